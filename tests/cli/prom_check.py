#!/usr/bin/env python3
"""prom_check.py — asks a running Prometheus server, through its HTTP query API (PromQL), whether
the series it scraped from a `launch_rank metrics` job equal the calls that job made.

Used by tests/cli/test_metrics_prometheus.sh (one host) and tests/multihost/mh_metrics.sh (two
namespace hosts). The expectations are computed here from what tests/cli/launch_rank.c's
`metrics` mode does on every rank (5 all_reduce, 3 all_gather, 2 broadcast and 4 barrier of 8
float32 on the world, one all_reduce whose count differs on rank 0: MISMATCH everywhere, then rank
0's recv that never comes: one TIMEOUT), never from anything the library computed.

usage: prom_check.py PROMETHEUS_PORT --ranks N --launchers L --hosts H [--path PATH]
  the scrape config's jobs are "ranks" (every rank's own endpoint) and "launcher" (one
  `pstate run --metrics` endpoint per node); H distinct values of the launcher's `host` label are
  expected; --path, when given, is the `path` label every world call must carry.
Prints one "ok"/"FAIL" line per check and "python: N passed, M failed"; exits 1 when one failed.
"""
import argparse
import json
import sys
import time
import urllib.parse
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--launchers", type=int, default=1)
    ap.add_argument("--hosts", type=int, default=1)
    ap.add_argument("--path")
    ap.add_argument("--host", default="127.0.0.1", help="the Prometheus server's address")
    ap.add_argument("--wait", type=float, default=90)
    a = ap.parse_args()
    ranks = a.ranks

    def query(q):
        url = f"http://{a.host}:{a.port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def scalar(q):
        res = query(q)
        return None if not res else float(res[0]["value"][1])

    # barrier: the job's 4, and the one that ends pstate_init (docs/metrics.md: pstate's own world
    # barriers at init, shrink and grow count as barriers of world:0)
    calls = {"all_reduce": 5, "all_gather": 3, "broadcast": 2, "barrier": 4 + 1}
    checks = []
    for op, n in calls.items():
        for job in ("ranks", "launcher"):
            checks.append((f'{job}: {op} ok = {n} x {ranks}',
                           f'sum(pstate_calls_total{{job="{job}",group="world:0",op="{op}",status="ok"}})', n * ranks))
        checks.append((f'launcher: {op} per rank = {n} on every rank',
                       f'count(pstate_calls_total{{job="launcher",group="world:0",op="{op}",status="ok"}} == {n})',
                       ranks))
    # bytes: 5 ok all_reduce of 8 float32 (32 B) on every rank; the MISMATCH call counts its own
    # count (4 floats on rank 0, 8 on the others)
    bytes_all_reduce = 5 * 32 * ranks + 16 + 32 * (ranks - 1)
    for job in ("ranks", "launcher"):
        checks += [
            (f'{job}: one MISMATCH on every rank',
             f'sum(pstate_calls_total{{job="{job}",op="all_reduce",status="mismatch"}})', ranks),
            (f'{job}: one TIMEOUT (rank 0\'s recv)',
             f'sum(pstate_calls_total{{job="{job}",op="recv",status="timeout"}})', 1),
            (f'{job}: all_reduce bytes = 5 x 32 B x {ranks} + the mismatched call\'s own counts',
             f'sum(pstate_call_bytes_total{{job="{job}",group="world:0",op="all_reduce"}})', bytes_all_reduce),
            (f'{job}: histogram count = calls of all_reduce (ok + mismatch)',
             f'sum(pstate_call_duration_seconds_count{{job="{job}",group="world:0",op="all_reduce"}})',
             (5 + 1) * ranks),
        ]
    checks += [
        (f'launcher: pstate_rank_up = 1 for {ranks} ranks', 'sum(pstate_rank_up{job="launcher"})', ranks),
        ('launcher: the rank 0 TIMEOUT is labelled rank="0"',
         'sum(pstate_calls_total{job="launcher",op="recv",status="timeout",rank="0"})', 1),
        (f'launcher: every rank labelled once ({ranks} rank values)', 'count(count by (rank) (pstate_rank_up{job="launcher"}))',
         ranks),
        (f'launcher: {a.hosts} host label value(s)', 'count(count by (host) (pstate_rank_up{job="launcher"}))', a.hosts),
        (f'ranks: every rank endpoint up (Prometheus up)', 'sum(up{job="ranks"})', ranks),
        (f'launcher: {a.launchers} endpoint(s) up', 'sum(up{job="launcher"})', a.launchers),
    ]
    if a.path:
        checks.append((f'ranks: every ok world all_reduce took path="{a.path}"',
                       f'sum(pstate_calls_total{{job="ranks",group="world:0",op="all_reduce",status="ok",path="{a.path}"}})',
                       5 * ranks))
    deadline = time.time() + a.wait
    last = {}
    while time.time() < deadline:
        try:
            last = {n: scalar(q) for n, q, _ in checks}
            if all(last[n] == want for n, _, want in checks):
                break
        except Exception as e:  # not up yet
            last = {"error": str(e)}
        time.sleep(1)
    failed = 0
    for n, q, want in checks:
        got = last.get(n)
        ok = got == want
        failed += not ok
        print(("ok   " if ok else "FAIL ") + f"prometheus: {n} (got {got}, want {want})")
        if not ok:
            print(f"     query: {q}")
    if "error" in last:
        print(f"     last error: {last['error']}")
    # a histogram quantile that makes sense: the median all_reduce between 100 ns and 3 s
    med = scalar('histogram_quantile(0.5, sum by (le) '
                 '(pstate_call_duration_seconds_bucket{job="ranks",group="world:0",op="all_reduce"}))')
    ok = med is not None and 1e-7 < med < 3
    failed += not ok
    print(("ok   " if ok else "FAIL ") + f"prometheus: median all_reduce duration {med} s is within (1e-7, 3)")
    print(f"python: {len(checks) + 1 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
