"""Non-blocking tensor dicts between two ranks: Group.isend_tensor_dict / irecv_tensor_dict
(vLLM's isend_tensor_dict / irecv_tensor_dict, SGLang's send_tensor_dict(async_send=True)).

The wire is the engines' own: one object message, then the tensors.

- The header is an object frame (Group.send_object: pickled, and a sender that cannot pickle a
  value sends a refusal, so the receiver raises ObjectRefusedError instead of waiting): the dict's
  keys in order, each non-tensor value in its place, and for each tensor its kind (torch or
  numpy), dtype (torch's or numpy's: bool, int16, bfloat16, complex, ... all of them), pstate
  dtype where it has one, shape, whether it was staged from CUDA memory and whether it is sent
  as a slice (all_gather_group).
- Then each tensor with bytes, in dict order, as one isend of its bytes (uint8) on the group's
  tensor stream: a pstate Request that owns a reference to the tensor, so the memory stays alive
  until the request completes. With ag (all_gather_group) a tensor whose byte count divides by
  ag's size S (and that ag_tensors does not exclude) goes as this rank's 1/S of its bytes.

The receiver takes the header when irecv_tensor_dict is called (it waits for the sender's header,
as vLLM's irecv_tensor_dict does), allocates every tensor at its full shape (torch.empty /
numpy.empty of the sender's kind, or of tensors=), posts one irecv per tensor into its bytes
(the slice at this rank's place in ag), and returns a DictRequest; wait() completes the receives,
all-gathers the sliced tensors over ag in place, and returns the TensorDict. Posting every receive
before returning keeps a later receive from the same peer from taking this dict's messages.

In a CUDA context (whose tensor messages are device memory) a CUDA tensor goes over the device
communicator (isend/irecv of its address on the current torch stream, allocated on the receiver's
current CUDA device) and a host tensor as one more object message right after the header (whole,
never sliced).

This wire is not the C tensor dict's (pstate_send_tensor_dict, whose payload messages a receive
of the tensor stream refuses): isend_tensor_dict pairs with irecv_tensor_dict (and with
pstate.parallel_state's send_tensor_dict / recv_tensor_dict, which use it in both forms, blocking
and not), send_tensor_dict with recv_tensor_dict.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from . import _torch
from ._enums import Device, DType, coerce
from ._errors import Error, InvalidArgumentError
from ._tensor_dict import NUMPY_DTYPE_NAMES, TensorDict, is_tensor_value, numpy

_VERSION = 1
_MAGIC = "pstate.dict.p2p"


class DictRequest:
    """A pending dict send or receive: wait() completes it (a receive returns the TensorDict,
    a send None), test() never blocks. ``requests`` are its tensors' Requests and
    ``postprocess`` the all-gathers of sliced tensors that wait() runs after them (vLLM's
    irecv_tensor_dict returns both); usable as a context manager (leaving the block waits)."""

    def __init__(self, where: str, requests: List[Any], postprocess: List[Callable[[], None]],
                 result: Optional[TensorDict], error: Optional[BaseException] = None) -> None:
        self.where = where
        self.requests = requests
        self.postprocess = postprocess
        self.tensor_dict = result
        self._error = error
        self._done = False

    def _complete(self) -> Any:
        if not self._done:
            self._done = True
            first: Optional[BaseException] = None
            for req in self.requests:  # every request completes, even after one failed
                try:
                    req.wait()
                except Error as e:
                    first = first or e
            if first is not None:
                self._error = first
            if self._error is None:
                for fn in self.postprocess:
                    fn()
        if self._error is not None:
            raise self._error
        return self.tensor_dict

    def wait(self) -> Optional[TensorDict]:
        """Completes every transfer (at most the context timeout each), runs the all-gathers, and
        returns the received dict (None for a send). Raises the first error of its transfers."""
        return self._complete()

    def test(self) -> bool:
        """True once every transfer completed (wait() then only runs the all-gathers of sliced
        tensors, which wait for the other ranks of ag); never blocks."""
        if self._done:
            return True
        if all(req.test() for req in self.requests):
            return True
        return False

    @property
    def done(self) -> bool:
        return self._done

    def __enter__(self) -> "DictRequest":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.wait()
        else:
            try:
                self.wait()
            except Error:
                pass

    def __repr__(self) -> str:
        return f"<pstate.DictRequest {self.where} {'done' if self._done else 'pending'}>"


def _bytes_of(value: Any, key: str, cuda_context: bool) -> Tuple[Any, Dict[str, Any]]:
    """(the flat uint8 bytes to send, the header fields) of one tensor of a dict to send: host
    bytes, or in a CUDA context a CUDA tensor's own flat uint8 view."""
    np = numpy()
    if _torch.is_tensor(value):
        device = "cuda" if value.device.type == "cuda" else None
        spec = {"kind": "torch", "torch": str(value.dtype).replace("torch.", ""), "numpy": None,
                "shape": tuple(value.shape), "dtype": _torch.result_dtype_of(value.dtype), "device": device}
        if device == "cuda" and cuda_context:
            return _byte_view(_contiguous(value.detach())), spec
        if value.device.type not in ("cpu", "meta"):
            value = value.detach().cpu()
        data, _, _ = _torch.raw_bytes(value, f"tensor '{key}'")
        return data, spec
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if not value.dtype.isnative:
        value = value.astype(value.dtype.newbyteorder("="))
    if not value.flags.c_contiguous:
        value = value.copy(order="C")
    names = {v: k for k, v in NUMPY_DTYPE_NAMES.items() if k not in (DType.BFLOAT16, DType.FP8_E4M3, DType.FP8_E5M2)}
    return value.reshape(-1).view(np.uint8), {"kind": "numpy", "torch": None, "numpy": value.dtype,
                                              "shape": value.shape, "dtype": names.get(value.dtype.name),
                                              "device": None}


def _contiguous(t: Any) -> Any:
    return t if t.is_contiguous() else t.contiguous()


def _count(data: Any) -> int:
    return data.numel() if _torch.is_tensor(data) else data.size


def _is_cuda(data: Any) -> bool:
    return _torch.is_tensor(data) and data.device.type == "cuda"


def _stream() -> int:
    return int(sys.modules["torch"].cuda.current_stream().cuda_stream)


def _isend(group: Any, data: Any, dst: int) -> Any:
    if _is_cuda(data):  # a CUDA context: the device communicator, on the current stream
        req = group.isend(data.data_ptr(), dst, dtype=DType.UINT8, count=data.numel(), stream=_stream())
        req._buf = data  # held until complete, as a host buffer is
        return req
    return group.isend(data, dst)


def _irecv(group: Any, data: Any, src: int) -> Any:
    if _is_cuda(data):
        req = group.irecv(data.data_ptr(), src, dtype=DType.UINT8, count=data.numel(), stream=_stream())
        req._buf = data
        return req
    return group.irecv(data, src)


class _ObjectDone:
    """The handle of a tensor that travelled as an object message (host bytes in a CUDA context):
    complete when made."""

    def wait(self) -> None:
        return None

    def test(self) -> bool:
        return True


def send(group: Any, tensor_dict: Mapping[str, Any], dst: int, ag: Any, ag_tensors: Optional[Mapping[str, bool]],
         dtypes: Optional[Mapping[str, Any]], where: str) -> DictRequest:
    np = numpy()
    if not isinstance(tensor_dict, Mapping):
        raise InvalidArgumentError(f"{where}: expected a dict, got {type(tensor_dict).__name__}")
    cuda_context = group._ps.device == Device.CUDA
    chosen: Dict[str, Any] = dict(getattr(tensor_dict, "dtypes", None) or {})
    chosen.update(dtypes or {})
    size, rank = (ag.world_size, ag.rank_in_group) if ag is not None else (1, 0)
    items: List[Tuple[Any, Tuple[Any, ...]]] = []
    payload: List[Any] = []
    objects: List[Any] = []
    for key, value in tensor_dict.items():
        if not is_tensor_value(np, value):
            items.append((key, ("v", value)))
            continue
        data, spec = _bytes_of(value, str(key), cuda_context)
        if key in chosen:
            spec["dtype"] = coerce(DType, chosen[key], f"dtypes['{key}']")
        # a CUDA context moves device memory: its host tensors go as object messages, whole
        spec["channel"] = "object" if cuda_context and not _is_cuda(data) else "tensor"
        count = _count(data)
        sliced = size > 1 and count > 0 and count % size == 0 and spec["channel"] == "tensor"
        if ag_tensors is not None:
            sliced = sliced and bool(ag_tensors.get(key, True))
        spec["sliced"] = sliced
        spec["dtype"] = int(spec["dtype"]) if spec["dtype"] is not None else None
        items.append((key, ("t", spec)))
        if not count:
            continue
        if spec["channel"] == "object":
            objects.append(data.tobytes())
        else:
            payload.append(data.reshape(size, -1)[rank] if sliced else data)
    header = {"magic": _MAGIC, "version": _VERSION, "ag_size": size, "items": items}
    group.send_object(header, dst)  # a value pickle refuses: sent as a refusal, raised here
    for data in objects:
        group.send_object(data, dst)
    requests = [_isend(group, data, dst) for data in payload]
    return DictRequest(where, requests, [], None)


def _allocate(np: Any, spec: Dict[str, Any], kind: str, cuda_context: bool) -> Any:
    """An empty tensor for a header entry, of kind ("torch" or "numpy") where that kind has its
    dtype, else of the other kind; a CUDA tensor sent over the device communicator (a CUDA
    context) on this process's current CUDA device."""
    shape = tuple(spec["shape"])
    if cuda_context and spec.get("channel") == "tensor" and spec["device"] == "cuda":
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=getattr(torch, spec["torch"]), device=torch.device("cuda", torch.cuda.current_device()))
    pdtype = DType(spec["dtype"]) if spec["dtype"] is not None else None
    if kind == "torch":
        torch = sys.modules.get("torch")
        if torch is None:
            import torch  # noqa: F811 - the sender sent torch tensors, or the caller asked for them
        if spec["torch"] is not None:
            dtype = getattr(torch, spec["torch"], None)
            if isinstance(dtype, torch.dtype):
                return torch.empty(shape, dtype=dtype)
        elif pdtype is not None and _torch.result_dtype(pdtype) is not None:
            return torch.empty(shape, dtype=_torch.result_dtype(pdtype))
        else:
            try:
                return torch.from_numpy(np.empty(shape, spec["numpy"]))
            except TypeError:
                pass
    if spec["numpy"] is not None:
        return np.empty(shape, spec["numpy"])
    if pdtype is not None:
        return np.empty(shape, NUMPY_DTYPE_NAMES[pdtype])
    torch = sys.modules["torch"]
    t = torch.empty(shape, dtype=getattr(torch, spec["torch"]))
    try:
        return t.numpy()
    except TypeError:  # numpy has no such type (complex32): it stays a torch tensor
        return t


def _byte_view(value: Any) -> Any:
    """The flat uint8 view of a contiguous tensor or array (its memory, writable)."""
    if _torch.is_tensor(value):
        torch = sys.modules["torch"]
        flat = value.reshape(-1)
        try:
            return flat.view(torch.uint8)
        except RuntimeError:  # complex32: through a same-size integer
            return flat.view(_torch._same_size_int(torch, value.element_size())).view(torch.uint8)
    return value.reshape(-1).view(numpy().uint8)


def receive(group: Any, src: int, ag: Any, tensors: Optional[str], where: str) -> DictRequest:
    np = numpy()
    header = group.recv_object(src)
    if not isinstance(header, dict) or header.get("magic") != _MAGIC:
        raise InvalidArgumentError(f"{where}: group rank {src} sent an object that is not a dict header of "
                                   "isend_tensor_dict (a send_object or a send_tensor_dict on the other side?)")
    if header.get("version") != _VERSION:
        raise InvalidArgumentError(f"{where}: group rank {src} sent a dict header of version {header.get('version')}; "
                                   f"this binding reads version {_VERSION}")
    size = int(header["ag_size"])
    mine, rank = (ag.world_size, ag.rank_in_group) if ag is not None else (1, 0)
    error: Optional[BaseException] = None
    if size != mine and any(spec[0] == "t" and spec[1]["sliced"] for _, spec in header["items"]):
        error = InvalidArgumentError(
            f"{where}: group rank {src} sent slices for an all_gather_group of {size} ranks, this rank passed "
            + (f"one of {mine}" if ag is not None else "none") + "; pass the receiving all_gather_group of that size")
    cuda_context = group._ps.device == Device.CUDA
    out = TensorDict()
    requests: List[Any] = []
    postprocess: List[Callable[[], None]] = []
    staged: List[Any] = []  # keys of tensors the sender staged from CUDA memory
    for key, spec in header["items"]:
        if spec[0] == "v":
            out[key] = spec[1]
            continue
        t = spec[1]
        value = _allocate(np, t, tensors or t["kind"], cuda_context)
        data = _byte_view(value)
        count = _count(data)
        if not count:
            pass
        elif t.get("channel") == "object":  # host bytes of a CUDA context: already here
            got = np.frombuffer(group.recv_object(src), np.uint8)
            if _torch.is_tensor(data):
                data.copy_(sys.modules["torch"].from_numpy(got.copy()))
            else:
                data[:] = got
            requests.append(_ObjectDone())
        elif t["sliced"] and error is None:
            part = data.reshape(size, -1)[rank]
            requests.append(_irecv(group, part, src))
            postprocess.append(_gather(ag, part, data))
        elif t["sliced"]:  # drained into scratch: the tensor stream stays in step
            requests.append(_irecv(group, _scratch(data, count // size), src))
        else:
            requests.append(_irecv(group, data, src))
        if t["dtype"] is not None:
            out.dtypes[key] = DType(t["dtype"])
        out[key] = value
        if t["device"] == "cuda" and not _is_cuda(value):
            staged.append(key)
    if staged:
        postprocess.append(lambda: out.update((key, _on_device(out[key], "cuda")) for key in staged))
    return DictRequest(where, requests, postprocess, out, error)


def _scratch(like: Any, count: int) -> Any:
    if _is_cuda(like):
        return sys.modules["torch"].empty(count, dtype=like.dtype, device=like.device)
    return numpy().empty(count, numpy().uint8)


def _gather(ag: Any, part: Any, whole: Any) -> Callable[[], None]:
    """The all-gather of one sliced tensor over ag, in place (part is this rank's place in whole)."""
    def run() -> None:
        if _is_cuda(whole):
            ag.all_gather(part.data_ptr(), whole.data_ptr(), dtype=DType.UINT8, count=part.numel(), stream=_stream())
        else:
            ag.all_gather(part, whole)
    return run


def _on_device(value: Any, device: Optional[str]) -> Any:
    if device != "cuda" or not _torch.is_tensor(value):
        return value
    torch = sys.modules["torch"]
    return value.to(torch.device("cuda", torch.cuda.current_device())) if torch.cuda.is_available() else value
