"""Non-blocking point-to-point: Request (pstate_request_t) and P2POp (one op of p2p_batch).

A Request is made by Group.isend / Group.irecv. Until it completes, the library owns its buffer:
the Request keeps a reference to the buffer object and holds an export of it (a memoryview), so
the memory stays alive and a bytearray cannot be resized; do not read a receive buffer or write a
send buffer before wait() (or test() returning True). Completing it (wait, a test that returns
True, leaving its `with` block, or garbage collection, which waits) frees the C request exactly
once; every later wait() returns the same result or raises the same error.
"""
from __future__ import annotations

import warnings
from typing import Any, NamedTuple, Optional

from . import capi
from ._errors import Error


class P2POp(NamedTuple):
    """One operation of Group.p2p_batch: send buf to group rank peer (is_send True) or receive
    exactly len(buf) elements from it into buf. A plain (is_send, buf, peer) tuple works too."""

    is_send: bool
    buf: Any
    peer: int


class Request:
    """One pending isend/irecv (SGLang's P2PWork). wait() blocks until it completes (at most the
    context timeout) and returns its buffer; test() never blocks and says whether it completed.
    Usable as a context manager: leaving the block waits (and when the block raised, completes
    the request without raising its own error)."""

    def __init__(self, ps: Any, handle: Any, buf: Any, where: str, exporter: Any = None) -> None:
        self._ps = ps
        self._handle = handle
        self._buf = buf
        self._where = where
        self._error: Optional[BaseException] = None
        # an export of the buffer (of exporter: the array over a DLPack tensor's memory), held
        # while pending; None for device addresses
        exporter = buf if exporter is None else exporter
        self._view = None if isinstance(exporter, int) else memoryview(exporter)

    @property
    def done(self) -> bool:
        """True once the request completed (successfully or not)."""
        return self._handle is None

    def _finish(self, error: Optional[BaseException]) -> None:
        self._handle = None
        self._error = error
        if self._view is not None:
            self._view.release()
            self._view = None

    def wait(self) -> Any:
        """Waits for completion and returns the buffer (for irecv: now holding the message).
        Raises the operation's error (MismatchError for a message of another size,
        TimeoutError, PeerLostError, AbortedError after finalize/abort)."""
        if self._handle is not None:
            handle = self._handle
            try:
                with self._ps._lock:
                    capi.wait(handle)
            except BaseException as e:  # the C request is freed whatever wait returned
                self._finish(e)
                raise
            self._finish(None)
        elif self._error is not None:
            raise self._error
        return self._buf

    def test(self) -> bool:
        """Progresses the transfer once without blocking: True when the request completed (then
        wait() returns at once), False while it is pending. Raises the operation's error when it
        completed with one."""
        if self._handle is None:
            if self._error is not None:
                raise self._error
            return True
        try:
            with self._ps._lock:
                done = capi.test(self._handle)
        except BaseException as e:  # a failed operation: completed (and freed) with its error
            self._finish(e)
            raise
        if done:
            self._finish(None)
        return bool(done)

    def __enter__(self) -> "Request":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.wait()
        elif self._handle is not None:
            try:
                self.wait()
            except Error:
                pass

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            warnings.warn(f"{self._where}: a pending pstate.Request was garbage-collected; waiting for it "
                          "(call wait() or use it in a `with` block)", ResourceWarning, stacklevel=2)
            try:
                self.wait()
            except Exception:
                pass

    def __repr__(self) -> str:
        state = "pending" if self._handle is not None else ("failed" if self._error else "done")
        return f"<pstate.Request {self._where} {state}>"
