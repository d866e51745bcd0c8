#!/usr/bin/python3
"""bench/torch_gloo_bench.py — torch.distributed over gloo (SGLang's CPU backend) with the timing
rule of `pstate bench`, for bench/across_hosts.sh.

    RANK=r WORLD_SIZE=n MASTER_ADDR=a MASTER_PORT=p GLOO_SOCKET_IFNAME=eth0 \
        /usr/bin/python3 bench/torch_gloo_bench.py --op all_reduce -b 8 -e 64M -f 2 --json FILE

Runs with Debian's python3-torch (/usr/bin/python3). The timing rule is the one of
src/cli/cli_bench.cpp (sizes, iterations and formulas of src/cli/bench_common.h): per size,
warmup untimed calls and iters timed calls, each preceded by a barrier and timed alone; the
per-call times are max-reduced across ranks (the slowest rank's time of each call) and the
median is the size's time. iters = 256 MiB / size within 20..1000, warmup = iters / 10 (>= 2),
but gloo is slow enough that the timed calls of a size stop after --budget-ms of wall time
(at least 10 calls; the same median rule over fewer calls), as bench/run.sh does for gloo_bench.

The ops, as SGLang calls them on its CPU group:
  all_reduce        dist.all_reduce of a float32 tensor (sum), in place;
  all_gather        dist.all_gather_into_tensor is not in gloo 1.13: dist.all_gather into a list
                    of per-rank views of one output tensor; bytes = the whole output;
  broadcast_object  SGLang's broadcast_pyobj: rank 0 pickles an object of `bytes` payload bytes,
                    broadcasts its length (a 1-element int64 tensor), then the bytes (uint8);
                    the readers unpickle; bytes = the payload;
  send_recv         ping-pong between ranks 2k and 2k+1 (dist.send / dist.recv); time = half the
                    round trip, as `pstate bench`.
Rank 0 prints the table and writes {"op", "dtype", "ranks", "results": [{bytes, time_us,
algbw_gbs, busbw_gbs, wrong}]} to --json (busbw: the nccl-tests factors of bench_common.h).
"""
import argparse
import json
import os
import pickle
import sys
import time

import torch
import torch.distributed as dist

SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text):
    text = text.strip()
    if text[-1].upper() in SUFFIX:
        return int(text[:-1]) * SUFFIX[text[-1].upper()]
    return int(text)


def default_iters(nbytes):
    return max(20, min(1000, (256 << 20) // max(nbytes, 1)))


def busbw_factor(op, n):
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op == "all_gather":
        return (n - 1) / n
    return 1.0


def make_call(op, nbytes, rank, n):
    """Returns (call, check): call() runs the op once; check() -> number of wrong elements."""
    if op == "all_reduce":
        count = max(nbytes // 4, 1)
        t = torch.empty(count, dtype=torch.float32)

        def call():
            t.fill_(rank + 1)
            dist.all_reduce(t)

        return call, lambda: int((t != n * (n + 1) / 2).sum()), count * 4
    if op == "all_gather":
        per = max(nbytes // 4 // n, 1)
        out = torch.empty(per * n, dtype=torch.float32)
        parts = list(out.split(per))
        mine = torch.full((per,), float(rank), dtype=torch.float32)

        def call():
            dist.all_gather(parts, mine)

        expect = torch.arange(n, dtype=torch.float32).repeat_interleave(per)
        return call, lambda: int((out != expect).sum()), per * n * 4
    if op == "broadcast_object":
        payload = bytes((i * 7 + 3) & 0xFF for i in range(nbytes))
        got = [None]

        def call():  # SGLang's broadcast_pyobj
            if rank == 0:
                data = pickle.dumps(payload)
                size = torch.tensor([len(data)], dtype=torch.long)
                dist.broadcast(size, src=0)
                dist.broadcast(torch.frombuffer(bytearray(data), dtype=torch.uint8), src=0)
                got[0] = payload
            else:
                size = torch.tensor([0], dtype=torch.long)
                dist.broadcast(size, src=0)
                buf = torch.empty(int(size.item()), dtype=torch.uint8)
                dist.broadcast(buf, src=0)
                got[0] = pickle.loads(buf.numpy().tobytes())

        return call, lambda: 0 if got[0] == payload else 1, nbytes
    if op == "send_recv":
        count = max(nbytes // 4, 1)
        buf = torch.full((count,), float(rank), dtype=torch.float32)
        peer = rank ^ 1

        def call():
            if peer >= n:
                return
            if rank % 2 == 0:
                dist.send(buf, peer)
                dist.recv(buf, peer)
            else:
                dist.recv(buf, peer)
                dist.send(buf, peer)

        return call, lambda: 0, count * 4
    raise SystemExit(f"torch_gloo_bench: unknown --op {op}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--op", default="all_reduce")
    p.add_argument("-b", default="8")
    p.add_argument("-e", default="64M")
    p.add_argument("-f", type=int, default=2)
    p.add_argument("--budget-ms", type=float, default=float(os.environ.get("GLOO_BUDGET_MS", "300")))
    p.add_argument("--json", default="")
    a = p.parse_args()
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=rank, world_size=n)
    if rank == 0:
        print(f"# torch {torch.__version__} gloo: {a.op}, {n} ranks, median of the slowest rank per call", flush=True)
        print(f"# {'bytes':>12} {'time_us':>12} {'algbw_GB/s':>12} {'busbw_GB/s':>12} {'calls':>6} {'#wrong':>6}")
    results = []
    size, last = parse_size(a.b), parse_size(a.e)
    while size <= last:
        call, check, nbytes = make_call(a.op, size, rank, n)
        iters = default_iters(nbytes)
        warmup = max(iters // 10, 2)
        for _ in range(warmup):
            dist.barrier()
            call()
        times = []
        start = time.perf_counter()
        stop = torch.zeros(1)
        while len(times) < iters:
            dist.barrier()
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1e6)
            if len(times) >= 10 and len(times) % 5 == 0:  # all ranks decide together
                stop[0] = 1.0 if (time.perf_counter() - start) * 1e3 > a.budget_ms else 0.0
                dist.all_reduce(stop, op=dist.ReduceOp.MAX)
                if stop[0] > 0:
                    break
        tt = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        med = float(tt.sort().values[(len(times) - 1) // 2] + tt.sort().values[len(times) // 2]) / 2
        if a.op == "send_recv":
            med /= 2
        wrong = torch.tensor([check()], dtype=torch.long)
        dist.all_reduce(wrong)
        algbw = nbytes / (med * 1e3)
        row = {"bytes": nbytes, "time_us": med, "algbw_gbs": algbw, "busbw_gbs": algbw * busbw_factor(a.op, n),
               "wrong": int(wrong.item()), "calls": len(times)}
        results.append(row)
        if rank == 0:
            print(f"  {nbytes:12d} {med:12.2f} {algbw:12.3f} {row['busbw_gbs']:12.3f} {len(times):6d} {row['wrong']:6d}",
                  flush=True)
        if size > last // a.f:
            break
        size *= a.f
    if rank == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump({"op": a.op, "dtype": "float32", "ranks": n, "results": results}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if any(r["wrong"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
