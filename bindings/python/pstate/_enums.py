"""The enumerations of pstate.h as Python IntEnums (the numbers are the C ABI's, never changed).

DType and ReduceOp numbers equal NCCL's ncclDataType_t / ncclRedOp_t. The values are written
out here (rather than read from the SWIG module) so that the types are visible to type checkers;
tests/test_enums.py checks every value against the compiled C constants.
"""
from __future__ import annotations

import enum
from typing import Any, Type, TypeVar


class DType(enum.IntEnum):
    """pstate_dtype_t: element types."""

    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FP8_E4M3 = 10  #: move-only on CPU: reductions raise UnsupportedError
    FP8_E5M2 = 11  #: move-only on CPU: reductions raise UnsupportedError

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _ITEMSIZE[self]


_ITEMSIZE = {
    DType.INT8: 1, DType.UINT8: 1, DType.INT32: 4, DType.UINT32: 4, DType.INT64: 8,
    DType.UINT64: 8, DType.FLOAT16: 2, DType.FLOAT32: 4, DType.FLOAT64: 8, DType.BFLOAT16: 2,
    DType.FP8_E4M3: 1, DType.FP8_E5M2: 1,
}


class ReduceOp(enum.IntEnum):
    """pstate_reduce_op_t. AVG is SUM divided by the group size (truncating for integers)."""

    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


class Device(enum.IntEnum):
    """pstate_device_t: where the tensors of the device communicator live."""

    CPU = 0
    CUDA = 1


class Engine(enum.IntEnum):
    """pstate_engine_t: whose rank layout a parallel config describes (the engine= keyword)."""

    SGLANG = 0  #: SGLang's initialize_model_parallel (the default): world = tp x pp
    VLLM = 1    #: vLLM's: world = ExternalDP x dp x pp x pcp x tp


class GroupKind(enum.IntEnum):
    """pstate_group_kind_t: the groups of SGLang's (and vLLM's) parallel_state.py."""

    WORLD = 0
    TP = 1
    PP = 2
    ATTN_TP = 3
    ATTN_CP = 4
    MOE_EP = 5
    MOE_TP = 6
    MOE_DP = 7
    DCP = 8
    SHARED_EXPERTS_TP = 9
    SELF_PP = 10
    DP = 11    #: vLLM's layout (Engine.VLLM): data parallel
    PCP = 12   #: vLLM: prefill context parallel
    EP = 13    #: vLLM: expert parallel over dp x pcp x tp of one pipeline stage (MoE models)
    EPLB = 14  #: vLLM: EP's ranks on a group of their own, for expert load balancing (MoE models)
    CUSTOM = 1000  #: a group of PState.new_group (not for PState.group); kinds >= 1000 are not layout kinds


_E = TypeVar("_E", bound=enum.IntEnum)


def coerce(cls: Type[_E], value: Any, what: str) -> _E:
    """value as a member of cls: a member, its name in any case ("tp", "Sum"), or its number;
    anything else (a member of another enumeration, a bool, a float, an unknown name or number)
    raises InvalidArgumentError naming `what` and the accepted names."""
    from ._errors import InvalidArgumentError  # _errors does not import this module

    if isinstance(value, cls):
        return value
    if type(value).__module__.startswith("torch"):  # torch.bfloat16, torch.distributed.ReduceOp.MAX
        member = _from_torch(cls, value)
        if member is not None:
            return member
    if isinstance(value, str):
        member = cls.__members__.get(value.strip().upper())
        if member is not None:
            return member
    elif isinstance(value, int) and not isinstance(value, (bool, enum.Enum)):
        try:
            return cls(value)
        except ValueError:
            pass
    names = ", ".join(f'"{m.name.lower()}"' for m in cls)
    torch_too = {"DType": " (or a torch dtype pstate has)", "ReduceOp": " (or a torch.distributed.ReduceOp)"}
    raise InvalidArgumentError(f"{what} {value!r} is not a {cls.__name__}: use {cls.__name__}.<NAME> or one of "
                               f"{names}{torch_too.get(cls.__name__, '')}")


def _from_torch(cls: Any, value: Any) -> Any:
    """The member a torch dtype (DType) or torch.distributed.ReduceOp (ReduceOp) stands for, or
    None. torch is the caller's: it is imported already when such a value exists."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if cls is DType and isinstance(value, torch.dtype):
        from ._torch import result_dtype_of

        return result_dtype_of(value)
    if cls is ReduceOp:
        dist_op = getattr(getattr(torch, "distributed", None), "ReduceOp", None)
        for name, member in (("SUM", ReduceOp.SUM), ("PRODUCT", ReduceOp.PROD), ("MAX", ReduceOp.MAX),
                             ("MIN", ReduceOp.MIN), ("AVG", ReduceOp.AVG)):
            theirs = getattr(dist_op, name, None)
            if theirs is not None and (value is theirs or value == theirs):
                return member
    return None
