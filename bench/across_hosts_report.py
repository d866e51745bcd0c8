#!/usr/bin/env python3
"""bench/across_hosts_report.py — turns bench/across_hosts.sh's results into the "Across hosts"
section (RESULTS/across_hosts.md), its plot (RESULTS/across_hosts.png) and the page
docs/bench/across-hosts.md.

    python3 bench/across_hosts_report.py RESULTS_DIR docs/bench/across-hosts.md

Reads RESULTS_DIR/raw/machine.txt and raw/hN/REP/{pstate,gloo,mpi}-CASE.json (the JSON of
`pstate bench`, bench/mpi_bench.c and bench/torch_gloo_bench.py) and raw/h2/REP/ucx-tag_{lat,bw}.txt
(ucx_perftest's output). Per size, a side's time is the median over repeats of each repeat's
median; a ratio is the median over repeats of the quotients within the repeat (the sides of a
repeat ran minutes apart at most, under the same load). The floor: ucx_perftest's tag_lat
"typical" (50th percentile) one-way latency, times 2 for the round trip, and tag_bw's bandwidth
(MB/s of 2^20 bytes), per repeat. The goals of issue 30 (2 hosts): 8 B all_reduce <= 1.5 round
trips; broadcast_object 1 KiB <= 2 round trips; 64 MiB all_reduce busbw >= 0.8 x tag_bw; at every
size faster than gloo and not slower than Open MPI. The section replaces the "## Across hosts"
section of that page (appended when there is none; a new page gets a title). The raw results are
git-ignored: the report is made right after a run, on the machine that ran it.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

SIDES = ("pstate", "gloo", "mpi")
CASES = ("all_reduce", "broadcast_object", "send_recv", "all_gather")
TITLES = {"all_reduce": "all_reduce float32", "broadcast_object": "broadcast_object from rank 0",
          "send_recv": "send_recv (ping-pong, one way)", "all_gather": "all_gather float32"}


def median(v):
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2


def human(n):
    for unit, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= s and n % s == 0:
            return f"{n // s} {unit}"
    return f"{n} B"


def fmt(x, d=2):
    return "—" if x is None else f"{x:.{d}f}"


def load(path):
    try:
        with open(path) as f:
            return {r["bytes"]: r for r in json.load(f)["results"]}
    except (OSError, ValueError, KeyError):
        return None


def perftest(path):
    """(50th percentile latency in us, overall bandwidth MB/s) from the client's 'Final:' line
    (iterations, latency 50%ile/average/overall, bandwidth average/overall, message rate ...): the
    overall bandwidth is all bytes over all the time; the average one is skewed by one slow message."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("Final:"):
                    v = line.split()[1:]
                    return float(v[1]), float(v[5])
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine(results):
    m = {}
    try:
        with open(os.path.join(results, "raw", "machine.txt")) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    m[k] = v
    except OSError:
        pass
    return m


class Run:
    """One host count: per repeat, per side, per case, {bytes: row}; the floor per repeat."""

    def __init__(self, results, n):
        self.n = n
        base = os.path.join(results, "raw", f"h{n}")
        self.reps = sorted((d for d in os.listdir(base) if d.isdigit()), key=int) if os.path.isdir(base) else []
        self.data = {rep: {side: {case: load(os.path.join(base, rep, f"{side}-{case}.json")) for case in CASES}
                           for side in SIDES} for rep in self.reps}
        self.lat = {rep: perftest(os.path.join(base, rep, "ucx-tag_lat.txt")) for rep in self.reps}
        self.bw = {rep: perftest(os.path.join(base, rep, "ucx-tag_bw.txt")) for rep in self.reps}

    def sizes(self, case):
        s = set()
        for rep in self.reps:
            for side in SIDES:
                if self.data[rep][side][case]:
                    s.update(self.data[rep][side][case])
        return sorted(s)

    def value(self, side, case, nbytes, key="time_us", rep=None):
        reps = [rep] if rep else self.reps
        vals = []
        for r in reps:
            d = self.data[r][side][case]
            if d and nbytes in d:
                vals.append(d[nbytes][key])
        return median(vals)

    def ratio(self, case, nbytes, other):
        q = []
        for r in self.reps:
            a, b = self.value("pstate", case, nbytes, rep=r), self.value(other, case, nbytes, rep=r)
            if a is not None and b:
                q.append(a / b)
        return median(q)

    def rtt(self, rep=None):
        v = [2 * self.lat[r][0] for r in ([rep] if rep else self.reps) if self.lat.get(r)]
        return median(v)

    def wire_gbs(self, rep=None):
        v = [self.bw[r][1] * (1 << 20) / 1e9 for r in ([rep] if rep else self.reps) if self.bw.get(r)]
        return median(v)

    def ratio_to_floor(self, case, nbytes):
        q = []
        for r in self.reps:
            a, rtt = self.value("pstate", case, nbytes, rep=r), self.rtt(r)
            if a is not None and rtt:
                q.append(a / rtt)
        return median(q)

    def busbw_to_wire(self, nbytes):
        q = []
        for r in self.reps:
            a, w = self.value("pstate", "all_reduce", nbytes, key="busbw_gbs", rep=r), self.wire_gbs(r)
            if a is not None and w:
                q.append(a / w)
        return median(q)


def waits_table(results, run):
    """'What the waits do': per spin setting and op, time and per-call waits/sleeps (rank 0's
    counters) and context switches / CPU (perf stat of rank 0), medians over repeats."""
    base = os.path.join(results, "raw", f"h{run.n}")
    calls = 1100  # --iters 1000 --warmup 100, each call after a world barrier
    rows = []
    for spin, label in (("default", "sized to the wire (as shipped)"), ("0", "PSTATE_NETWORK_SPIN_US=0 (50 us, as before)")):
        for op, nbytes in (("all_reduce", 8), ("broadcast_object", 1024)):
            t, w, sl, cs, cpu, budget = [], [], [], [], [], []
            for rep in run.reps:
                name = os.path.join(base, rep, f"waits-{op}-spin{spin}-{rep}")
                d = load(name + ".json")
                if d and nbytes in d:
                    t.append(d[nbytes]["time_us"])
                try:
                    line = open(name + ".waits").read()
                    m = re.search(r"waits: (\d+) \((\d+) on a peer.*?budget (\d+) us.*?(\d+) slept \((\d+) sleeps", line)
                    if m:
                        w.append(int(m.group(1)) / calls)
                        sl.append(int(m.group(5)) / calls)
                        budget.append(int(m.group(3)))
                except OSError:
                    pass
                try:
                    text = open(name + ".perf").read()
                    m = re.search(r"([\d,]+)\s+context-switches", text)
                    if m:
                        cs.append(int(m.group(1).replace(",", "")) / calls)
                    m = re.search(r"([\d.,]+)\s+msec task-clock", text)
                    if m:
                        cpu.append(float(m.group(1).replace(",", "")) * 1e3 / calls)
                except OSError:
                    pass
            if t or w:
                rows.append([label, f"{op} {human(nbytes)}", fmt(median(t)), fmt(median(w)), fmt(median(sl)),
                             fmt(median(cs)), fmt(median(cpu), 1), fmt(median(budget), 0)])
    if not rows:
        return []
    md = ["What the waits do (rank 0 of 2 hosts; per call = per barrier + operation, 1100 calls; waits and sleeps "
          "from the worker's counters, logged at INFO at close; context switches and CPU from `perf stat`, all "
          "medians over repeats):", "",
          "| network spin | call | time (us) | waits / call | sleeps / call | context switches / call | CPU us / call | "
          "network budget at the end (us) |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    return md + [""]


def verdict(x, bar, higher_better=False):
    if x is None:
        return "not measured"
    return "met" if (x >= bar if higher_better else x <= bar) else "missed"


def goals(run):
    rows = []
    x = run.ratio_to_floor("all_reduce", 8)
    rows.append(("8 B all_reduce / UCX tag round trip", "<= 1.5",
                 f"{fmt(run.value('pstate', 'all_reduce', 8))} us / {fmt(run.rtt())} us = {fmt(x)}", verdict(x, 1.5)))
    x = run.ratio_to_floor("broadcast_object", 1024)
    rows.append(("broadcast_object 1 KiB / UCX tag round trip", "<= 2",
                 f"{fmt(run.value('pstate', 'broadcast_object', 1024))} us / {fmt(run.rtt())} us = {fmt(x)}",
                 verdict(x, 2.0)))
    big = 64 << 20
    x = run.busbw_to_wire(big)
    rows.append(("64 MiB all_reduce busbw / ucx_perftest tag_bw", ">= 0.8",
                 f"{fmt(run.value('pstate', 'all_reduce', big, key='busbw_gbs'), 3)} GB/s / "
                 f"{fmt(run.wire_gbs(), 3)} GB/s = {fmt(x)}", verdict(x, 0.8, higher_better=True)))
    for other, bar, name in (("gloo", 1.0, "gloo"), ("mpi", 1.0, "Open MPI")):
        behind, total = [], 0
        for case in CASES:
            for b in run.sizes(case):
                q = run.ratio(case, b, other)
                if q is None:
                    continue
                total += 1
                if (q >= bar) if other == "gloo" else (q > bar):
                    behind.append(f"{case} {human(b)} ({q:.2f}x)")
        what = "ahead of gloo at every size" if other == "gloo" else "not behind Open MPI at any size"
        measured = f"{total - len(behind)} of {total} sizes" + (": behind at " + ", ".join(behind) if behind else "")
        rows.append((what, "pstate/" + ("gloo < 1" if other == "gloo" else "MPI <= 1"), measured,
                     "not measured" if total == 0 else ("met" if not behind else "missed")))
    return rows


def case_table(run, case):
    floor = run.n == 2 and case in ("all_reduce", "broadcast_object", "send_recv")
    head = ["bytes", "pstate (us)", "gloo (us)", "Open MPI (us)", "pstate/gloo", "pstate/MPI"]
    if case == "all_reduce":
        head.insert(4, "pstate busbw (GB/s)")
    if floor:
        head.append("pstate / round trip" if case != "send_recv" else "pstate / one-way")
    md = ["| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
    for b in run.sizes(case):
        row = [human(b), fmt(run.value("pstate", case, b)), fmt(run.value("gloo", case, b)),
               fmt(run.value("mpi", case, b))]
        if case == "all_reduce":
            row.append(fmt(run.value("pstate", case, b, key="busbw_gbs"), 3))
        row += [fmt(run.ratio(case, b, "gloo")), fmt(run.ratio(case, b, "mpi"))]
        if floor:
            x = run.ratio_to_floor(case, b)
            row.append(fmt(x * 2 if (x is not None and case == "send_recv") else x))
        md.append("| " + " | ".join(row) + " |")
    return md


def write_plot(results, runs):
    pdir = os.path.join(results, "plot")
    os.makedirs(pdir, exist_ok=True)
    panels = []
    for run in runs:
        for case in CASES:
            sizes = run.sizes(case)
            if not sizes:
                continue
            name = f"h{run.n}-{case}"
            with open(os.path.join(pdir, name + ".dat"), "w") as f:
                f.write("# bytes pstate_us gloo_us mpi_us floor_us\n")
                for b in sizes:
                    vals = [run.value(s, case, b) for s in SIDES]
                    fl = run.rtt() if (run.n == 2 and case in ("all_reduce", "broadcast_object")) else None
                    if run.n == 2 and case == "send_recv" and run.rtt():
                        fl = run.rtt() / 2
                    f.write(f"{b} " + " ".join("NaN" if v is None else f"{v:.3f}" for v in vals + [fl]) + "\n")
            panels.append(f"{name}|{run.n} hosts: {TITLES[case]}")
    with open(os.path.join(pdir, "cases.txt"), "w") as f:
        f.write("\n".join(panels) + "\n")
    png = os.path.join(results, "across_hosts.png")
    if shutil.which("gnuplot") and panels:
        gp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "across_hosts.gp")
        subprocess.run(["gnuplot", "-e", f"dir='{pdir}'; out='{png}'", gp], check=False)
    return png if os.path.exists(png) else None


def section(results, runs, m, png, rel):
    loads = ", ".join(f"{k[5:]} {v.split()[0]}" for k, v in m.items() if k.startswith("load_h"))
    md = [f"Run {m.get('date', '?')}, commit {m.get('commit', '?')}, {m.get('cpus', '?')} CPUs ({m.get('cpu', '?')}), "
          f"kernel {m.get('kernel', '?')}, UCX {m.get('ucx', '?')}, {m.get('ompi', '?')}, torch {m.get('torch', '?')}; "
          f"{m.get('repeats', '?')} repeats; load average (1 min) at the start {m.get('load_start', '?').split()[0]}, "
          f"per host count and repeat: {loads}; at the end {m.get('load_end', '?').split()[0]}.", ""]
    if m.get("quick") == "1":
        md += ["**QUICK=1: a smoke test of the script, not a measurement.**", ""]
    md += ["Hosts are network namespaces joined by veth pairs on one bridge (tests/multihost/mh_lib.sh), one rank "
           "per host, `PSTATE_SOCKET_IFNAME=eth0`, all on this machine's cores: the wire is the kernel's TCP over "
           "veth, so every message costs system calls and a softirq on the same CPUs the ranks run on. Sides: "
           "pstate (`pstate bench --group world`), torch.distributed gloo (Debian's python3-torch, "
           "bench/torch_gloo_bench.py, same timing rule; broadcast_object as SGLang's broadcast_pyobj), Open MPI "
           "(bench/mpi_bench.c, `--mca pml ob1 --mca btl self,tcp` on eth0, ranks started in the namespaces by "
           "mpirun's rsh agent bench/across_hosts_rsh.sh), and the floor, `ucx_perftest -t tag_lat -s 8` / "
           "`-t tag_bw -s 64M` (overall bandwidth) with `UCX_TLS=tcp UCX_NET_DEVICES=eth0` between two namespaces. Times: median over "
           "calls of the slowest rank's time, median over repeats; ratios: median over repeats of the quotient "
           "within a repeat (below 1 pstate is faster).", ""]
    for run in runs:
        if not run.reps:
            continue
        md += [f"### {run.n} hosts, 1 rank each", ""]
        if run.n == 2:
            lat = [fmt(run.lat[r][0]) if run.lat.get(r) else "—" for r in run.reps]
            bw = [fmt(run.wire_gbs(r), 3) if run.bw.get(r) else "—" for r in run.reps]
            md += [f"The floor: UCX tag one-way latency (median) {', '.join(lat)} us per repeat, round trip "
                   f"{fmt(run.rtt())} us (median of 2 x one-way); tag_bw {', '.join(bw)} GB/s per repeat, "
                   f"median {fmt(run.wire_gbs(), 3)} GB/s.", "",
                   "| goal (issue 30) | bar | measured | verdict |", "| --- | --- | --- | --- |"]
            md += ["| " + " | ".join(r) + " |" for r in goals(run)]
            md.append("")
            md += waits_table(results, run)
        for case in CASES:
            if run.sizes(case):
                md += [f"**{TITLES[case]}**", ""] + case_table(run, case) + [""]
    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "across_hosts_analysis.md")
    if os.path.exists(notes):  # hand-written: what the counters and perf showed, why goals are missed
        with open(notes) as f:
            md += [f.read().strip(), ""]
    if png:
        md += [f"![time vs size across hosts]({rel(png)})", ""]
    md += ["Reproduce: `sudo bench/across_hosts.sh` after `./build.sh build` (REPEATS=3 by default, HOSTS=\"2 4\"; "
           "about 10 minutes on a quiet 2-core machine); raw results in bench/results/across_hosts/raw/.", ""]
    return md


def splice(path, body):
    text = open(path).read() if os.path.exists(path) else "# Benchmarks: across hosts\n\n"
    new = "## Across hosts\n\n" + body.strip() + "\n\n"
    m = re.search(r"^## Across hosts\n.*?(?=^## |\Z)", text, flags=re.S | re.M)
    if m:
        text = text[:m.start()] + new + text[m.end():]
    else:
        g = re.search(r"^## On a GPU", text, flags=re.M)
        at = g.start() if g else len(text)
        text = text[:at] + new + text[at:]
    with open(path, "w") as f:
        f.write(text)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: across_hosts_report.py RESULTS_DIR PAGE.md (docs/bench/across-hosts.md)")
    results, bench_md = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    m = machine(results)
    runs = [Run(results, int(d[1:])) for d in sorted(os.listdir(os.path.join(results, "raw")))
            if re.fullmatch(r"h\d+", d)]
    runs.sort(key=lambda r: r.n)
    png = write_plot(results, runs)

    def rel_to(folder):  # a link to p from a file in folder
        return lambda p: os.path.relpath(p, folder)

    with open(os.path.join(results, "across_hosts.md"), "w") as f:  # links relative to itself
        f.write("\n".join(section(results, runs, m, png, rel_to(results))) + "\n")
    body = "\n".join(section(results, runs, m, png, rel_to(os.path.dirname(bench_md))))
    splice(bench_md, body)
    print(body)


if __name__ == "__main__":
    main()
