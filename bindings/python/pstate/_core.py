"""PState and Group: one rank's parallel state and its groups, over the raw SWIG module.

The lifecycle is pstate.h's: init() -> initialize_model_parallel() -> collectives ->
destroy_model_parallel() -> finalize() (abort() after a peer is lost). Python adds what C cannot
check: a Group remembers the "generation" of the model-parallel groups it came from, so using a
group after destroy_model_parallel() or finalize() raises InvalidStateError instead of touching a
freed C object. Buffer arguments are resolved and size-checked in _buffers before any C call;
the C calls release the GIL (SWIG threads="1"). A collective whose arguments this binding refuses
on one rank still takes part in the call (_refusing_together): the group's other ranks fail with
it instead of pairing the call with this rank's next one.

Thread rules are the C library's: one PState and its groups are driven by one thread at a time;
different PStates are independent.
"""
from __future__ import annotations

import contextlib
import functools
import math
import threading
import warnings
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from . import _dict_p2p, _hooks, _objects, _tensor_dict, _torch, capi
from ._buffers import Buffer, BufferLike, new_like, require, resolve, same_dtype
from ._enums import Device, DType, GroupKind, ReduceOp, coerce
from ._errors import BusyError, Error, InvalidArgumentError, InvalidStateError, NoMemoryError, UnsupportedError
from ._layout import make_config
from ._memory import DeviceMemory
from ._dict_p2p import DictRequest
from ._requests import Request


# The refused form of each collective's C call: buffers NULL with one element (INT8), which C
# refuses on this rank inside the call's agreement, so every rank of the group fails at once.
_REFUSED_DTYPE = int(DType.INT8)


@contextlib.contextmanager
def _refusing_together(refuse: Any, where: str, who: str) -> Iterator[None]:
    """Runs the binding's checks of a collective's arguments (the with block). Most of them see
    what only this rank sees (its buffers, a root's out or send), and a rank that raised here
    alone would leave the group's other ranks inside the call, pairing it with this rank's next
    one: another call's data, no error (issue 46). So a refusal still takes part in the call:
    refuse() is the C call in its refused form (_REFUSED_DTYPE), which fails it on every rank of
    the group at once (InvalidArgumentError naming this rank there) and keeps the group in step;
    then this rank raises its own, more precise error (naming the call and, in who, this rank)."""
    try:
        yield
    except Exception as e:
        with contextlib.suppress(Exception):
            refuse()
        if type(e) is InvalidArgumentError:
            detail = e.detail if e.detail.startswith(where) else f"{where}: {e.detail}"
            raise InvalidArgumentError(detail.replace(where, f"{where} ({who})", 1)) from None
        raise


def _out(out: BufferLike, like: Buffer, like_name: str, dtype: Optional[DType], count: int) -> Buffer:
    """resolve() of an out argument, whose dtype is like's (the send or buf argument) unless
    dtype= was passed; a device address holds count elements."""
    return resolve(out, "out", writable=True, dtype=dtype or like.dtype, implied_by=None if dtype else like_name,
                   count=count if like.is_device else None)


def shape_of(s: Buffer) -> Tuple[int, ...]:
    """s's shape, or (count,) for a shapeless buffer or one that count= cut short."""
    return s.shape if s.shape and math.prod(s.shape) == s.count else (s.count,)


def _gather_shape(s: Buffer, world: int, dim: Any, where: str) -> Tuple[Tuple[int, ...], int, bool]:
    """(the result's shape, the axis dim names, whether the ranks' blocks lie one after another in
    it, so that C can gather straight into it) for an all_gather of s over world ranks."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise InvalidArgumentError(f"{where}: dim must be an int, got {type(dim).__name__}")
    shape = shape_of(s)
    if not -len(shape) <= dim < len(shape):
        raise InvalidArgumentError(f"{where}: dim={dim} is out of range for send of shape {shape}")
    axis = dim % len(shape)
    want = shape[:axis] + (shape[axis] * world,) + shape[axis + 1:]
    return want, axis, all(extent == 1 for extent in shape[:axis])


def _all_gather(where: str, world: int, call: Any, refuse: Any, who: str, send: BufferLike, out: Optional[BufferLike],
                dim: Any, dtype: Optional[DType], count: Optional[int], stream: Optional[int]) -> Any:
    """Group.all_gather and PState.tp_all_gather: call(send, recv, count, dtype, stream) is the C
    all-gather of the group, refuse() its refused form and who this rank (_refusing_together)."""
    with _refusing_together(refuse, where, who):
        s = resolve(send, "send", writable=False, dtype=dtype, count=count)
        total = s.count * world
        want, axis, blocks_in_order = _gather_shape(s, world, dim, where)
        if out is None:
            out = new_like(s, send, total, shape=want)
        o = _out(out, s, "send", dtype, total)
        same_dtype(s, o, "send/out")
        if s.is_device:
            if axis != 0:
                raise InvalidArgumentError(f"{where}: dim={dim} on a device address: only dim 0 (the C call's layout)")
            require(o, "out", total)
        elif o.shape != want and not (blocks_in_order and o.count == total and
                                      (len(o.shape) == 1 or o.shape == (world,) + shape_of(s))):
            raise InvalidArgumentError(
                f"{where}: out has shape {o.shape} ({o.count} elements); the result of gathering send of shape "
                f"{shape_of(s)} from {world} ranks along dim {dim} has shape {want}"
                + (f" (or 1-d of {total} elements, or stacked: {(world,) + shape_of(s)})" if blocks_in_order else ""))
        if not blocks_in_order:
            # the blocks interleave in the result: gather them one after another, then move the
            # rank axis to its place (one copy)
            staged = new_like(o, out, total, shape=(world,) + want[:axis] + (want[axis] // world,) + want[axis + 1:])
            t = resolve(staged, "staging buffer", writable=True, dtype=s.dtype)
    if blocks_in_order:
        call(s.obj, o.obj, s.count, int(s.dtype), stream)
        return out
    call(s.obj, t.obj, s.count, int(s.dtype), stream)
    split = want[:axis] + (world, want[axis] // world) + want[axis + 1:]
    if _torch.is_tensor(out):
        out.view(split).copy_(staged.movedim(0, axis))
    else:
        import numpy as np

        np.copyto(np.asarray(out).reshape(split), np.moveaxis(np.asarray(staged), 0, axis))
    return out


class Group:
    """One group of a PState (SGLang's GroupCoordinator), as seen from this rank.

    Ranks passed to operations are ranks in this group (0 .. world_size-1). Host buffers are
    numpy arrays, torch CPU tensors, bytearrays, memoryviews, ...; the dtype comes from the
    buffer or tensor. Operations with an ``out`` argument allocate the result like the input
    when out is None (torch in, torch out). After a MismatchError on a shared-memory group the
    PState is failed: every later call raises AbortedError (abort() it).
    """

    def __init__(self, ps: "PState", handle: Any, kind: GroupKind, generation: int) -> None:
        self._ps = ps
        self._handle = handle
        self._kind = coerce(GroupKind, kind, "group kind")
        self._generation = generation
        info = capi.pstate_group_info_t()
        with ps._lock:
            capi.group_info(handle, info)
        self._info = info
        self._ranks: Optional[List[int]] = None

    # ---- validity --------------------------------------------------------------------------
    def _call(self, fn: Any, *args: Any) -> Any:
        """fn(handle, *args) with the PState's lock held (C: one thread at a time per pstate_t)."""
        with self._ps._lock:
            return fn(self._h(), *args)

    def _h(self) -> Any:
        ps = self._ps
        if ps._handle is None:
            raise InvalidStateError(f"group {self.name}: its PState was finalized or aborted (step 5 happened)")
        if self._kind != GroupKind.WORLD and self._generation != ps._generation:
            raise InvalidStateError(
                f"group {self.name}: destroyed by destroy_model_parallel() (or shrink()/grow()); get it "
                "again after initialize_model_parallel()"
            )
        return self._handle

    def _together(self, where: str, fn: Any, *refused: Any) -> Any:
        """_refusing_together for a collective of this group: fn(handle, *refused) is its
        refused form."""
        return _refusing_together(functools.partial(self._call, fn, *refused), where, f"group rank {self.rank_in_group}")

    # ---- facts (SGLang's GroupCoordinator properties) ---------------------------------------
    @property
    def kind(self) -> GroupKind:
        """The kind this group was asked for as."""
        return self._kind

    @property
    def name(self) -> str:
        """"<kind>:<index of the group among its kind>", e.g. "tp:0"."""
        return self._info.name

    @property
    def rank(self) -> int:
        """This rank's global rank."""
        return self._info.rank

    @property
    def rank_in_group(self) -> int:
        """This rank's index in the group."""
        return self._info.rank_in_group

    @property
    def world_size(self) -> int:
        """Number of ranks in the group."""
        return self._info.world_size

    @property
    def local_rank(self) -> int:
        """This process's local rank on its host (its device index)."""
        return self._info.local_rank

    @property
    def first_rank(self) -> int:
        return self._info.first_rank

    @property
    def last_rank(self) -> int:
        return self._info.last_rank

    @property
    def next_rank(self) -> int:
        """Global rank of group index (rank_in_group + 1) % world_size."""
        return self._info.next_rank

    @property
    def prev_rank(self) -> int:
        """Global rank of group index (rank_in_group - 1) % world_size."""
        return self._info.prev_rank

    @property
    def is_first_rank(self) -> bool:
        return self.rank == self.first_rank

    @property
    def is_last_rank(self) -> bool:
        return self.rank == self.last_rank

    @property
    def ranks(self) -> List[int]:
        """Global ranks of the group, in group order."""
        if self._ranks is None:
            self._ranks = self._call(capi.group_ranks, self.world_size)
        return list(self._ranks)

    def same_node(self, source: int = 0) -> List[bool]:
        """SGLang's in_the_same_node_as(source_rank): for each group rank, whether it shares a
        host with group rank source (pstate_group_same_node's root). Local, not collective."""
        return self._call(capi.group_same_node, source, self.world_size)

    @property
    def timeout_ms(self) -> int:
        """The timeout of this group's calls on this rank, in ms: its own (set_timeout) or the
        context's (pstate_group_timeout)."""
        return int(self._call(capi.group_timeout))

    def set_timeout(self, timeout_ms: int) -> None:
        """Bounds every later call of this group on this rank by timeout_ms instead of the
        context's timeout (0: the context's again); a call past it raises TimeoutError naming the
        group's timeout, and fails the context as any timeout does. Local, not collective: set it
        alike on every rank (pstate_group_set_timeout; docs/timeouts.md)."""
        self._call(capi.group_set_timeout, int(timeout_ms))

    def __repr__(self) -> str:
        return (f"<pstate.Group {self.name} rank_in_group={self.rank_in_group} "
                f"world_size={self.world_size} ranks={self._ranks if self._ranks is not None else '...'}>")

    # ---- collectives -----------------------------------------------------------------------
    def all_reduce(self, buf: BufferLike, op: ReduceOp = ReduceOp.SUM, *, out: Optional[BufferLike] = None,
                   dtype: Optional[DType] = None, count: Optional[int] = None, stream: Optional[int] = None) -> Any:
        """buf reduced with op over the group. In place when out is None (buf must be
        writable); else the result goes to out and buf is only read. Returns the result buffer."""
        with self._together(f"all_reduce on {self.name}", capi.all_reduce, None, None, 1, _REFUSED_DTYPE, 0, None):
            src = resolve(buf, "buf", writable=out is None, dtype=dtype, count=count)
            dst = src if out is None else _out(out, src, "buf", dtype, src.count)
            same_dtype(src, dst, "buf/out")
            require(dst, "out", src.count)
            reduce_op = int(coerce(ReduceOp, op, "op"))
        self._call(capi.all_reduce, src.obj, dst.obj, src.count, int(src.dtype), reduce_op, stream)
        return buf if out is None else out

    def all_gather(self, send: BufferLike, out: Optional[BufferLike] = None, *, dim: int = 0,
                   dtype: Optional[DType] = None, count: Optional[int] = None, stream: Optional[int] = None) -> Any:
        """SGLang's GroupCoordinator.all_gather(input, dim): every rank's send concatenated in
        group-rank order along dimension dim (negative: from the end), so the result has send's
        shape with shape[dim] * world_size (a 1-d or shapeless send: world_size * len(send)
        elements). out, when given, must have exactly that shape or, when the blocks lie one
        after another (dim 0, or only extents of 1 before dim), be 1-d with exactly that many
        elements or send's shape stacked, (world_size, *send.shape), as torch's
        all_gather_into_tensor takes; anything else, larger included, is InvalidArgumentError. A dim with blocks interleaved is
        gathered into a temporary and copied into place (one copy, as torch does). Returns out,
        allocated like send when None (a torch tensor for a torch tensor, numpy for numpy)."""
        return _all_gather(f"all_gather on {self.name}", self.world_size, functools.partial(self._call, capi.all_gather),
                           functools.partial(self._call, capi.all_gather, None, None, 1, _REFUSED_DTYPE, None),
                           f"group rank {self.rank_in_group}", send, out, dim, dtype, count, stream)

    def reduce_scatter(self, send: BufferLike, op: ReduceOp = ReduceOp.SUM, out: Optional[BufferLike] = None, *,
                       dtype: Optional[DType] = None, count: Optional[int] = None,
                       stream: Optional[int] = None) -> Any:
        """send (world_size blocks) reduced with op; this rank gets block rank_in_group.
        len(send) must be a multiple of world_size. Returns out (allocated when None)."""
        where = f"reduce_scatter on {self.name}"
        with self._together(where, capi.reduce_scatter, None, None, 1, _REFUSED_DTYPE, 0, None):
            s = resolve(send, "send", writable=False, dtype=dtype, count=count)
            if s.count % self.world_size:
                raise InvalidArgumentError(
                    f"{where}: send holds {s.count} elements, not a multiple of world_size {self.world_size}")
            block = s.count // self.world_size
            if out is None:
                lead = s.shape[0] // self.world_size if s.shape and s.shape[0] % self.world_size == 0 else None
                out = new_like(s, send, block, leading=lead)
            o = _out(out, s, "send", dtype, block)
            same_dtype(s, o, "send/out")
            require(o, "out", block)
            reduce_op = int(coerce(ReduceOp, op, "op"))
        self._call(capi.reduce_scatter, s.obj, o.obj, block, int(s.dtype), reduce_op, stream)
        return out

    def broadcast(self, buf: BufferLike, src: int = 0, *, dtype: Optional[DType] = None,
                  count: Optional[int] = None, stream: Optional[int] = None) -> Any:
        """buf of group rank src copied into buf on every rank. Returns buf."""
        with self._together(f"broadcast on {self.name}", capi.broadcast, None, 1, _REFUSED_DTYPE, 0, None):
            b = resolve(buf, "buf", writable=True, dtype=dtype, count=count)
        self._call(capi.broadcast, b.obj, b.count, int(b.dtype), src, stream)
        return buf

    def gather(self, send: BufferLike, dst: int = 0, out: Optional[BufferLike] = None, *,
               dtype: Optional[DType] = None, count: Optional[int] = None,
               stream: Optional[int] = None) -> Optional[Any]:
        """Every rank's send, in group-rank order, on group rank dst (like all_gather there).
        Returns the result on dst and None elsewhere. out is checked on dst only (ignored
        elsewhere); an out dst refuses fails the call on every rank of the group at once
        (InvalidArgumentError naming dst there), so no rank pairs it with another call."""
        is_dst = self.rank_in_group == dst
        with self._together(f"gather on {self.name}", capi.gather, None, None, 1, _REFUSED_DTYPE, 0, None):
            s = resolve(send, "send", writable=False, dtype=dtype, count=count)
            total = s.count * self.world_size
            recv = None
            if is_dst:
                if out is None:
                    out = new_like(s, send, total, leading=(s.shape[0] * self.world_size) if s.shape else None)
                o = _out(out, s, "send", dtype, total)
                same_dtype(s, o, "send/out")
                require(o, "out", total)
                recv = o.obj
        self._call(capi.gather, s.obj, recv, s.count, int(s.dtype), dst, stream)
        return out if is_dst else None

    def reduce(self, buf: BufferLike, dst: int = 0, op: ReduceOp = ReduceOp.SUM, *,
               out: Optional[BufferLike] = None, dtype: Optional[DType] = None, count: Optional[int] = None,
               stream: Optional[int] = None) -> Optional[Any]:
        """torch.distributed.reduce: buf reduced with op over the group, on group rank dst only.
        On dst the result goes to out, or into buf itself when out is None (buf must then be
        writable), and is returned; every other rank only reads buf (out is ignored there) and
        gets None. An out (or buf) dst refuses fails the call on every rank of the group at once."""
        is_dst = self.rank_in_group == dst
        with self._together(f"reduce on {self.name}", capi.reduce, None, None, 1, _REFUSED_DTYPE, 0, 0, None):
            src = resolve(buf, "buf", writable=is_dst and out is None, dtype=dtype, count=count)
            recv = None
            if is_dst:
                res = src if out is None else _out(out, src, "buf", dtype, src.count)
                same_dtype(src, res, "buf/out")
                require(res, "out", src.count)
                recv = res.obj
            reduce_op = int(coerce(ReduceOp, op, "op"))
        self._call(capi.reduce, src.obj, recv, src.count, int(src.dtype), reduce_op, dst, stream)
        if not is_dst:
            return None
        return buf if out is None else out

    def scatter(self, out: BufferLike, send: Optional[BufferLike] = None, src: int = 0, *,
                dtype: Optional[DType] = None, count: Optional[int] = None, stream: Optional[int] = None) -> Any:
        """torch.distributed.scatter: send of group rank src holds world_size blocks of len(out)
        elements; block r lands in out on group rank r. send is needed on src only (ignored
        elsewhere); out may be send's own block there (a view: nothing is copied). A send src
        refuses fails the call on every rank of the group at once. Returns out."""
        where = f"scatter on {self.name}"
        with self._together(where, capi.scatter, None, None, 1, _REFUSED_DTYPE, 0, None):
            o = resolve(out, "out", writable=True, dtype=dtype, count=count)
            sent = None
            if self.rank_in_group == src:
                total = o.count * self.world_size
                if send is None:
                    raise InvalidArgumentError(f"{where}: group rank {src} is the source and needs send "
                                               f"({total} elements)")
                s = resolve(send, "send", writable=False, dtype=dtype or o.dtype, implied_by=None if dtype else "out",
                            count=total if o.is_device else None)
                same_dtype(s, o, "send/out")
                require(s, "send", total)
                sent = s.obj
        self._call(capi.scatter, sent, o.obj, o.count, int(o.dtype), src, stream)
        return out

    def all_to_all(self, send: BufferLike, out: Optional[BufferLike] = None, *, dtype: Optional[DType] = None,
                   count: Optional[int] = None, stream: Optional[int] = None) -> Any:
        """Block j of send goes to group rank j; block i of the result came from rank i.
        len(send) must be a multiple of world_size. Returns out (allocated when None)."""
        where = f"all_to_all on {self.name}"
        with self._together(where, capi.all_to_all, None, None, 1, _REFUSED_DTYPE, None):
            s = resolve(send, "send", writable=False, dtype=dtype, count=count)
            if s.count % self.world_size:
                raise InvalidArgumentError(
                    f"{where}: send holds {s.count} elements, not a multiple of world_size {self.world_size}")
            if out is None:
                out = new_like(s, send, s.count, leading=s.shape[0] if s.shape else None)
            o = _out(out, s, "send", dtype, s.count)
            same_dtype(s, o, "send/out")
            require(o, "out", s.count)
        self._call(capi.all_to_all, s.obj, o.obj, s.count // self.world_size, int(s.dtype), stream)
        return out

    def send(self, buf: BufferLike, dst: int, *, dtype: Optional[DType] = None, count: Optional[int] = None,
             stream: Optional[int] = None) -> None:
        """Sends buf to group rank dst (returns when buf may be reused)."""
        b = resolve(buf, "buf", writable=False, dtype=dtype, count=count)
        self._call(capi.send, b.obj, b.count, int(b.dtype), dst, stream)

    def recv(self, buf: BufferLike, src: int, *, dtype: Optional[DType] = None, count: Optional[int] = None,
             stream: Optional[int] = None) -> Any:
        """Receives exactly len(buf) (or count) elements from group rank src into buf; a
        different size sent is MismatchError. Returns buf."""
        b = resolve(buf, "buf", writable=True, dtype=dtype, count=count)
        self._call(capi.recv, b.obj, b.count, int(b.dtype), src, stream)
        return buf

    # ---- variable counts ---------------------------------------------------------------------
    def _counts(self, counts: Any, where: str) -> List[int]:
        try:
            values = [int(c) for c in counts]
        except TypeError:
            raise InvalidArgumentError(f"{where}: counts must be a sequence of ints (one per group rank), "
                                       f"got {type(counts).__name__}") from None
        if len(values) != self.world_size:
            raise InvalidArgumentError(f"{where}: counts has {len(values)} entries, the group has "
                                       f"{self.world_size} ranks (one count per group rank)")
        if any(c < 0 for c in values):
            raise InvalidArgumentError(f"{where}: counts must be >= 0, got {values}")
        return values

    @staticmethod
    def _leading(buf: Any, total: int) -> Optional[int]:
        shape = getattr(buf, "shape", None)
        if not shape:
            return None
        inner = 1
        for extent in shape[1:]:
            inner *= int(extent)
        return total // inner if inner and total % inner == 0 else None

    def all_gatherv(self, send: BufferLike, counts: Any, out: Optional[BufferLike] = None, *,
                    dtype: Optional[DType] = None, stream: Optional[int] = None) -> Any:
        """SGLang's all_gatherv with sizes=: counts (any sequence, one element count per group
        rank, the same on every rank) says how much each rank contributes; send holds
        counts[rank_in_group] elements. Every rank's part, packed in group-rank order, lands in
        out (sum(counts) elements; numpy: concatenated along axis 0 when the counts allow).
        Returns out (allocated when None)."""
        where = f"all_gatherv on {self.name}"
        with self._together(where, capi.all_gatherv, None, None, [1] * self.world_size, _REFUSED_DTYPE, None):
            c = self._counts(counts, where)
            mine, total = c[self.rank_in_group], sum(c)
            s = resolve(send, "send", writable=False, dtype=dtype, count=mine if isinstance(send, int) else None)
            if s.count != mine:
                raise InvalidArgumentError(f"{where}: send holds {s.count} elements but counts[{self.rank_in_group}] "
                                           f"(this rank) is {mine}")
            if out is None:
                out = new_like(s, send, total, leading=self._leading(send, total))
            o = _out(out, s, "send", dtype, total)
            same_dtype(s, o, "send/out")
            require(o, "out", total)
        self._call(capi.all_gatherv, s.obj, o.obj, c, int(s.dtype), stream)
        return out

    def reduce_scatterv(self, send: BufferLike, counts: Any, op: ReduceOp = ReduceOp.SUM,
                        out: Optional[BufferLike] = None, *, dtype: Optional[DType] = None,
                        stream: Optional[int] = None) -> Any:
        """SGLang's reduce_scatterv with sizes=: send holds sum(counts) elements on every rank;
        group rank i gets in out the reduction over the group of the counts[i] elements at offset
        counts[0] + ... + counts[i-1]. Returns out (allocated when None)."""
        where = f"reduce_scatterv on {self.name}"
        with self._together(where, capi.reduce_scatterv, None, None, [1] * self.world_size, _REFUSED_DTYPE, 0, None):
            c = self._counts(counts, where)
            mine, total = c[self.rank_in_group], sum(c)
            s = resolve(send, "send", writable=False, dtype=dtype, count=total if isinstance(send, int) else None)
            if s.count != total:
                raise InvalidArgumentError(f"{where}: send holds {s.count} elements but sum(counts) is {total}")
            if out is None:
                out = new_like(s, send, mine, leading=self._leading(send, mine))
            o = _out(out, s, "send", dtype, mine)
            same_dtype(s, o, "send/out")
            require(o, "out", mine)
            reduce_op = int(coerce(ReduceOp, op, "op"))
        self._call(capi.reduce_scatterv, s.obj, o.obj, c, int(s.dtype), reduce_op, stream)
        return out

    @staticmethod
    def _packed(counts: List[int]) -> List[int]:
        displs, at = [], 0
        for c in counts:
            displs.append(at)
            at += c
        return displs

    def _extent(self, counts: List[int], displs: List[int]) -> int:
        return max((d + c for c, d in zip(counts, displs) if c), default=0)

    def all_to_all_v(self, send: BufferLike, send_counts: Any, recv_counts: Any, out: Optional[BufferLike] = None, *,
                     send_displs: Any = None, recv_displs: Any = None, dtype: Optional[DType] = None,
                     stream: Optional[int] = None) -> Any:
        """MPI_Alltoallv (torchcomms' all_to_all_v_single): send_counts[j] elements of send go to
        group rank j, recv_counts[i] elements from group rank i land in out. Counts and
        displacements are element counts, one per group rank (any sequence: list, tuple, numpy);
        displacements default to the parts packed in group-rank order. Every pair must agree
        (this rank's send_counts[j] is rank j's recv_counts[this rank]), else MismatchError on
        every rank. Returns out (allocated when None: the received extent, packed by default)."""
        where = f"all_to_all_v on {self.name}"
        with self._together(where, capi.all_to_all_v, None, None, None, None, None, None, _REFUSED_DTYPE, None):
            sc = self._counts(send_counts, f"{where}: send_counts")
            rc = self._counts(recv_counts, f"{where}: recv_counts")
            sd = self._packed(sc) if send_displs is None else self._counts(send_displs, f"{where}: send_displs")
            rd = self._packed(rc) if recv_displs is None else self._counts(recv_displs, f"{where}: recv_displs")
            send_extent, recv_extent = self._extent(sc, sd), self._extent(rc, rd)
            s = resolve(send, "send", writable=False, dtype=dtype,
                        count=send_extent if isinstance(send, int) else None)
            require(s, "send", send_extent)
            if out is None:
                out = new_like(s, send, recv_extent, leading=self._leading(send, recv_extent))
            o = _out(out, s, "send", dtype, recv_extent)
            same_dtype(s, o, "send/out")
            require(o, "out", recv_extent)
        self._call(capi.all_to_all_v, s.obj, sc, sd, o.obj, rc, rd, int(s.dtype), stream)
        return out

    # ---- non-blocking and batched point-to-point ---------------------------------------------
    def isend(self, buf: BufferLike, dst: int, *, dtype: Optional[DType] = None, count: Optional[int] = None,
              stream: Optional[int] = None) -> Request:
        """Posts a send of buf to group rank dst and returns a Request at once; buf belongs to
        pstate (do not change it) until the request completes. Matches dst's next receive from
        this rank, blocking or not."""
        b = resolve(buf, "buf", writable=False, dtype=dtype, count=count)
        req = Request(self._ps, None, buf, f"isend on {self.name} to {dst}", b.obj)
        req._handle = self._call(capi.isend, b.obj, b.count, int(b.dtype), dst, stream)
        return req

    def irecv(self, buf: BufferLike, src: int, *, dtype: Optional[DType] = None, count: Optional[int] = None,
              stream: Optional[int] = None) -> Request:
        """Posts a receive of exactly len(buf) (or count) elements from group rank src into buf
        and returns a Request at once; read buf only after wait() (which returns it)."""
        b = resolve(buf, "buf", writable=True, dtype=dtype, count=count)
        req = Request(self._ps, None, buf, f"irecv on {self.name} from {src}", b.obj)
        req._handle = self._call(capi.irecv, b.obj, b.count, int(b.dtype), src, stream)
        return req

    def p2p_batch(self, ops: Any, *, stream: Optional[int] = None) -> None:
        """torch's batch_isend_irecv, completed: runs every op (P2POp or (is_send, buf, peer)
        tuples) as one batch, in any listing order without deadlock, and returns when all are
        done. Sends to one peer match its receives from this rank in list order."""
        entries = []
        for i, op in enumerate(ops):
            try:
                is_send, buf, peer = op
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"p2p_batch on {self.name}: ops[{i}] must be a P2POp or an "
                                           f"(is_send, buf, peer) tuple, got {op!r}") from None
            if not isinstance(is_send, bool):
                raise InvalidArgumentError(f"p2p_batch on {self.name}: ops[{i}].is_send must be a bool")
            b = resolve(buf, f"ops[{i}].buf", writable=not is_send)
            entries.append((is_send, b.obj, b.count, int(b.dtype), int(peer)))
        self._call(capi.p2p_batch, entries, stream)

    # ---- group memory and registered buffers (issue 29; CUDA contexts) -----------------------
    def mem_alloc(self, nbytes: int) -> DeviceMemory:
        """pstate_mem_alloc: nbytes of group memory (a symmetric NCCL window where NCCL can), as a
        DLPack-capable DeviceMemory. Collective over the group unless it has a pool
        (mem_pool_reserve), then local. MismatchError when ranks ask for different sizes."""
        ptr = int(self._call(capi.mem_alloc, int(nbytes)))
        pooled = self.mem_query(ptr)["kind"] == "pool"
        device = self._ps._device_ordinal if self._ps._device_ordinal is not None else self.local_rank
        return DeviceMemory(self, int(ptr), int(nbytes), pooled, device)

    def _mem_free(self, ptr: int) -> None:
        self._call(capi.mem_free, ptr)

    def mem_pool_reserve(self, nbytes: int) -> None:
        """pstate_mem_pool_reserve: collective, once; later mem_alloc calls are local pieces of it."""
        self._call(capi.mem_pool_reserve, int(nbytes))

    def mem_register(self, ptr: int, nbytes: int) -> None:
        """pstate_mem_register: registers your device buffer (an address int) with the group's
        NCCL communicator (ncclCommRegister). Local."""
        self._call(capi.mem_register, int(ptr), int(nbytes))

    def mem_deregister(self, ptr: int) -> None:
        self._call(capi.mem_deregister, int(ptr))

    def mem_query(self, ptr: int) -> Dict[str, Any]:
        """pstate_mem_query: {"kind": "none"|"group"|"pool"|"registered", "base", "size",
        "symmetric", "registered"} for a device address."""
        info = capi.pstate_mem_info_t()
        self._call(capi.mem_query, int(ptr), info)
        kinds = {capi.PSTATE_MEM_NONE: "none", capi.PSTATE_MEM_GROUP: "group", capi.PSTATE_MEM_POOL: "pool",
                 capi.PSTATE_MEM_REGISTERED: "registered"}
        base = info.base
        return {"kind": kinds.get(int(info.kind), "none"), "base": int(base) if base else 0, "size": int(info.size),
                "symmetric": bool(info.symmetric), "registered": bool(info.registered)}

    def mem_stats(self) -> Dict[str, Any]:
        """pstate_group_mem_stats: windows, registrations, pool, and the path device collectives took
        ("none", "plain", "registered", "symmetric")."""
        st = capi.pstate_mem_stats_t()
        self._call(capi.group_mem_stats, st)
        paths = {capi.PSTATE_MEM_PATH_NONE: "none", capi.PSTATE_MEM_PATH_PLAIN: "plain",
                 capi.PSTATE_MEM_PATH_REGISTERED: "registered", capi.PSTATE_MEM_PATH_SYMMETRIC: "symmetric"}
        return {"symmetric_calls": int(st.symmetric_calls), "registered_calls": int(st.registered_calls),
                "plain_calls": int(st.plain_calls), "windows": int(st.windows),
                "registrations": int(st.registrations), "allocated": int(st.allocated),
                "pool_reserved": int(st.pool_reserved), "pool_used": int(st.pool_used),
                "symmetric_available": bool(st.symmetric_available), "last_path": paths.get(int(st.last_path), "none"),
                "nccl_version": int(st.nccl_version)}

    def barrier(self) -> None:
        """Returns once every rank of the group has entered it."""
        self._call(capi.barrier)

    # ---- objects (pickled here into frames, bytes through C; see _objects) ---------------------
    def broadcast_object(self, obj: Any = None, src: int = 0) -> Any:
        """obj of group rank src (any picklable object) on every rank; other ranks' obj is
        ignored. Unpickles what peers of the same job sent: trust them as you trust the job.
        An obj src cannot pickle raises its pickling error on src and ObjectRefusedError (with
        src's reason) on every other rank; the group stays in step."""
        if self.rank_in_group == src:
            self._send_framed(capi.broadcast_object, obj, src)
            return obj
        return _objects.decode(self._call(capi.broadcast_object, b"", src), src, f"broadcast_object on {self.name}")

    def all_gather_object(self, obj: Any) -> List[Any]:
        """Every rank's obj, in group-rank order. A rank that cannot pickle its obj raises its
        pickling error (after taking part in the call); every other rank raises
        ObjectRefusedError naming the ranks that refused."""
        where = f"all_gather_object on {self.name}"
        data, sizes = self._send_framed(capi.all_gather_object, obj, self.world_size)
        parts, offset, view = [], 0, memoryview(data)
        for rank, size in enumerate(sizes):
            parts.append(_objects.parse(view[offset:offset + size], rank, where))
            offset += size
        reasons = {rank: _objects.reason(body) for rank, (kind, body) in enumerate(parts) if kind == _objects.REFUSAL}
        if reasons:
            raise _objects.refused(reasons, where)
        return [_objects.load(kind, body, rank, where) for rank, (kind, body) in enumerate(parts)]

    def send_object(self, obj: Any, dst: int) -> None:
        """Sends a picklable object to group rank dst. One that cannot be pickled raises its
        pickling error here and ObjectRefusedError in dst's recv_object."""
        self._send_framed(capi.send_object, obj, dst)

    def recv_object(self, src: int) -> Any:
        """The next object sent by group rank src (ObjectRefusedError when src could not pickle
        it, ObjectFrameError when src sent bytes that are not an object frame)."""
        return _objects.decode(self._call(capi.recv_object, src), src, f"recv_object on {self.name}")

    def _send_framed(self, fn: Any, obj: Any, *args: Any) -> Any:
        """fn(handle, frame of obj, *args) and its result; an obj that cannot be pickled is
        sent as a refusal, so that the receivers fail with the reason instead of waiting (or
        taking the next call's object for this one), then its pickling error is raised here."""
        try:
            frame = _objects.encode(obj)
        except Exception as e:  # noqa: BLE001 - any pickling failure becomes a refusal
            with contextlib.suppress(Error):
                self._call(fn, _objects.refusal(e), *args)
            raise
        return self._call(fn, frame, *args)

    # ---- tensor dicts (numpy arrays or torch CPU tensors; see _tensor_dict for dtypes) ----------------------------
    def broadcast_tensor_dict(self, tensor_dict: Optional[Mapping[str, Any]] = None, src: int = 0, *,
                              dtypes: Optional[Mapping[str, DType]] = None,
                              tensors: Optional[str] = None) -> Dict[str, Any]:
        """SGLang's broadcast_tensor_dict: the dict of group rank src on every rank (others pass
        None; their argument is ignored). Values are torch tensors, numpy arrays and anything
        picklable (strings, ints, None, lists, dicts), mixed as the engines mix them (_tensor_dict).
        Returns tensor_dict itself on src and a TensorDict (a dict in the sender's order, plus
        .dtypes) elsewhere, shapes kept, 0-d and 0-size tensors included, each tensor of the kind
        src sent (torch tensors for torch, bfloat16 as torch.bfloat16, bool and int16 as
        themselves; numpy arrays for numpy); tensors="numpy" or "torch" forces one kind. In numpy
        bfloat16/fp8 travel in uint16/uint8 containers named with
        dtypes={key: DType.BFLOAT16 | FP8_E4M3 | FP8_E5M2}. A dict src cannot send (a value that
        cannot be pickled) raises InvalidArgumentError there and on every other rank."""
        where = f"broadcast_tensor_dict on {self.name}"
        try:
            kind = _tensor_dict.tensors_kind(tensors, where)
        except InvalidArgumentError as e:  # the others are in the call: they fail with this rank
            refused = _tensor_dict.Refused("", f"tensors={tensors!r} (None, \"numpy\" or \"torch\")", where)
            entries = _tensor_dict.refusal(refused) if self.rank_in_group == src else None
            with contextlib.suppress(Exception):
                self._call(capi.broadcast_tensor_dict, entries, src, None, None)
            raise e from None
        if self.rank_in_group == src:
            self._send_dict(capi.broadcast_tensor_dict, tensor_dict, dtypes, where, src, None, None)
            return tensor_dict  # type: ignore[return-value]
        return self._receive_dict(capi.broadcast_tensor_dict, where, kind, src, None, src)

    def send_tensor_dict(self, tensor_dict: Mapping[str, Any], dst: Optional[int] = None, *,
                         dtypes: Optional[Mapping[str, DType]] = None) -> None:
        """SGLang's send_tensor_dict: sends a dict of numpy arrays or torch CPU tensors to group rank dst (default:
        the next rank, (rank_in_group + 1) % world_size), which receives it with
        recv_tensor_dict. dtypes as for broadcast_tensor_dict; a refused dict fails the
        receiver too."""
        if dst is None:
            dst = (self.rank_in_group + 1) % self.world_size
        self._send_dict(capi.send_tensor_dict, tensor_dict, dtypes, f"send_tensor_dict on {self.name}", dst, None)

    def recv_tensor_dict(self, src: Optional[int] = None, *, tensors: Optional[str] = None) -> Dict[str, Any]:
        """SGLang's recv_tensor_dict: the next dict sent by group rank src (default: the
        previous rank, (rank_in_group - 1) % world_size), as a TensorDict of what the sender sent
        (torch tensors for torch, numpy arrays for numpy, other values as they were); tensors=
        "numpy" or "torch" forces one kind."""
        where = f"recv_tensor_dict on {self.name}"
        kind = _tensor_dict.tensors_kind(tensors, where)
        if src is None:
            src = (self.rank_in_group - 1) % self.world_size
        return self._receive_dict(capi.recv_tensor_dict, where, kind, src, src)

    def send_tensor_dict_sliced(self, tensor_dict: Mapping[str, Any], dst: Optional[int] = None, *,
                                ag: "Group", dtypes: Optional[Mapping[str, DType]] = None) -> None:
        """send_tensor_dict with all_gather_group=ag (SGLang): a tensor whose element count
        divides by ag's size S (> 1) goes as this rank's 1/S slice; the receiver gathers the
        whole tensor over its own ag (recv_tensor_dict_sliced). ag is a group of this PState."""
        if dst is None:
            dst = (self.rank_in_group + 1) % self.world_size
        self._send_dict(capi.send_tensor_dict_sliced, tensor_dict, dtypes,
                        f"send_tensor_dict_sliced on {self.name}", dst, self._ag(ag), None)

    def recv_tensor_dict_sliced(self, src: Optional[int] = None, *, ag: "Group",
                                tensors: Optional[str] = None) -> Dict[str, Any]:
        """recv_tensor_dict with all_gather_group=ag: collective over ag (every rank of ag calls
        it, each from its own sender); every tensor arrives whole (slices gathered over ag), of
        the kind the sender sent (tensors= forces one)."""
        where = f"recv_tensor_dict_sliced on {self.name}"
        kind = _tensor_dict.tensors_kind(tensors, where)
        if src is None:
            src = (self.rank_in_group - 1) % self.world_size
        return self._receive_dict(capi.recv_tensor_dict_sliced, where, kind, src, src, self._ag(ag))

    # ---- non-blocking tensor dicts (the engines' wire: one object message, then the tensors) --
    def isend_tensor_dict(self, tensor_dict: Mapping[str, Any], dst: Optional[int] = None, *,
                          ag: Optional["Group"] = None, ag_tensors: Optional[Mapping[str, bool]] = None,
                          dtypes: Optional[Mapping[str, DType]] = None) -> "DictRequest":
        """vLLM's isend_tensor_dict / SGLang's send_tensor_dict(async_send=True): sends the dict's
        header (keys, non-tensor values, each tensor's dtype and shape) as one object message to
        group rank dst (default: the next rank), then posts one isend per tensor and returns a
        DictRequest at once; the requests hold the tensors until they complete (wait() it). With
        ag (all_gather_group) a tensor whose bytes divide by ag's size goes as this rank's slice,
        unless ag_tensors maps its key to False. Pairs with irecv_tensor_dict (not with
        recv_tensor_dict, the C dict's receive); see pstate._dict_p2p."""
        if dst is None:
            dst = (self.rank_in_group + 1) % self.world_size
        where = f"isend_tensor_dict on {self.name}"
        return _dict_p2p.send(self, tensor_dict, dst, self._ag_group(ag), ag_tensors, dtypes, where)

    def irecv_tensor_dict(self, src: Optional[int] = None, *, ag: Optional["Group"] = None,
                          tensors: Optional[str] = None) -> "DictRequest":
        """vLLM's irecv_tensor_dict: takes the header isend_tensor_dict of group rank src (default:
        the previous rank) sent (waiting for it), allocates the dict's tensors (of the sender's
        kind; tensors= forces one), posts their receives and returns a DictRequest whose wait()
        completes them, all-gathers sliced tensors over ag (every rank of ag waits for its own)
        and returns the TensorDict."""
        where = f"irecv_tensor_dict on {self.name}"
        kind = _tensor_dict.tensors_kind(tensors, where)
        if src is None:
            src = (self.rank_in_group - 1) % self.world_size
        return _dict_p2p.receive(self, src, self._ag_group(ag), kind, where)

    def _ag_group(self, ag: Any) -> Optional["Group"]:
        if ag is None:
            return None
        self._ag(ag)
        return ag

    def _ag(self, ag: Any) -> Any:
        if not isinstance(ag, Group) or ag._ps is not self._ps:
            raise InvalidArgumentError(f"ag must be a pstate.Group of the same PState as {self.name}, "
                                       f"got {type(ag).__name__}")
        return ag._h()

    def _send_dict(self, fn: Any, tensor_dict: Any, dtypes: Any, where: str, *args: Any) -> None:
        """fn(handle, entries, *args); a dict the binding refuses is sent as one the library
        refuses, so that the receivers fail with the reason instead of waiting for it."""
        try:
            entries = _tensor_dict.encode(tensor_dict, dtypes, where)
        except _tensor_dict.Refused as refused:
            with contextlib.suppress(Error):
                self._call(fn, _tensor_dict.refusal(refused), *args)
            raise InvalidArgumentError(refused.detail) from None
        self._call(fn, entries, *args)

    def _receive_dict(self, fn: Any, where: str, tensors: Optional[str], src: int, *args: Any) -> Dict[str, Any]:
        """fn(handle, *args, collector, stream=None) into a ReceivedDict (the C allocation
        callback), then the tensors it collected as numpy arrays or torch tensors (tensors)."""
        received = capi.ReceivedDict()
        try:
            self._call(fn, *args, received, None)
        except NoMemoryError as e:
            cuda = received.cuda_tensor()
            if cuda is not None:
                raise UnsupportedError(
                    f"{where}: tensor '{cuda}' is a CUDA tensor; the Python binding receives host tensors "
                    f"only (numpy), so it had no memory for it and nothing was transferred ({e.detail})") from e
            raise
        return _tensor_dict.decode(received.take(), tensors, where, src)


def _set_params(**fields: Any) -> "capi.pstate_init_params_t":
    params = capi.pstate_init_params_t()
    for key, value in fields.items():
        if value is None:
            continue
        if key in ("init_method", "job_token", "socket_ifname"):
            if not isinstance(value, str):
                raise InvalidArgumentError(f"{key} must be a str, got {type(value).__name__}")
        elif isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgumentError(f"{key} must be an int, got {type(value).__name__}")
        setattr(params, key, int(value) if isinstance(value, int) else value)
    return params



class PState:
    """One rank's parallel state (pstate_t). Create it with pstate.init().

    Use it as a context manager: leaving the block finalizes it, or aborts it (never blocking
    on peers) when the block raised.
    """

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self._generation = 0  # bumped by destroy_model_parallel: older groups become invalid
        self._lock = threading.RLock()  # reentrant: a signal handler run inside a wait must not deadlock
        # Held while the handle is read to revoke it (abort() from another thread) and while it is
        # taken to be freed, so a revoke never reaches a freed context.
        self._handle_lock = threading.Lock()
        self._world: Optional[Group] = None
        self._device_ordinal: Optional[int] = None  # init's device_ordinal (None: the local rank)
        self._device = Device.CPU  # init's device: the memory the context's tensor operations take
        self._capturing = False  # inside graph_capture(): pstate_finalize refuses and frees nothing
        self._hooks: Dict[int, Any] = {}  # add_hook's callables by id: alive while the C hook is

    def _h(self) -> Any:
        if self._handle is None:
            raise InvalidStateError("this PState was finalized or aborted; call pstate.init() again")
        return self._handle

    def _call(self, fn: Any, *args: Any) -> Any:
        """fn(handle, *args) with the lock held (C: one thread at a time per pstate_t)."""
        with self._lock:
            return fn(self._h(), *args)

    # ---- lifecycle -------------------------------------------------------------------------
    def initialize_model_parallel(self, tensor_parallel_size: Optional[int] = None,
                                  pipeline_parallel_size: Optional[int] = None, **sizes: Optional[int]) -> None:
        """Cuts the world into SGLang's groups (collective over the world). Keyword names are
        pstate_parallel_config_t's fields: expert_parallel_size, attention_data_parallel_size,
        attention_context_parallel_size, moe_data_parallel_size, decode_context_parallel_size,
        shared_experts_tensor_parallel_size. A size not given, None or 0 is its default (pstate.h,
        the same rule in C, `pstate layout`, Go and Rust): tensor_parallel_size = world_size /
        pipeline_parallel_size, the others 1 (no shared-experts group). engine="vllm" cuts vLLM's
        groups instead (GroupKind TP, PP, DP, PCP, DCP, EP, EPLB), from data_parallel_size,
        prefill_context_parallel_size, decode_context_parallel_size and moe_model=True."""
        sizes.update(tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size)
        self._call(capi.initialize_model_parallel, make_config(**sizes))

    @property
    def model_parallel_is_initialized(self) -> bool:
        with self._lock:
            return self._handle is not None and bool(capi.model_parallel_is_initialized(self._handle))

    def destroy_model_parallel(self) -> None:
        """Drops the model-parallel groups (their Group objects become invalid); world stays."""
        self._call(capi.destroy_model_parallel)
        self._generation += 1

    def trace_dump(self, path: Optional[str] = None) -> None:
        """Writes this rank's flight-recorder dump now (pstate_trace_dump; read by `pstate doctor`).
        path None: $PSTATE_TRACE_DIR/rank<R>.pstate-trace; a directory: that file in it; else the
        file itself. Dumps are also written on their own when a call fails with a timeout, a lost
        peer, a mismatch or ABORTED, when `pstate run` asks through the job's store, and on SIGUSR1
        when the process was started with PSTATE_TRACE_SIGNAL=1."""
        with self._lock:
            capi.trace_dump(self._h(), None if path is None else str(path))

    def finalize(self) -> None:
        """Graceful teardown: waits for peers (up to the timeout), frees the state, and frees it
        even when it raises, except in the one case pstate_finalize frees nothing: inside a
        ps.graph_capture() block it raises InvalidStateError and this PState stays usable (leave
        the block, then finalize() again; abort() always frees)."""
        with self._lock:
            with self._handle_lock:  # taken out first: a revoke from another thread never meets a freed context
                handle, self._handle = self._handle, None
            if handle is None:
                return
            try:
                capi.finalize(handle)
            except (InvalidStateError, BusyError) as e:
                # The two refusals that free nothing (pstate.h): BUSY, and INVALID_STATE in capture
                # mode. Keep the handle for the capture's end, finalize again, abort.
                if isinstance(e, BusyError) or self._capturing:
                    with self._handle_lock:
                        self._handle = handle
                raise

    def abort(self) -> None:
        """Local teardown that never blocks on peers (after PeerLostError / TimeoutError), from any
        thread: a watchdog thread stops the call another thread is blocked in (it raises
        AbortedError within milliseconds: pstate_revoke), then frees the state once that call has
        returned (pstate_abort). Called from a signal handler while this thread is inside a call,
        it raises BusyError and the call raises AbortedError; abort() again afterwards frees."""
        if not self._lock.acquire(blocking=False):  # another thread is inside a call: stop it
            with self._handle_lock:
                if self._handle is not None:
                    capi.revoke(self._handle)
            self._lock.acquire()
        try:
            with self._handle_lock:
                if self._handle is not None:
                    capi.abort(self._handle)  # BusyError from inside a call on this thread: kept
                    self._handle = None
        finally:
            self._lock.release()

    def add_hook(self, fn: Any) -> int:
        """pstate_add_hook: fn(info: CallInfo) is called before and after every call of this
        PState's groups (from the next call on, in the order hooks were added), and once with
        HookPhase.ABORT when the PState fails or is aborted (possibly on a watchdog's thread).
        Returning False in HookPhase.BEFORE refuses the call: it raises InvalidArgumentError, on
        every rank for a collective of a CPU group. An exception fn raises goes to
        sys.unraisablehook and the call goes on. fn must not call this PState (BusyError) and
        should be quick. Returns the hook's id for remove_hook. docs/hooks.md."""
        if not callable(fn):
            raise TypeError("add_hook: fn must be callable")
        call = _hooks.trampoline(fn)
        with self._lock:
            hook_id = capi.add_hook(self._h(), call)
            self._hooks[hook_id] = call
        return hook_id

    def remove_hook(self, hook_id: int) -> None:
        """pstate_remove_hook: the hook sees no later call (InvalidArgumentError for an unknown id)."""
        with self._lock:
            capi.remove_hook(self._h(), hook_id)
            self._hooks.pop(hook_id, None)

    def revoke(self) -> None:
        """Stops the call another thread is inside (AbortedError there, within milliseconds) and
        every later call, from any thread, freeing nothing (pstate_revoke); abort() frees."""
        with self._handle_lock:
            if self._handle is not None:
                capi.revoke(self._handle)

    @property
    def closed(self) -> bool:
        return self._handle is None

    @property
    def device(self) -> Device:
        """The context's device (init's device=): CPU contexts move host memory, CUDA contexts
        device memory (objects, tensor dicts and barriers take host data in both)."""
        return self._device

    def __enter__(self) -> "PState":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is None:
            self.finalize()
        else:
            self.abort()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            warnings.warn("pstate.PState garbage collected without finalize(); aborting it", ResourceWarning)
            try:
                self.abort()
            except Exception:
                pass

    # ---- groups ----------------------------------------------------------------------------
    def group(self, kind: Union[GroupKind, str]) -> Group:
        """The group of kind (a GroupKind or its name: "world", "tp", "attn_tp", ...) that
        contains this rank. WORLD always exists; the others need initialize_model_parallel()
        (InvalidStateError), DCP and SHARED_EXPERTS_TP only when configured (UnsupportedError)."""
        kind = coerce(GroupKind, kind, "group kind")
        handle = self._call(capi.get_group, int(kind))
        return Group(self, handle, kind, self._generation)

    def new_group(self, ranks: Any) -> Optional[Group]:
        """SGLang's create_custom_parallel_group / vLLM's new_group: collective over the world
        (every rank calls it). ranks: the global ranks of the group this rank joins (strictly
        ascending, this rank among them), or empty to join none (returns None). Returns a Group of
        kind CUSTOM named "custom:<n>", retired by destroy_model_parallel() like the
        model-parallel groups."""
        try:
            values = [int(r) for r in ranks]
        except TypeError:
            raise InvalidArgumentError(f"new_group: ranks must be a sequence of ints, got {type(ranks).__name__}") from None
        handle = self._call(capi.new_group, values)
        if handle is None:
            return None
        return Group(self, handle, GroupKind.CUSTOM, self._generation)

    @property
    def world(self) -> Group:
        if self._world is None or self._world._ps._handle is None:
            self._world = self.group(GroupKind.WORLD)
        return self._world

    @property
    def tp(self) -> Group:
        return self.group(GroupKind.TP)

    @property
    def pp(self) -> Group:
        return self.group(GroupKind.PP)

    @property
    def rank(self) -> int:
        """This rank's global rank."""
        return self.world.rank

    @property
    def world_size(self) -> int:
        return self.world.world_size

    @property
    def live_ranks(self) -> List[int]:
        """pstate_live_ranks: the global ranks this rank does not know to be dead, ascending (a
        rank whose process ended, as the job's store, this host or a failed endpoint saw it, is
        dead). Local; works after a PeerLostError, to learn who is gone."""
        return list(self._call(capi.live_ranks, self.world_size))

    def shrink(self) -> List[int]:
        """pstate_shrink: collective over the survivors, after a PeerLostError (or AbortedError
        because of one): every live rank calls it; they agree on who is alive and rebuild the world
        from them, ranks renumbered in their old order. Returns new_rank: one entry per rank of the
        world before the call, its new rank, -1 for a dead one. Every model-parallel and custom
        Group is dropped (so is the old world Group: ps.world is the new one); call
        initialize_model_parallel() again with sizes that fit the new world."""
        n = self.world_size  # the world before the call (the cached world group: works after a failure)
        try:
            new_rank = self._call(capi.shrink, n)
        finally:
            self._generation += 1  # dropped first thing, whatever the outcome
        self._renew_world()
        return list(new_rank)

    def grow(self, timeout_ms: int) -> None:
        """pstate_grow: collective over the world; admits the replacement processes waiting to join
        (started with PSTATE_REJOIN=1 and the RANK of a dead rank) and rebuilds the world with them
        appended. Every model-parallel and custom Group is dropped (so is the old world Group:
        ps.world is the new one). Waits up to timeout_ms for at least one; none in time:
        TimeoutError, the world unchanged and usable."""
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int):
            raise InvalidArgumentError(f"grow: timeout_ms must be an int, got {type(timeout_ms).__name__}")
        if not 0 <= timeout_ms <= 0x7FFFFFFFFFFFFFFF:
            raise InvalidArgumentError(f"grow: timeout_ms {timeout_ms} is outside 0..2**63-1 (int64_t milliseconds)")
        self._call(capi.grow, timeout_ms)
        self._generation += 1
        self._renew_world()

    def _renew_world(self) -> None:
        """After the world was rebuilt: the new world group, fetched now so that its size is known
        after a later failure (pstate_get_group refuses in a failed context)."""
        self._world = None
        self._world = self.group(GroupKind.WORLD)

    # ---- communication_op.py ---------------------------------------------------------------
    def tp_all_reduce(self, buf: BufferLike, op: ReduceOp = ReduceOp.SUM, *, dtype: Optional[DType] = None,
                      count: Optional[int] = None, stream: Optional[int] = None) -> Any:
        """tensor_model_parallel_all_reduce: in place on the TP group. Returns buf."""
        with _refusing_together(functools.partial(self._call, capi.tp_allreduce, None, 1, _REFUSED_DTYPE, 0, None),
                                "tp_all_reduce", f"rank {self.rank}"):
            b = resolve(buf, "buf", writable=True, dtype=dtype, count=count)
            reduce_op = int(coerce(ReduceOp, op, "op"))
        self._call(capi.tp_allreduce, b.obj, b.count, int(b.dtype), reduce_op, stream)
        return buf

    def tp_all_gather(self, send: BufferLike, out: Optional[BufferLike] = None, *, dim: int = 0,
                      dtype: Optional[DType] = None, count: Optional[int] = None, stream: Optional[int] = None) -> Any:
        """tensor_model_parallel_all_gather(input, dim) on the TP group: Group.all_gather's rules.
        Returns out (allocated when None)."""
        return _all_gather("tp_all_gather", self.tp.world_size, functools.partial(self._call, capi.tp_allgather),
                           functools.partial(self._call, capi.tp_allgather, None, None, 1, _REFUSED_DTYPE, None),
                           f"rank {self.rank}", send, out, dim, dtype, count, stream)

    # ---- graph capture ---------------------------------------------------------------------
    def set_graph_registration(self, enable: bool = True) -> None:
        """pstate_set_graph_registration: register the buffers of captured device collectives with
        their group's communicator at the end of each graph_capture() block (SGLang's graph-buffer
        registration). Keep those buffers allocated while the graph lives."""
        self._call(capi.set_graph_registration, 1 if enable else 0)

    @contextlib.contextmanager
    def graph_capture(self, stream: Optional[int] = None) -> Iterator[int]:
        """SGLang's graph_capture(): every group in capture mode for the block; yields the
        cudaStream_t (as an int) to capture on. CUDA contexts only (UnsupportedError on CPU)."""
        capture_stream = self._call(capi.graph_capture_begin, stream)
        self._capturing = True
        try:
            yield capture_stream
        finally:
            if self._handle is not None:
                self._call(capi.graph_capture_end)
            self._capturing = False


def init(*, world_size: Optional[int] = None, rank: Optional[int] = None, local_rank: Optional[int] = None,
         init_method: Optional[str] = None, device: Union[Device, str] = Device.CPU,
         device_ordinal: Optional[int] = None, timeout_ms: Optional[int] = None, job_token: Optional[str] = None,
         socket_ifname: Optional[str] = None) -> PState:
    """init_distributed_environment: rendezvous with the other ranks and return this rank's
    PState with the world group ready. Collective; blocks up to the timeout.

    Signals: a call on the PState that blocks (a collective whose peers are late, recv, ...) runs
    Python's signal handlers every 20-50 ms, so Ctrl-C raises KeyboardInterrupt there within
    ~0.1-0.2 s (main thread; the GIL stays released while it waits). The call's peers were left
    inside the operation, so the PState is failed: later calls raise AbortedError; abort() it (the
    ``with`` block does). A signal handler must not call pstate itself. (init itself is not
    interrupted: it has no PState yet; bound it with timeout_ms.)

    Every argument left None comes from the environment (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR/MASTER_PORT for init_method "env://", PSTATE_TIMEOUT_MS, PSTATE_JOB_TOKEN, ...),
    which is what ``pstate run -n N -- python3 prog.py`` sets. device is "cpu"/"cuda" (any case)
    or a Device.
    """
    device = coerce(Device, device, "device")
    params = _set_params(world_size=world_size, rank=rank, local_rank=local_rank, init_method=init_method,
                         device=int(device), device_ordinal=device_ordinal, timeout_ms=timeout_ms,
                         job_token=job_token, socket_ifname=socket_ifname)
    ps = PState(capi.init(params))
    ps._device_ordinal = device_ordinal if device_ordinal is not None and device_ordinal >= 0 else None
    ps._device = device
    ps._world = ps.group(GroupKind.WORLD)  # kept: its size sizes shrink() after a failure (get_group refuses then)
    # Ctrl-C: every wait of a call on ps runs Python's signal handlers every 20-50 ms (the
    # GIL stays released in between); a handler that raises stops the call with its exception.
    ps._call(capi.set_interrupt_check, True)
    return ps
