#!/usr/bin/env python3
"""startup_counts_check.py N < COUNTS.json — checks bench/startup_counts.py's summary of a job of N
ranks against the rules written in startup_counts.sh (exact counts; see there)."""

import json, sys
n = int(sys.argv[1])
c = json.load(sys.stdin)
ph = c["phases"]
problems = []
def check(cond, what):
    if not cond:
        problems.append(what)
for phase in ("pstate_init", "initialize_model_parallel", "finalize"):
    check(phase in ph and ph[phase]["ranks_seen"] == n, f"{phase}: lines of {n} ranks")
if problems:
    sys.exit("\n".join(problems))
init = {int(k): v for k, v in ph["pstate_init"]["ranks"].items()}
extra = 0
for r in range(n):
    base = 2 * n + 3 if r == 0 else 5
    got = init[r]["requests"]
    check(got in (base, base + 1), f"rank {r}: {got} store requests in pstate_init, expected {base} or {base + 1}")
    extra += got == base + 1
    check(init[r]["connects"] == 1, f"rank {r}: {init[r]['connects']} store connections")
check(extra == 1, f"{extra} ranks made the barrier's last set, expected 1")
check(sum(v["requests"] for v in init.values()) == 7 * n - 1, "7N - 1 requests in all")
for r in range(n):
    peers = set()
    d = 1
    while d < n:
        peers |= {(r + d) % n, (r - d) % n}
        d *= 2
    peers.discard(r)
    for phase in ("pstate_init", "initialize_model_parallel", "finalize"):
        got = ph[phase]["ranks"][str(r)]
        check(got["endpoints"] == len(peers), f"rank {r} {phase}: {got['endpoints']} UCX endpoints, expected {len(peers)} (of {n - 1} peers)")
        check(got["requests"] == init[r]["requests"] and got["sent_bytes"] == init[r]["sent_bytes"],
              f"rank {r} {phase}: store traffic after pstate_init ({got['requests']} requests)")
server = c["server"]
check(server is not None, "the launcher logged its store server at exit")
if server:
    frames = sum(v["frames"] for v in init.values())
    check(server["requests"] >= frames, f"server answered {server['requests']} requests < the ranks sent {frames}")
    check(server["accepted"] >= n, f"server accepted {server['accepted']} connections < {n}")
if problems:
    sys.exit("\n".join(problems))
print(f"startup_counts: {n} ranks: store requests rank 0 {init[0]['requests']}, others {sorted(set(v['requests'] for k, v in init.items() if k))}; endpoints per rank {sorted(set(ph['finalize']['ranks'][str(r)]['endpoints'] for r in range(n)))} of {n - 1}; server {server}")
