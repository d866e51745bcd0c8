"""pstate errors: one exception class per pstate_status_t, all subclasses of pstate.Error.

Every C call that returns a status other than PSTATE_OK raises the class for that status (the
SWIG typemap in bindings/pstate.i calls _raise_status); the exception carries the status and the
text pstate_last_error() gave on the failing thread. Each class also derives from the builtin
exception a Python programmer would catch for that kind of failure, so
``except TimeoutError`` and ``except pstate.TimeoutError`` both work.
"""
from __future__ import annotations

import builtins
import enum
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
    )
}


def error_class(status: int) -> Type[Error]:
    """The exception class for a status number (Error itself for unknown numbers)."""
    return _BY_STATUS.get(int(status), Error)


def _raise_status(status: int, detail: str) -> None:
    """Called by the SWIG status typemap with the failing call's status and last_error text."""
    cls = error_class(status)
    if cls is Error:
        raise Error(f"unknown status {status}: {detail}", Status.INTERNAL)
    raise cls(detail)
