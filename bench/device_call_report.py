#!/usr/bin/env python3
"""bench/device_call_report.py OUT NAME COMMIT BUILD_TYPE COMMAND LOAD WORLD... — the table of
bench/device_call_cost.sh.

Reads OUT/raw/NAME.wW.txt (bench/device_call_cost.c, rank 0: "round R bytes B pstate_ns P
direct_ns D" per round and size) and writes OUT/NAME.md: per world and size the median over
rounds of each side, and the median and range of the paired difference pstate - direct (same
round, back to back): pstate's own host time per device call, against the target of issue 28
(at most 0.3 us at every size).
"""
import os
import statistics
import sys
import time

TARGET_US = 0.3


def size_text(b):
    if b >= 1 << 20:
        return f"{b >> 20} MiB"
    if b >= 1 << 10:
        return f"{b >> 10} KiB"
    return f"{b} B"


def load(path):
    rows = {}  # bytes -> [(pstate_us, direct_us)]
    shape = None  # (samples, calls per sample), from "# world W, R rounds, S samples of C calls per batch"
    with open(path) as f:
        for line in f:
            w = line.split()
            if "samples" in w and "of" in w:
                shape = (int(w[w.index("samples") - 1]), int(w[w.index("of") + 1]))
            if "round" not in w or "pstate_ns" not in w:
                continue
            b = int(w[w.index("bytes") + 1])
            p = float(w[w.index("pstate_ns") + 1]) / 1000.0
            d = float(w[w.index("direct_ns") + 1]) / 1000.0
            q = float(w[w.index("query_ns") + 1]) / 1000.0 if "query_ns" in w else float("nan")
            rows.setdefault(b, []).append((p, d, q))
    return rows, shape


def main():
    out, name, commit, build_type, command, machine_load = sys.argv[1:7]
    worlds = [w for w in sys.argv[7:] if os.path.exists(os.path.join(out, "raw", f"{name}.w{w}.txt"))]
    data = {w: load(os.path.join(out, "raw", f"{name}.w{w}.txt")) for w in worlds}
    samples, calls = next((s for _, s in data.values() if s), (0, 0))
    lines = [
        f"Device-call cost, commit {commit} ({build_type}), {time.strftime('%Y-%m-%d')} (`{command}`; {machine_load}): "
        "pstate_all_reduce (float32 sum, out of place, CUDA context, non-blocking stream) against a direct "
        "ncclAllReduce through the library pstate loaded, on the no-work stand-ins of tests/devsim "
        "(collectives and cudaMemcpyAsync return at once; nothing moves). Per round and side: median of "
        f"{samples} samples of {calls} calls back to back, in us per call; `pstate - direct` = median of the "
        "per-round differences (min..max over rounds): pstate's own host time per device call. "
        f"Target (issue 28): at most {TARGET_US} us at every size. Host time only, on this machine's "
        "stand-ins: it says nothing of GPU time (tests/gpu/ measures that). `one pointer query` = one "
        "cudaPointerGetAttributes of a device buffer (the stand-in's: a map lookup under a mutex), what each of "
        "pstate's pointer checks asks (two per out-of-place all_reduce, one in place).",
        "",
        "| world | size | rounds | pstate (us) | direct (us) | pstate - direct (us) | range of pstate - direct | target "
        "| one pointer query (us) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    for w in worlds:
        for b, pairs in sorted(data[w][0].items()):
            ps = [p for p, _, _ in pairs]
            ds = [d for _, d, _ in pairs]
            qs = [q for _, _, q in pairs]
            diff = [p - d for p, d, _ in pairs]
            med = statistics.median(diff)
            lines.append(
                f"| {w} | {size_text(b)} | {len(pairs)} | {statistics.median(ps):.3f} | {statistics.median(ds):.3f} | "
                f"{med:+.3f} | {min(diff):+.3f}..{max(diff):+.3f} | {'met' if med <= TARGET_US else 'MISSED'} | {statistics.median(qs):.3f} |"
            )
    with open(os.path.join(out, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
