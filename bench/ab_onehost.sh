#!/usr/bin/env bash
# bench/ab_onehost.sh — A/B of two pstate builds against each other and Open MPI on one host, one
# case at a time, alternating MPI, A, B in every repeat (so all three see the same machine load),
# then, per size, the median of each side and the median of the paired quotients A/MPI, B/MPI
# and B/A (each quotient from runs of the same repeat, as bench/report.py pairs them).
#
#   bench/ab_onehost.sh A_BUILD_DIR B_BUILD_DIR CASE [REPEATS]
#     CASE: all_gatherv | sendrecv | broadcast_object | all_reduce (8 B..1 KiB, 2 ranks)
#     PSTATE_SHM=0 in the environment: both builds over UCX instead of shared memory (the
#     transport choice of a one-host group; Open MPI's side does not change)
#
# Why: the machine is shared, so single runs of either side vary more than the changes measured;
# alternation and paired quotients take the load out of the comparison. The load average at
# start and end is printed with the results. Open MPI runs as in bench/run.sh (vader, unbound;
# broadcast_object: 4 ranks oversubscribed with mpi_yield_when_idle).
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:?A build dir}
B=${2:?B build dir}
CASE=${3:?case}
REPEATS=${4:-9}
OUT=${OUT:-/tmp/ab_onehost.$$}
mkdir -p "$OUT"
MPI_BENCH=$OUT/mpi_bench
mpicc -O2 -I src/cli bench/mpi_bench.c -o "$MPI_BENCH"
MPIRUN=(mpirun --allow-run-as-root --bind-to none --mca pml ob1 --mca btl 'self,vader')
case "$CASE" in
  all_gatherv) N=2 ARGS=(--op all_gatherv -b ${AGV_MIN:-32K} -e ${AGV_MAX:-8M} -f 4 --check) ;;
  sendrecv) N=2 ARGS=(--op sendrecv -b 8 -e 2K -f 4 --check) ;;
  all_reduce) N=2 ARGS=(--op all_reduce -b 8 -e 1K -f 8 --check) ;;
  broadcast_object)
    N=4 ARGS=(--op broadcast_object -b 64 -e 4K -f 4 --iters 200 --warmup 20 --check)
    MPIRUN+=(--oversubscribe --mca mpi_yield_when_idle 1) ;;
  *) echo "unknown case $CASE" >&2; exit 2 ;;
esac
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$REPEATS"); do
  timeout 300 "${MPIRUN[@]}" -np "$N" "$MPI_BENCH" "${ARGS[@]}" --json "$OUT/mpi.$r.json" >/dev/null
  timeout 300 "$A/pstate" run --no-bind -n "$N" -- "$A/pstate" bench "${ARGS[@]}" --json "$OUT/a.$r.json" >/dev/null
  timeout 300 "$B/pstate" run --no-bind -n "$N" -- "$B/pstate" bench "${ARGS[@]}" --json "$OUT/b.$r.json" >/dev/null
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" "$REPEATS" <<'EOF'
import json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
def load(side, r):
    d = json.load(open(f"{out}/{side}.{r}.json"))
    return {x["bytes"]: (x["time_us"], x["wrong"]) for x in d["results"]}
runs = {s: [load(s, r) for r in range(1, n + 1)] for s in ("mpi", "a", "b")}
print(f"{'bytes':>9} {'MPI us':>9} {'A us':>9} {'B us':>9} {'A/MPI':>6} {'B/MPI':>6} {'B/A':>6}  wrong")
for size in sorted(runs["mpi"][0]):
    t = {s: [runs[s][r][size][0] for r in range(n)] for s in runs}
    wrong = sum(runs[s][r][size][1] for s in runs for r in range(n))
    q = lambda x, y: statistics.median(t[x][r] / t[y][r] for r in range(n))
    med = {s: statistics.median(t[s]) for s in t}
    print(f"{size:>9} {med['mpi']:>9.2f} {med['a']:>9.2f} {med['b']:>9.2f} {q('a','mpi'):>6.2f} {q('b','mpi'):>6.2f} {q('b','a'):>6.2f}  {wrong}")
EOF
