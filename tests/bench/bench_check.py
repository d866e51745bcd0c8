#!/usr/bin/env python3
# tests/bench/bench_check.py: the driver of the bench_* tests, beside bench.cmake (their list).
"""bench_check.py — correctness (never timing) of `pstate bench` and bench/mpi_bench.c.

    bench_check.py PSTATE op OP RANKS [BENCH ARGS...]   pstate run -n RANKS -- pstate bench --check
    bench_check.py PSTATE startup RANKS [BENCH ARGS...] pstate bench --op startup exits 0
    bench_check.py PSTATE usage                         bad options exit 2, --help exits 0
    bench_check.py MPICC mpi SOURCE_DIR OP              mpi_bench --check over mpirun -np 2

An `op` run passes when the command exits 0 (--check makes any wrong result exit 1), and the JSON
of --json has exactly the promised shape: {"op", "dtype", "ranks", "results": [{"bytes",
"time_us", "algbw_gbs", "busbw_gbs", "wrong"}]}, with the sizes of the sweep (computed here from
nccl-tests' rules, independently of bench_common.h), wrong 0 everywhere and algbw/busbw consistent
with bytes and time. Every command runs in its own process group under a timeout and is killed
whole when it overruns, so a hang fails the test instead of blocking ctest.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

TIMEOUT_S = 120
DTYPE_SIZE = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "float16": 2,
              "float32": 4, "float64": 8, "bfloat16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
BLOCK_OPS = {"all_gather", "reduce_scatter", "all_to_all"}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(cmd, expect_rc=0, env=None):
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        print(out)
        fail(f"timed out after {TIMEOUT_S} s")
    print(out)
    if expect_rc is not None and proc.returncode != expect_rc:
        fail(f"exit status {proc.returncode}, expected {expect_rc}")
    return out


def arg(args, name, default):
    return args[args.index(name) + 1] if name in args else default


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


def expected_sizes(op, dtype, ranks, args):
    """The bytes of each row: nccl-tests rounding, at least one element per rank block."""
    lo, hi, f = parse_size(arg(args, "-b", "8")), parse_size(arg(args, "-e", "64M")), int(arg(args, "-f", "2"))
    elem, per = DTYPE_SIZE[dtype], ranks if op in BLOCK_OPS else 1
    sizes, size = [], lo
    while size <= hi:
        sizes.append(max(1, size // (elem * per)) * elem * per)
        size *= f
    return sizes


def busbw_factor(op, n):
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in BLOCK_OPS:
        return (n - 1) / n
    return 1.0


def check_json(path, op, dtype, ranks, args):
    with open(path) as f:
        doc = json.load(f)
    if list(doc) != ["op", "dtype", "ranks", "results"]:
        fail(f"top-level keys {list(doc)}")
    if (doc["op"], doc["dtype"], doc["ranks"]) != (op, dtype, ranks):
        fail(f"header {doc['op']}, {doc['dtype']}, {doc['ranks']} != {op}, {dtype}, {ranks}")
    sizes = [r["bytes"] for r in doc["results"]]
    want = expected_sizes(op, dtype, ranks, args)
    if sizes != want:
        fail(f"sizes {sizes} != {want}")
    for r in doc["results"]:
        if list(r) != ["bytes", "time_us", "algbw_gbs", "busbw_gbs", "wrong"]:
            fail(f"result keys {list(r)}")
        if r["wrong"] != 0:
            fail(f"{r['wrong']} wrong results at {r['bytes']} bytes")
        if not r["time_us"] > 0:
            fail(f"time {r['time_us']} at {r['bytes']} bytes")
        # time_us is printed to 0.001 us and the bandwidths to 0.0001 GB/s: allow for both roundings.
        t = r["time_us"]
        lo, hi = r["bytes"] / ((t + 0.0005) * 1e3) - 1e-4, r["bytes"] / (max(t - 0.0005, 1e-9) * 1e3) + 1e-4
        if not lo <= r["algbw_gbs"] <= hi:
            fail(f"algbw {r['algbw_gbs']} is not bytes / time = {r['bytes'] / (t * 1e3)}")
        busbw = r["algbw_gbs"] * busbw_factor(op, ranks)
        if abs(r["busbw_gbs"] - busbw) > 2e-4 + 1e-3 * busbw:
            fail(f"busbw {r['busbw_gbs']} != algbw x {busbw_factor(op, ranks)} = {busbw}")


def group_size(ranks, args):
    """Ranks of the benchmarked group: the world for --group world, else tp (world / pp)."""
    group, pp = arg(args, "--group", "tp"), int(arg(args, "--pp", "1"))
    tp = int(arg(args, "--tp", str(ranks // pp)))
    return {"world": ranks, "tp": tp, "pp": pp}[group]


def mode_op(pstate, op, ranks, args):
    ranks = int(ranks)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        run([pstate, "run", "-n", str(ranks), "--", pstate, "bench", "--op", op, "--check", "--json", path] + args)
        check_json(path, op, arg(args, "--dtype", "float32"), group_size(ranks, args), args)


def mode_startup(pstate, ranks, args):
    out = run([pstate, "run", "-n", ranks, "--", pstate, "bench", "--op", "startup"] + args)
    if "pstate_init" not in out:
        fail("rank 0 did not report its start-up phases")


def mode_usage(pstate):
    for bad in (["--op", "nope"], ["--dtype", "float7"], ["-b", "x"], ["-b", "1M", "-e", "1K"], ["-f", "1"],
                ["--iters", "0"], ["--group", "nope"], ["--op", "all_reduce", "--dtype", "fp8_e4m3"]):
        run([pstate, "bench"] + bad, expect_rc=2)
    out = run([pstate, "bench", "--help"])
    for word in ("--op", "--check", "--json", "busbw"):
        if word not in out:
            fail(f"--help does not mention {word}")


def mode_mpi(mpicc, source_dir, op):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        fail("mpirun not found")
    args = ["-b", "8", "-e", "256K", "-f", "16", "--iters", "3", "--warmup", "1"]
    with tempfile.TemporaryDirectory() as tmp:
        exe, path = os.path.join(tmp, "mpi_bench"), os.path.join(tmp, "out.json")
        run([mpicc, "-O2", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(source_dir, "src", "cli"),
             os.path.join(source_dir, "bench", "mpi_bench.c"), "-o", exe])
        run([mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "pml", "ob1", "--mca", "btl", "self,vader",
             "-np", "2", exe, "--op", op, "--check", "--json", path] + args)
        check_json(path, op, "float32", 2, args)


def main():
    if len(sys.argv) < 3:
        fail(__doc__)
    tool, mode, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    if mode == "op":
        mode_op(tool, rest[0], rest[1], rest[2:])
    elif mode == "startup":
        mode_startup(tool, rest[0], rest[1:])
    elif mode == "usage":
        mode_usage(tool)
    elif mode == "mpi":
        mode_mpi(tool, rest[0], rest[1])
    else:
        fail(f"unknown mode {mode}")
    print("PASS")


if __name__ == "__main__":
    main()
