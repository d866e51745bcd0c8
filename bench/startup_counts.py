#!/usr/bin/env python3
"""startup_counts.py LOG — what start-up cost each rank, from a job's INFO lines (issue 30).

Reads the lines every rank writes at PSTATE_DEBUG=INFO:
  [pstate R] INFO counts after PHASE: store requests A frames B sent_bytes C received_bytes D
      connects E; ucx endpoints F peers G; wall_ms H cpu_ms I [(config agreement J ms, ...)]
and the launcher's "store: server at exit: accepted ... sent_bytes ..." line, and prints one JSON
object: per phase (pstate_init, initialize_model_parallel, finalize) rank 0's counts and the
others' min / mean / max, plus every rank's raw numbers ("ranks": {rank: {...}}), and the server's.
"""
import json
import re
import sys

LINE = re.compile(r"\[pstate (\d+)\] INFO counts after (\w+): store (.*?); ucx endpoints (\d+) peers (\d+); "
                  r"wall_ms (\d+) cpu_ms (\d+)(.*)$")
SERVER = re.compile(r"store: server at exit: (.*)$")


def pairs(text):
    words = text.split()
    return {words[i]: int(words[i + 1]) for i in range(0, len(words) - 1, 2)}


def summary(values):
    if not values:
        return None
    return {"min": min(values), "mean": round(sum(values) / len(values), 2), "max": max(values)}


def parse(path):
    phases, server = {}, None
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.search(line)
            if m:
                rank, phase = int(m.group(1)), m.group(2)
                rec = pairs(m.group(3))
                rec.update(endpoints=int(m.group(4)), peers=int(m.group(5)), wall_ms=int(m.group(6)),
                           cpu_ms=int(m.group(7)))
                detail = re.findall(r"(config agreement|groups|ready barrier) (\d+) ms", m.group(8))
                for name, ms in detail:
                    rec[name.replace(" ", "_") + "_ms"] = int(ms)
                phases.setdefault(phase, {})[rank] = rec
                continue
            m = SERVER.search(line)
            if m:
                server = pairs(m.group(1))
    out = {"server": server, "phases": {}}
    for phase, ranks in phases.items():
        others = [r for k, r in ranks.items() if k != 0]
        entry = {"ranks_seen": len(ranks), "rank0": ranks.get(0)}
        for key in ("requests", "frames", "sent_bytes", "received_bytes", "connects", "endpoints", "peers", "wall_ms",
                    "cpu_ms", "config_agreement_ms", "groups_ms", "ready_barrier_ms"):
            vals = [r[key] for r in others if key in r]
            if vals:
                entry["others_" + key] = summary(vals)
        entry["ranks"] = {str(k): ranks[k] for k in sorted(ranks)}
        out["phases"][phase] = entry
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: startup_counts.py LOG")
    json.dump(parse(sys.argv[1]), sys.stdout, indent=1)
    print()
