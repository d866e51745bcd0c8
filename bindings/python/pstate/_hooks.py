"""Hooks around every call (pstate_add_hook, docs/hooks.md): a callable that pstate calls before
and after each call of a PState's groups with a CallInfo, and once when the PState fails or is
aborted. Returning False in HookPhase.BEFORE refuses the call (it raises InvalidArgumentError, on
every rank for a collective of a CPU group); an exception a hook raises goes to
sys.unraisablehook and the call goes on."""
from __future__ import annotations

import enum
from typing import Any, Callable, NamedTuple, Optional

from ._enums import DType
from ._errors import Status


class HookPhase(enum.IntEnum):
    """pstate_hook_phase_t."""
    BEFORE = 0  #: the call is about to begin (after its argument checks)
    AFTER = 1  #: it returned: status, duration_ns and message are set
    ABORT = 2  #: the PState failed, was revoked or aborted (once per PState)


class CallInfo(NamedTuple):
    """What a hook is told (pstate_call_info_t)."""
    phase: HookPhase
    status: Status  #: AFTER: what the call returns; ABORT: the failure's; BEFORE: OK
    call_id: int  #: the PState's calls numbered from 1; BEFORE and AFTER of one call share it
    group: str  #: "tp:0"; "" in ABORT
    operation: str  #: "all_reduce", "send", ...; in ABORT "context_failed", "pstate_revoke", "pstate_abort"
    seq: Optional[int]  #: the group's number of a CPU collective, else None
    count: int  #: the call's count (elements; bytes for objects)
    dtype: Optional[DType]  #: None for objects and barriers
    root: Optional[int]
    peer: Optional[int]
    on_device: bool
    bytes: int
    path: str  #: "shm", "ucx", "nccl", "local" or "none"
    duration_ns: int
    send: int  #: the address of the data this rank sends (0: none), valid during the hook only
    send_bytes: int
    message: Optional[str]  #: AFTER of a failed call and ABORT: the error's text


def _opt(v: int) -> Optional[int]:
    return None if v < 0 else v


def trampoline(fn: Callable[[CallInfo], Any]) -> Callable[[tuple], int]:
    """The callable the C hook calls with the raw tuple: makes the CallInfo, calls fn, returns a
    status (1, INVALID_ARGUMENT: BEFORE refused)."""
    def call(t: tuple) -> int:
        (phase, status, call_id, group, operation, seq, count, dtype, root, peer, on_device, nbytes, path,
         duration_ns, send, send_bytes, message) = t
        info = CallInfo(HookPhase(phase), Status(status), call_id, group, operation,
                        None if seq == 0xFFFFFFFFFFFFFFFF else seq, count, None if dtype < 0 else DType(dtype),
                        _opt(root), _opt(peer), bool(on_device), nbytes, path, duration_ns, send, send_bytes, message)
        verdict = fn(info)  # an exception: the C side reports it (PyErr_WriteUnraisable), the call goes on
        return 1 if verdict is False and info.phase == HookPhase.BEFORE else 0
    return call
