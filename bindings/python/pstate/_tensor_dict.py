"""Tensor dicts on numpy and torch: from a dict to the C API's (name, dtype, shape, data) list,
and from what the C collector received back to a dict.

A dict is what vLLM and SGLang broadcast and send: tensors mixed with strings, ints, None,
lists, dicts. How it travels (one C tensor-dict call; the library sends one metadata message,
small CPU tensors inside it, then the rest):

- A numpy array (or numpy scalar) of a dtype pstate has (int8/uint8/int32/uint32/int64/uint64/
  float16/float32/float64, or bfloat16/fp8 named with ``dtypes={key: DType.BFLOAT16}`` over a
  same-size container) travels as that tensor, C-contiguous and in native byte order (copied
  first only when it is not), shape kept, 0-d and 0-size included. A dict of only such arrays is
  exactly what the C API, Go and Rust send and read: nothing else is added.
- Anything else adds one entry to the dict, PY_META (a uint8 tensor holding an object frame,
  _objects): the pickled non-tensor values in their places among the keys, each tensor's kind
  (numpy or torch), and for a tensor of a dtype pstate has none for (bool, int16, complex, uint16,
  a torch dtype numpy lacks, ...) its real dtype and shape: such a tensor travels as its bytes (a
  flat uint8 tensor) and is viewed as its dtype again on arrival. The entry is small and rides
  inside the metadata message (up to 64 KiB of it, then it follows as one payload), so the
  non-tensor values travel with the metadata, as the engines send them (one object message, then
  the tensors). A torch tensor carries its dtype, bfloat16 and fp8 included; it is sent detached
  (sending only reads it); a CUDA torch tensor is staged through host memory (t.cpu()) and put
  back on the receiver's current CUDA device when it has one.

Receiving: the C allocation callback (bindings/pstate.i) mallocs each tensor while the GIL is
released; here every block becomes the buffer of a numpy array, without a copy, freed with the
array. A dict comes back as the sender sent it: torch tensors where it sent torch tensors (bfloat16
as torch.bfloat16, never a uint16 stand-in), numpy arrays where it sent numpy, the values
unpickled in their places (``tensors="numpy"`` / ``"torch"`` forces one kind; a dict from C, Go or
Rust has no PY_META and is numpy unless forced). The result is a TensorDict: a plain dict plus
``.dtypes`` (key -> pstate DType for each tensor of a pstate dtype), so that a bfloat16 tensor that
arrives in a uint16 numpy array keeps its meaning and the dict can be sent on unchanged.
"""
from __future__ import annotations

import pickle
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _objects, _torch
from ._buffers import resolve
from ._enums import DType, coerce
from ._errors import InvalidArgumentError, UnsupportedError

#: The numpy dtype each pstate dtype arrives as (containers for bfloat16 and fp8).
NUMPY_DTYPE_NAMES: Dict[DType, str] = {
    DType.INT8: "int8", DType.UINT8: "uint8", DType.INT32: "int32", DType.UINT32: "uint32",
    DType.INT64: "int64", DType.UINT64: "uint64", DType.FLOAT16: "float16", DType.FLOAT32: "float32",
    DType.FLOAT64: "float64", DType.BFLOAT16: "uint16", DType.FP8_E4M3: "uint8", DType.FP8_E5M2: "uint8",
}

#: The name of the entry that carries a mixed dict's values and kinds (a key of the C dict; no
#: user key may take it). Other bindings see it as a uint8 tensor holding a pickle frame.
PY_META = "__pstate_py_dict__"
_META_VERSION = 1

# numpy dtypes pstate has (by dtype.str without the byte-order character)
_NUMPY_NATIVE = {"i1", "u1", "i4", "u4", "i8", "u8", "f2", "f4", "f8"}

Entry = Tuple[str, int, Tuple[int, ...], Any]


class TensorDict(Dict[str, Any]):
    """A received tensor dict: a dict in the sender's order (tensors as the sender sent them:
    torch tensors or numpy arrays; other values as they were), plus ``dtypes``
    (``{key: pstate.DType}``) giving each tensor's pstate element type where it has one (in numpy
    bfloat16 arrives as a uint16 array, fp8 as uint8). Keys added later without a ``dtypes`` entry
    are sent with the dtype of their array or tensor."""

    def __init__(self, *args: Any, dtypes: Optional[Mapping[str, DType]] = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.dtypes: Dict[str, DType] = dict(dtypes or {})


def numpy() -> Any:
    try:
        import numpy as np
    except ImportError:
        raise InvalidArgumentError("tensor dicts need numpy (Debian: python3-numpy)") from None
    return np


def tensors_kind(tensors: Any, where: str) -> Optional[str]:
    """The tensors= argument of the receiving calls: None (as sent), "numpy" or "torch"."""
    if tensors is not None and tensors not in ("numpy", "torch"):
        raise InvalidArgumentError(f"{where}: tensors must be None (as the sender sent them), \"numpy\" or "
                                   f"\"torch\", got {tensors!r}")
    return tensors


class Refused(InvalidArgumentError):
    """A dict the binding cannot send: key names the tensor, reason says why (both go into the
    refusal the peers get); the detail adds where."""

    def __init__(self, key: str, reason: str, where: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.key = key
        self.reason = reason


def is_tensor_value(np: Any, value: Any) -> bool:
    """Whether a dict value travels as a tensor (else it is pickled with the metadata): torch
    tensors, and numpy arrays and scalars other than object arrays."""
    if _torch.is_tensor(value):
        return True
    if isinstance(value, np.generic):
        return not isinstance(value, np.object_)
    return isinstance(value, np.ndarray) and value.dtype.kind != "O"


def _contiguous_native(np: Any, value: Any) -> Any:
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if not value.dtype.isnative:
        value = value.astype(value.dtype.newbyteorder("="))
    if not value.flags.c_contiguous:
        value = value.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into 1-d)
    return value


def _torch_tensor(key: str, value: Any, where: str) -> Tuple[Any, Optional[DType], Any]:
    """(array to send, its pstate dtype when numpy has none, raw spec or None) of a torch tensor;
    a CUDA tensor is staged through host memory first."""
    try:
        if value.device.type not in ("cpu", "meta"):  # staged through host memory (the receiver puts it back)
            value = value.detach().cpu()
        if _torch.result_dtype_of(value.dtype) is None:
            arr, name, shape = _torch.raw_bytes(value, f"tensor '{key}'")
            return arr, None, ("torch", name, shape)
        arr, carried = _torch.as_numpy(value, f"tensor '{key}'")
        return arr, carried, None
    except InvalidArgumentError as e:
        raise Refused(key, e.detail, where) from None
    except (RuntimeError, TypeError, ValueError) as e:  # what torch raises (a sparse tensor has no numpy())
        raise Refused(key, f"tensor '{key}': torch cannot give its memory ({value.layout}): {e}", where) from None


def encode(tensor_dict: Optional[Mapping[str, Any]], dtypes: Optional[Mapping[str, Any]], where: str) -> List[Entry]:
    """The (name, dtype, shape, array) list of the C typemap for a dict (PY_META first when the
    dict needs it); raises Refused (an InvalidArgumentError) naming the first value it cannot
    send."""
    np = numpy()
    if not isinstance(tensor_dict, Mapping):
        raise Refused("?", f"expected a dict, got {type(tensor_dict).__name__}", where)
    chosen: Dict[str, Any] = dict(getattr(tensor_dict, "dtypes", None) or {})
    chosen.update(dtypes or {})
    for key in dtypes or {}:
        if key not in tensor_dict:
            raise Refused(str(key), f"dtypes names '{key}', which is not a key of the dict", where)
    entries: List[Entry] = []
    items: List[Tuple[str, Tuple[Any, ...]]] = []  # PY_META's list, in the dict's order
    mixed = False
    for key, value in tensor_dict.items():
        if not isinstance(key, str):
            raise Refused(repr(key), f"key {key!r} is not a str", where)
        if key == PY_META:
            raise Refused(key, f"key '{PY_META}' is pstate's own (it carries a dict's other values)", where)
        if not is_tensor_value(np, value):
            items.append((key, ("v", value)))
            mixed = True
            continue
        raw, device = None, None
        if _torch.is_tensor(value):
            arr, carried = None, None
            kind = "torch"
            device = "cuda" if value.device.type == "cuda" else None
            mixed = True
            if key not in chosen:
                arr, carried, raw = _torch_tensor(key, value, where)
        else:
            kind = "numpy"
            arr, carried = _contiguous_native(np, value), None
            if key not in chosen and arr.dtype.str[1:] not in _NUMPY_NATIVE:
                raw = ("numpy", arr.dtype, arr.shape)
                arr = arr.reshape(-1).view(np.uint8)
                mixed = True
        if raw is not None:
            items.append((key, ("t", kind, raw, device)))
            entries.append((key, int(DType.UINT8), (arr.size,), arr))
            continue
        if arr is None:  # a torch container named in dtypes (int16 carrying bfloat16, ...)
            arr, carried, _ = _torch_tensor(key, value, where) if _torch.result_dtype_of(value.dtype) \
                else (_contiguous_native(np, value.detach().cpu().numpy()), None, None)
        dtype = chosen.get(key, carried)
        try:
            if dtype is not None:
                dtype = coerce(DType, dtype, f"dtypes['{key}']")
            buf = resolve(arr, f"tensor '{key}'", writable=False, dtype=dtype)
        except InvalidArgumentError as e:
            raise Refused(key, e.detail, where) from None
        items.append((key, ("t", kind, None, device)))
        entries.append((key, int(buf.dtype), tuple(arr.shape), arr))
    if not mixed:
        return entries
    try:
        frame = _objects.encode({"version": _META_VERSION, "items": items})
    except Exception as e:  # noqa: BLE001 - a value pickle refuses: name it
        bad = next((k for k, spec in items if spec[0] == "v" and not _picklable(spec[1])), "?")
        raise Refused(bad, f"value '{bad}' cannot be pickled ({type(e).__name__}: {e}); tensor dicts pickle "
                           "their non-tensor values", where) from None
    meta = np.frombuffer(frame, dtype=np.uint8)
    return [(PY_META, int(DType.UINT8), (meta.size,), meta)] + entries


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
        return True
    except Exception:  # noqa: BLE001
        return False


def refusal(refused: Refused) -> List[Entry]:
    """A one-tensor dict the library refuses on every rank (dtype -1), named so that the peers'
    error says what this rank's binding refused: the ranks stay in step instead of waiting. The
    name starts with "refused by the sender's Python binding: ", which every binding's error
    text reduces to the reason alone on the receivers (pstate._errors.pythonic, Go's and Rust's
    counterparts)."""
    return [(f"refused by the sender's Python binding: {refused.reason}", -1, (), None)]


def _array(np: Any, owner: Any, dtype: DType, shape: Tuple[int, ...]) -> Any:
    np_dtype = np.dtype(NUMPY_DTYPE_NAMES[dtype])
    if owner is None:  # 0 bytes: nothing was allocated
        return np.zeros(shape, dtype=np_dtype)
    return np.frombuffer(owner, dtype=np_dtype).reshape(shape)


def _as_kind(value: Any, dtype: Optional[DType], kind: str) -> Any:
    """A received tensor (a numpy array, or a torch tensor of a raw dtype) as kind."""
    np = sys.modules["numpy"]
    if kind == "torch":
        if isinstance(value, np.ndarray):
            return _torch.from_array(value, dtype) if dtype is not None else _torch.from_numpy_any(value)
        return value
    if _torch.is_tensor(value):  # a raw torch dtype forced to numpy: numpy's where it has one
        try:
            return value.numpy()
        except TypeError:
            return value
    return value


def decode(items: List[Tuple[str, int, Tuple[int, ...], Any, int]], tensors: Optional[str] = None,
           where: str = "tensor dict", src: int = -1) -> TensorDict:
    """What ReceivedDict.take() returned, as a TensorDict: the sender's kinds and values when it
    sent PY_META, numpy arrays otherwise; tensors ("numpy"/"torch") forces one kind. No copies
    (bfloat16 as torch.bfloat16; a dtype torch lacks stays numpy)."""
    np = sys.modules.get("numpy") or numpy()
    arrays: Dict[str, Any] = {}
    dtypes: Dict[str, DType] = {}
    meta = None
    for name, dtype, shape, owner, _device in items:
        try:
            kind = DType(dtype)
        except ValueError:
            raise UnsupportedError(f"received tensor '{name}' has dtype {dtype}, which this binding does not know "
                                   "(a newer library?)") from None
        arr = _array(np, owner, kind, shape)
        if name == PY_META and kind == DType.UINT8:
            meta = _objects.decode(arr, src, f"{where} ('{PY_META}')")
            continue
        arrays[name] = arr
        dtypes[name] = kind
    out = TensorDict()
    if meta is None:
        for name, arr in arrays.items():
            out[name] = _torch.from_array(arr, dtypes[name]) if tensors == "torch" else arr
            out.dtypes[name] = dtypes[name]
        return out
    if not isinstance(meta, dict) or meta.get("version") != _META_VERSION:
        raise UnsupportedError(f"{where}: the sender's '{PY_META}' is of another version "
                               f"({meta.get('version') if isinstance(meta, dict) else type(meta).__name__}); "
                               f"this binding reads version {_META_VERSION}")
    for key, spec in meta["items"]:
        if spec[0] == "v":
            out[key] = spec[1]
            continue
        _, kind, raw, device = spec
        value = arrays[key]
        if raw is None:
            out.dtypes[key] = dtypes[key]
            out[key] = _on_device(_as_kind(value, dtypes[key], tensors or kind), device)
            continue
        made_by, raw_dtype, shape = raw
        data = value if value.size else None
        if made_by == "torch":
            value = _torch.from_raw_bytes(data, raw_dtype, tuple(shape), key)
        else:
            value = np.zeros(shape, raw_dtype) if data is None else data.view(raw_dtype).reshape(shape)
        out[key] = _on_device(_as_kind(value, None, tensors or kind), device)
    return out


def _on_device(value: Any, device: Optional[str]) -> Any:
    """A tensor the sender staged from CUDA memory, on this process's current CUDA device when it
    has one (else it stays in host memory)."""
    if device != "cuda" or not _torch.is_tensor(value):
        return value
    torch = sys.modules["torch"]
    return value.to(torch.device("cuda", torch.cuda.current_device())) if torch.cuda.is_available() else value
