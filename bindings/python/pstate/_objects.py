"""Object frames: the bytes the object operations (broadcast_object, all_gather_object,
send_object/recv_object) hand to the C library.

Every rank of an object call must make the C call, or the others stay in it and take the next
call's payload for this one (every later call shifted by one). So a sender that cannot pickle
its object still sends: a *refusal* frame carrying the reason, then raises its own pickling
error; each receiver finds the refusal instead of an object and raises ObjectRefusedError at
once. Bytes that are not a frame (a raw capi call, another program) raise ObjectFrameError;
nothing that is not a frame of this binding's encoding is unpickled.

A frame (the same in the Go binding, whose values are gob):

    b"PSOB"  version (1 byte, = 1)  kind (1 byte)  body
    kind b"p": body is a pickle (this binding)      kind b"g": body is gob (the Go binding)
    kind b"r": a refusal; body is the sender's reason, UTF-8 (at most MAX_REASON bytes)

A reader refuses a version it does not know instead of guessing at its layout.
"""
from __future__ import annotations

import io
import pickle
from typing import Any, Tuple

from ._errors import InvalidArgumentError

MAGIC = b"PSOB"
VERSION = 1
HEADER_SIZE = len(MAGIC) + 2
PICKLE, GOB, REFUSAL = b"p", b"g", b"r"
MAX_REASON = 1024
_PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL
_ENCODINGS = {PICKLE: "a pickle (Python binding)", GOB: "a gob value (Go binding)"}


class ObjectRefusedError(InvalidArgumentError):
    """A peer could not encode its object and sent a refusal instead (the sender raised its own
    encoding error). rank: the group rank that refused (for all_gather_object the first one;
    reasons maps every refusing group rank to its reason); reason: what the sender said."""

    def __init__(self, detail: str, rank: int, reason: str, reasons: "dict[int, str] | None" = None) -> None:
        super().__init__(detail)
        self.rank = rank
        self.reason = reason
        self.reasons = reasons if reasons is not None else {rank: reason}


class ObjectFrameError(InvalidArgumentError):
    """The bytes a peer sent are not an object frame this binding reads (raw bytes, a newer
    frame version, another binding's encoding). rank: the group rank that sent them."""

    def __init__(self, detail: str, rank: int) -> None:
        super().__init__(detail)
        self.rank = rank


def _header(kind: bytes) -> bytes:
    return MAGIC + bytes([VERSION]) + kind


def encode(obj: Any) -> memoryview:
    """obj as a pickle frame (header and pickle written into one buffer: no copy of a large
    pickle). Raises what pickle raises (PicklingError, TypeError, AttributeError, ...)."""
    buf = io.BytesIO()
    buf.write(_header(PICKLE))
    pickle.Pickler(buf, protocol=_PICKLE_PROTOCOL).dump(obj)
    return buf.getbuffer()


def refusal(error: BaseException) -> bytes:
    """The refusal frame for an encoding error: the reason is the error's type and text."""
    reason = f"Python binding: {type(error).__name__}: {error}".encode("utf-8", "replace")
    if len(reason) > MAX_REASON:
        reason = reason[:MAX_REASON - 3] + b"..."
    return _header(REFUSAL) + reason


def parse(data: Any, rank: int, where: str) -> Tuple[bytes, memoryview]:
    """(kind, body) of a frame from group rank `rank`; ObjectFrameError when it is not one."""
    view = memoryview(data).cast("B")
    if len(view) < HEADER_SIZE or view[:len(MAGIC)] != MAGIC:
        head = bytes(view[:8])
        raise ObjectFrameError(
            f"{where}: group rank {rank} sent {len(view)} bytes that are not a pstate object frame "
            f"(first bytes {head!r}; expected {MAGIC!r}): a raw capi object call or another program on "
            "the other side? Send objects with the Group object operations on every rank", rank)
    version = view[len(MAGIC)]
    if version != VERSION:
        raise ObjectFrameError(
            f"{where}: group rank {rank} sent an object frame of version {version}; this binding reads "
            f"version {VERSION} (is the sender a different pstate release?)", rank)
    return bytes(view[len(MAGIC) + 1:HEADER_SIZE]), view[HEADER_SIZE:]


def reason(body: memoryview) -> str:
    """The reason of a refusal frame's body."""
    return bytes(body).decode("utf-8", "replace")


def refused(reasons: "dict[int, str]", where: str) -> ObjectRefusedError:
    """The receivers' error for refusals from the group ranks in reasons (rank -> reason)."""
    first = min(reasons)
    if len(reasons) == 1:
        detail = f"{where}: group rank {first} could not encode its object and sent a refusal instead: {reasons[first]}"
    else:
        detail = (f"{where}: group ranks {sorted(reasons)} could not encode their objects and sent refusals "
                  "instead: " + "; ".join(f"rank {r}: {why}" for r, why in sorted(reasons.items())))
    return ObjectRefusedError(detail, first, reasons[first], dict(reasons))


def load(kind: bytes, body: memoryview, rank: int, where: str) -> Any:
    """The object of a parsed frame: ObjectRefusedError for a refusal, ObjectFrameError for a
    kind this binding does not read."""
    if kind == REFUSAL:
        raise refused({rank: reason(body)}, where)
    if kind != PICKLE:
        what = _ENCODINGS.get(kind, f"an object of unknown kind {kind!r}")
        raise ObjectFrameError(f"{where}: group rank {rank} sent {what}; this binding reads pickles", rank)
    return pickle.loads(body)


def decode(data: Any, rank: int, where: str) -> Any:
    """The object in the frame group rank `rank` sent (see load)."""
    return load(*parse(data, rank, where), rank, where)
