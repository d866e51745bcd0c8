"""pstate — the parallel state of an LLM serving runtime (SGLang's parallel_state.py), in Python.

    import numpy as np, pstate

    with pstate.init() as ps:                      # RANK, WORLD_SIZE, ... from `pstate run -n N`
        ps.initialize_model_parallel(tensor_parallel_size=2)
        x = np.full(4, ps.rank, dtype=np.float32)
        ps.tp.all_reduce(x)                        # in place, GIL released while it runs
        cfg = ps.world.broadcast_object({"seed": 1})
        meta = ps.world.broadcast_tensor_dict({"ids": np.arange(3)} if ps.rank == 0 else None)

Failed calls raise pstate.Error subclasses (pstate.TimeoutError is also a builtin TimeoutError,
pstate.PeerLostError a ConnectionError, ...) carrying .status and .detail (pstate_last_error()).
Ctrl-C reaches a call blocked in the library within ~0.1 s: KeyboardInterrupt is raised there and
the context is failed (the ``with`` block aborts it; otherwise call ps.abort()).
A MismatchError on a shared-memory group (ranks of one host disagreeing about a collective)
fails the context the same way: every later call raises AbortedError.
torch CPU tensors work wherever numpy arrays do (read directly; torch in, torch out; tensor dicts
give torch tensors back with tensors="torch").
Layout(world_size, ...) computes SGLang's groups without communication.
pstate.parallel_state is vLLM's and SGLang's parallel_state on pstate: their function names,
GroupCoordinator methods and argument orders on torch tensors (docs/bindings.md, "Coming from
vLLM or SGLang").
"""
from __future__ import annotations

from . import capi
from ._buffers import BufferLike
from ._core import Group, PState, init
from ._hooks import CallInfo, HookPhase
from ._enums import Device, DType, Engine, GroupKind, ReduceOp
from ._errors import (
    AbortedError,
    AuthError,
    BusyError,
    Error,
    InternalError,
    InterruptedError,
    InvalidArgumentError,
    InvalidStateError,
    MismatchError,
    NoMemoryError,
    PeerLostError,
    Status,
    TimeoutError,
    TransportError,
    UnsupportedError,
    error_class,
)
from ._errors import pythonic as _pythonic
from ._layout import CONFIG_FIELDS, Layout
from ._objects import ObjectFrameError, ObjectRefusedError
from ._dict_p2p import DictRequest
from ._requests import P2POp, Request
from ._memory import DeviceMemory, DeviceTensor
from ._tensor_dict import NUMPY_DTYPE_NAMES, TensorDict

__all__ = [
    "AbortedError", "AuthError", "BufferLike", "BusyError", "CallInfo", "HookPhase", "CONFIG_FIELDS", "Device", "DictRequest", "DType", "Engine", "Error", "Group", "GroupKind",
    "InternalError", "InterruptedError", "InvalidArgumentError", "InvalidStateError", "Layout", "MismatchError", "NoMemoryError",
    "NUMPY_DTYPE_NAMES", "ObjectFrameError", "ObjectRefusedError", "P2POp", "PState", "PeerLostError", "ReduceOp", "Status",
    "Request", "TensorDict", "TimeoutError", "DeviceMemory", "DeviceTensor",
    "TransportError", "UnsupportedError",
    "error_class", "init", "last_error", "library_version", "__version__",
]


def library_version() -> int:
    """pstate_version() of the loaded libpstate: MAJOR*10000 + MINOR*100 + PATCH."""
    return capi.version()


def last_error() -> str:
    """This thread's pstate_last_error() text ("" when it has had no failure), in Python's names
    as the exceptions' .detail says it."""
    return _pythonic(capi.last_error())


#: The version of the header these bindings were generated from.
__version__ = f"{capi.PSTATE_VERSION_MAJOR}.{capi.PSTATE_VERSION_MINOR}.{capi.PSTATE_VERSION_PATCH}"
