#!/usr/bin/env python3
"""startup_counts_check.py N < COUNTS.json — checks bench/startup_counts.py's summary of a job of N
ranks against the rules written in startup_counts.sh (exact counts; see there)."""

import json, os, sys
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
ucx_only = os.environ.get("PSTATE_SHM") == "0"
for r in range(n):
    peers = set()
    d = 1
    while d < n:
        peers |= {(r + d) % n, (r - d) % n}
        d *= 2
    peers.discard(r)
    check(init[r]["endpoints"] == len(peers), f"rank {r} pstate_init: {init[r]['endpoints']} UCX endpoints, expected {len(peers)} (of {n - 1} peers)")
    check(init[r]["peers"] == len(peers), f"rank {r} pstate_init: {init[r]['peers']} UCX peers known, expected {len(peers)}")
    for phase in ("initialize_model_parallel", "finalize"):
        got = ph[phase]["ranks"][str(r)]
        if not ucx_only:
            check(got["endpoints"] == len(peers), f"rank {r} {phase}: {got['endpoints']} UCX endpoints, expected {len(peers)} (of {n - 1} peers)")
            check(got["requests"] == init[r]["requests"] and got["sent_bytes"] == init[r]["sent_bytes"],
                  f"rank {r} {phase}: store traffic after pstate_init ({got['requests']} requests)")
        else:
            # Every peer met after pstate_init costs one read of its record, and nothing else does.
            new_peers = got["peers"] - init[r]["peers"]
            check(got["requests"] - init[r]["requests"] == new_peers,
                  f"rank {r} {phase}: {got['requests'] - init[r]['requests']} store requests after pstate_init for {new_peers} peers met since")
            check(got["peers"] <= n - 1, f"rank {r} {phase}: {got['peers']} peers known of {n - 1}")
if ucx_only:
    check(any(ph["finalize"]["ranks"][str(q)]["peers"] > init[q]["peers"] for q in range(n)),
          "no rank met a peer after pstate_init in this UCX-only job: choose a shape whose groups do (the lazy read is untested)")
server = c["server"]
check(server is not None, "the launcher logged its store server at exit")
if server:
    frames = sum(v["frames"] for v in init.values())
    check(server["requests"] >= frames, f"server answered {server['requests']} requests < the ranks sent {frames}")
    check(server["accepted"] >= n, f"server accepted {server['accepted']} connections < {n}")
if problems:
    sys.exit("\n".join(problems))
print(f"startup_counts: {n} ranks: store requests rank 0 {init[0]['requests']}, others {sorted(set(v['requests'] for k, v in init.items() if k))}; endpoints per rank {sorted(set(ph['finalize']['ranks'][str(r)]['endpoints'] for r in range(n)))} of {n - 1}; server {server}")
