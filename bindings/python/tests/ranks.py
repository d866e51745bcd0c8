"""Rank programs for the multi-rank tests: `pstate run -n N -- python3 ranks.py SCENARIO`.

Each scenario runs on every rank, computes what each operation must return with numpy/Python
(independently of pstate) and raises AssertionError on the first difference, so the launcher
exits non-zero. Values are small integers so float sums are exact on every rank.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time

import numpy as np

import pstate
from pstate import DType, GroupKind, ReduceOp

TIMEOUT_MS = int(os.environ.get("PSTATE_TIMEOUT_MS", "60000"))


def expect_raises(cls, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except cls as e:
        return e
    raise AssertionError(f"{fn.__name__} did not raise {cls.__name__}")


def lifecycle() -> None:
    ps = pstate.init(timeout_ms=TIMEOUT_MS)
    assert ps.world_size == int(os.environ["WORLD_SIZE"]) and ps.rank == int(os.environ["RANK"])
    assert not ps.model_parallel_is_initialized
    assert ps.live_ranks == list(range(ps.world_size)), ps.live_ranks  # nobody died
    # shrink with nobody dead: the same world, renumbered as before (no model-parallel groups yet)
    n, rank, old_world = ps.world_size, ps.rank, ps.world
    assert ps.shrink() == list(range(n))
    assert (ps.world_size, ps.rank) == (n, rank), (ps.world_size, ps.rank)
    expect_raises(pstate.InvalidStateError, old_world.barrier)  # shrink replaced the world group
    ones = np.ones(3, dtype=np.int32)
    ps.world.all_reduce(ones)
    assert ones.tolist() == [n] * 3, ones
    # grow with nobody waiting to join: TimeoutError, the world unchanged and usable
    err = expect_raises(pstate.TimeoutError, ps.grow, 300)
    assert "unchanged" in err.detail, err.detail
    ones = np.ones(3, dtype=np.int32)
    ps.world.all_reduce(ones)
    assert ones.tolist() == [n] * 3, ones
    assert ps.live_ranks == list(range(n)), ps.live_ranks
    err = expect_raises(pstate.InvalidStateError, ps.group, GroupKind.TP)
    assert "initialize_model_parallel" in err.detail, err.detail
    ps.initialize_model_parallel(tensor_parallel_size=ps.world_size)
    assert ps.model_parallel_is_initialized
    expect_raises(pstate.InvalidStateError, ps.initialize_model_parallel)  # twice: destroy first
    tp = ps.tp
    tp.barrier()
    ps.destroy_model_parallel()
    assert not ps.model_parallel_is_initialized
    expect_raises(pstate.InvalidStateError, tp.barrier)  # a destroyed group is refused, not used
    expect_raises(pstate.InvalidStateError, ps.destroy_model_parallel)
    ps.world.barrier()  # world survives destroy_model_parallel
    ps.initialize_model_parallel(tensor_parallel_size=1, pipeline_parallel_size=ps.world_size)
    assert ps.pp.world_size == ps.world_size
    ps.finalize()
    assert ps.closed
    expect_raises(pstate.InvalidStateError, ps.group, GroupKind.WORLD)
    ps.finalize()  # idempotent
    # (no second init in this job: it would reuse MASTER_PORT while a peer may still be tearing
    # down its first store; the other scenarios use the context manager, which finalizes)


def groups_tp_pp() -> None:
    with pstate.init(timeout_ms=TIMEOUT_MS) as ps:
        world, rank = ps.world_size, ps.rank
        tp_size, pp_size = 2, world // 2
        ps.initialize_model_parallel(tensor_parallel_size=tp_size, pipeline_parallel_size=pp_size)
        # SGLang: TP = tp consecutive ranks; PP = ranks tp apart
        tp_ranks = list(range(rank // tp_size * tp_size, rank // tp_size * tp_size + tp_size))
        pp_ranks = list(range(rank % tp_size, world, tp_size))
        for g, ranks, kind in ((ps.tp, tp_ranks, GroupKind.TP), (ps.pp, pp_ranks, GroupKind.PP)):
            i = ranks.index(rank)
            assert g.kind == kind
            assert g.ranks == ranks, (g.ranks, ranks)
            assert (g.rank, g.rank_in_group, g.world_size) == (rank, i, len(ranks))
            assert (g.first_rank, g.last_rank) == (ranks[0], ranks[-1])
            assert g.next_rank == ranks[(i + 1) % len(ranks)] and g.prev_rank == ranks[(i - 1) % len(ranks)]
            assert g.is_first_rank == (i == 0) and g.is_last_rank == (i == len(ranks) - 1)
            assert g.name.startswith(kind.name.lower() + ":"), g.name
            assert g.same_node(0) == [True] * len(ranks)
        assert ps.group(GroupKind.ATTN_TP).ranks == tp_ranks  # attn_tp = tp (attn_dp = attn_cp = 1)
        assert ps.world.ranks == list(range(world))


def _ops_on(g: pstate.Group, dtype) -> None:
    n, r = g.world_size, g.rank_in_group
    rows = [np.arange(4 * n, dtype=dtype) * (k + 1) + k for k in range(n)]  # rank k's input
    mine = rows[r].copy()
    # all_reduce: sum in place, max into out
    x = mine.copy()
    g.all_reduce(x)
    assert np.array_equal(x, sum(rows)), (x, sum(rows))
    out = np.empty_like(mine)
    g.all_reduce(mine, ReduceOp.MAX, out=out)
    assert np.array_equal(out, np.maximum.reduce(rows))
    # all_gather: concatenation in group-rank order
    assert np.array_equal(g.all_gather(mine), np.concatenate(rows))
    # reduce_scatter: block r of the sum
    block = 4
    assert np.array_equal(g.reduce_scatter(mine), sum(rows)[r * block:(r + 1) * block])
    # broadcast from the last rank
    b = mine.copy()
    g.broadcast(b, src=n - 1)
    assert np.array_equal(b, rows[n - 1])
    # gather on rank 0 only
    got = g.gather(mine, dst=0)
    if r == 0:
        assert np.array_equal(got, np.concatenate(rows))
    else:
        assert got is None
    # all_to_all: block j of rank k goes to rank j
    expect = np.concatenate([rows[k][r * block:(r + 1) * block] for k in range(n)])
    assert np.array_equal(g.all_to_all(mine), expect)
    # send/recv around the ring
    if n > 1:
        buf = np.empty_like(mine)
        if r % 2 == 0:
            g.send(mine, (r + 1) % n)
            g.recv(buf, (r - 1) % n)
        else:
            g.recv(buf, (r - 1) % n)
            g.send(mine, (r + 1) % n)
        assert np.array_equal(buf, rows[(r - 1) % n])
    g.barrier()


def ops() -> None:
    with pstate.init(timeout_ms=TIMEOUT_MS) as ps:
        ps.initialize_model_parallel(tensor_parallel_size=2, pipeline_parallel_size=ps.world_size // 2)
        for dtype in (np.float32, np.int64):
            for g in (ps.world, ps.tp, ps.pp):
                _ops_on(g, dtype)
            # communication_op.py on the TP group
            tp = ps.tp
            v = np.full(3, ps.rank + 1, dtype=dtype)
            ps.tp_all_reduce(v)
            assert np.array_equal(v, np.full(3, sum(rk + 1 for rk in tp.ranks), dtype=dtype))
            got = ps.tp_all_gather(np.full(2, ps.rank, dtype=dtype))
            assert np.array_equal(got, np.repeat(np.array(tp.ranks, dtype=dtype), 2))
        # bytearray and memoryview work as buffers too
        w = ps.world
        ba = bytearray([ps.rank + 1] * 3)
        w.all_reduce(ba)
        assert list(ba) == [sum(range(1, ps.world_size + 1))] * 3
        mv = memoryview(bytearray(8)).cast("i")
        mv[0], mv[1] = ps.rank, 1
        w.all_reduce(mv)
        assert mv.tolist() == [sum(range(ps.world_size)), ps.world_size]


def reduce_and_scatter() -> None:
    """reduce and scatter from every root of the world and the TP group: reduce in place on dst
    (buf only read elsewhere) and into out; scatter into out, and into a view of send's own
    block on src. Then the binding's own argument errors, on each rank's group of one (SELF_PP:
    every rank is the root there, so no peer waits for a refused call), and a root that is not a
    rank of the group, refused by C on every rank alike."""
    with pstate.init(timeout_ms=TIMEOUT_MS) as ps:
        ps.initialize_model_parallel(tensor_parallel_size=ps.world_size)
        for g in (ps.world, ps.tp):
            n, r = g.world_size, g.rank_in_group
            for dtype in (np.float32, np.int64, np.uint8):
                rows = [(np.arange(10) * (k + 1) + k).astype(dtype) for k in range(n)]
                for root in range(n):
                    x = rows[r].copy()
                    got = g.reduce(x, root)
                    if r == root:
                        assert got is x and np.array_equal(x, sum(rows)), (x, sum(rows))
                    else:
                        assert got is None and np.array_equal(x, rows[r]), x
                    out = np.full_like(rows[r], 99)
                    got = g.reduce(rows[r], root, ReduceOp.MAX, out=out)
                    assert (got is out and np.array_equal(out, np.maximum.reduce(rows))) if r == root else got is None
                    mine = np.zeros(10, dtype)
                    got = g.scatter(mine, np.concatenate(rows) if r == root else None, src=root)
                    assert got is mine and np.array_equal(mine, rows[r]), (mine, rows[r])
                    if r == root:
                        send = np.concatenate(rows)
                        assert np.array_equal(g.scatter(send[root * 10:(root + 1) * 10], send, src=root), rows[r])
                    else:
                        g.scatter(np.zeros(10, dtype), src=root)
        ba = bytearray([ps.rank + 1] * 4)
        ps.world.reduce(ba, 0)
        if ps.rank == 0:
            assert list(ba) == [sum(range(1, ps.world_size + 1))] * 4, list(ba)
        solo = ps.group(GroupKind.SELF_PP)
        a = np.arange(6, dtype=np.float32)
        for call in (lambda: solo.scatter(np.zeros(3, np.float32)),                      # no send on src
                     lambda: solo.scatter(np.zeros(3, np.float32), a[:2]),               # send too short
                     lambda: solo.scatter(np.zeros(3, np.int32), a),                     # dtypes differ
                     lambda: solo.reduce(a, 0, out=np.zeros(2, np.float32)),             # out too short
                     lambda: solo.reduce(np.arange(3, dtype=np.float32).view(np.uint8).reshape(3, 4)[:, 0], 0)):
            expect_raises(pstate.InvalidArgumentError, call)
        for call in (lambda: ps.world.reduce(a, ps.world_size), lambda: ps.world.scatter(a, a, src=-1)):
            err = expect_raises(pstate.InvalidArgumentError, call)
            assert "root" in err.detail, err.detail
        ps.world.barrier()  # still in step


_REFUSALS: list = []


def _refused_everywhere(fn, *args, refuser: int, me: int, text: str, **kw):
    """fn(*args, **kw) raises InvalidArgumentError on every rank of the call. Its text is checked
    by _refusal_texts, after the next call: a rank out of step shows in that call's data first."""
    err = expect_raises(pstate.InvalidArgumentError, fn, *args, **kw)
    _REFUSALS.append((err.detail, refuser, me, text))


def _refusal_texts() -> None:
    """On the refusing rank the binding's own error (text in it, with the call and the rank), on
    the others the library's, naming the refusing rank."""
    for detail, refuser, me, text in _REFUSALS:
        if me == refuser:
            assert text in detail and f"(group rank {refuser})" in detail, detail
        else:
            assert "refused its part of this call" in detail and f"(group rank {refuser})" in detail, detail
    _REFUSALS.clear()


def rooted_refusals() -> None:
    """Issue 46: an argument the binding checks on one rank only (a root's out or send: missing,
    too short, another dtype, read-only, vLLM's gather(x, dst, dim) whose dim lands in out; one
    rank's out of a symmetric call) raises on every rank of the call at once, and every call after
    it returns its own data: no gather one call behind ([20, 20, 11, 11] for [20, 20, 21, 21]).
    2 ranks; run over shared memory, UCX and PSTATE_CHECK=1. PSTATE_TEST_CALLS: the calls to
    check (gather, reduce, scatter, symmetric; default all)."""
    only = os.environ.get("PSTATE_TEST_CALLS", "gather,reduce,scatter,symmetric").split(",")
    with pstate.init(timeout_ms=TIMEOUT_MS) as ps:
        w, me, n = ps.world, ps.world.rank_in_group, ps.world.world_size
        calls = iter(range(1, 1000))

        def row(k: int, r: int) -> np.ndarray:  # rank r's input of call k: 10 k + r
            return np.full(2, 10 * k + r, np.int32)

        read_only = np.zeros(2 * n, np.int32)
        read_only.flags.writeable = False
        for root in range(n):
            for bad, text in ((np.zeros(2 * n - 1, np.int32), "out"), (np.zeros(2 * n, np.float32), "out"),
                              (-1, "out"), (read_only, "out")) if "gather" in only else ():
                k = next(calls)
                _refused_everywhere(w.gather, row(k, me), root, bad if me == root else None, refuser=root, me=me,
                                    text=text)
                k = next(calls)
                got = w.gather(row(k, me), root)
                assert me != root or got.tolist() == [10 * k + r for r in range(n) for _ in range(2)], (k, got)
                _refusal_texts()
            for bad, text in ((np.zeros(1, np.int32), "out"), (np.zeros(2, np.float64), "out"), (None, "buf")) \
                    if "reduce" in only else ():
                k = next(calls)
                buf = row(k, me)
                if bad is None:  # in place: buf must be writable on root only
                    buf.flags.writeable = False
                _refused_everywhere(w.reduce, buf, root, out=bad if me == root else None, refuser=root, me=me,
                                    text=text)
                k = next(calls)
                got = w.reduce(row(k, me), root)
                assert me != root or got.tolist() == [sum(10 * k + r for r in range(n))] * 2, (k, got)
                _refusal_texts()
            for bad, text in ((None, "needs send"), (np.zeros(2 * n - 1, np.int32), "send"),
                              (np.zeros(2 * n, np.int64), "send")) if "scatter" in only else ():
                k = next(calls)
                _refused_everywhere(w.scatter, np.zeros(2, np.int32), bad if me == root else None, root,
                                    refuser=root, me=me, text=text)
                k = next(calls)
                send = np.concatenate([row(k, r) for r in range(n)]) if me == root else None
                got = w.scatter(np.zeros(2, np.int32), send, root)
                assert got.tolist() == row(k, me).tolist(), (k, got)
                _refusal_texts()
            if "symmetric" not in only:
                continue
            # symmetric calls: one rank's own out
            k = next(calls)
            _refused_everywhere(w.all_reduce, row(k, me), out=np.zeros(1, np.int32) if me == root else None,
                                refuser=root, me=me, text="out")
            k = next(calls)
            assert w.all_reduce(row(k, me)).tolist() == [sum(10 * k + r for r in range(n))] * 2
            _refusal_texts()
            k = next(calls)
            _refused_everywhere(w.all_gather, row(k, me), np.zeros(2 * n + 1, np.int32) if me == root else None,
                                refuser=root, me=me, text="out")
            k = next(calls)
            assert w.all_gather(row(k, me)).tolist() == [10 * k + r for r in range(n) for _ in range(2)]
            _refusal_texts()
        w.barrier()  # still in step


class Payload:
    """A user class: broadcast_object takes anything picklable."""

    def __init__(self, name, shape):
        self.name, self.shape = name, shape

    def __eq__(self, other):
        return isinstance(other, Payload) and (self.name, self.shape) == (other.name, other.shape)


def objects() -> None:
    with pstate.init(timeout_ms=TIMEOUT_MS) as ps:
        w, rank = ps.world, ps.rank
        src = w.world_size - 1
        obj = {"step": 7, "tokens": list(range(1000)), "cfg": Payload("llama", (2, 3)), "arr": np.eye(2)}
        got = w.broadcast_object(obj if rank == src else None, src=src)
        assert got["step"] == 7 and got["tokens"] == list(range(1000)) and got["cfg"] == Payload("llama", (2, 3))
        assert np.array_equal(got["arr"], np.eye(2))
        # empty and large objects
        assert w.broadcast_object(b"" if rank == 0 else None, src=0) == b""
        big = "x" * (1 << 20)
        assert w.broadcast_object(big if rank == 0 else None, src=0) == big
        gathered = w.all_gather_object(("rank", rank, "p" * rank))
        assert gathered == [("rank", k, "p" * k) for k in range(w.world_size)]
        if w.world_size >= 2:
            if rank == 0:
                w.send_object({"hello": [1, 2, 3]}, dst=1)
            elif rank == 1:
                assert w.recv_object(src=0) == {"hello": [1, 2, 3]}
        w.barrier()


def _unpicklable(kind: str):
    """An object pickle refuses: a lambda (PicklingError/AttributeError) or a socket (TypeError)."""
    if kind == "lambda":
        return lambda x: x + 1
    import socket
    return socket.socket()


PICKLING_ERRORS = (pickle.PicklingError, AttributeError, TypeError)


def expect_refused(fn, *args, rank: int, text: str):
    err = expect_raises(pstate.ObjectRefusedError, fn, *args)
    assert isinstance(err, pstate.InvalidArgumentError) and isinstance(err, ValueError)
    assert err.rank == rank and text in err.reason and "Python binding" in err.reason, (err.rank, err.reason)
    assert "group rank" in err.detail and f"rank {rank}" in err.detail and "refusal" in err.detail, err.detail
    return err


def object_refusals() -> None:
    """An object its sender cannot pickle fails the sender with its pickling error and every
    receiver with ObjectRefusedError (its rank and reason), at once; the next object call on
    the group gets the right object everywhere (no shift by one). 3 ranks."""
    with pstate.init(timeout_ms=TIMEOUT_MS) as ps:
        w, me, n = ps.world, ps.world.rank_in_group, ps.world.world_size
        for src, kind in ((0, "lambda"), (n - 1, "socket")):
            bad = _unpicklable(kind)
            if me == src:
                expect_raises(PICKLING_ERRORS, w.broadcast_object, bad, src)
            else:
                expect_refused(w.broadcast_object, None, src, rank=src, text=kind)
            if kind == "socket":
                bad.close()
            assert w.broadcast_object({"next": src} if me == src else None, src=src) == {"next": src}
        # send_object / recv_object: the refusal reaches dst, the next object is the right one
        if me == 0:
            expect_raises(PICKLING_ERRORS, w.send_object, _unpicklable("lambda"), 1)
            w.send_object(("after", 1), dst=1)
        elif me == 1:
            expect_refused(w.recv_object, 0, rank=0, text="lambda")
            assert w.recv_object(src=0) == ("after", 1)
        # all_gather_object: every rank encodes; one refusing rank fails every rank
        if me == 1:
            expect_raises(PICKLING_ERRORS, w.all_gather_object, _unpicklable("lambda"))
        else:
            expect_refused(w.all_gather_object, ("ok", me), rank=1, text="lambda")
        # two refusing ranks: the others name both
        if me >= 1:
            expect_raises(PICKLING_ERRORS, w.all_gather_object, _unpicklable("lambda"))
        else:
            err = expect_refused(w.all_gather_object, ("ok", me), rank=1, text="lambda")
            assert sorted(err.reasons) == list(range(1, n)), err.reasons
        assert w.all_gather_object(("ok", me)) == [("ok", k) for k in range(n)]
        assert w.broadcast_object("last" if me == 0 else None, src=0) == "last"


def object_garbage() -> None:
    """Bytes that are not an object frame (a raw capi call on the sender) are ObjectFrameError
    on the receivers, never unpickled; the group stays in step. 3 ranks."""
    with pstate.init(timeout_ms=TIMEOUT_MS) as ps:
        w, me, n = ps.world, ps.world.rank_in_group, ps.world.world_size
        payloads = [
            (b"garbage!", "not a pstate object frame"),
            (b"", "not a pstate object frame"),
            (b"PSOB", "not a pstate object frame"),            # magic, no version/kind
            (pickle.dumps({"old": 1}), "not a pstate object frame"),  # an unframed pickle
            (b"PSOB\x09p" + pickle.dumps(1), "version 9"),
            (b"PSOB\x01g\x03\x04", "gob value (Go binding)"),
            (b"PSOB\x01?", "unknown kind"),
        ]
        for raw, text in payloads:
            if me == 0:
                w._call(pstate.capi.broadcast_object, raw, 0)  # the raw C-level call
            else:
                err = expect_raises(pstate.ObjectFrameError, w.broadcast_object, None, 0)
                assert isinstance(err, pstate.InvalidArgumentError)
                assert err.rank == 0 and text in err.detail, (text, err.detail)
        assert w.broadcast_object({"good": 1} if me == 0 else None, src=0) == {"good": 1}
        if me == 0:
            w._call(pstate.capi.send_object, b"\x80\x05junk", 1)
            w.send_object("fine", dst=1)
        elif me == 1:
            err = expect_raises(pstate.ObjectFrameError, w.recv_object, 0)
            assert err.rank == 0, err.detail
            assert w.recv_object(0) == "fine"
        if me == n - 1:
            w._call(pstate.capi.all_gather_object, b"junk", n)
        else:
            err = expect_raises(pstate.ObjectFrameError, w.all_gather_object, me)
            assert err.rank == n - 1, err.detail
        assert w.all_gather_object(me * 10) == [k * 10 for k in range(n)]


def errors() -> None:
    with pstate.init(timeout_ms=TIMEOUT_MS) as ps:
        w = ps.world
        # wrong dtype: fp8 cannot be reduced on CPU (the library refuses)
        err = expect_raises(pstate.UnsupportedError, w.all_reduce, np.zeros(4, dtype=np.uint8), dtype=DType.FP8_E4M3)
        assert err.status == pstate.Status.UNSUPPORTED and err.detail, err
        # wrong dtype between send and out (the binding refuses before C)
        expect_raises(pstate.InvalidArgumentError, w.all_reduce, np.zeros(4, np.float32), out=np.zeros(4, np.int32))
        # out too small
        expect_raises(pstate.InvalidArgumentError, w.all_gather, np.zeros(4, np.float32), np.zeros(4, np.float32))
        # bad rank: the library's text names the rank
        err = expect_raises(pstate.InvalidArgumentError, w.broadcast, np.zeros(2, np.float32), src=w.world_size + 3)
        assert str(w.world_size + 3) in err.detail, err.detail
        assert pstate.last_error() == err.detail
        # out-of-order: TP before initialize_model_parallel
        expect_raises(pstate.InvalidStateError, ps.group, GroupKind.TP)
        # graph capture needs a CUDA context
        try:
            with ps.graph_capture():
                raise AssertionError("graph_capture on a CPU context did not raise")
        except pstate.UnsupportedError:
            pass
        # the context is still usable after refused calls
        x = np.ones(2, np.float64)
        w.all_reduce(x)
        assert np.array_equal(x, np.full(2, float(w.world_size)))


def gil() -> None:
    """While one thread is blocked in barrier() (rank 1 enters late), another Python thread
    keeps running: the C call released the GIL. Rank 1 waits for a file rank 0's main thread
    writes while its own barrier thread is blocked."""
    with pstate.init(timeout_ms=TIMEOUT_MS) as ps:
        flag = os.path.join(os.environ["PSTATE_TEST_TMP"], "gil-flag")
        if ps.rank == 0:
            started = threading.Event()

            def blocked():
                started.set()
                ps.world.barrier()

            t = threading.Thread(target=blocked)
            t.start()
            started.wait()
            time.sleep(0.2)  # let the thread enter the C call
            ticks = sum(1 for _ in range(100000))  # Python work while the other thread waits in C
            with open(flag, "w") as f:
                f.write(str(ticks))
            t.join()
        else:
            while not os.path.exists(flag):
                time.sleep(0.01)
            ps.world.barrier()


def peer_killed() -> None:
    """Rank 1 dies (SIGKILL) while rank 0 is inside all_reduce; rank 0 must get PeerLostError or
    TimeoutError (short timeout), abort, and report it. Rank 0 ignores the launcher's SIGTERM."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ps = pstate.init(timeout_ms=3000)
    ps.world.barrier()
    if ps.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    x = np.ones(1 << 16, np.float32)
    try:
        ps.world.all_reduce(x)
        print("SURVIVOR: all_reduce returned without error", flush=True)
        sys.exit(3)
    except (pstate.PeerLostError, pstate.TimeoutError) as e:
        print(f"SURVIVOR: {type(e).__name__} status={e.status.name}: {e.detail}", flush=True)
        ps.abort()
        sys.exit(0)


# ---- tensor dicts --------------------------------------------------------------------------------
#: dtypes= of the containers in dict_of
DICT_DTYPES = {"bf16": DType.BFLOAT16, "e4m3": DType.FP8_E4M3, "e5m2": DType.FP8_E5M2}
_NATIVE = {np.dtype(np.int8): DType.INT8, np.dtype(np.uint8): DType.UINT8, np.dtype(np.int32): DType.INT32,
           np.dtype(np.uint32): DType.UINT32, np.dtype(np.int64): DType.INT64, np.dtype(np.uint64): DType.UINT64,
           np.dtype(np.float16): DType.FLOAT16, np.dtype(np.float32): DType.FLOAT32,
           np.dtype(np.float64): DType.FLOAT64}


def dict_of(rank: int) -> dict:
    """The dict group rank `rank` sends; every rank builds it to check what it receives. Every
    dtype, a numpy scalar and a 0-d array, a 0-size array, a non-contiguous view, a big-endian
    array and one tensor above the library's 64 KiB inline limit."""
    return {
        "f32": (np.arange(6, dtype=np.float32) + rank).reshape(2, 3),
        "i64 scalar": np.int64(-7 - rank),
        "0-d": np.array(2.5 * rank),
        "empty": np.zeros((0, 4), np.uint8),
        "i8": np.array([-1, rank, 3, -128], np.int8),
        "u32": np.array([[rank], [2**32 - 1]], np.uint32),
        "u64": np.array([rank << 40], np.uint64),
        "i32": np.array([[[rank, -rank]]], np.int32),
        "f16": np.array([1.0, 2.0 + rank], np.float16),
        "bf16": np.array([0x3F80, 0x4000, 0x4040 + rank], np.uint16),
        "e4m3": np.array([[0x38, 0x40], [rank, 0xFF]], np.uint8),
        "e5m2": np.array([0x3C, rank, 0x80], np.uint8),
        "transposed": np.arange(12, dtype=np.int32).reshape(3, 4).T + rank,
        "big-endian": np.arange(5, dtype=">f4") + rank,
        "big": (np.arange(20000, dtype=np.float64) + rank * 1e6).reshape(100, 200),
    }


def check_dict(got, want: dict, where: str) -> None:
    assert isinstance(got, pstate.TensorDict), (where, type(got))
    assert list(got) == list(want), (where, list(got))  # the sender's order
    for key, value in want.items():
        ref = np.asarray(value)
        arr = got[key]
        assert isinstance(arr, np.ndarray) and arr.shape == ref.shape, (where, key, arr, ref)
        assert arr.flags.c_contiguous and arr.flags.writeable, (where, key)
        assert np.array_equal(arr, ref), (where, key, arr, ref)
        dtype = DICT_DTYPES[key] if key in DICT_DTYPES else _NATIVE[ref.dtype.newbyteorder("=")]
        assert got.dtypes[key] == dtype, (where, key, got.dtypes[key])
        assert arr.dtype == np.dtype(pstate.NUMPY_DTYPE_NAMES[dtype]), (where, key, arr.dtype)


def tensor_dicts() -> None:
    """broadcast from every root, an empty dict, a received dict relayed on (its .dtypes kept),
    and send/recv around the ring with SGLang's default peers."""
    with pstate.init(timeout_ms=TIMEOUT_MS) as ps:
        w = ps.world
        n, me = w.world_size, w.rank_in_group
        for root in range(n):
            mine = dict_of(root) if me == root else None
            got = w.broadcast_tensor_dict(mine, src=root, dtypes=DICT_DTYPES if me == root else None)
            if me == root:
                assert got is mine
            else:
                check_dict(got, dict_of(root), f"broadcast from {root}")
                if root == 0 and me == n - 1:
                    relayed = got  # sent back to rank 0 below, without dtypes=
        assert w.broadcast_tensor_dict({} if me == 0 else None, src=0) == {}
        if me == n - 1:
            w.send_tensor_dict(relayed, dst=0)
        elif me == 0:
            check_dict(w.recv_tensor_dict(src=n - 1), dict_of(0), "relayed")
        # ring: even ranks send first, odd ranks receive first (no cycle of waiting senders)
        if me % 2 == 0:
            w.send_tensor_dict(dict_of(me), dtypes=DICT_DTYPES)
            got = w.recv_tensor_dict()
        else:
            got = w.recv_tensor_dict()
            w.send_tensor_dict(dict_of(me), dtypes=DICT_DTYPES)
        check_dict(got, dict_of((me - 1) % n), "ring")


def tensor_dict_errors() -> None:
    """A dict the binding refuses on src fails every rank at once with the reason; bad ranks are
    refused locally; the group stays in step."""
    with pstate.init(timeout_ms=TIMEOUT_MS) as ps:
        w = ps.world
        src = w.rank_in_group == 0
        refused = [
            ({"fn": lambda: 0, "ids": np.arange(3)}, None, "cannot be pickled"),
            ({"w": np.zeros(2, np.float32)}, {"w": DType.BFLOAT16}, "bfloat16"),
            ({"w": np.zeros(2, np.uint16)}, {"v": DType.BFLOAT16}, "not a key"),
            ({3: np.zeros(1)}, None, "not a str"),
        ]
        for tensors, dtypes, text in refused:
            err = expect_raises(pstate.InvalidArgumentError, w.broadcast_tensor_dict,
                                tensors if src else None, 0, dtypes=dtypes if src else None)
            assert text in err.detail, (text, err.detail)
            if not src:
                # the sender's reason, clean: not the library's refusal of the stand-in dict
                assert "refused its dict" in err.detail and "its Python binding refused it" in err.detail, err.detail
                assert "dtype -1" not in err.detail and "pstate_dtype_t" not in err.detail, err.detail
        expect_raises(pstate.InvalidArgumentError, w.broadcast_tensor_dict, None, w.world_size + 3)
        expect_raises(pstate.InvalidArgumentError, w.send_tensor_dict, {}, w.rank_in_group)
        expect_raises(pstate.InvalidArgumentError, w.recv_tensor_dict, w.rank_in_group)
        got = w.broadcast_tensor_dict(dict_of(0) if src else None, 0, dtypes=DICT_DTYPES if src else None)
        if not src:
            check_dict(got, dict_of(0), "after refusals")


def tensor_dict_gil() -> None:
    """Rank 0 blocks in recv_tensor_dict on a thread while its main thread runs Python (the GIL
    is released, and the C allocation callback needs no GIL); rank 1 sends once rank 0's main
    thread has written a file."""
    with pstate.init(timeout_ms=TIMEOUT_MS) as ps:
        w = ps.world
        flag = os.path.join(os.environ["PSTATE_TEST_TMP"], "tensor-dict-flag")
        if w.rank_in_group == 0:
            result = {}
            t = threading.Thread(target=lambda: result.update(got=w.recv_tensor_dict(src=1)))
            t.start()
            time.sleep(0.2)  # let the thread enter the C call
            ticks = sum(1 for _ in range(100000))
            with open(flag, "w") as f:
                f.write(str(ticks))
            t.join()
            check_dict(result["got"], dict_of(1), "received on a thread")
        else:
            while not os.path.exists(flag):
                time.sleep(0.01)
            w.send_tensor_dict(dict_of(1), dst=0, dtypes=DICT_DTYPES)


def interrupted() -> None:
    """Ctrl-C reaches a blocked call: rank 0 blocks in PSTATE_TEST_OP ("all_reduce": a world
    collective, shared memory; "recv": UCX) that rank 1 never joins, and sends itself SIGINT
    0.5 s in. KeyboardInterrupt must come out of the call within a second (printed: the measured
    delay), carrying the library's text as a note (Python >= 3.11); the PState is then failed
    (AbortedError naming the interruption and ps.abort()) and abort() frees it. Rank 1 waits for
    rank 0's verdict (a file), then aborts too."""
    op = os.environ["PSTATE_TEST_OP"]
    flag = os.path.join(os.environ["PSTATE_TEST_TMP"], "interrupt-done")
    ps = pstate.init(timeout_ms=TIMEOUT_MS)
    w = ps.world
    if w.rank_in_group == 1:
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.02)
        ps.abort()
        assert os.path.exists(flag), "rank 0 gave no verdict"
        return
    sent = []

    def ctrl_c() -> None:
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.5, ctrl_c)
    timer.start()
    x = np.ones(4, dtype=np.float32)
    try:
        if op == "all_reduce":
            w.all_reduce(x)
        else:
            w.recv(x, 1)
    except KeyboardInterrupt as e:
        took = time.monotonic() - sent[0]
        notes = " ".join(getattr(e, "__notes__", []))
    else:
        raise AssertionError(f"{op} returned although rank 1 never joined")
    print(f"INTERRUPTED {op} after {took * 1000:.0f} ms")
    assert took < 1.0, f"KeyboardInterrupt came {took:.2f} s after SIGINT"
    if sys.version_info >= (3, 11):
        assert "interrupted" in notes and "ps.abort()" in notes, notes
    err = expect_raises(pstate.AbortedError, w.barrier)
    assert "interrupted" in err.detail and "ps.abort()" in err.detail, err.detail
    ps.abort()
    with open(flag, "w") as f:
        f.write(f"{took:.3f}")


def aborted_from_a_thread() -> None:
    """A watchdog thread stops a hung call (issue 32): rank 0's main thread blocks in
    PSTATE_TEST_OP ("all_reduce": shared memory; "recv": UCX) that rank 1 never joins; a Python
    thread calls ps.abort() 0.3 s in. AbortedError must come out of the call (printed: the delay),
    and abort() returns having freed the state (closed). Rank 1 waits for rank 0's verdict."""
    op = os.environ["PSTATE_TEST_OP"]
    flag = os.path.join(os.environ["PSTATE_TEST_TMP"], "abort-done")
    ps = pstate.init(timeout_ms=TIMEOUT_MS)
    w = ps.world
    w.barrier()
    if w.rank_in_group == 1:
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.02)
        ps.abort()
        assert os.path.exists(flag), "rank 0 gave no verdict"
        return
    fired = []

    def watchdog() -> None:
        time.sleep(0.3)
        fired.append(time.monotonic())
        ps.abort()  # the call in flight on the main thread raises AbortedError, then the state is freed

    t = threading.Thread(target=watchdog)
    t.start()
    x = np.ones(4, dtype=np.float32)
    try:
        if op == "all_reduce":
            w.all_reduce(x)
        else:
            w.recv(x, 1)
    except pstate.AbortedError as e:
        took = time.monotonic() - fired[0]
        detail = e.detail
    else:
        raise AssertionError(f"{op} returned although rank 1 never joined")
    t.join()
    print(f"ABORTED {op} {took * 1000:.1f} ms after ps.abort() on another thread: {detail}")
    assert "another thread" in detail, detail
    assert ps.closed, "abort() from the watchdog did not free the state"
    with open(flag, "w") as f:
        f.write(f"{took:.3f}")


class DLPackOnly:
    """An object with __dlpack__ / __dlpack_device__ and no buffer protocol (as a torch tensor)."""

    def __init__(self, array) -> None:
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def _dlpack_makers():
    makers = [DLPackOnly]
    try:
        import torch  # python3-torch (CPU) when installed
    except ImportError:
        return makers
    return makers + [lambda a: torch.from_numpy(a.copy())]


def _values(x) -> list:
    return (x.array if isinstance(x, DLPackOnly) else x).tolist()


def all_to_all_v() -> None:
    """3 ranks: all_to_all_v with uneven counts (zeros among them) given as a list, a tuple and a
    numpy array; packed, and with the parts in reverse order and gaps (send_displs/recv_displs)
    into an out of the caller's; a pair whose counts disagree is MismatchError on every rank
    and the next call works; the binding's own refusal on one rank (send shorter than its counts)
    is InvalidArgumentError on every rank. References computed here with numpy."""
    ps = pstate.init(timeout_ms=TIMEOUT_MS)
    w, r, n = ps.world, ps.rank, ps.world_size

    def count(i: int, j: int) -> int:
        return (i + 2 * j) % 4

    def part(i: int, j: int) -> np.ndarray:
        return 1000 * i + 100 * j + np.arange(count(i, j), dtype=np.int32)

    sc = [count(r, j) for j in range(n)]
    rc = [count(i, r) for i in range(n)]
    send = np.concatenate([part(r, j) for j in range(n)])
    want = np.concatenate([part(i, r) for i in range(n)])
    for s_counts, r_counts in ((sc, rc), (tuple(sc), tuple(rc)), (np.array(sc), np.array(rc, dtype=np.int64))):
        got = w.all_to_all_v(send, s_counts, r_counts)
        assert got.dtype == np.int32 and got.tolist() == want.tolist(), (got, want)
    # reverse order with a gap of 2 after every part, on both sides
    def place(counts):
        displs, at = [0] * n, 0
        for j in reversed(range(n)):
            displs[j] = at
            at += counts[j] + 2
        return displs, at
    sd, s_extent = place(sc)
    rd, r_extent = place(rc)
    sbuf = np.full(s_extent, -1, dtype=np.int32)
    for j in range(n):
        sbuf[sd[j]:sd[j] + sc[j]] = part(r, j)
    out = np.full(r_extent, -7, dtype=np.int32)
    expected = out.copy()
    for i in range(n):
        expected[rd[i]:rd[i] + rc[i]] = part(i, r)
    assert w.all_to_all_v(sbuf, sc, rc, out=out, send_displs=sd, recv_displs=rd) is out
    assert out.tolist() == expected.tolist(), (out, expected)
    # group rank 0 sends one element more to group rank 1 than rank 1 expects
    bad = list(sc)
    if r == 0:
        bad[1] += 1
    e = expect_raises(pstate.MismatchError, w.all_to_all_v, np.zeros(sum(bad), np.int32), bad, rc)
    assert "group rank 0 (rank 0) sends" in e.detail, e.detail
    assert w.all_to_all_v(send, sc, rc).tolist() == want.tolist()
    # the binding's refusal on rank 2 (send shorter than its counts) fails every rank
    short = send[:-1] if r == 2 else send
    expect_raises(pstate.InvalidArgumentError, w.all_to_all_v, short, sc, rc)
    assert w.all_to_all_v(send, sc, rc).tolist() == want.tolist()
    e = expect_raises(pstate.InvalidArgumentError, w.all_to_all_v, send, sc[:2], rc)  # every rank: in step
    assert "2 entries" in e.detail, e.detail
    ps.finalize()


def nonblocking() -> None:
    """4 ranks (TP 2 x PP 2): all_gatherv / reduce_scatterv with uneven counts (a zero among them)
    on the world, isend/irecv rings (wait, test, `with`), a p2p batch with every peer listed in
    reverse order, a custom group of ranks 0-2 (rank 3 joins none), sliced tensor dicts from PP
    stage 0 to stage 1 gathered over TP, and the binding's and the library's errors."""
    ps = pstate.init(timeout_ms=TIMEOUT_MS)
    ps.initialize_model_parallel(pipeline_parallel_size=2)
    w, r, n = ps.world, ps.rank, ps.world_size
    assert n == 4
    # all_gatherv: rank i contributes counts[i] elements i*100 + k; any sequence of counts
    counts = (2, 0, 3, 1)
    for cs in (counts, list(counts), np.array(counts)):
        mine = np.arange(counts[r], dtype=np.float32) + 100 * r
        got = w.all_gatherv(mine, cs)
        want = np.concatenate([np.arange(c, dtype=np.float32) + 100 * i for i, c in enumerate(counts)])
        assert got.dtype == np.float32 and got.tolist() == want.tolist(), (got, want)
    # into out, int64
    out = np.full(sum(counts), -1, dtype=np.int64)
    assert w.all_gatherv(np.full(counts[r], r, dtype=np.int64), counts, out=out) is out
    assert out.tolist() == [i for i, c in enumerate(counts) for _ in range(c)], out
    # reduce_scatterv: send = arange(total) * (rank + 1); rank i gets its part of the sum
    rs_counts = [1, 3, 0, 2]
    total = sum(rs_counts)
    send = np.arange(total, dtype=np.int64) * (r + 1)
    got = w.reduce_scatterv(send, rs_counts)
    full = np.arange(total, dtype=np.int64) * sum(k + 1 for k in range(n))
    off = sum(rs_counts[:r])
    assert got.tolist() == full[off:off + rs_counts[r]].tolist(), (got, full)
    got = w.reduce_scatterv(send.astype(np.float32), rs_counts, ReduceOp.MAX)
    assert got.tolist() == (np.arange(total, dtype=np.float32) * n)[off:off + rs_counts[r]].tolist(), got
    # binding errors before any C call (every rank, so nothing is out of step)
    e = expect_raises(pstate.InvalidArgumentError, w.all_gatherv, np.zeros(1, np.float32), [1, 1])
    assert "counts has 2 entries" in e.detail and "4 ranks" in e.detail, e.detail
    e = expect_raises(pstate.InvalidArgumentError, w.all_gatherv, np.zeros(5, np.float32), counts)
    assert f"counts[{r}]" in e.detail, e.detail
    e = expect_raises(pstate.InvalidArgumentError, w.reduce_scatterv, np.zeros(2, np.float32), rs_counts)
    assert "sum(counts) is 6" in e.detail, e.detail
    expect_raises(pstate.InvalidArgumentError, w.all_gatherv, np.zeros(1, np.float32), 7)
    # isend/irecv ring: wait() returns the buffer, which the request kept alive
    nxt, prv = (r + 1) % n, (r - 1) % n
    s_req = w.isend(np.full(5, r, dtype=np.float32), nxt)
    r_req = w.irecv(np.zeros(5, dtype=np.float32), prv)
    assert r_req.wait().tolist() == [float(prv)] * 5
    s_req.wait()
    assert s_req.done and r_req.done and r_req.wait().tolist() == [float(prv)] * 5  # wait again: same result
    # a pending receive holds its bytearray's export: resizing is refused until completion
    ba = bytearray(8)
    with w.irecv(ba, prv) as req:
        expect_raises(BufferError, ba.extend, b"x")
        with w.isend(bytes([r] * 8), nxt):
            pass
    assert ba == bytes([prv] * 8) and req.done
    ba.extend(b"x")
    # test() until done (never blocks)
    buf = np.zeros(3, dtype=np.int64)
    req = w.irecv(buf, prv)
    w.send(np.array([r, r * 10, r * 100], dtype=np.int64), nxt)
    while not req.test():
        pass
    assert buf.tolist() == [prv, prv * 10, prv * 100] and req.test()
    # p2p batch: to and from every peer, listed in reverse order, tuples and P2POp
    recvs = {p: np.zeros(2, dtype=np.int32) for p in range(n) if p != r}
    ops = []
    for p in sorted(recvs, reverse=True):
        ops.append(pstate.P2POp(False, recvs[p], p))
        ops.append((True, np.array([r, p], dtype=np.int32), p))
    w.p2p_batch(ops)
    for p, got in recvs.items():
        assert got.tolist() == [p, r], (p, got)
    w.p2p_batch([])
    e = expect_raises(pstate.InvalidArgumentError, w.p2p_batch, [(1, np.zeros(1, np.float32), 0)])
    assert "is_send must be a bool" in e.detail, e.detail
    # custom group of ranks 0..2; rank 3 joins none
    g = ps.new_group(range(3) if r < 3 else [])
    if r == 3:
        assert g is None
    else:
        assert g.kind == GroupKind.CUSTOM and g.name.startswith("custom:") and g.ranks == [0, 1, 2], g
        x = np.full(2, r + 1, dtype=np.float32)
        assert g.all_reduce(x).tolist() == [6.0, 6.0]
    e = expect_raises(pstate.InvalidArgumentError, ps.new_group, [0, 2, 1, 3])
    assert "ascending" in e.detail, e.detail
    # sliced tensor dicts: PP stage 0 (ranks 0, 1) sends to stage 1 (ranks 2, 3), sliced over TP
    tp, pp = ps.tp, ps.pp
    full = {"h": np.arange(8, dtype=np.float32).reshape(2, 4), "odd": np.arange(3, dtype=np.int64)}
    if pp.rank_in_group == 0:
        pp.send_tensor_dict_sliced({k: v.copy() for k, v in full.items()}, ag=tp)
    else:
        got = pp.recv_tensor_dict_sliced(ag=tp)
        assert list(got) == ["h", "odd"]
        for k, v in full.items():
            assert got[k].dtype == v.dtype and got[k].shape == v.shape and got[k].tolist() == v.tolist(), (k, got[k])
    expect_raises(pstate.InvalidArgumentError, pp.recv_tensor_dict_sliced, ag="tp")
    # DLPack inputs without the buffer protocol (a torch tensor when torch is installed; always a
    # wrapper that exports a numpy array's memory through __dlpack__ only): written in place
    for make in _dlpack_makers():
        x = make(np.full(4, r + 1, dtype=np.float32))
        assert w.all_reduce(x) is x and _values(x) == [10.0] * 4, _values(x)
        mine = make(np.arange(counts[r], dtype=np.int64) + 100 * r)
        got = w.all_gatherv(mine, counts)
        # the caller's kind of array: torch for torch, numpy for other DLPack producers
        assert type(got) is (type(mine) if make is not DLPackOnly else np.ndarray), type(got)
        assert got.tolist() == [
            100 * i + k for i, c in enumerate(counts) for k in range(c)], got
        inbox = make(np.zeros(3, dtype=np.float64))
        with w.irecv(inbox, prv) as req, w.isend(make(np.full(3, r, dtype=np.float64)), nxt):
            pass
        assert req.done and _values(inbox) == [float(prv)] * 3, _values(inbox)
    if len(_dlpack_makers()) > 1:  # torch: bfloat16 comes from the DLPack type
        import torch
        bf = torch.full((2, 2), float(r + 1), dtype=torch.bfloat16)
        assert w.all_reduce(bf) is bf and bf.float().tolist() == [[10.0, 10.0], [10.0, 10.0]], bf
    e = expect_raises(pstate.InvalidArgumentError, w.all_reduce, DLPackOnly(np.zeros((4, 4), np.float32)[:, 1]))
    assert "not C-contiguous" in e.detail, e.detail
    # the library's error through a request: a receive of the wrong size fails its wait
    if r == 0:
        w.isend(np.zeros(3, dtype=np.float32), 1).wait()
    elif r == 1:
        req = w.irecv(np.zeros(2, dtype=np.float32), 0)
        expect_raises(pstate.MismatchError, req.wait)
        assert req.done
        expect_raises(pstate.MismatchError, req.wait)  # the same error again
    ps.abort()


def group_memory() -> None:
    """Group memory (issue 29) on the devsim stand-ins, which the test names through
    PSTATE_CUDA_RUNTIME_LIBRARY / PSTATE_NCCL_LIBRARY: their device memory is host memory, so this
    rank writes and reads it with ctypes, and waits for the stream with the stand-in runtime's
    cudaDeviceSynchronize. Expected sums are computed here."""
    import ctypes

    cudart = ctypes.CDLL(os.environ["PSTATE_CUDA_RUNTIME_LIBRARY"])
    ps = pstate.init(timeout_ms=TIMEOUT_MS, device="cuda")
    w, n, r = ps.world, ps.world_size, ps.rank
    mem = w.mem_alloc(4096)
    assert not mem.pooled and mem.nbytes == 4096, mem
    q = w.mem_query(mem.ptr + 40)
    assert q["kind"] == "group" and q["base"] == mem.ptr and q["symmetric"] == (n > 1), q
    t = mem.view("float32", (1024,))
    assert t.__dlpack_device__() == (2, ps.rank) and mem.__dlpack_device__() == (2, ps.rank)
    capsule = t.__dlpack__()
    is_valid = ctypes.pythonapi.PyCapsule_IsValid
    is_valid.restype, is_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    assert is_valid(capsule, b"dltensor") == 1
    del capsule  # unconsumed: its destructor releases the export
    host = (ctypes.c_float * 1024).from_address(mem.ptr)
    for i in range(1024):
        host[i] = float((r * 7 + i) % 13)
    w.all_reduce(mem.ptr, dtype=DType.FLOAT32, count=1024)
    assert cudart.cudaDeviceSynchronize() == 0
    for i in range(1024):
        want = float(sum((k * 7 + i) % 13 for k in range(n)))
        assert host[i] == want, (i, host[i], want)
    st = w.mem_stats()
    assert st["last_path"] == ("symmetric" if n > 1 else "plain") and st["windows"] == (1 if n > 1 else 0), st
    if n > 1:
        err = expect_raises(pstate.MismatchError, w.mem_alloc, 4096 if r == 0 else 8192)
        assert "disagree" in err.detail, err.detail
    mem.free()
    mem.free()  # idempotent
    w.mem_pool_reserve(1 << 16)
    pieces = [w.mem_alloc(1000) for _ in range(r + 1)]  # local: a different number per rank
    assert all(p.pooled for p in pieces) and w.mem_stats()["pool_used"] == 1024 * (r + 1)
    expect_raises(pstate.NoMemoryError, w.mem_alloc, 1 << 17)
    del pieces  # the collector frees pool pieces (local)
    assert w.mem_stats()["pool_used"] == 0
    ps.finalize()


def finalize_in_capture() -> None:
    """finalize() inside ps.graph_capture() (a CUDA context: the devsim stand-ins): pstate_finalize
    refuses and frees nothing, so the PState must stay usable: InvalidStateError, then the world
    group still answers, the block's end leaves capture mode, and finalize() then frees. Before,
    finalize() dropped its handle first: the context leaked and every later call said
    "finalized"."""
    ps = pstate.init(timeout_ms=TIMEOUT_MS, device="cuda")
    with ps.graph_capture():
        e = expect_raises(pstate.InvalidStateError, ps.finalize)
        assert "graph-capture" in e.detail, e.detail
        assert not ps.closed and ps.world.world_size == ps.world_size
    ps.world.barrier()
    ps.finalize()
    assert ps.closed
    ps.finalize()  # a no-op


# ---- torch tensors (python3-torch, CPU) ---------------------------------------------------------

def _torch_block(torch, rank: int, shape, dtype):
    """Rank rank's all_gather input: distinct small integers (exact in bfloat16: < 256)."""
    count = 1
    for extent in shape:
        count *= extent
    return (torch.arange(count, dtype=torch.float64) + 32 * rank).reshape(shape).to(dtype)


def _torch_dict(torch, rank: int) -> dict:
    """Every dtype torch and pstate share, bfloat16 included, with 0-d, 0-size, a
    non-contiguous view and a tensor that requires grad (sent as its values)."""
    base = torch.arange(12, dtype=torch.float64).reshape(3, 4) + rank
    return {
        "i8": base.to(torch.int8), "u8": base.to(torch.uint8), "i32": base.to(torch.int32),
        "i64": base.to(torch.int64), "f16": base.to(torch.float16), "f32": base.to(torch.float32),
        "f64": base, "bf16": (base / 4).to(torch.bfloat16), "scalar": torch.tensor(7.5 + rank, dtype=torch.bfloat16),
        "empty": torch.zeros(0, 5, dtype=torch.bfloat16), "strided": base.to(torch.float32).t(),
        "grad": (base.to(torch.float32) + 0.5).requires_grad_(),
    }


def _check_torch_dict(torch, got, want: dict, where: str) -> None:
    assert list(got) == list(want), (where, list(got))
    for key, value in want.items():
        t = got[key]
        assert isinstance(t, torch.Tensor), (where, key, type(t))
        assert t.dtype == value.dtype and tuple(t.shape) == tuple(value.shape), (where, key, t.dtype, t.shape)
        assert torch.equal(t, value.detach()), (where, key, t, value)
        assert not t.requires_grad, (where, key)


def torch_tensors() -> None:
    """4 ranks (TP 2 x PP 2), torch CPU tensors throughout: results of torch's kind (bfloat16
    included), all_gather and tp_all_gather along any dim against torch.cat of the ranks' inputs
    (made here, not by pstate), out= shapes, reduce with op names, tensor dicts of every dtype
    (plain, broadcast, sliced), and torch's refusals as pstate.InvalidArgumentError."""
    import torch

    ps = pstate.init(timeout_ms=TIMEOUT_MS)
    ps.initialize_model_parallel(pipeline_parallel_size=2)
    w, r, n = ps.world, ps.rank, ps.world_size
    tp, pp = ps.tp, ps.pp
    assert n == 4
    # all_reduce in place and reduce with an op name, every float dtype
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64):
        x = torch.full((2, 3), r + 1, dtype=dtype)
        assert w.all_reduce(x, "sum") is x and torch.equal(x, torch.full((2, 3), 10, dtype=dtype)), x
        y = torch.arange(4, dtype=dtype) * (r + 1)
        got = w.reduce(y, 0, "max")
        if r == 0:
            assert got is y and torch.equal(y, torch.arange(4, dtype=dtype) * n), y
        else:
            assert got is None
    got = w.reduce(torch.full((3,), r + 1.0), 1, "min", out=torch.zeros(3))
    assert (got is None) if r != 1 else torch.equal(got, torch.ones(3)), got
    expect_raises(pstate.InvalidArgumentError, w.reduce, torch.zeros(2), 0, "median")
    # all_gather: torch in, torch out, along every dim (negative ones too), bfloat16 included
    shape = (2, 3, 4)
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.float16):
        for dim in (0, 1, 2, -1, -2, -3):
            want = torch.cat([_torch_block(torch, q, shape, dtype) for q in range(n)], dim=dim)
            got = w.all_gather(_torch_block(torch, r, shape, dtype), dim=dim)
            assert isinstance(got, torch.Tensor) and got.dtype == dtype, (dim, type(got), getattr(got, "dtype", None))
            assert tuple(got.shape) == tuple(want.shape) and torch.equal(got, want), (dtype, dim, got.shape)
            out = torch.full(tuple(want.shape), -1, dtype=dtype)
            assert w.all_gather(_torch_block(torch, r, shape, dtype), out, dim=dim) is out
            assert torch.equal(out, want), (dtype, dim, "out")
    # the default stays SGLang's dim 0 = the C call's layout; a 1-d out of the exact size is the flat form
    flat = torch.zeros(n * 24)
    assert w.all_gather(_torch_block(torch, r, shape, torch.float32), flat) is flat
    assert torch.equal(flat, torch.cat([_torch_block(torch, q, shape, torch.float32) for q in range(n)]).flatten())
    stacked = torch.zeros(n, *shape)  # torch's all_gather_into_tensor form
    assert w.all_gather(_torch_block(torch, r, shape, torch.float32), stacked) is stacked
    assert torch.equal(stacked, torch.stack([_torch_block(torch, q, shape, torch.float32) for q in range(n)]))
    # numpy keeps numpy, along a dim too
    mine = np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * r
    got = w.all_gather(mine, dim=1)
    want_np = np.concatenate([np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * q for q in range(n)], axis=1)
    assert isinstance(got, np.ndarray) and got.shape == (2, 3 * n) and np.array_equal(got, want_np), got
    # tp_all_gather(dim=-1): the logits case
    logits = _torch_block(torch, tp.rank_in_group, (3, 5), torch.bfloat16)
    got = ps.tp_all_gather(logits, dim=-1)
    want = torch.cat([_torch_block(torch, q, (3, 5), torch.bfloat16) for q in range(tp.world_size)], dim=-1)
    assert got.shape == (3, 5 * tp.world_size) and torch.equal(got, want), got
    # out of the right count but the wrong shape, larger than needed, a dim out of range: refused
    # before any C call (on every rank, so the ranks stay in step)
    send = _torch_block(torch, r, shape, torch.float32)
    for bad_out, dim in ((torch.zeros(2, 3 * n, 4), 0), (torch.zeros(n * 2, 3, 4), 1), (torch.zeros(n * 24 + 1), 0),
                         (torch.zeros(n * 2 + 1, 3, 4), 0), (torch.zeros(n * 24), 1)):
        e = expect_raises(pstate.InvalidArgumentError, w.all_gather, send, bad_out, dim=dim)
        assert "out has shape" in e.detail, e.detail
    e = expect_raises(pstate.InvalidArgumentError, w.all_gather, send, dim=3)
    assert "dim=3 is out of range" in e.detail, e.detail
    # out's dtype follows send's when no dtype= was passed: the message says so
    e = expect_raises(pstate.InvalidArgumentError, w.all_gather, torch.zeros(4), torch.zeros(4 * n, dtype=torch.float16))
    assert "send's dtype float32" in e.detail and "dtype=" not in e.detail, e.detail
    e = expect_raises(pstate.InvalidArgumentError, w.all_gather, np.zeros(4, np.float32), np.zeros(4 * n, np.float16))
    assert "send's dtype float32" in e.detail and "dtype=" not in e.detail, e.detail
    # what torch itself would raise on is pstate's InvalidArgumentError
    leaf = torch.ones(3, requires_grad=True)
    e = expect_raises(pstate.InvalidArgumentError, w.all_reduce, leaf)
    assert "requires grad" in e.detail and "detach()" in e.detail, e.detail
    assert torch.equal(w.all_gather(leaf), torch.ones(3 * n))  # only read: taken as it is
    e = expect_raises(pstate.InvalidArgumentError, w.all_reduce, torch.zeros(3, device="meta"))
    assert "meta tensor" in e.detail, e.detail
    e = expect_raises(pstate.InvalidArgumentError, w.all_reduce, torch.zeros(3, dtype=torch.bool))
    assert "torch.bool" in e.detail and "torch.uint8" in e.detail, e.detail
    e = expect_raises(pstate.InvalidArgumentError, w.all_reduce, torch.zeros(4, 4)[:, 1])
    assert "not contiguous" in e.detail, e.detail
    e = expect_raises(pstate.InvalidArgumentError, w.all_reduce, torch.zeros(2, dtype=torch.complex64))
    assert "complex64" in e.detail, e.detail
    # tensor dicts: stage 0 sends torch tensors of every dtype to stage 1 (plain, then sliced
    # over TP); the receivers ask for torch and get the same dtypes back
    sent = _torch_dict(torch, tp.rank_in_group)
    if pp.rank_in_group == 0:
        pp.send_tensor_dict(sent)
        pp.send_tensor_dict_sliced(_torch_dict(torch, 0), ag=tp)
    else:
        got = pp.recv_tensor_dict(tensors="torch")
        _check_torch_dict(torch, got, sent, "recv_tensor_dict")
        assert got.dtypes["bf16"] == DType.BFLOAT16 and got.dtypes["i64"] == DType.INT64, got.dtypes
        got = pp.recv_tensor_dict_sliced(ag=tp, tensors="torch")
        _check_torch_dict(torch, got, _torch_dict(torch, 0), "recv_tensor_dict_sliced")
    # broadcast: rank 0's dict; ranks 1, 2 take torch, rank 3 numpy (bfloat16 in uint16, named)
    if r == 0:
        assert w.broadcast_tensor_dict(_torch_dict(torch, 0)) is not None
    elif r == 1:
        _check_torch_dict(torch, w.broadcast_tensor_dict(tensors="torch"), _torch_dict(torch, 0), "broadcast")
    elif r == 2:  # the sender's kind by default: torch, bfloat16 as torch.bfloat16
        _check_torch_dict(torch, w.broadcast_tensor_dict(), _torch_dict(torch, 0), "broadcast as sent")
    else:
        got = w.broadcast_tensor_dict(tensors="numpy")
        assert got["bf16"].dtype == np.uint16 and got.dtypes["bf16"] == DType.BFLOAT16, got["bf16"]
        want_bf16 = _torch_dict(torch, 0)["bf16"]
        assert torch.equal(torch.from_numpy(got["bf16"].view(np.int16)).view(torch.bfloat16), want_bf16)
    # a received torch dict goes on unchanged (round trip: 0 -> 1 -> 0)
    if r == 0:
        w.send_tensor_dict(_torch_dict(torch, 0), 1)
        _check_torch_dict(torch, w.recv_tensor_dict(1, tensors="torch"), _torch_dict(torch, 0), "round trip")
    elif r == 1:
        w.send_tensor_dict(w.recv_tensor_dict(0, tensors="torch"), 0)
    # a dict torch cannot give: refused on the sender and on the receiver
    if r == 0:
        e = expect_raises(pstate.InvalidArgumentError, w.send_tensor_dict, {"m": torch.zeros(2, device="meta")}, 1)
        assert "meta tensor" in e.detail, e.detail
    elif r == 1:
        e = expect_raises(pstate.InvalidArgumentError, w.recv_tensor_dict, 0, tensors="torch")
        assert "meta tensor" in e.detail, e.detail
    expect_raises(pstate.InvalidArgumentError, w.recv_tensor_dict, 0, tensors="jax")
    w.barrier()
    ps.finalize()


def shm_mismatch() -> None:
    """2 ranks of one host (shared memory): rank 0 all_reduces 4 elements, rank 1 5; both get
    MismatchError whose text says the context is failed and what to do; every later call,
    another collective or a barrier, raises AbortedError; abort() frees it."""
    ps = pstate.init(timeout_ms=TIMEOUT_MS)
    w, r = ps.world, ps.rank
    e = expect_raises(pstate.MismatchError, w.all_reduce, np.zeros(4 + r, np.float32))
    assert "every later call on it returns ABORTED" in e.detail and "ps.abort()" in e.detail, e.detail
    expect_raises(pstate.AbortedError, w.all_reduce, np.zeros(4, np.float32))
    expect_raises(pstate.AbortedError, w.barrier)
    ps.abort()
    assert ps.closed


def hooks() -> None:
    """2 ranks: a Python hook sees every call BEFORE and AFTER, in order, with its status (issue
    45); returning False refuses rank 1's all_reduce of 3 elements on both ranks; an exception in
    a hook does not stop the call; a removed hook sees nothing; revoke gives ABORT once. With
    PSTATE_NAN_CHECK=1 (PSTATE_TEST_NAN=1): rank 1's NaN fails the all_reduce on both ranks."""
    ps = pstate.init(timeout_ms=TIMEOUT_MS)
    w, r = ps.world, ps.rank
    if os.environ.get("PSTATE_TEST_NAN") == "1":
        x = np.arange(6, dtype=np.float32)
        if r == 1:
            x[4] = np.nan
        e = expect_raises(pstate.InvalidArgumentError, w.all_reduce, x)
        assert ("send[4] is NaN" if r == 1 else "rank 1") in e.detail, e.detail
        x[4] = 4
        w.all_reduce(x)
        assert x.tolist() == [2.0 * i for i in range(6)], x
        ps.finalize()
        return
    seen = []

    def record(info: pstate.CallInfo):
        seen.append(info)
        if info.phase == pstate.HookPhase.BEFORE and r == 1 and info.operation == "all_reduce" and info.count == 3:
            return False
        return None

    def broken(info: pstate.CallInfo):
        raise RuntimeError("a broken hook")

    hook = ps.add_hook(record)
    broken_id = ps.add_hook(broken)
    expect_raises(TypeError, ps.add_hook, 42)
    x = np.arange(4, dtype=np.float32)
    w.all_reduce(x)
    w.barrier()
    if r == 0:
        w.send(np.ones(2, np.int64), 1)
    else:
        w.recv(np.zeros(2, np.int64), 0)
    assert w.broadcast_object({"k": 1}, src=0) == {"k": 1}
    e = expect_raises(pstate.InvalidArgumentError, w.all_reduce, np.ones(3, np.float32))
    assert ("refused by hook" if r == 1 else "rank 1") in e.detail, e.detail
    y = np.ones(5, np.float32)
    w.all_reduce(y)
    assert y.tolist() == [2.0] * 5, y
    want = [("all_reduce", pstate.Status.OK), ("barrier", pstate.Status.OK),
            ("send" if r == 0 else "recv", pstate.Status.OK), ("broadcast_object", pstate.Status.OK),
            ("all_reduce", pstate.Status.INVALID_ARGUMENT), ("all_reduce", pstate.Status.OK)]
    assert len(seen) == 2 * len(want), [(i.phase, i.operation) for i in seen]
    for k, (op, status) in enumerate(want):
        b, a = seen[2 * k], seen[2 * k + 1]
        assert (b.phase, a.phase) == (pstate.HookPhase.BEFORE, pstate.HookPhase.AFTER), (k, b, a)
        assert b.operation == a.operation == op and a.status == status and b.call_id == a.call_id, (k, b, a)
        assert b.group == "world:0" and a.duration_ns >= 0, b
    assert seen[0].dtype == DType.FLOAT32 and seen[0].count == 4 and seen[0].bytes == 16 and seen[0].send != 0
    assert seen[0].seq is not None and seen[4].peer == 1 - r and seen[4].seq is None, (seen[0], seen[4])
    assert [i.call_id for i in seen[::2]] == sorted({i.call_id for i in seen}), [i.call_id for i in seen]
    assert seen[9].message and seen[8].message is None, (seen[8], seen[9])
    ps.remove_hook(broken_id)
    expect_raises(pstate.InvalidArgumentError, ps.remove_hook, broken_id)
    ps.remove_hook(hook)
    n = len(seen)
    w.barrier()
    assert len(seen) == n
    ps.add_hook(record)
    ps.revoke()
    assert seen[-1].phase == pstate.HookPhase.ABORT and seen[-1].operation == "pstate_revoke", seen[-1]
    assert seen[-1].status == pstate.Status.ABORTED
    ps.abort()
    assert sum(1 for i in seen if i.phase == pstate.HookPhase.ABORT) == 1


def group_timeout() -> None:
    """2 ranks: Group.set_timeout bounds the world's calls by 200 ms while the context's timeout is
    60 s; rank 1 never comes (it aborts 0.7 s later), so rank 0's all_reduce raises TimeoutError
    naming the group's timeout, well before the context's (issue 43, per-call deadlines)."""
    ps = pstate.init(timeout_ms=60000)
    w, r = ps.world, ps.rank
    assert w.timeout_ms == 60000, w.timeout_ms
    expect_raises(pstate.InvalidArgumentError, w.set_timeout, -1)
    w.set_timeout(200)
    assert w.timeout_ms == 200, w.timeout_ms
    w.barrier()
    if r == 1:  # never makes the call; aborts 0.7 s later (rank 0 would then see PEER_LOST)
        time.sleep(0.7)
        ps.abort()
        return
    t0 = time.monotonic()
    e = expect_raises(pstate.TimeoutError, w.all_reduce, np.ones(4, np.float32))
    took = time.monotonic() - t0
    assert "own timeout on this rank: 200 ms" in str(e), str(e)
    assert 0.19 <= took < 2.0, took  # the group's 200 ms, not the context's 60 s
    ps.abort()


if __name__ == "__main__":
    globals()[sys.argv[1]]()
