#!/usr/bin/env python3
"""bench/torch_call_cost.py — what a torch CPU tensor costs per call in the Python binding,
against a numpy array (issue 31 item 5: at most 1.5x), in one run.

    PYTHONPATH=build/bindings/python /usr/bin/python3 bench/torch_call_cost.py [--build build]
        (writes bench/results/torch_call/torch_call.md; docs/bench/device-call.md quotes it)

Method. Three measurements, each on three kinds of argument of the same 16 KiB float32 memory:
a numpy array, a torch tensor (read directly: data_ptr, dtype, shape) and, as the baseline, the
same tensor behind an object that has only __dlpack__ (the path every torch tensor took before
issue 31: a DLPack capsule, a ctypes view and a numpy array per argument):

  resolve     pstate._buffers.resolve(x, writable=True): the binding's per-argument cost alone;
  world 1     ps.world.all_reduce(x) on a one-rank world (file store): the whole Python call, the
              C call included (it returns at once: nothing to exchange);
  world 2     ps.world.all_reduce(x) on two ranks (`pstate run -n 2`, shared memory), timed on rank 0
              after a barrier, as the issue measured it (13.8 us torch vs 2.9 us numpy there).

Each is ROUNDS rounds; a round times SAMPLES samples of CALLS calls back to back per kind, the
kinds' order rotating from round to round, and keeps each kind's median sample (us per call). The
table gives per kind the median over rounds, and the ratio torch/numpy as the median of the
per-round ratios (the two sides of a ratio ran in the same seconds). Standard library, numpy and
torch only. The machine may be shared: the load average at start and end is written with the
numbers.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGET = 1.5
NBYTES = 16 << 10


class DLPackOnly:
    """A torch tensor seen through __dlpack__ alone (the binding's path for torch before issue 31)."""

    def __init__(self, t) -> None:
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def kinds():
    import numpy as np
    import torch

    n = NBYTES // 4
    return {"numpy": np.ones(n, np.float32), "torch": torch.ones(n), "torch via DLPack (before)": DLPackOnly(torch.ones(n))}


def per_call_us(fn, x, calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter_ns() - t0) / calls / 1000.0


def measure(fn, args: dict, rounds: int, samples: int, calls: int, before_sample=None) -> dict:
    """{kind: [median sample of each round]}."""
    names = list(args)
    out = {k: [] for k in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            times = []
            for _ in range(samples):
                if before_sample is not None:
                    before_sample()
                times.append(per_call_us(fn, args[k], calls))
            out[k].append(statistics.median(times))
    return out


def rank_program(rounds: int, samples: int, calls: int, result: str) -> None:
    """Run under `pstate run -n 2`: every rank times its own calls; rank 0 writes its numbers."""
    import pstate

    with pstate.init() as ps:
        w = ps.world
        args = kinds()
        for x in args.values():  # warm up (and check: every rank holds 2.0 after one call)
            w.all_reduce(x)
        got = measure(w.all_reduce, args, rounds, samples, calls, before_sample=w.barrier)
        if ps.rank == 0:
            with open(result, "w") as f:
                f.write(repr(got))


def table_rows(label: str, got: dict) -> list:
    rows = []
    numpy = got["numpy"]
    for kind, values in got.items():
        ratios = [v / n for v, n in zip(values, numpy)]
        ratio = statistics.median(ratios)
        verdict = ""
        if kind == "torch":
            verdict = "met" if ratio <= TARGET else "MISSED"
        rows.append(f"| {label} | {kind} | {statistics.median(values):.2f} | {min(values):.2f}..{max(values):.2f} | "
                    f"{ratio:.2f} | {verdict} |")
    return rows


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return ", ".join(f.read().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--samples", type=int, default=51)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "torch_call", "torch_call.md"))
    ap.add_argument("--rank-program", metavar="RESULT")
    a = ap.parse_args()
    if a.rank_program:
        rank_program(a.rounds, a.samples, a.calls, a.rank_program)
        return
    import numpy
    import torch

    import pstate
    from pstate._buffers import resolve

    load_start, started = loadavg(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = []
    got = measure(lambda x: resolve(x, "buf", writable=True), kinds(), a.rounds, a.samples, a.calls)
    rows += table_rows("resolve() alone", got)
    with tempfile.TemporaryDirectory() as tmp:
        with pstate.init(world_size=1, rank=0, init_method=f"file://{tmp}/store") as ps:
            got = measure(ps.world.all_reduce, kinds(), a.rounds, a.samples, a.calls)
        rows += table_rows("all_reduce 16 KiB, world 1", got)
        result = os.path.join(tmp, "world2.txt")
        cli = os.path.join(a.build, "pstate")
        # fewer calls per sample: every sample starts with a barrier
        subprocess.run([cli, "run", "-n", "2", "--", sys.executable, os.path.abspath(__file__), "--rounds",
                        str(a.rounds), "--samples", str(a.samples), "--calls", str(max(a.calls // 4, 1)),
                        "--rank-program", result], check=True)
        with open(result) as f:
            got = eval(f.read())  # noqa: S307 - our own repr of a dict of float lists
        rows += table_rows("all_reduce 16 KiB, world 2 (shared memory)", got)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True).stdout.strip()
    md = [f"torch call cost, commit {commit}{'+dirty' if dirty else ''}, {started} (`bench/torch_call_cost.py`; "
          f"Python {sys.version.split()[0]}, numpy {numpy.__version__}, torch {torch.__version__}, nproc "
          f"{os.cpu_count()}; load average {load_start} at start, {loadavg()} at end: the machine is shared, other "
          "work ran during the measurement, so the absolute times are high and noisy; the ratios pair runs made in "
          "the same seconds). One argument of 16 KiB float32 per call; per round and kind the median of "
          f"{a.samples} samples of {a.calls} calls ({max(a.calls // 4, 1)} on two ranks, each sample after a "
          f"barrier), {a.rounds} rounds, kinds in rotating order. `x numpy` = median over rounds of the round's "
          f"time over numpy's. Target (issue 31): a torch tensor at most {TARGET}x a numpy array per call.",
          "", "| measurement | argument | us per call (median) | range over rounds | x numpy | target |",
          "| --- | --- | ---: | --- | ---: | --- |"] + rows
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
