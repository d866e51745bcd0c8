#!/usr/bin/env python3
"""bench/report.py — turns the results of bench/run.sh into docs/bench/collectives.md and
docs/bench/startup.md, and the gnuplot PNGs.

    python3 bench/report.py RESULTS_DIR OUT_DIR        (bench/run.sh: bench/results docs/bench)
    python3 bench/report.py --topic recovery|gpu|device-call|torch-call   (prints that section)

RESULTS_DIR holds what run.sh wrote: machine.txt (key=value lines), memcpy.json,
handoff_floor.REPEAT.json, CASE.mpi.REPEAT.json and CASE.pstate.REPEAT.json for each case (the
`pstate bench` / mpi_bench JSON), CASE.gloo.REPEAT.json for the cases gloo joins (bench/gloo_bench.cc,
same JSON; absent in older results, and then the tables and plot are MPI and pstate only),
startup.json, failures.txt (cases that failed or timed out) and logs/ (every command, then its
output). The per-repeat JSON files and logs/ are git-ignored: this script folds the repeats and the
commands into RESULTS_DIR/rounds.json (committed), and reads that file for any side of a case whose
per-repeat files are absent, so a fresh clone makes the same pages. The issue's targets are judged
here, from those numbers only; a hand-written analysis of misses (profiles) is taken from
bench/analysis.md when it exists.

Start-up as the job grows comes from bench/startup_curve.sh, run on its own: startup_curve.json
(and, to compare with a start-up change, startup_curve_before.json in the same format, shown as
"before"), looked for in RESULTS_DIR, then in bench/results/ (both from the same folder); the section and
RESULTS_DIR/startup_curve.png (bench/startup_curve.gp) are left out when it is absent.
Standard library only (and gnuplot).
"""
import glob
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20

# (case, title) in the order of the tables and the plot panels.
CASES = [
    ("all_reduce.2", "all_reduce float32 sum, 2 ranks"),
    ("all_gather.2", "all_gather float32, 2 ranks"),
    ("reduce_scatter.2", "reduce_scatter float32 sum, 2 ranks"),
    ("broadcast.2", "broadcast float32, 2 ranks"),
    ("all_to_all.2", "all_to_all float32, 2 ranks"),
    ("send_recv.2", "send_recv (one way) float32, 2 ranks"),
    ("all_gatherv.2", "all_gatherv float32, parts 1:2 (MPI: MPI_Allgatherv), 2 ranks"),
    ("sendrecv.2", "sendrecv ring: isend + irecv + wait (MPI: MPI_Isend/MPI_Irecv/MPI_Waitall), 2 ranks"),
    ("all_reduce.2.bound", "all_reduce float32 sum, 2 ranks, each bound to its own core (both sides)"),
    ("all_gather.2.bound", "all_gather float32, 2 ranks, each bound to its own core (both sides)"),
    ("reduce_scatter.2.bound", "reduce_scatter float32 sum, 2 ranks, each bound to its own core (both sides)"),
    ("broadcast.2.bound", "broadcast float32, 2 ranks, each bound to its own core (both sides)"),
    ("all_reduce.4", "all_reduce float32 sum, 4 ranks on 2 cores (oversubscribed)"),
    ("broadcast_object.4", "broadcast_object to 3 readers (MPI: MPI_Bcast), 4 ranks on 2 cores"),
]

# Ratio targets of the issue: case -> (sizes or None for every size, bar on pstate/MPI time).
RATIO_TARGETS = {
    "all_reduce.2": (None, 0.8),
    "all_gather.2": ([8, 64 << 10, 16 * MiB], 1.0),
    "reduce_scatter.2": ([8, 64 << 10, 16 * MiB], 1.0),
    "broadcast.2": ([8, 64 << 10, 16 * MiB], 1.0),
    "all_reduce.2.bound": (None, 0.8),
    "all_gather.2.bound": ([8, 64 << 10, 16 * MiB], 1.0),
    "reduce_scatter.2.bound": ([8, 64 << 10, 16 * MiB], 1.0),
    "broadcast.2.bound": ([8, 64 << 10, 16 * MiB], 1.0),
    "all_reduce.4": ([8, MiB], 1.0),
    "broadcast_object.4": ([1024], 0.8),
    "all_gatherv.2": (None, 1.0),
    "sendrecv.2": (None, 1.0),
}


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_machine(results):
    return load_machine_file(os.path.join(results, "machine.txt"))


def load_machine_file(path):
    info = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.rstrip("\n").partition("=")
                info[key] = value
    except OSError:
        pass
    return info


def human(nbytes):
    for unit, size in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1 << 10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


def busbw_factor(op, n):
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "all_gatherv", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def combine(docs):
    """One row per size from the repeats of one side: the median of their times (so the median
    over repeats of each repeat's median), bandwidths recomputed from it, the largest #wrong."""
    rows = {}
    for doc in docs:
        for r in doc["results"]:
            rows.setdefault(r["bytes"], []).append(r)
    out = {}
    for nbytes, reps in rows.items():
        times = sorted(r["time_us"] for r in reps)
        t = times[(len(times) - 1) // 2] if len(times) % 2 else 0.5 * (times[len(times) // 2 - 1] + times[len(times) // 2])
        algbw = nbytes / (t * 1e3) if t > 0 else 0.0
        out[nbytes] = {"time_us": t, "algbw_gbs": algbw, "busbw_gbs": algbw * busbw_factor(docs[0]["op"], docs[0]["ranks"]),
                       "wrong": max(r["wrong"] for r in reps), "runs": len(reps),
                       "min_us": times[0], "max_us": times[-1]}
    return out


ROUNDS = "rounds.json"  # the per-repeat JSON of every case in one file: what is committed


def load_rounds(results):
    """RESULTS_DIR/rounds.json: {"runs": {"NAME.SIDE": {repeat: doc}}, "commands": [...]} (empty
    when absent). run.sh writes one file per repeat (NAME.SIDE.REPEAT.json, git-ignored); this
    report folds them into rounds.json, so a fresh clone re-makes the tables from it."""
    doc = load_json(os.path.join(results, ROUNDS))
    return doc if isinstance(doc, dict) else {}


def load_repeats(results, name, side, rounds=None):
    """{repeat number: JSON document} of one side of a case: the per-repeat files run.sh wrote,
    else that side's entry in rounds.json."""
    out = {}
    for path in glob.glob(os.path.join(results, f"{name}.{side}.*.json")):
        m = re.search(r"\.(\d+)\.json$", path)
        doc = load_json(path)
        if m and doc:
            out[int(m.group(1))] = doc
    if not out:
        kept = (rounds if rounds is not None else load_rounds(results)).get("runs", {}).get(f"{name}.{side}", {})
        out = {int(rep): doc for rep, doc in kept.items()}
    return out


def load_floor_repeats(results, rounds):
    """{repeat: doc} of bench/handoff_floor.c's runs (handoff_floor.REPEAT.json, else rounds.json)."""
    out = {}
    for path in glob.glob(os.path.join(results, "handoff_floor.*.json")):
        m, doc = re.search(r"\.(\d+)\.json$", path), load_json(path)
        if m and doc:
            out[int(m.group(1))] = doc
    if not out:
        out = {int(rep): doc for rep, doc in rounds.get("runs", {}).get("handoff_floor", {}).items()}
    return out


def write_rounds(results, cases, floor_reps, commands_run):
    """Folds every repeat the tables were made from into RESULTS_DIR/rounds.json."""
    runs = {f"{c.name}.{side}": {str(rep): doc for rep, doc in sorted(reps.items())}
            for c in cases.values() for side, reps in c.repeats.items() if reps}
    if floor_reps:
        runs["handoff_floor"] = {str(rep): doc for rep, doc in sorted(floor_reps.items())}
    with open(os.path.join(results, ROUNDS), "w") as f:
        json.dump({"about": "bench/run.sh's per-repeat JSON (NAME.SIDE.REPEAT.json), folded by bench/report.py",
                   "runs": runs, "commands": commands_run}, f, indent=None, separators=(",", ":"))
        f.write("\n")


def median(values):
    v = sorted(values)
    if not v:
        return None
    return v[(len(v) - 1) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def paired_ratios(mpi_reps, pstate_reps):
    """{bytes: median over repeats i of pstate_i / MPI_i}. Repeat i of each side ran back to back
    (run.sh alternates them), so each quotient compares two runs in the same phase of this shared
    machine; a quotient of two medians taken over all repeats mixes phases (bench/analysis.md)."""
    per_size = {}
    for i in set(mpi_reps) & set(pstate_reps):
        m = {r["bytes"]: r["time_us"] for r in mpi_reps[i]["results"]}
        for r in pstate_reps[i]["results"]:
            if m.get(r["bytes"], 0) > 0:
                per_size.setdefault(r["bytes"], []).append(r["time_us"] / m[r["bytes"]])
    return {b: median(q) for b, q in per_size.items()}


def median_times(docs):
    """{bytes: median time_us over docs} (e.g. bench/handoff_floor.c over its repeats)."""
    per_size = {}
    for doc in docs:
        for r in doc.get("results", []):
            per_size.setdefault(r["bytes"], []).append(r["time_us"])
    return {b: median(t) for b, t in per_size.items()}


class Case:
    """One benchmark case: MPI, pstate (and gloo, where run.sh ran it) rows joined on bytes."""

    def __init__(self, results, name, title, rounds=None):
        self.name, self.title = name, title
        mpi_reps, pstate_reps = load_repeats(results, name, "mpi", rounds), load_repeats(results, name, "pstate", rounds)
        gloo_reps = load_repeats(results, name, "gloo", rounds)
        self.mpi = combine(list(mpi_reps.values())) if mpi_reps else {}
        self.pstate = combine(list(pstate_reps.values())) if pstate_reps else {}
        self.gloo = combine(list(gloo_reps.values())) if gloo_reps else {}
        self.ratios = paired_ratios(mpi_reps, pstate_reps)
        self.gloo_ratios = paired_ratios(gloo_reps, pstate_reps)  # pstate/gloo, repeat i of each
        floor_reps = load_repeats(results, name, "floor", rounds)
        self.repeats = {"mpi": mpi_reps, "pstate": pstate_reps, "gloo": gloo_reps, "floor": floor_reps}
        self.floor = median_times(floor_reps.values())  # the minimal implementation, over repeats
        self.floor_ratios = paired_ratios(mpi_reps, floor_reps)  # minimal / MPI, same repeats
        self.sizes = sorted(set(self.mpi) | set(self.pstate) | set(self.gloo))

    def ratio(self, nbytes):
        """pstate/MPI: the median of the per-repeat quotients (see paired_ratios)."""
        return self.ratios.get(nbytes)

    def gloo_ratio(self, nbytes):
        """pstate/gloo, the same way (gloo ran right after pstate in each repeat)."""
        return self.gloo_ratios.get(nbytes)

    def present(self):
        return bool(self.mpi or self.pstate)


def verdict(value, bar, lower_is_better=True):
    if value is None:
        return "not measured"
    ok = value <= bar if lower_is_better else value >= bar
    if ok:
        return "**met**"
    if lower_is_better:
        return f"**missed** by {100 * (value / bar - 1):.0f}% ({value / bar:.2f}x the bar)"
    return f"**missed** by {100 * (1 - value / bar):.0f}% (reaches {value / bar:.2f} of the bar)"


def fmt(x, digits=2):
    return "—" if x is None else f"{x:.{digits}f}"


def sig(x, digits=3):
    """x with `digits` significant digits (ratios far below 1, such as pstate/gloo)."""
    return "—" if x is None else f"{x:.{digits}g}"


def target_rows(cases, memcpy, startup):
    rows = []
    for name, (sizes, bar) in RATIO_TARGETS.items():
        case = cases[name]
        if sizes is None:  # every size: one row with the worst one and the misses
            ratios = [(case.ratio(b), b) for b in case.sizes]
            measured = [(r, b) for r, b in ratios if r is not None]
            if not measured:
                rows.append((f"{case.title}, every size", f"pstate/MPI time ≤ {bar}", "—", "not measured"))
                continue
            worst, at = max(measured)
            missed = [human(b) for r, b in measured if r > bar]
            text = f"worst {worst:.2f} at {human(at)}; {len(measured) - len(missed)} of {len(measured)} sizes met"
            if missed:
                text += " (missed at " + ", ".join(missed) + ")"
            floor_misses = [(b, case.floor_ratios[b]) for r, b in measured if r > bar and b in case.floor_ratios]
            if floor_misses:
                text += "; at those sizes the minimal implementation, in the same repeats, is at " + ", ".join(
                    f"{q:.2f} ({human(b)})" for b, q in floor_misses)
            rows.append((f"{case.title}, every size {human(case.sizes[0])}..{human(case.sizes[-1])}",
                         f"pstate/MPI time ≤ {bar}", text, verdict(worst, bar)))
            continue
        for nbytes in sizes:
            r = case.ratio(nbytes)
            rows.append((f"{case.title}, {human(nbytes)}", f"pstate/MPI time ≤ {bar}", fmt(r), verdict(r, bar)))
    ar = cases["all_reduce.2"].pstate.get(64 * MiB)
    bw = memcpy["bw_gbs"] if memcpy else None
    frac = ar["algbw_gbs"] / bw if ar and bw else None
    rows.append(("all_reduce 64 MiB, 2 ranks: algbw / single-core memcpy bandwidth", "≥ 0.40",
                 "—" if frac is None else f"{frac:.2f} ({ar['algbw_gbs']:.2f} / {bw:.2f} GB/s)",
                 verdict(frac, 0.4, lower_is_better=False)))
    s = None
    if startup and startup.get("mpi_ms") and startup.get("pstate_ms"):
        s = startup["pstate_ms"] / startup["mpi_ms"]
    rows.append(("start-up of 8 ranks to model parallel (tp 4 x pp 2) and finalize, whole processes",
                 "pstate/MPI wall time ≤ 0.5",
                 "—" if s is None else f"{s:.2f} ({startup['pstate_ms']:.0f} / {startup['mpi_ms']:.0f} ms)",
                 verdict(s, 0.5)))
    return rows


def case_table(case):
    sizes, bar = RATIO_TARGETS.get(case.name, ([], None))
    floor, gloo = case.floor, case.gloo
    extra = "| minimal (µs) | minimal/MPI " if floor else ""
    # gloo, where it ran: its time next to MPI's, pstate/gloo next to pstate/MPI, its #wrong in the middle
    lines = [f"### {case.title}", "",
             "| bytes | MPI time (µs) " + ("| gloo time (µs) " if gloo else "") + "| pstate time (µs) | pstate/MPI "
             + ("| pstate/gloo " if gloo else "") + "| MPI busbw (GB/s) | pstate busbw (GB/s) "
             + f"| #wrong MPI / {'gloo / ' if gloo else ''}pstate | target {extra}|",
             "| ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if gloo else "") + " ---: | ---: | :---: | --- |"
             + (" ---: | ---: |" if floor else "")]
    for nbytes in case.sizes:
        m, p, g = case.mpi.get(nbytes), case.pstate.get(nbytes), gloo.get(nbytes)
        r = case.ratio(nbytes)
        target = ""
        if bar is not None and (sizes is None or nbytes in sizes):
            target = f"≤ {bar}: " + ("met" if r is not None and r <= bar else "missed" if r is not None else "—")
        lines.append(
            f"| {human(nbytes)} | {fmt(m and m['time_us'])} "
            + (f"| {fmt(g and g['time_us'])} " if gloo else "")
            + f"| {fmt(p and p['time_us'])} | {fmt(r)} "
            + (f"| {sig(case.gloo_ratio(nbytes))} " if gloo else "")
            + f"| {fmt(m and m['busbw_gbs'], 3)} | {fmt(p and p['busbw_gbs'], 3)} "
            f"| {m['wrong'] if m else '—'} / " + (f"{g['wrong'] if g else '—'} / " if gloo else "")
            + f"{p['wrong'] if p else '—'} | {target} |"
            + (f" {fmt(floor.get(nbytes)) if floor.get(nbytes) is not None else ''} "
               f"| {fmt(case.floor_ratios.get(nbytes)) if case.floor_ratios.get(nbytes) is not None else ''} |"
               if floor else ""))
    if floor:
        lines += ["", "*minimal*: `bench/handoff_floor.c`, the same 2-rank sum with nothing but the hand-off in it "
                  "(one store of the data, one spin on the peer's, no library), timed the same way, ranks bound, "
                  "run just before each repeat: about the least time any implementation needed in that minute; "
                  "*minimal/MPI* is its paired ratio, the best ratio the bar could be met with."]
    if gloo:
        lines += ["", "*gloo*: `bench/gloo_bench.cc` (gloo's TCP transport on 127.0.0.1, as torch's CPU process "
                  "groups use it), run right after pstate in each repeat; its timed calls per size are capped by "
                  "wall time (`--budget-ms`, at least 10 calls), so its large sizes rest on fewer calls. "
                  "*pstate/gloo* is the paired ratio, as pstate/MPI (three significant digits)."]
    return lines + [""]


def commands(results, rounds=None):
    """The exact commands run.sh ran, from the logs (git-ignored), in run order; else the list
    rounds.json kept."""
    seen, out = set(), []
    logs = os.path.join(results, "logs")
    order = (["memcpy", "handoff_floor"]
             + [f"{c}.{side}" for c, _ in CASES for side in ("floor", "mpi", "pstate", "gloo")] + ["startup"])
    for name in order:
        try:
            with open(os.path.join(logs, f"{name}.log")) as f:
                for line in f:
                    line = re.sub(r"\.(mpi|pstate|floor|gloo)\.\d+\.json", r".\1.REPEAT.json", line)  # one line per case
                    line = re.sub(r"handoff_floor\.\d+\.json", "handoff_floor.REPEAT.json", line)
                    if line.startswith("$ ") and line not in seen:
                        seen.add(line)
                        out.append(line[2:].rstrip().replace(os.path.dirname(HERE) + "/", ""))
        except OSError:
            pass
    if not out:
        out = list((rounds if rounds is not None else load_rounds(results)).get("commands", []))
    return [re.sub(r"/\S*?/(?=(?:bench/results|build)/)", "", line) for line in out]  # any checkout's root


def write_plot(results, cases):
    plot_dir = os.path.join(results, "plot")
    os.makedirs(plot_dir, exist_ok=True)
    shown = [c for c in cases.values() if c.present()]
    with open(os.path.join(plot_dir, "cases.txt"), "w") as f:
        for c in shown:
            f.write(f"{c.name}|{c.title}|{1 if c.gloo else 0}\n")
    for c in shown:
        with open(os.path.join(plot_dir, f"{c.name}.dat"), "w") as f:
            f.write("# bytes mpi_time_us pstate_time_us gloo_time_us\n")
            for nbytes in c.sizes:
                m, p, g = c.mpi.get(nbytes), c.pstate.get(nbytes), c.gloo.get(nbytes)
                f.write(f"{nbytes} {m['time_us'] if m else 'NaN'} {p['time_us'] if p else 'NaN'} "
                        f"{g['time_us'] if g else 'NaN'}\n")
    png = os.path.join(results, "time_vs_size.png")
    subprocess.run(["gnuplot", "-e", f"dir='{plot_dir}'; out='{png}'", os.path.join(HERE, "plot.gp")], check=True)
    return png


def load_startup_curve(path):
    """bench/startup_curve.sh's JSON, its rows keyed by ranks (a value the script could not measure
    is null); None when absent or unreadable."""
    doc = load_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("sizes"), list):
        return None
    doc["rows"] = {r["ranks"]: r for r in doc["sizes"] if isinstance(r, dict) and isinstance(r.get("ranks"), int)}
    return doc


def load_startup_curves(results):
    """(curve, before): startup_curve.json from RESULTS_DIR or else bench/results/, and
    startup_curve_before.json from the same folder (None where absent)."""
    for d in (results, os.path.join(HERE, "results")):
        curve = load_startup_curve(os.path.join(d, "startup_curve.json"))
        if curve:
            return curve, load_startup_curve(os.path.join(d, "startup_curve_before.json"))
    return None, None


def write_startup_plot(results, curve, before):
    """RESULTS_DIR/startup_curve.png (bench/startup_curve.gp), or None when nothing can be drawn."""
    plot_dir = os.path.join(results, "plot")
    os.makedirs(plot_dir, exist_ok=True)
    prev = before["rows"] if before else {}
    ranks = sorted(set(curve["rows"]) | set(prev))
    value = lambda rows, n, key: rows.get(n, {}).get(key)
    columns = {"mpi": [value(curve["rows"], n, "mpi_ms") for n in ranks],
               "pstate": [value(curve["rows"], n, "pstate_ms") for n in ranks],
               "before": [value(prev, n, "pstate_ms") for n in ranks]}
    drawn = {k: int(any(v is not None for v in vs)) for k, vs in columns.items()}
    if not any(drawn.values()):
        return None
    dat = os.path.join(plot_dir, "startup_curve.dat")
    with open(dat, "w") as f:
        f.write("# ranks mpi_ms pstate_ms pstate_before_ms\n")
        for i, n in enumerate(ranks):
            f.write(f"{n} " + " ".join("NaN" if columns[k][i] is None else str(columns[k][i])
                                       for k in ("mpi", "pstate", "before")) + "\n")
    png = os.path.join(results, "startup_curve.png")
    flags = "; ".join(f"{k}={v}" for k, v in drawn.items())
    subprocess.run(["gnuplot", "-e", f"dat='{dat}'; out='{png}'; {flags}", os.path.join(HERE, "startup_curve.gp")],
                   check=True)
    return png


def startup_curve_section(curve, before, png, rel):
    """The section "Start-up as the job grows": its plot and table."""
    prev = before["rows"] if before else {}
    desc = lambda doc: (f"{doc.get('date', '?')}, commit {doc.get('commit', '?')}, nproc {doc.get('nproc', '?')}, "
                        f"median of {doc.get('repeats', '?')} runs per size")
    md = ["## Start-up as the job grows", "",
          f"Measured by `bench/startup_curve.sh` on its own ({desc(curve)}), not in the session above. Whole "
          "processes, oversubscribed on this machine's cores: `pstate run -n N` of pstate_init, "
          "initialize_model_parallel (tp min(N, 8) x pp N/tp), destroy and finalize, against `mpirun -np N` of "
          "MPI_Init + MPI_Barrier + MPI_Finalize, alternating. *pstate_init* and *initialize_model_parallel* are "
          "rank 0's own times within the pstate run. — means not measured (failed or timed out)."]
    if before:
        md[-1] += (f" With *before* (`startup_curve_before.json`: {desc(before)}), the same measurement before the "
                   "start-up change, every cell reads *now / before*; each pstate/MPI is against the MPI runs of its "
                   "own session.")
    md.append("")
    if png:
        md += [f"![start-up vs ranks, pstate and Open MPI]({rel(png)})", ""]
    both = " now / before" if before else ""
    md += [f"| ranks | tp x pp | pstate (ms){both} | pstate_init on rank 0 (ms){both} "
           f"| initialize_model_parallel (ms){both} | Open MPI (ms){both} | pstate/MPI{both} |",
           "| ---: | :---: | ---: | ---: | ---: | ---: | ---: |"]

    def ratio(row):
        p, m = row.get("pstate_ms"), row.get("mpi_ms")
        return p / m if p is not None and m else None

    for n in sorted(set(curve["rows"]) | set(prev)):
        r, b = curve["rows"].get(n, {}), prev.get(n, {})
        tp, pp = r.get("tp", b.get("tp")), r.get("pp", b.get("pp"))
        cell = lambda get, digits=0: fmt(get(r), digits) + (f" / {fmt(get(b), digits)}" if before else "")
        md.append(f"| {n} | {tp if tp is not None else '?'} x {pp if pp is not None else '?'} "
                  + "".join(f"| {cell(lambda row, k=k: row.get(k))} "
                            for k in ("pstate_ms", "pstate_init_ms", "model_parallel_ms", "mpi_ms"))
                  + f"| {cell(ratio, 2)} |")
    return md + [""]


def recovery_section():
    """'What a dead rank costs': bench/recovery.sh's results/recovery.json, then bench/recovery.md."""
    path = os.path.join(HERE, "results", "recovery.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        r = json.load(f)
    runs = lambda key: ", ".join(str(x) for x in r.get(key, []))
    md = ["## What a dead rank costs", "",
          f"`bench/recovery.sh` (commit {r.get('commit', '?')}, {r.get('date', '?')}, {r.get('repeats', '?')} runs, "
          f"medians; `bench/results/recovery.json`; \"+dirty\" there is only the log the script itself rewrites): "
          f"{r.get('ranks', '?')} ranks on this host ({r.get('nproc', '?')} cores). **Survive**: `pstate run -n 6 "
          "--keep-going -- elastic_serving --kill-rank 3 --kill-at-step 20`: rank 3 SIGKILLs itself inside a 2 MiB "
          "tensor-parallel all-reduce; the survivors see it (shared-memory waits check their peers every 20 ms), call "
          "`pstate_shrink`, re-initialize tp and redo the step; the time is from the kill (the victim's "
          "CLOCK_MONOTONIC just before it) to the *last* survivor's exact result. **Restart** (what a job without "
          "shrink does, at the least): the bare start-up of the ranks, whole jobs, wall time — Open MPI (`mpirun -np N "
          "mpi_bench --op startup`: MPI_Init, a barrier, MPI_Finalize) and pstate (`pstate run -n N -- pstate bench "
          "--op startup`); neither includes noticing the death, stopping the other ranks, nor reloading a model, "
          "which is what a restart of a serving engine really costs (tens of seconds and more for a large model).",
          "", "| what | median (ms) | runs (ms) |", "| --- | ---: | --- |",
          f"| survive: kill -> every survivor's first exact collective (pstate_shrink) | {r.get('shrink_ms')} | "
          f"{runs('shrink_runs_ms')} |",
          f"| restart with Open MPI (start-up only) | {r.get('mpi_restart_ms')} | {runs('mpi_restart_runs_ms')} |",
          f"| restart with pstate (start-up only) | {r.get('pstate_restart_ms')} | {runs('pstate_restart_runs_ms')} |",
          ""]
    prose = os.path.join(HERE, "recovery.md")
    if os.path.exists(prose):
        with open(prose) as f:
            md += [f.read().strip(), ""]
    return md


def gpu_section():
    """'On a GPU': the summary tests/gpu/run.sh printed on a GPU machine (results/gpu/summary.md)."""
    path = os.path.join(HERE, "results", "gpu", "summary.md")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        summary = f.read().strip()
    # its title becomes a line of text; its tables stay
    lines = summary.splitlines()
    title = lines[0].lstrip("# ").strip() if lines and lines[0].startswith("#") else ""
    body = "\n".join(lines[1:] if title else lines).strip()
    return ["## On a GPU (tests/gpu/run.sh)", "",
            f"The last run of `tests/gpu/run.sh` on a GPU machine ({title}; `bench/results/gpu/summary.md`). One GPU, so world 1 only: every operation, dtype and reduce op against a host "
            "reference, the argument and capture-mode errors, a graph of 100 all_reduces replayed, both through the "
            "backend (`device_comm_check`) and the C API (`gpu_api_check`); and the cost of one all_reduce against a "
            "raw `ncclAllReduce` on the same communicator size (GPU time by CUDA events and host time of the call, "
            "median of 200). Multi-rank NCCL (and so `pstate_shrink`'s `ncclCommShrink`) needs a machine with "
            "several GPUs. On the lent machine (no UCX there) it ran with Debian's UCX libraries carried along: "
            "`tests/gpu/carry_ucx.sh` (see tests/gpu/README.md).", "", body, ""]


def device_call_section():
    """bench/device_call_cost.sh, run on its own: pstate's host time per eager device call (issue 28), as the
    code stands (device_call.md) and, when kept, the baseline it was cut from (before.md)."""
    here = os.path.join(HERE, "results", "device_call")
    now, before = os.path.join(here, "device_call.md"), os.path.join(here, "before.md")
    if not os.path.exists(now):
        return []
    md = ["## Device-call cost", "",
          "What pstate itself adds to an eager device call, without a GPU (issue 28; `bench/device_call_cost.c` "
          "explains the method). The cut: every call built its messages' \"group: op\" text four times up front "
          "(pstate::cat, an ostringstream: 90% of the call's instructions under callgrind); it is now built only "
          "when a check fails. No check was dropped: both buffers' cudaPointerGetAttributes (one when in place), "
          "the current device, the stream and capture rules, PSTATE_CHECK's agreement and the flight-recorder "
          "entry all remain, and the two pointer queries are a good part of what is left. On a GPU a pointer query "
          "costs what the driver costs: the program run there against the real runtime and NCCL "
          "(`pstate run -n 1 -- device_call_cost` without the PSTATE_*_LIBRARY variables) shows it in the last "
          "column.", ""]
    with open(now) as f:
        md += [f.read().strip(), ""]
    if os.path.exists(before):
        with open(before) as f:
            md += ["The baseline: the library before the cuts of issue 28, measured in the same minutes by the same "
                   "program on the same stand-ins (`BASE_REF=... NAME=before bench/device_call_cost.sh`):", "",
                   f.read().strip(), ""]
    return md


def torch_call_section():
    """bench/torch_call_cost.py, run on its own: a torch CPU tensor's cost per call in the Python binding
    against a numpy array's (issue 31 item 5)."""
    path = os.path.join(HERE, "results", "torch_call", "torch_call.md")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        table = f.read().strip()
    return ["## What a torch tensor costs in the Python binding", "",
            "The Python binding reads a torch CPU tensor directly (`t.data_ptr()`, `t.dtype`, `t.shape`, "
            "`t.is_contiguous()`, the dtype table built once: `bindings/python/pstate/_torch.py`) instead of "
            "exporting it through DLPack, which built a capsule, a ctypes view and a numpy array per argument. "
            "The third row of each measurement is that old path, measured in the same run (the tensor behind an "
            "object that has only `__dlpack__`, which is how every torch tensor was taken before). Both paths also "
            "gained from `Buffer` becoming a NamedTuple (a frozen dataclass cost about 1 us to build).", "",
            table, ""]


def collectives_page(results, out_dir, rounds):
    """docs/bench/collectives.md: bench/run.sh's session (machine, targets, why targets are missed,
    the tables and plot, 8-rank start-up, the commands)."""
    machine = load_machine(results)
    memcpy = load_json(os.path.join(results, "memcpy.json"))
    floor_reps = load_floor_repeats(results, rounds)
    floor = median_times(floor_reps.values())
    startup = load_json(os.path.join(results, "startup.json"))
    cases = {name: Case(results, name, title, rounds) for name, title in CASES}
    commands_run = commands(results, rounds)
    write_rounds(results, cases, floor_reps, commands_run)
    try:
        with open(os.path.join(results, "failures.txt")) as f:
            failures = [line.strip() for line in f if line.strip()]
    except OSError:
        failures = []
    png = write_plot(results, cases)
    rel = lambda p: os.path.relpath(p, out_dir)  # links, from the page
    here = lambda p: os.path.relpath(os.path.abspath(p), os.path.dirname(HERE))  # paths in the text, from the root

    md = ["# Benchmarks: collectives against Open MPI and gloo", "",
          "pstate's CPU collectives against Open MPI (and, for three 2-rank cases, gloo, torch's CPU backend) "
          "on one machine, measured by `bench/run.sh` in one "
          "session (this page is its output, `bench/report.py`; do not edit by hand: the prose comes from "
          "`bench/analysis.md`); [BENCHMARKS.md](../../BENCHMARKS.md) has the current figures of every topic. "
          "Method: nccl-tests' sizes and formulas; "
          "every call is preceded by a barrier and timed alone on each rank; the time of a size is the median "
          "over calls of the slowest rank's time, and the median of that over the repeats of the case (MPI and "
          "pstate runs alternate) (`src/cli/bench_common.h`, shared by `pstate bench` and "
          "`bench/mpi_bench.c`). The ratio pstate/MPI of a size is the median over repeats of the quotient "
          "of the two runs made back to back (so both sides of a quotient saw the same machine phase), "
          "which can differ from the quotient of the two time columns. Inputs are crafted so results are "
          "exact, and every result was checked (`#wrong`).", "",
          "## Machine and run", "",
          f"- date: {machine.get('date', '?')}; elapsed {machine.get('elapsed_s', '?')} s",
          f"- CPU: {machine.get('cpu', '?')}, nproc {machine.get('nproc', '?')}, memory {machine.get('mem', '?')}, "
          f"kernel {machine.get('kernel', '?')}",
          f"- load average at start / end: {machine.get('load_start', '?')} / {machine.get('load_end', '?')} "
          f"(the machine is shared: other work may run during the benchmark; quiet at start: "
          f"{machine.get('quiet', '?')})",
          f"- {machine.get('openmpi', 'Open MPI ?')}: `--mca pml ob1 --mca btl self,vader`, "
          f"`--bind-to {machine.get('mpi_bind', '?')}` (pstate ranks are not bound either), except in the "
          "cases marked *bound*, where every rank of both sides is bound to its own core",
          f"- every case run {machine.get('repeats', '?')} times per side, alternating MPI and pstate",
          *([f"- gloo ({machine['gloo']}, TCP on 127.0.0.1): `bench/gloo_bench.cc`, 2 ranks forked by the program, for the "
             "plain 2-rank all_reduce, all_gather and broadcast, run right after pstate in each repeat, timed "
             f"calls per size capped at {machine.get('gloo_budget_ms', '?')} ms of wall time (at least 10)"]
            if machine.get("gloo") else []),
          f"- {machine.get('pstate', 'pstate ?')}, commit {machine.get('commit', '?')}, "
          f"{machine.get('build_type', '?')} build",
          f"- single-core memcpy of 64 MiB: {fmt(memcpy and memcpy['bw_gbs'])} GB/s "
          f"({fmt(memcpy and memcpy['time_us'], 0)} µs)",
          "- minimal 2-rank all_reduce (`bench/handoff_floor.c`, ranks bound; the least a hand-off costs "
          "here): " + (", ".join(f"{human(b)} {floor[b]:.2f} µs" for b in sorted(floor)) if floor else "not measured"),
          ""]
    for path in sorted(glob.glob(os.path.join(results, "partial-*.txt"))):  # bench/run.sh --cases
        name = os.path.basename(path)[len("partial-"):-len(".txt")]
        part = load_machine_file(path)
        md.insert(len(md) - 1,
                  f"- case `{name}` re-measured on its own (`bench/run.sh --cases {name}`): {part.get('date', '?')}, "
                  f"commit {part.get('commit', '?')}, {part.get('repeats', '?')} repeats, load at start / end "
                  f"{part.get('quiet', '?')} / {part.get('load_end', '?')}")
    if machine.get("quick") == "1":
        md += ["**Quick run (`bench/run.sh --quick`): a smoke test of the script, not a measurement.**", ""]
    if failures:
        md += [f"**Failed or timed out (see `{here(results)}/logs/`):** " + ", ".join(failures), ""]

    md += ["## Targets of the issue", "", "| what | bar | measured | verdict |", "| --- | --- | --- | --- |"]
    for row in target_rows(cases, memcpy, startup):
        md.append("| " + " | ".join(row) + " |")
    md.append("")
    analysis = os.path.join(HERE, "analysis.md")
    if os.path.exists(analysis):
        with open(analysis) as f:
            md += ["## Why targets are missed", "", f.read().strip(), ""]
    md += ["## Time vs size", "", f"![time vs size, Open MPI, gloo and pstate]({rel(png)})", "", "## Tables", "",
           "`pstate/MPI` is pstate's time over Open MPI's: below 1 pstate is faster (`pstate/gloo` the same "
           "against gloo, where it ran). busbw follows nccl-tests "
           "(all_reduce 2(n-1)/n x algbw; all_gather, reduce_scatter, all_to_all (n-1)/n; others 1). "
           "bytes is the whole buffer (all_gather output, reduce_scatter input).", ""]
    for c in cases.values():
        if c.present():
            md += case_table(c)
    if startup:
        md += ["### Start-up, 8 ranks (oversubscribed on the 2 cores), whole processes", "",
               "| | median wall time of 5 runs (ms) |", "| --- | ---: |",
               f"| `mpirun -np 8` MPI_Init + MPI_Barrier + MPI_Finalize | {fmt(startup.get('mpi_ms'), 1)} |",
               f"| `pstate run -n 8` pstate_init, initialize_model_parallel (tp 4 x pp 2), destroy, finalize "
               f"| {fmt(startup.get('pstate_ms'), 1)} |", "",
               "Start-up as the job grows, counted and on etcd: [startup.md](startup.md).", ""]
    md += ["## Reproduce", "", "```", "bench/run.sh          # builds, measures, rewrites this page and startup.md",
           "bench/run.sh --cases all_gatherv.2,sendrecv.2   # only those cases, the others' results kept",
           "python3 bench/report.py bench/results docs/bench   # the pages again from bench/results/rounds.json",
           "```", "",
           f"The commands it ran, each REPEAT times (REPEAT = 1, 2, ...; raw output in `{here(results)}/logs/` and one "
           f"JSON file per repeat in `{here(results)}/`, both git-ignored; `bench/report.py` folds the JSON into "
           f"`{here(results)}/{ROUNDS}`, which is committed):", "", "```"]
    md += commands_run
    md += ["```", ""]
    return md


def startup_page(results, out_dir):
    """docs/bench/startup.md: start-up as the job grows (bench/startup_curve.sh), counted
    (bench/startup_counts.md) and on etcd (bench/etcd_startup.md)."""
    rel = lambda p: os.path.relpath(p, out_dir)
    curve, before = load_startup_curves(results)
    curve_png = write_startup_plot(results, curve, before) if curve else None
    md = ["# Benchmarks: start-up", "",
          "How long a job takes to start and what start-up costs each rank and the store (this page is written by "
          "`bench/report.py`; its prose comes from `bench/startup_counts.md` and `bench/etcd_startup.md`). "
          "The 8-rank start-up against `mpirun` of the main session is in [collectives.md](collectives.md).", ""]
    if curve:
        md += startup_curve_section(curve, before, curve_png, rel)
    for name in ("startup_counts.md", "etcd_startup.md"):  # hand-written, with their measurements
        path = os.path.join(HERE, name)
        if os.path.exists(path):
            with open(path) as f:
                md += f.read().rstrip("\n").split("\n") + [""]
    md += ["## Reproduce", "", "```"]
    if curve:
        md += ["bench/startup_curve.sh  # start-up as the job grows, on its own (startup_curve.json)"]
    md += ["build/tests/store_protocol --sizes 256,1024,2048,4096   # start-up's store traffic, ranks as threads",
           "python3 bench/startup_counts.py   # the counts of whole processes (startup_counts.json)",
           "bench/etcd_startup.sh   # start-up on the etcd store against the TCP store (etcd_startup.json)",
           "```", ""]
    return md


# The sections of the pages that quote another script's summary (docs/bench/recovery.md, gpu.md,
# device-call.md): `bench/report.py --topic NAME` prints the section, to paste into its page.
TOPICS = {"recovery": lambda: recovery_section(), "gpu": lambda: gpu_section(),
          "device-call": lambda: device_call_section(), "torch-call": lambda: torch_call_section()}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--topic" and sys.argv[2] in TOPICS:
        print("\n".join(TOPICS[sys.argv[2]]()))
        return
    if len(sys.argv) != 3:
        sys.exit("usage: report.py RESULTS_DIR OUT_DIR   (writes OUT_DIR/collectives.md and OUT_DIR/startup.md)\n"
                 "       report.py --topic " + "|".join(TOPICS) + "   (prints that section)")
    results, out_dir = sys.argv[1], os.path.abspath(sys.argv[2])
    os.makedirs(out_dir, exist_ok=True)
    rounds = load_rounds(results)
    for name, md in (("collectives.md", collectives_page(results, out_dir, rounds)),
                     ("startup.md", startup_page(results, out_dir))):
        with open(os.path.join(out_dir, name), "w") as f:
            f.write("\n".join(md))


if __name__ == "__main__":
    main()
