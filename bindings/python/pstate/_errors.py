"""pstate errors: one exception class per pstate_status_t, all subclasses of pstate.Error.

Every C call that returns a status other than PSTATE_OK raises the class for that status (the
SWIG typemap in bindings/pstate.i calls _raise_status); the exception carries the status and the
text pstate_last_error() gave on the failing thread, with the C names in it said the Python way
(pythonic: "call pstate_abort" -> "call ps.abort()", "PSTATE_DEVICE_CPU" -> 'device="cpu"',
"pstate_init_params_t.world_size" -> "pstate.init(world_size=...)") and a tensor dict another
rank's binding refused reduced to that binding's reason. Each class also derives from the builtin
exception a Python programmer would catch for that kind of failure, so ``except TimeoutError``
and ``except pstate.TimeoutError`` both work.

A wait interrupted by a signal (Ctrl-C) raises what the Python signal handler raised
(KeyboardInterrupt), not a pstate.Error; InterruptedError is the status's class for the rare case
where no Python exception is pending.
"""
from __future__ import annotations

import builtins
import enum
import re
from typing import Dict, Type


class Status(enum.IntEnum):
    """pstate_status_t: the result of every C call (stable numbers)."""

    OK = 0
    INVALID_ARGUMENT = 1
    INVALID_STATE = 2
    UNSUPPORTED = 3
    NO_MEMORY = 4
    TIMEOUT = 5
    PEER_LOST = 6
    TRANSPORT = 7
    MISMATCH = 8
    AUTH = 9
    ABORTED = 10
    INTERNAL = 11
    INTERRUPTED = 12
    BUSY = 13


class Error(Exception):
    """A failed pstate call.

    Attributes:
        status: the Status of the failure.
        detail: what pstate_last_error() said (what failed, where, what to do), or the
            binding's own explanation when the Python layer refused the call before C.
    """

    status: Status = Status.INTERNAL

    def __init__(self, detail: str = "", status: "Status | None" = None) -> None:
        if status is not None:
            self.status = Status(status)
        self.detail = detail
        super().__init__(self._text())

    def _text(self) -> str:
        name = f"PSTATE_ERR_{self.status.name}" if self.status != Status.OK else "PSTATE_OK"
        return f"{name}: {self.detail}" if self.detail else name

    def __str__(self) -> str:
        return self._text()


class InvalidArgumentError(Error, ValueError, TypeError):
    """PSTATE_ERR_INVALID_ARGUMENT: a bad pointer, size, dtype, op or rank (also raised by the
    binding for a buffer of the wrong dtype, layout or size)."""

    status = Status.INVALID_ARGUMENT


class InvalidStateError(Error, RuntimeError):
    """PSTATE_ERR_INVALID_STATE: a call out of lifecycle order; the text names the step."""

    status = Status.INVALID_STATE


class UnsupportedError(Error, NotImplementedError):
    """PSTATE_ERR_UNSUPPORTED: valid, but not in this build or context (fp8 reductions, graph
    capture on a CPU context, a group kind that is not configured)."""

    status = Status.UNSUPPORTED


class NoMemoryError(Error, MemoryError):
    """PSTATE_ERR_NO_MEMORY: an allocation failed."""

    status = Status.NO_MEMORY


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 - deliberately shadows the builtin
    """PSTATE_ERR_TIMEOUT: a blocking call passed the context's timeout_ms."""

    status = Status.TIMEOUT


class PeerLostError(Error, ConnectionError):
    """PSTATE_ERR_PEER_LOST: a peer is gone (its process died or its link closed). Call
    PState.abort() (the context manager does) rather than finalize()."""

    status = Status.PEER_LOST


class TransportError(Error, ConnectionError):
    """PSTATE_ERR_TRANSPORT: UCX, sockets, NCCL or CUDA reported an error."""

    status = Status.TRANSPORT


class MismatchError(Error, RuntimeError):
    """PSTATE_ERR_MISMATCH: ranks disagree (world size, a taken rank, PSTATE_CHECK=1)."""

    status = Status.MISMATCH


class AuthError(Error, PermissionError):
    """PSTATE_ERR_AUTH: the job token was refused by the rendezvous store."""

    status = Status.AUTH


class AbortedError(Error, RuntimeError):
    """PSTATE_ERR_ABORTED: the context failed earlier; only abort/finalize are allowed."""

    status = Status.ABORTED


class InternalError(Error, RuntimeError):
    """PSTATE_ERR_INTERNAL: a bug in pstate; the text says where."""

    status = Status.INTERNAL


class InterruptedError(Error, builtins.InterruptedError):  # noqa: A001 - deliberately shadows the builtin
    """PSTATE_ERR_INTERRUPTED: a wait was stopped by the context's interrupt check (a signal).
    The context is failed: abort() (or leave the ``with`` block) next. Ctrl-C normally raises the
    signal handler's KeyboardInterrupt instead of this class."""

    status = Status.INTERRUPTED


class BusyError(Error, RuntimeError):
    """PSTATE_ERR_BUSY: another thread is inside a call on the same PState (the binding serializes
    its own calls, so this comes from a C caller sharing the handle, or from abort() called inside a
    call on the same thread: a signal handler). Nothing was done."""

    status = Status.BUSY


_BY_STATUS: Dict[int, Type[Error]] = {
    cls.status.value: cls
    for cls in (
        InvalidArgumentError,
        InvalidStateError,
        UnsupportedError,
        NoMemoryError,
        TimeoutError,
        PeerLostError,
        TransportError,
        MismatchError,
        AuthError,
        AbortedError,
        InternalError,
        InterruptedError,
        BusyError,
    )
}


def error_class(status: int) -> Type[Error]:
    """The exception class for a status number (Error itself for unknown numbers)."""
    return _BY_STATUS.get(int(status), Error)


# The C names of pstate_last_error() texts, as a Python user writes them (whole words only).
_CALLS = {
    "pstate_init": "pstate.init()",
    "pstate_abort": "ps.abort()",
    "pstate_revoke": "ps.revoke()",
    "pstate_finalize": "ps.finalize()",
    "pstate_shrink": "ps.shrink()",
    "pstate_grow": "ps.grow()",
    "pstate_live_ranks": "ps.live_ranks()",
    "pstate_initialize_model_parallel": "ps.initialize_model_parallel()",
    "pstate_destroy_model_parallel": "ps.destroy_model_parallel()",
    "pstate_get_group": "ps.group()",
    "pstate_graph_capture_begin": "ps.graph_capture()",
    "pstate_graph_capture_end": "the end of the ps.graph_capture() block",
    "pstate_tp_allreduce": "ps.tp_all_reduce()",
    "pstate_tp_allgather": "ps.tp_all_gather()",
    "pstate_set_interrupt_check": "the Ctrl-C check",
    "pstate_trace_dump": "ps.trace_dump()",
    "pstate_group_set_timeout": "group.set_timeout()",
    "pstate_group_timeout": "group.timeout_ms",
    "pstate_t": "pstate.PState",
    "pstate_group_t": "pstate.Group",
    "pstate_dtype_t": "pstate.DType",
    "pstate_reduce_op_t": "pstate.ReduceOp",
    "pstate_group_kind_t": "pstate.GroupKind",
    "pstate_device_t": "pstate.Device",
    "pstate_parallel_config_t": "set of initialize_model_parallel() sizes",
    "pstate_tensor_t": "tensor",
    "PSTATE_DEVICE_CPU": 'device="cpu"',
    "PSTATE_DEVICE_CUDA": 'device="cuda"',
}
_C_NAME = re.compile(r"\b(?:pstate_init_params_t\.|params->)(\w+)|\b(pstate_[a-z0-9_]+|PSTATE_DEVICE_[A-Z]+)\b")
# A dict another rank's binding refused reaches this rank as the library's refusal of the
# stand-in dict that binding sent (bindings/pstate.i: one tensor of dtype -1 named with the
# reason); only the reason is worth reading.
_BINDING_REFUSAL = re.compile(
    r"(?:\S+ \w+: )?tensor 0 \('.*?refused by the sender's (\w+) binding: (.*)'\): "
    r"dtype -1 is not a pstate_dtype_t", re.S)


def _python_name(match: "re.Match[str]") -> str:
    field, name = match.group(1), match.group(2)
    if field is not None:
        return f"pstate.init({field}=...)"
    if name in _CALLS:
        return _CALLS[name]
    return f"{name[len('pstate_'):]}()" if name.startswith("pstate_") else name


def pythonic(detail: str) -> str:
    """detail (pstate_last_error() text) with C names said the Python way, and a dict refused by
    another rank's binding reduced to its reason."""
    detail = _BINDING_REFUSAL.sub(lambda m: f"{m.group(2)} (its {m.group(1)} binding refused it)", detail)
    detail = detail.replace("call pstate_graph_capture_end first", "leave the ps.graph_capture() block first")
    return _C_NAME.sub(_python_name, detail)


def _note_interrupt(exc: BaseException, detail: str) -> None:
    """Called by the status typemap for a call a signal handler interrupted: exc (what the
    handler raised, e.g. KeyboardInterrupt) is raised as it is, with the library's text as a
    note (Python >= 3.11) saying where the rank was waiting and that the context is failed."""
    add_note = getattr(exc, "add_note", None)
    if add_note is not None:
        add_note(f"pstate: {pythonic(detail)}")


def _raise_status(status: int, detail: str) -> None:
    """Called by the SWIG status typemap with the failing call's status and last_error text."""
    cls = error_class(status)
    if cls is Error:
        raise Error(f"unknown status {status}: {pythonic(detail)}", Status.INTERNAL)
    raise cls(pythonic(detail))
