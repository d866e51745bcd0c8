#!/usr/bin/env python3
"""mh_check_logs.py — proves from PSTATE_DEBUG=INFO logs which transport each pair of hosts used.

    mh_check_logs.py --per-host N [--addr-base 198.18.0.] [--ifname eth0] [--group KIND=shm|ucx]... LOG...

Ranks are numbered host by host (rank r runs on host r // N), as `pstate run --nnodes` and
PSTATE_ORDER_RANKS_BY_HOST=1 number them. Every rank logs, at INFO, the first UCX endpoint it
opens to each host:
    [pstate 3] INFO ucx: endpoint to rank 5 (other host, error mode peer): tcp/eth0(am,am_bw,...)
Checks, for every such line: "same host" exactly when both ranks are on one host; inside a host
every lane is a shared-memory transport (sysv, posix, cma, xpmem, knem) and none is TCP; across
hosts every lane is TCP. And coverage: every rank has a line for every host it must reach (its
own when the host has other ranks, and every other host), so the table printed at the end
covers every pair of hosts from both sides. With --ifname, every rank must also log the
interface and its address, which must be 198.18.0.(10 + host). With --group KIND=shm (ucx),
every rank must have logged that a group of KIND runs on shared memory ("group tp:0: shared
memory for ...") (spans hosts and runs on UCX only), the group layer's own report.
Exit status 0 when all holds; otherwise the failures are listed.
"""
import argparse
import re
import sys

ENDPOINT = re.compile(r"\[pstate (\d+)\] INFO ucx: endpoint to rank (\d+) \((same|other) host, error mode \w+\): (.*)$")
GROUP = re.compile(r"\[pstate (\d+)\] INFO group (\w+):\d+: (shared memory for|spans hosts: UCX)")
INTERFACE = re.compile(r"\[pstate (\d+)\] INFO init: interface (\S+) address (\S+)")
LANE = re.compile(r"([\w-]+)/([\w.:-]+)\(([\w,]*)\)")
SHM = {"sysv", "posix", "cma", "xpmem", "knem"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-host", type=int, required=True)
    ap.add_argument("--addr-base", default="198.18.0.")
    ap.add_argument("--ifname")
    ap.add_argument("--group", action="append", default=[], help="KIND=shm or KIND=ucx")
    ap.add_argument("logs", nargs="+")
    args = ap.parse_args()
    per = args.per_host
    seen = {}  # (rank, host of peer) -> (peer, transports)
    addresses = {}
    group_modes = set()  # (rank, kind, "shm" | "ucx")
    ranks = set()
    errors = []
    for path in args.logs:
        with open(path, errors="replace") as f:
            for line in f:
                m = ENDPOINT.search(line)
                if m:
                    r, x, kind, lanes = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
                    ranks.add(r)
                    same = r // per == x // per
                    tls = {t for t, _, _ in LANE.findall(lanes)}
                    where = "rank %d -> rank %d" % (r, x)
                    if (kind == "same") != same:
                        errors.append("%s: logged as '%s host' but they are %s" % (where, kind, "on one host" if same else "on different hosts"))
                    if not tls:
                        errors.append("%s: no lanes in %r" % (where, lanes))
                    elif same and not tls <= SHM:
                        errors.append("%s (same host) uses %s: expected shared memory only" % (where, lanes))
                    elif not same and tls != {"tcp"}:
                        errors.append("%s (other host) uses %s: expected TCP only" % (where, lanes))
                    seen.setdefault((r, x // per), (x, ",".join(sorted(tls))))
                    continue
                m = GROUP.search(line)
                if m:
                    group_modes.add((int(m.group(1)), m.group(2), "shm" if m.group(3).startswith("shared") else "ucx"))
                    continue
                m = INTERFACE.search(line)
                if m:
                    r = int(m.group(1))
                    ranks.add(r)
                    addresses[r] = (m.group(2), m.group(3))
    if not ranks:
        errors.append("no endpoint lines at all: was PSTATE_DEBUG=INFO set?")
    world = max(ranks) + 1 if ranks else 0
    hosts = world // per if per else 0
    for r in range(world):
        for h in range(hosts):
            if h == r // per and per == 1:
                continue
            if (r, h) not in seen:
                errors.append("rank %d logged no endpoint to host %d" % (r, h))
        if args.ifname:
            want = (args.ifname, "%s%d" % (args.addr_base, 10 + r // per))
            if addresses.get(r) != want:
                errors.append("rank %d: interface/address %s, expected %s" % (r, addresses.get(r), want))
    for spec in args.group:
        kind, mode = spec.split("=")
        missing = [r for r in range(world) if (r, kind, mode) not in group_modes]
        if missing:
            errors.append("ranks %s logged no %s group on %s" % (missing, kind, "shared memory" if mode == "shm" else "UCX across hosts"))
        else:
            print("every rank: a %s group on %s" % (kind, "shared memory (one host)" if mode == "shm" else "UCX (spans hosts)"))
    print("transport by host pair (row: from host, column: to host; from every rank of the row host):")
    print("       " + "".join("host%-14d" % h for h in range(hosts)))
    for a in range(hosts):
        cells = []
        for b in range(hosts):
            used = sorted({seen[(r, b)][1] for r in range(a * per, (a + 1) * per) if (r, b) in seen})
            cells.append("%-18s" % ("/".join(used) or "-"))
        print("host%-3d" % a + "".join(cells))
    if errors:
        print("FAILED:")
        for e in errors:
            print("  " + e)
        return 1
    print("ok: %d ranks on %d hosts: shared memory inside every host, TCP between every pair of hosts" % (world, hosts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
