"""pstate.parallel_state: vLLM's and SGLang's ``parallel_state`` (and ``communication_op``) on pstate.

Code written against ``vllm.distributed`` or ``sglang.srt.distributed`` runs on pstate by changing
its imports: the module functions, the GroupCoordinator methods and properties keep the engines'
names, argument orders, defaults and return conventions (where the two engines differ, both
spellings are taken), on torch tensors. The typical workflow is theirs:

    from pstate.parallel_state import (init_distributed_environment, initialize_model_parallel,
                                       get_tp_group, get_pp_group, tensor_model_parallel_all_reduce)
    init_distributed_environment()                    # RANK, WORLD_SIZE, ... (pstate run, torchrun)
    initialize_model_parallel(tensor_model_parallel_size=2, pipeline_model_parallel_size=2)
    y = tensor_model_parallel_all_reduce(x)           # a new tensor, as in both engines
    if not get_pp_group().is_last_rank:
        get_pp_group().send_tensor_dict({"hidden": h, "step": 3})
    destroy_model_parallel(); destroy_distributed_environment()

Underneath is one pstate.PState (module state, as the engines keep module globals): a CPU context
for the gloo/CPU backend or when torch has no CUDA, a CUDA context for backend "nccl" where torch
has CUDA. A GroupCoordinator wraps one pstate.Group (its ``cpu_group`` and ``device_group`` are
that Group). CPU tensors run on the CPU groups; CUDA tensors on the device groups of a CUDA
context (their addresses on the current torch stream). Every remaining difference from vLLM and
SGLang is listed in docs/bindings.md ("Coming from vLLM or SGLang").
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import sys
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from . import _torch
from ._core import Group, PState, init
from ._enums import Device as _Device
from ._enums import DType, GroupKind, ReduceOp, coerce
from ._errors import InvalidArgumentError, InvalidStateError, UnsupportedError

__all__ = [
    "GraphCaptureContext", "GroupCoordinator", "P2PWork", "PyNcclCommunicator", "TensorMetadata",
    "broadcast_tensor_dict", "cleanup_dist_env_and_memory", "destroy_distributed_environment", "destroy_model_parallel",
    "ensure_model_parallel_initialized", "get_attention_tp_group", "get_attn_cp_group", "get_attn_tp_group",
    "get_context_model_parallel_group", "get_dcp_group", "get_dp_group", "get_ep_group", "get_moe_dp_group",
    "get_moe_cp_group", "get_moe_ep_group", "get_moe_tp_group", "get_pcp_group", "get_pipeline_model_parallel_group", "get_pp_group",
    "get_pstate", "get_tensor_model_parallel_group", "get_tensor_model_parallel_rank",
    "get_tensor_model_parallel_world_size", "get_pipeline_model_parallel_rank",
    "get_pipeline_model_parallel_world_size", "get_decode_context_model_parallel_rank",
    "get_decode_context_model_parallel_world_size", "get_moe_expert_parallel_rank",
    "get_moe_expert_parallel_world_size", "get_moe_tensor_parallel_rank", "get_moe_tensor_parallel_world_size",
    "get_tp_group", "get_world_group", "graph_capture", "in_the_same_node_as", "init_distributed_environment",
    "initialize_model_parallel", "model_parallel_is_initialized", "new_group", "set_custom_all_reduce",
    "set_quick_all_reduce", "tensor_model_parallel_all_gather", "tensor_model_parallel_all_reduce",
    "tensor_model_parallel_gather", "tensor_model_parallel_reduce_scatter",
]


def _torch_module() -> Any:
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: F811
        except ImportError:
            raise InvalidStateError("pstate.parallel_state works on torch tensors: it needs torch "
                                    "(Debian: python3-torch); pstate.PState works on numpy arrays without it") from None
    _torch.tensor_type()
    return torch


@dataclasses.dataclass
class GraphCaptureContext:
    """What graph_capture() yields (vLLM, SGLang): the stream to capture on (None in a CPU context,
    where there is nothing to capture)."""

    stream: Any


#: vLLM's and SGLang's TensorMetadata (device type, dtype, size), for code that builds its own.
TensorMetadata = collections.namedtuple("TensorMetadata", ["device", "dtype", "size"])


class P2PWork:
    """SGLang's P2PWork: ``work`` (its ``wait()`` completes the transfer) and ``payload`` (what
    it keeps alive until then); ``wait()`` is ``work.wait()``."""

    def __init__(self, work: Any, payload: Any) -> None:
        self.work = work
        self.payload = payload

    def wait(self) -> None:
        self.work.wait()

    def is_completed(self) -> bool:
        return bool(self.work.test())

    def __repr__(self) -> str:
        return f"P2PWork({self.work!r})"


class _State:
    """The module's state, as the engines keep _WORLD, _TP, ...: one PState and its coordinators."""

    ps: Optional[PState] = None
    device: str = "cpu"
    coordinators: Dict[str, "GroupCoordinator"] = {}
    custom_all_reduce: bool = True
    quick_all_reduce: bool = True


def get_pstate() -> PState:
    """The pstate.PState under this module (for pstate's own calls: trace_dump, abort, ...)."""
    if _State.ps is None or _State.ps.closed:
        raise InvalidStateError("pstate.parallel_state: call init_distributed_environment() first")
    return _State.ps


# ---- tensors: one flat primitive per C call, for CPU tensors and CUDA addresses alike ----------

def _stream() -> Optional[int]:
    torch = sys.modules["torch"]
    return int(torch.cuda.current_stream().cuda_stream)


class _Flat:
    """A contiguous tensor as a C buffer argument: the tensor itself (CPU) or its address with
    dtype, count and the current stream (CUDA tensors in a CUDA context). move=True (operations
    that only move bytes) takes any dtype, as its bytes; reductions need a pstate dtype."""

    def __init__(self, t: Any, where: str, move: bool) -> None:
        torch = sys.modules["torch"]
        dtype = _torch.result_dtype_of(t.dtype)
        if dtype is None:
            if not move:
                raise InvalidArgumentError(
                    f"{where}: pstate reduces int8, uint8, int32, int64, float16, bfloat16, float32 and float64 "
                    f"tensors; {t.dtype} has no pstate dtype (convert it, e.g. t.to(torch.int32))")
            t = _byte_view(torch, t)
            dtype = DType.UINT8
        self.tensor = t
        self.dtype = dtype
        self.count = t.numel()
        self.cuda = t.device.type == "cuda"
        if self.cuda and (_State.ps is None or _State.device != "cuda"):
            raise UnsupportedError(
                f"{where}: a CUDA tensor in a CPU context: call init_distributed_environment(backend=\"nccl\") on a "
                "host where torch has CUDA, or move the tensor to the CPU")
        if not self.cuda and t.device.type != "cpu":
            raise InvalidArgumentError(f"{where}: a tensor on {t.device}; pstate takes CPU and CUDA tensors")
        if not self.cuda and _State.device == "cuda":
            raise UnsupportedError(
                f"{where}: a CPU tensor in a CUDA context: pstate.parallel_state runs tensor collectives of a "
                "CUDA context on CUDA tensors (objects, tensor dicts and barriers take host data)")

    def args(self) -> Tuple[Any, Dict[str, Any]]:
        if self.cuda:
            return self.tensor.data_ptr(), {"dtype": self.dtype, "count": self.count, "stream": _stream()}
        if self.dtype == _torch.result_dtype_of(self.tensor.dtype):
            return self.tensor, {}
        return self.tensor, {"dtype": self.dtype}


def _byte_view(torch: Any, t: Any) -> Any:
    flat = t.reshape(-1)
    try:
        return flat.view(torch.uint8)
    except RuntimeError:  # complex32: through a same-size integer
        return flat.view(_torch._same_size_int(torch, t.element_size())).view(torch.uint8)


def _counted(kw: Dict[str, Any]) -> Dict[str, Any]:
    """kw for the variable-count calls, whose counts say the sizes (no count=)."""
    return {k: v for k, v in kw.items() if k != "count"}


def _contiguous(t: Any) -> Any:
    return t if t.is_contiguous() else t.contiguous()


def _empty(shape: Sequence[int], like: Any) -> Any:
    torch = sys.modules["torch"]
    return torch.empty(tuple(shape), dtype=like.dtype, device=like.device)


def _dim(t: Any, dim: int, where: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise InvalidArgumentError(f"{where}: dim must be an int, got {type(dim).__name__}")
    if not -t.dim() <= dim < max(t.dim(), 1):
        raise InvalidArgumentError(f"{where}: invalid dim ({dim}) for input tensor with shape {tuple(t.shape)}")
    return dim % max(t.dim(), 1)


def _op(op: Any, where: str) -> ReduceOp:
    return coerce(ReduceOp, op, f"{where}: op")


class GroupCoordinator:
    """vLLM's and SGLang's GroupCoordinator over one pstate.Group: the group's facts as
    properties and its communication as methods on torch tensors, with the engines' argument
    orders, defaults and return conventions. Ranks passed to methods (src, dst) are ranks in the
    group, as in both engines; a group of one rank returns its input where they do."""

    def __init__(self, group: Group, name: Optional[str] = None) -> None:
        self._group = group
        self.unique_name = name or group.name
        self.rank = group.rank
        self.ranks = group.ranks
        self.world_size = group.world_size
        self.rank_in_group = group.rank_in_group
        self.local_rank = group.local_rank
        self.cpu_group = group  # what the engines hand to torch.distributed: here the pstate.Group
        self.device_group = group
        self.use_custom_op_call = False
        self.use_device_communicator = True
        self.mq_broadcaster = None
        torch = _torch_module()
        self.device = torch.device("cuda", self.local_rank) if _State.device == "cuda" else torch.device("cpu")
        self.pynccl_comm = PyNcclCommunicator(self)
        self.device_communicator = _DeviceCommunicator(self)

    @property
    def group(self) -> Group:
        """The pstate.Group under this coordinator."""
        return self._group

    # ---- facts ---------------------------------------------------------------------------
    @property
    def first_rank(self) -> int:
        return self.ranks[0]

    @property
    def last_rank(self) -> int:
        return self.ranks[-1]

    @property
    def is_first_rank(self) -> bool:
        return self.rank == self.first_rank

    @property
    def is_last_rank(self) -> bool:
        return self.rank == self.last_rank

    @property
    def next_rank(self) -> int:
        return self.ranks[(self.rank_in_group + 1) % self.world_size]

    @property
    def prev_rank(self) -> int:
        return self.ranks[(self.rank_in_group - 1) % self.world_size]

    def __repr__(self) -> str:
        return f"<pstate.parallel_state.GroupCoordinator {self.unique_name} ranks={self.ranks} rank_in_group={self.rank_in_group}>"

    # ---- graph capture ---------------------------------------------------------------------
    @contextlib.contextmanager
    def graph_capture(self, graph_capture_context: Optional[GraphCaptureContext] = None) -> Iterator[GraphCaptureContext]:
        """The engines' per-group graph_capture: yields the context (made when None). A CPU context
        has nothing to capture: the block runs as it is. CUDA contexts capture through the module's
        graph_capture(), which puts every group in capture mode."""
        if graph_capture_context is None:
            graph_capture_context = GraphCaptureContext(None)
        yield graph_capture_context

    # ---- collectives -------------------------------------------------------------------------
    def all_reduce(self, input_: Any) -> Any:
        """The sum over the group, as a new tensor (input_ itself on a group of one)."""
        if self.world_size == 1:
            return input_
        where = f"all_reduce on {self.unique_name}"
        x = _Flat(_contiguous(input_), where, move=False)
        out = _Flat(_empty(input_.shape, input_), where, move=False)
        send, kw = x.args()
        recv, _ = out.args()
        self._group.all_reduce(send, out=recv, **kw)
        return out.tensor

    def _all_gather_flat(self, x: Any, where: str) -> Any:
        """Every rank's x, stacked: a new tensor of shape (world_size, *x.shape)."""
        x = _contiguous(x)
        out = _empty((self.world_size,) + tuple(x.shape), x)
        src, dst = _Flat(x, where, move=True), _Flat(out, where, move=True)
        send, kw = src.args()
        recv, _ = dst.args()
        if not src.cuda:
            recv = dst.tensor.reshape(-1)
        self._group.all_gather(send, recv, **kw)
        return out

    def all_gather(self, input_: Any, dim: int = -1, output_tensor_list: Optional[List[Any]] = None) -> Any:
        """Every rank's input_ concatenated along dim (default -1, both engines), as a new tensor;
        with output_tensor_list (SGLang) each rank's input_ is copied into its entry instead."""
        if self.world_size == 1 and output_tensor_list is None:
            return input_
        where = f"all_gather on {self.unique_name}"
        d = _dim(input_, dim, where)
        stacked = self._all_gather_flat(input_, where)
        if output_tensor_list is not None:
            for i, t in enumerate(output_tensor_list):
                t.copy_(stacked[i])
            return output_tensor_list
        shape = tuple(input_.shape)
        if not shape:
            return stacked.reshape(self.world_size)
        return stacked.movedim(0, d).reshape(shape[:d] + (self.world_size * shape[d],) + shape[d + 1:])

    def all_gather_into_tensor(self, output: Any, input_: Any) -> Any:
        """SGLang's all_gather_into_tensor: every rank's input_ one after another in output."""
        where = f"all_gather_into_tensor on {self.unique_name}"
        src, dst = _Flat(_contiguous(input_), where, move=True), _Flat(output, where, move=True)
        send, kw = src.args()
        recv, _ = dst.args()
        self._group.all_gather(send, recv if src.cuda else dst.tensor.reshape(-1), **kw)
        return output

    def all_gatherv(self, input_: Any, dim: Any = 0, sizes: Optional[Sequence[int]] = None) -> Any:
        """vLLM's all_gatherv(input_, dim=0, sizes=None) and SGLang's all_gatherv(input_,
        sizes=None): every rank's input_ (a tensor, or a list of tensors: each gathered) with
        sizes[i] rows (along dim 0) from group rank i, concatenated; sizes None: equal sizes."""
        if isinstance(dim, (list, tuple)) and sizes is None:  # SGLang: all_gatherv(input_, sizes)
            dim, sizes = 0, dim
        if isinstance(input_, (list, tuple)):
            return [self.all_gatherv(t, dim, sizes) for t in input_]
        where = f"all_gatherv on {self.unique_name}"
        if self.world_size == 1:
            return input_
        if _dim(input_, dim, where) != 0:
            raise InvalidArgumentError(f"{where}: only dim 0 (vLLM's CudaCommunicator asserts it too), got {dim}")
        if sizes is None:
            return self.all_gather(input_, 0)
        sizes = [int(s) for s in sizes]
        if len(sizes) != self.world_size or input_.shape[0] != sizes[self.rank_in_group]:
            raise InvalidArgumentError(f"{where}: sizes {sizes} must have {self.world_size} entries, this rank's "
                                       f"({self.rank_in_group}) equal to input_.shape[0] = {input_.shape[0]}")
        x = _contiguous(input_)
        # elements of the C call per row: a dtype pstate has none for moves as its bytes
        row = _prod(x.shape[1:]) * (1 if _torch.result_dtype_of(x.dtype) is not None else x.element_size())
        out = _empty((sum(sizes),) + tuple(x.shape[1:]), x)
        src, dst = _Flat(x, where, move=True), _Flat(out, where, move=True)
        send, kw = src.args()
        recv, _ = dst.args()
        counts = [s * row for s in sizes]
        self._group.all_gatherv(send, counts, recv if src.cuda else dst.tensor.reshape(-1), **_counted(kw))
        return out

    def reduce_scatter(self, input_: Any, dim: Any = -1) -> Any:
        """vLLM's reduce_scatter(input_, dim=-1): input_ split along dim into world_size chunks,
        this rank gets the sum of its chunk, as a new tensor. SGLang's reduce_scatter(output,
        input_list) is taken too (a list second): output gets the sum of input_list[rank]."""
        if isinstance(dim, (list, tuple)):
            return self._reduce_scatter_list(input_, list(dim))
        if self.world_size == 1:
            return input_
        where = f"reduce_scatter on {self.unique_name}"
        d = _dim(input_, dim, where)
        x = input_.movedim(d, 0).contiguous() if input_.dim() else input_.reshape(1)
        if x.shape[0] % self.world_size:
            raise InvalidArgumentError(f"{where}: dim {dim} has {x.shape[0]} entries, not a multiple of the group's "
                                       f"{self.world_size} ranks")
        out = _empty((x.shape[0] // self.world_size,) + tuple(x.shape[1:]), x)
        self._reduce_scatter_flat(x, out, where)
        return out.movedim(0, d).contiguous()

    def _reduce_scatter_flat(self, x: Any, out: Any, where: str, op: Any = ReduceOp.SUM) -> None:
        src, dst = _Flat(x, where, move=False), _Flat(out, where, move=False)
        send, kw = src.args()
        recv, _ = dst.args()
        self._group.reduce_scatter(send, _op(op, where), recv if src.cuda else dst.tensor.reshape(-1), **kw)

    def _reduce_scatter_list(self, output: Any, input_list: List[Any]) -> Any:
        torch = sys.modules["torch"]
        where = f"reduce_scatter on {self.unique_name}"
        if len(input_list) != self.world_size:
            raise InvalidArgumentError(f"{where}: input_list has {len(input_list)} tensors, the group {self.world_size} ranks")
        x = torch.cat([_contiguous(t).reshape(-1) for t in input_list])
        out = output if output.is_contiguous() else _empty(output.shape, output)
        self._reduce_scatter_flat(x, out, where)
        if out is not output:
            output.copy_(out)
        return output

    def reduce_scatter_tensor(self, output: Any, input_: Any) -> Any:
        """SGLang's reduce_scatter_tensor(output, input): block rank_in_group of input_'s
        world_size blocks, summed over the group, into output."""
        self._reduce_scatter_flat(_contiguous(input_), output, f"reduce_scatter_tensor on {self.unique_name}")
        return output

    def reduce_scatterv(self, input_: Any, dim: Any = -1, sizes: Optional[Sequence[int]] = None, *,
                        output: Any = None) -> Any:
        """vLLM's reduce_scatterv(input_, dim=-1, sizes=None) and SGLang's reduce_scatterv(input_,
        output=None, sizes=None) (a tensor second, or output=: dim 0): input_ holds sum(sizes)
        entries along dim; this rank gets the sum over the group of its sizes[rank_in_group]
        entries (sizes None: equal parts), as a new tensor or in output."""
        if _torch.is_tensor(dim) or dim is None:
            output, dim = (dim if output is None else output), 0
        elif output is not None:
            dim = 0
        where = f"reduce_scatterv on {self.unique_name}"
        if sizes is None:
            result = self.reduce_scatter(input_, dim)
        elif self.world_size == 1:
            result = input_
        else:
            d = _dim(input_, dim, where)
            x = input_.movedim(d, 0).contiguous()
            sizes = [int(s) for s in sizes]
            if len(sizes) != self.world_size or sum(sizes) != x.shape[0]:
                raise InvalidArgumentError(f"{where}: sizes {sizes} must have {self.world_size} entries summing to "
                                           f"{x.shape[0]} (input_'s extent along dim {dim})")
            row = int(_prod(x.shape[1:]))
            out = _empty((sizes[self.rank_in_group],) + tuple(x.shape[1:]), x)
            src, dst = _Flat(x, where, move=False), _Flat(out, where, move=False)
            send, kw = src.args()
            recv, _ = dst.args()
            self._group.reduce_scatterv(send, [s * row for s in sizes], ReduceOp.SUM,
                                        recv if src.cuda else dst.tensor.reshape(-1), **_counted(kw))
            result = out.movedim(0, d).contiguous()
        if output is not None:
            output.copy_(result.reshape(output.shape))
            return output
        return result

    def gather(self, input_: Any, dst: int = 0, dim: int = -1) -> Optional[Any]:
        """Every rank's input_ concatenated along dim on group rank dst (a new tensor there, None
        elsewhere; input_ itself on a group of one)."""
        if self.world_size == 1:
            return input_
        where = f"gather on {self.unique_name}"
        d = _dim(input_, dim, where)
        x = _contiguous(input_)
        is_dst = self.rank_in_group == dst
        out = _empty((self.world_size,) + tuple(x.shape), x) if is_dst else None
        src = _Flat(x, where, move=True)
        send, kw = src.args()
        recv = None
        if out is not None:
            o = _Flat(out, where, move=True)
            recv = o.args()[0] if src.cuda else o.tensor.reshape(-1)
        self._group.gather(send, dst, recv, **kw)
        if out is None:
            return None
        shape = tuple(x.shape)
        if not shape:
            return out.reshape(self.world_size)
        return out.movedim(0, d).reshape(shape[:d] + (self.world_size * shape[d],) + shape[d + 1:])

    def broadcast(self, input_: Any, src: int = 0) -> Any:
        """input_ of group rank src into input_ on every rank (in place); returns input_."""
        if self.world_size == 1:
            return input_
        where = f"broadcast on {self.unique_name}"
        buf = input_ if input_.is_contiguous() else input_.contiguous()
        b = _Flat(buf, where, move=True)
        arg, kw = b.args()
        self._group.broadcast(arg, src, **kw)
        if buf is not input_:
            input_.copy_(buf)
        return input_

    # ---- objects -------------------------------------------------------------------------------
    def broadcast_object(self, obj: Any = None, src: int = 0) -> Any:
        if self.world_size == 1:
            return obj
        return self._group.broadcast_object(obj, src)

    def broadcast_object_list(self, obj_list: List[Any], src: int = 0, group: Any = None) -> List[Any]:
        """torch's broadcast_object_list: obj_list of src into obj_list on every rank (in place)."""
        if self.world_size == 1:
            return obj_list
        got = self._group.broadcast_object(list(obj_list) if self.rank_in_group == src else None, src)
        if self.rank_in_group != src:
            obj_list[:] = got
        return obj_list

    def all_gather_object(self, obj: Any) -> List[Any]:
        return self._group.all_gather_object(obj)

    def send_object(self, obj: Any, dst: int, async_send: bool = False) -> Any:
        self._group.send_object(obj, dst)
        return [] if async_send else None

    def recv_object(self, src: int) -> Any:
        return self._group.recv_object(src)

    # ---- tensor dicts --------------------------------------------------------------------------
    def broadcast_tensor_dict(self, tensor_dict: Optional[Dict[str, Any]] = None, src: int = 0, group: Any = None,
                              metadata_group: Any = None) -> Optional[Dict[str, Any]]:
        """The dict of group rank src on every rank: tensors (of every dtype torch has) and other
        values mixed; src gets its own dict back, the others a dict of what src sent (torch
        tensors for torch tensors)."""
        if self.world_size == 1:
            return tensor_dict
        if self.rank_in_group == src and not isinstance(tensor_dict, dict):
            raise InvalidArgumentError(f"broadcast_tensor_dict on {self.unique_name}: expecting a dictionary, "
                                       f"got {type(tensor_dict)}")
        return self._group.broadcast_tensor_dict(tensor_dict, src)

    def _dict_request(self, tensor_dict: Dict[str, Any], dst: Optional[int], all_gather_group: Any,
                      all_gather_tensors: Optional[Mapping[str, bool]]) -> Any:
        if not isinstance(tensor_dict, dict):
            raise InvalidArgumentError(f"send_tensor_dict on {self.unique_name}: expecting a dictionary, "
                                       f"got {type(tensor_dict)}")
        return self._group.isend_tensor_dict(tensor_dict, dst, ag=_group_of(all_gather_group),
                                             ag_tensors=all_gather_tensors)

    def send_tensor_dict(self, tensor_dict: Dict[str, Any], dst: Optional[int] = None, all_gather_group: Any = None,
                         all_gather_tensors: Optional[Mapping[str, bool]] = None,
                         async_send: bool = False) -> Any:
        """Sends the dict to group rank dst (default: the next rank): one object message, then
        the tensors (sliced over all_gather_group, vLLM's and SGLang's optimization). Returns None;
        with async_send=True (SGLang) a list of P2PWork to wait for before the tensors change."""
        if self.world_size == 1:
            return tensor_dict
        req = self._dict_request(tensor_dict, dst, all_gather_group, all_gather_tensors)
        if async_send:
            return [P2PWork(req, tensor_dict)]
        req.wait()
        return None

    def recv_tensor_dict(self, src: Optional[int] = None, all_gather_group: Any = None,
                         all_gather_tensors: Optional[Mapping[str, bool]] = None) -> Optional[Dict[str, Any]]:
        """The next dict group rank src (default: the previous rank) sent with send_tensor_dict
        (blocking or not) or isend_tensor_dict."""
        if self.world_size == 1:
            return None
        return self._group.irecv_tensor_dict(src, ag=_group_of(all_gather_group)).wait()

    def isend_tensor_dict(self, tensor_dict: Dict[str, Any], dst: Optional[int] = None, all_gather_group: Any = None,
                          all_gather_tensors: Optional[Mapping[str, bool]] = None) -> List[Any]:
        """vLLM's isend_tensor_dict: returns the handles to wait for (the tensors stay alive
        until they complete)."""
        if self.world_size == 1:
            return []
        return [self._dict_request(tensor_dict, dst, all_gather_group, all_gather_tensors)]

    def irecv_tensor_dict(self, src: Optional[int] = None, all_gather_group: Any = None,
                          all_gather_tensors: Optional[Mapping[str, bool]] = None) -> Tuple[Any, List[Any], List[Any]]:
        """vLLM's irecv_tensor_dict: (tensor_dict, handles, postprocess). The dict holds every
        key at once (tensors at their full shape); its tensors are complete once every handle was
        waited for and every postprocess function (the all-gathers of sliced tensors) was run."""
        if self.world_size == 1:
            return None, [], []
        req = self._group.irecv_tensor_dict(src, ag=_group_of(all_gather_group))
        return req.tensor_dict, list(req.requests), list(req.postprocess)

    # ---- point-to-point, barrier ---------------------------------------------------------------
    def barrier(self) -> None:
        self._group.barrier()

    def send(self, tensor: Any, dst: Optional[int] = None, async_send: bool = False) -> Optional[P2PWork]:
        """Sends tensor to group rank dst (default: the next rank); async_send=True (SGLang)
        returns a P2PWork that keeps tensor alive until its wait()."""
        if dst is None:
            dst = (self.rank_in_group + 1) % self.world_size
        where = f"send on {self.unique_name}"
        t = _Flat(_contiguous(tensor), where, move=True)
        arg, kw = t.args()
        if async_send:
            return P2PWork(self._group.isend(arg, dst, **kw), t.tensor)
        self._group.send(arg, dst, **kw)
        return None

    def recv(self, size: Any, dtype: Any, src: Optional[int] = None) -> Any:
        """A new tensor of size and (torch) dtype received from group rank src (default: the
        previous rank)."""
        torch = sys.modules["torch"]
        if src is None:
            src = (self.rank_in_group - 1) % self.world_size
        out = torch.empty(size, dtype=dtype, device=self.device)
        t = _Flat(out, f"recv on {self.unique_name}", move=True)
        arg, kw = t.args()
        self._group.recv(arg, src, **kw)
        return out

    def destroy(self) -> None:
        """Nothing to do one group at a time: pstate destroys the groups together
        (destroy_model_parallel, destroy_distributed_environment)."""

    def prepare_communication_buffer_for_model(self, model: Any) -> None:
        """vLLM's hook for all-to-all buffers sized by the model: nothing to prepare."""


def _prod(shape: Sequence[int]) -> int:
    n = 1
    for extent in shape:
        n *= int(extent)
    return n


def _group_of(g: Any) -> Optional[Group]:
    if g is None:
        return None
    if isinstance(g, GroupCoordinator):
        return g.group
    if isinstance(g, Group):
        return g
    raise InvalidArgumentError(f"all_gather_group must be a GroupCoordinator, got {type(g).__name__}")


class _DeviceCommunicator:
    """vLLM's GroupCoordinator.device_communicator: the same collectives (all_gather(input_, dim),
    ...) and its pynccl_comm."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self._c = coordinator
        self.pynccl_comm = coordinator.pynccl_comm
        self.world_size = coordinator.world_size
        self.rank_in_group = coordinator.rank_in_group

    def all_reduce(self, input_: Any) -> Any:
        return self._c.all_reduce(input_)

    def all_gather(self, input_: Any, dim: int = -1) -> Any:
        return self._c.all_gather(input_, dim)

    def all_gatherv(self, input_: Any, dim: int = 0, sizes: Optional[Sequence[int]] = None) -> Any:
        return self._c.all_gatherv(input_, dim, sizes)

    def reduce_scatter(self, input_: Any, dim: int = -1) -> Any:
        return self._c.reduce_scatter(input_, dim)

    def reduce_scatterv(self, input_: Any, dim: int = -1, sizes: Optional[Sequence[int]] = None) -> Any:
        return self._c.reduce_scatterv(input_, dim, sizes)

    def gather(self, input_: Any, dst: int = 0, dim: int = -1) -> Any:
        return self._c.gather(input_, dst, dim)

    def send(self, tensor: Any, dst: Optional[int] = None) -> None:
        self._c.send(tensor, dst)

    def recv(self, size: Any, dtype: Any, src: Optional[int] = None) -> Any:
        return self._c.recv(size, dtype, src)

    def destroy(self) -> None:
        pass


class PyNcclCommunicator:
    """vLLM's and SGLang's PyNcclCommunicator(group, device) over a pstate group (a
    GroupCoordinator, its cpu_group, or a pstate.Group): out-parameter collectives on torch
    tensors, with their argument orders. In a CPU context they run on the CPU group."""

    def __init__(self, group: Any, device: Any = None) -> None:
        if isinstance(group, GroupCoordinator):
            coordinator = group
        elif isinstance(group, Group):
            coordinator = _coordinator(group)
        else:
            raise InvalidArgumentError(f"PyNcclCommunicator: group must be a GroupCoordinator or its cpu_group, "
                                       f"got {type(group).__name__}")
        self._c = coordinator
        self.rank = coordinator.rank_in_group
        self.world_size = coordinator.world_size
        self.device = coordinator.device if device is None else device
        self.available = True
        self.disabled = False
        self.stream = None

    @contextlib.contextmanager
    def change_state(self, enable: Optional[bool] = None, stream: Any = None) -> Iterator[None]:
        """Older vLLM's switch: nothing to switch here."""
        yield

    def _g(self) -> Group:
        return self._c.group

    def all_reduce(self, in_tensor: Any, out_tensor: Any = None, op: Any = ReduceOp.SUM, stream: Any = None) -> Any:
        where = "PyNcclCommunicator.all_reduce"
        if out_tensor is None:
            out_tensor = _empty(in_tensor.shape, in_tensor)
        src, dst = _Flat(_contiguous(in_tensor), where, move=False), _Flat(out_tensor, where, move=False)
        send, kw = src.args()
        self._g().all_reduce(send, _op(op, where), out=dst.args()[0], **kw)
        return out_tensor

    def all_gather(self, output_tensor: Any, input_tensor: Any, stream: Any = None) -> None:
        self._c.all_gather_into_tensor(output_tensor, input_tensor)

    def all_gatherv(self, output_tensor: Any, input_tensor: Any, sizes: Sequence[int], stream: Any = None) -> None:
        output_tensor.copy_(self._c.all_gatherv(input_tensor, 0, sizes).reshape(output_tensor.shape))

    def reduce_scatter(self, output_tensor: Any, input_tensor: Any, op: Any = ReduceOp.SUM, stream: Any = None) -> None:
        self._c._reduce_scatter_flat(_contiguous(input_tensor), output_tensor, "PyNcclCommunicator.reduce_scatter", op)

    def reduce_scatterv(self, output_tensor: Any, input_tensor: Any, sizes: Sequence[int], op: Any = ReduceOp.SUM,
                        stream: Any = None) -> None:
        where = "PyNcclCommunicator.reduce_scatterv"
        x = _contiguous(input_tensor)
        row = int(_prod(x.shape[1:]))
        src, dst = _Flat(x, where, move=False), _Flat(output_tensor, where, move=False)
        send, kw = src.args()
        self._g().reduce_scatterv(send, [int(s) * row for s in sizes], _op(op, where), dst.args()[0], **_counted(kw))

    def send(self, tensor: Any, dst: int, stream: Any = None) -> None:
        self._c.send(tensor, dst)

    def recv(self, tensor: Any, src: int, stream: Any = None) -> None:
        t = _Flat(tensor, "PyNcclCommunicator.recv", move=True)
        arg, kw = t.args()
        self._g().recv(arg, src, **kw)

    def broadcast(self, tensor: Any, src: int, stream: Any = None) -> None:
        self._c.broadcast(tensor, src)


# ---- the module's state: environment and groups ---------------------------------------------

def _coordinator(group: Group, name: Optional[str] = None) -> GroupCoordinator:
    """The coordinator of a group, one per group (aliased kinds share theirs, as in SGLang)."""
    key = group.name
    found = _State.coordinators.get(key)
    if found is None or found.group._generation != group._generation:
        found = GroupCoordinator(group, name)
        _State.coordinators[key] = found
    return found


def _timeout_ms(timeout: Any) -> Optional[int]:
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        return max(1, int(timeout.total_seconds() * 1000))
    return int(timeout * 1000)


def init_distributed_environment(world_size: int = -1, rank: int = -1, distributed_init_method: str = "env://",
                                 local_rank: int = -1, backend: str = "nccl", timeout: Any = None,
                                 *, device: Optional[str] = None, **engine_options: Any) -> None:
    """vLLM's and SGLang's init_distributed_environment: rendezvous with the other ranks and make
    the world group (pstate.init). -1 and "env://" take RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR/MASTER_PORT (or PSTATE_STORE) from the environment, as `pstate run` and torchrun
    set them; "tcp://HOST:PORT" and "file:///DIR" work too. backend "nccl" (the default) makes a
    CUDA context where torch has CUDA, else (as vLLM falls back to gloo) a CPU one; "gloo", "cpu"
    and the others a CPU context; device="cuda" or "cpu" (pstate's own keyword) chooses the
    context whatever torch has (the devsim stand-ins: a CUDA context for a CPU-only torch). timeout:
    a timedelta or seconds. Other keywords of the engines' versions are accepted and ignored. A
    second call with a world of the same size is a no-op, as in both engines."""
    torch = _torch_module()
    if _State.ps is not None and not _State.ps.closed:
        if world_size not in (-1, None) and _State.ps.world_size != world_size:
            raise InvalidStateError(f"init_distributed_environment: the world is already initialized with "
                                    f"{_State.ps.world_size} ranks, not {world_size}")
        return
    if device is None:
        device = "cuda" if str(backend).lower() == "nccl" and torch.cuda.is_available() else "cpu"
    device = str(coerce(_Device, device, "device").name.lower())
    ps = init(world_size=None if world_size in (-1, None) else world_size, rank=None if rank in (-1, None) else rank,
              local_rank=None if local_rank in (-1, None) else local_rank,
              init_method=None if distributed_init_method in (None, "env://") else distributed_init_method,
              device=device, timeout_ms=_timeout_ms(timeout))
    _State.ps, _State.device, _State.coordinators = ps, device, {}
    _coordinator(ps.world)


def _config_from(args: Tuple[Any, ...], kw: Dict[str, Any]) -> Dict[str, Optional[int]]:
    """The pstate sizes of initialize_model_parallel's arguments: vLLM's positional order and the
    keywords of both engines (and pstate's own names)."""
    positional = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "prefill_context_model_parallel_size",
                  "decode_context_model_parallel_size", "backend")
    if len(args) > len(positional):
        raise TypeError(f"initialize_model_parallel takes at most {len(positional)} positional arguments")
    for name, value in zip(positional, args):
        if name in kw:
            raise TypeError(f"initialize_model_parallel got multiple values for argument '{name}'")
        kw[name] = value
    names = {"tensor_model_parallel_size": "tensor_parallel_size",
             "pipeline_model_parallel_size": "pipeline_parallel_size",
             "expert_model_parallel_size": "expert_parallel_size",
             "attention_data_parallel_size": "attention_data_parallel_size",
             "attention_context_model_parallel_size": "attention_context_parallel_size",
             "moe_data_model_parallel_size": "moe_data_parallel_size",
             "moe_context_model_parallel_size": "moe_data_parallel_size",  # SGLang's newer name
             "decode_context_model_parallel_size": "decode_context_parallel_size"}
    ignored = {"backend", "duplicate_tp_group", "torch_compile", "fault_tolerance_config"}
    sizes: Dict[str, Optional[int]] = {}
    for key, value in kw.items():
        if key in ignored:
            continue
        if key == "prefill_context_model_parallel_size":
            if value not in (None, 1):
                raise UnsupportedError("initialize_model_parallel: prefill_context_model_parallel_size > 1 (vLLM's "
                                       "PCP) has no pstate layout; pstate's context parallelism is SGLang's "
                                       "attention_context_model_parallel_size")
            continue
        target = names.get(key, key)
        if target not in names.values() and target != "shared_experts_tensor_parallel_size":
            raise TypeError(f"initialize_model_parallel got an unexpected keyword argument '{key}'")
        sizes[target] = None if value is None else int(value)
    if sizes.get("decode_context_parallel_size") == 1:
        sizes["decode_context_parallel_size"] = None  # vLLM's default 1: no DCP group, as pstate's default
    return sizes


def initialize_model_parallel(*args: Any, **kwargs: Any) -> None:
    """vLLM's initialize_model_parallel(tensor_model_parallel_size=1,
    pipeline_model_parallel_size=1, prefill_context_model_parallel_size=1,
    decode_context_model_parallel_size=1, backend=None) and SGLang's keywords
    (expert_model_parallel_size, attention_data_parallel_size,
    attention_context_model_parallel_size, moe_data_model_parallel_size, duplicate_tp_group,
    torch_compile). Positional arguments follow vLLM's order (SGLang's second positional is
    expert_model_parallel_size: pass it by keyword). A size not given takes pstate's default
    (tensor = world / pipeline, the others 1). Collective over the world; SGLang's layout."""
    ps = get_pstate()
    ps.initialize_model_parallel(**_config_from(args, dict(kwargs)))
    _coordinator(ps.tp)
    _coordinator(ps.pp)


def ensure_model_parallel_initialized(tensor_model_parallel_size: int, pipeline_model_parallel_size: int = 1,
                                      *args: Any, **kwargs: Any) -> None:
    """Initializes the model-parallel groups unless they are; if they are, checks the TP and PP
    sizes (AssertionError naming both, as vLLM)."""
    if not model_parallel_is_initialized():
        initialize_model_parallel(tensor_model_parallel_size, pipeline_model_parallel_size, *args, **kwargs)
        return
    tp, pp = get_tp_group().world_size, get_pp_group().world_size
    assert tp == tensor_model_parallel_size, (
        f"tensor parallel group already initialized, but of unexpected size: {tp} vs. {tensor_model_parallel_size}")
    assert pp == pipeline_model_parallel_size, (
        f"pipeline parallel group already initialized, but of unexpected size: {pp} vs. {pipeline_model_parallel_size}")


def model_parallel_is_initialized() -> bool:
    return _State.ps is not None and not _State.ps.closed and _State.ps.model_parallel_is_initialized


def _group(kind: GroupKind, name: str) -> GroupCoordinator:
    ps = get_pstate()
    if kind != GroupKind.WORLD and not ps.model_parallel_is_initialized:
        raise AssertionError(f"{name} group is not initialized: call initialize_model_parallel() first")
    return _coordinator(ps.group(kind))


def get_world_group() -> GroupCoordinator:
    return _group(GroupKind.WORLD, "world")


def get_tp_group() -> GroupCoordinator:
    return _group(GroupKind.TP, "tensor model parallel")


def get_pp_group() -> GroupCoordinator:
    return _group(GroupKind.PP, "pipeline model parallel")


get_tensor_model_parallel_group = get_tp_group  # SGLang's (vLLM's older) name
get_pipeline_model_parallel_group = get_pp_group


def get_attn_tp_group() -> GroupCoordinator:
    """SGLang's attention-TP group."""
    return _group(GroupKind.ATTN_TP, "attention tensor parallel")


get_attention_tp_group = get_attn_tp_group


def get_attn_cp_group() -> GroupCoordinator:
    """SGLang's attention context-parallel group."""
    return _group(GroupKind.ATTN_CP, "attention context parallel")


def get_moe_ep_group() -> GroupCoordinator:
    return _group(GroupKind.MOE_EP, "MoE expert parallel")


def get_moe_tp_group() -> GroupCoordinator:
    return _group(GroupKind.MOE_TP, "MoE tensor parallel")


def get_moe_dp_group() -> GroupCoordinator:
    return _group(GroupKind.MOE_DP, "MoE data parallel")


get_moe_cp_group = get_moe_dp_group  # SGLang's newer name (moe_context_model_parallel_size)


def get_ep_group() -> GroupCoordinator:
    """vLLM's expert-parallel group: SGLang's MoE EP group here (its size is
    expert_model_parallel_size)."""
    return get_moe_ep_group()


def get_dcp_group() -> GroupCoordinator:
    """The decode-context-parallel group (decode_context_model_parallel_size > 1)."""
    return _group(GroupKind.DCP, "decode context model parallel")


get_context_model_parallel_group = get_dcp_group


def get_dp_group() -> GroupCoordinator:
    raise UnsupportedError("get_dp_group: vLLM's data-parallel group (its DP x PP x PCP x TP layout) is not "
                           "pstate's; SGLang's attention DP is get_attn_tp_group() / attention_data_parallel_size")


def get_pcp_group() -> GroupCoordinator:
    raise UnsupportedError("get_pcp_group: vLLM's prefill context parallelism has no pstate layout; "
                           "pstate's context parallelism is SGLang's get_attn_cp_group()")


def get_tensor_model_parallel_world_size() -> int:
    return get_tp_group().world_size


def get_tensor_model_parallel_rank() -> int:
    return get_tp_group().rank_in_group


def get_pipeline_model_parallel_world_size() -> int:
    return get_pp_group().world_size


def get_pipeline_model_parallel_rank() -> int:
    return get_pp_group().rank_in_group


def get_decode_context_model_parallel_world_size() -> int:
    return get_dcp_group().world_size


def get_decode_context_model_parallel_rank() -> int:
    return get_dcp_group().rank_in_group


def get_moe_expert_parallel_world_size() -> int:
    return get_moe_ep_group().world_size


def get_moe_expert_parallel_rank() -> int:
    return get_moe_ep_group().rank_in_group


def get_moe_tensor_parallel_world_size() -> int:
    return get_moe_tp_group().world_size


def get_moe_tensor_parallel_rank() -> int:
    return get_moe_tp_group().rank_in_group


def new_group(ranks: Sequence[int], backend: Any = None, **options: Any) -> Optional[GroupCoordinator]:
    """torch.distributed.new_group's way: every rank of the world calls it with the same ranks;
    members get the group's GroupCoordinator, the others None (pstate_new_group underneath)."""
    ps = get_pstate()
    members = sorted(int(r) for r in ranks)
    group = ps.new_group(members if ps.rank in members else [])
    return None if group is None else GroupCoordinator(group)


def in_the_same_node_as(pg: Any, source_rank: int = 0) -> List[bool]:
    """For each rank of pg (a GroupCoordinator, its cpu_group or a pstate.Group), whether it shares
    a host with group rank source_rank. Local in pstate (hosts are known from the rendezvous)."""
    group = _group_of(pg)
    assert group is not None
    return group.same_node(source_rank)


def set_custom_all_reduce(enable: bool) -> None:
    """Accepted (SGLang's and vLLM's switch); pstate chooses its algorithms itself."""
    _State.custom_all_reduce = bool(enable)


def set_quick_all_reduce(enable: bool) -> None:
    """Accepted (SGLang's switch); pstate chooses its algorithms itself."""
    _State.quick_all_reduce = bool(enable)


@contextlib.contextmanager
def graph_capture(device: Any = None) -> Iterator[GraphCaptureContext]:
    """The engines' graph_capture(): every group in capture mode for the block, yielding a
    GraphCaptureContext whose stream the graph is captured on. A CPU context has nothing to
    capture (stream None; the block runs as it is); a CUDA context runs pstate's graph capture
    (PState.graph_capture) on a new torch stream."""
    ps = get_pstate()
    if _State.device != "cuda":
        yield GraphCaptureContext(None)
        return
    torch = sys.modules["torch"]
    stream = torch.cuda.Stream(device=device)
    stream.wait_stream(torch.cuda.current_stream())
    with ps.graph_capture(stream.cuda_stream) as capture_stream:
        capturing = torch.cuda.ExternalStream(capture_stream) if capture_stream != stream.cuda_stream else stream
        with torch.cuda.stream(capturing):
            yield GraphCaptureContext(capturing)


def destroy_model_parallel() -> None:
    """Drops the model-parallel groups (the world stays); a no-op when there are none."""
    ps = _State.ps
    if ps is not None and not ps.closed and ps.model_parallel_is_initialized:
        ps.destroy_model_parallel()
    _State.coordinators = {k: c for k, c in _State.coordinators.items() if c.group.kind == GroupKind.WORLD}


def destroy_distributed_environment() -> None:
    """Finalizes the PState (waits for the peers, frees everything); a no-op without one."""
    ps, _State.ps = _State.ps, None
    _State.coordinators = {}
    if ps is not None and not ps.closed:
        ps.finalize()


def cleanup_dist_env_and_memory(shutdown_ray: bool = False) -> None:
    destroy_model_parallel()
    destroy_distributed_environment()


# ---- communication_op.py ------------------------------------------------------------------------

def tensor_model_parallel_all_reduce(input_: Any) -> Any:
    """The sum of input_ over the TP group, as a new tensor."""
    return get_tp_group().all_reduce(input_)


def tensor_model_parallel_all_gather(input_: Any, dim: int = -1) -> Any:
    return get_tp_group().all_gather(input_, dim)


def tensor_model_parallel_reduce_scatter(input_: Any, dim: int = -1) -> Any:
    return get_tp_group().reduce_scatter(input_, dim)


def tensor_model_parallel_gather(input_: Any, dst: int = 0, dim: int = -1) -> Optional[Any]:
    return get_tp_group().gather(input_, dst, dim)


def broadcast_tensor_dict(tensor_dict: Optional[Dict[str, Any]] = None, src: int = 0) -> Optional[Dict[str, Any]]:
    """broadcast_tensor_dict on the TP group (vLLM's and SGLang's communication_op); without
    model-parallel groups on the world, as the engines' callers do before initialization."""
    if _State.ps is None or _State.ps.closed:
        return tensor_dict
    group = get_tp_group() if model_parallel_is_initialized() else get_world_group()
    return group.broadcast_tensor_dict(tensor_dict, src)
