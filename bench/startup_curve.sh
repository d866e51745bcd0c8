#!/usr/bin/env bash
# bench/startup_curve.sh — start-up as the job grows: pstate against Open MPI, whole processes.
#
#   bench/startup_curve.sh [OUT.json]      (default bench/results/startup_curve.json)
#
# For N in SIZES (default 8 16 32 64 128 256; oversubscribed on this machine), REPEATS times
# (default 3), alternating:
#   pstate  `pstate run -n N -- pstate bench --op startup --tp T --pp N/T` (T = min(N, 8)): every
#           rank starts, pstate_init, initialize_model_parallel, destroy, finalize; rank 0 prints
#           how long its pstate_init and initialize_model_parallel took
#   MPI     `mpirun -np N --oversubscribe mpi_bench --op startup`: MPI_Init, MPI_Barrier,
#           MPI_Finalize
# and writes the median wall time of each (and pstate_init / initialize_model_parallel on rank 0)
# to OUT.json, which bench/report.py turns into the start-up table and plot of docs/bench/startup.md. A
# size that fails or passes CASE_TIMEOUT (default 300 s) is recorded as null.
# The pstate runs log at PSTATE_DEBUG=INFO, and each size's row gets the counts of its last run
# (bench/startup_counts.py: every rank's "counts after PHASE" lines and the launcher's store server
# at exit): store requests and bytes per rank, UCX endpoints per rank, CPU and wall time per phase.
# Counts are exact (the same every run but for which rank arrives last at the store barrier);
# times on an oversubscribed machine are not.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
OUT=${1:-$ROOT/bench/results/startup_curve.json}
SIZES=${SIZES:-"8 16 32 64 128 256"}
SKIP_MPI=${SKIP_MPI:-0}  # 1: pstate only (the counts), no Open MPI runs
REPEATS=${REPEATS:-3}
CASE_TIMEOUT=${CASE_TIMEOUT:-300}
PSTATE=${PSTATE:-$ROOT/$BUILD_DIR/pstate}  # PSTATE=/path/to/pstate measures another build (a "before")
BIN=$(dirname "$OUT")/bin
LOG=$(dirname "$OUT")/logs/$(basename "$OUT" .json).log
mkdir -p "$BIN" "$(dirname "$LOG")"
: >"$LOG"
log() { echo "bench/startup_curve.sh: $*" >&2; }

[ -x "$PSTATE" ] || { log "no $PSTATE: build first (./build.sh build)"; exit 2; }
mpicc -O2 -Wall -Wextra -I src/cli bench/mpi_bench.c -o "$BIN/mpi_bench"
MPIRUN=(mpirun --allow-run-as-root --bind-to none --oversubscribe --mca mpi_yield_when_idle 1 --mca pml ob1
        --mca btl self,vader)
# Many ranks on 2 cores: the rendezvous needs far more than the 1-2 s of a small job.
export PSTATE_TIMEOUT_MS=${PSTATE_TIMEOUT_MS:-240000}
ulimit -n 65536 2>/dev/null || true

# Runs a command; prints "WALL_MS" or "null". Its output goes to the log.
timed() {
  local t0 t1
  echo "\$ $*" >>"$LOG"
  t0=$(date +%s%N)
  if ! timeout --kill-after=10 "$CASE_TIMEOUT" "$@" >>"$LOG" 2>&1; then
    echo "(failed or timed out)" >>"$LOG"
    echo null
    return
  fi
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}

median() { printf '%s\n' "$@" | grep -v null | sort -n | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "null"}'; }

rows=()
for n in $SIZES; do
  tp=$((n < 8 ? n : 8))
  pp=$((n / tp))
  mpi=() ps=() init=() mp=()
  for rep in $(seq 1 "$REPEATS"); do
    if [ "$SKIP_MPI" = 1 ]; then mpi+=(null); else mpi+=("$(timed "${MPIRUN[@]}" -np "$n" "$BIN/mpi_bench" --op startup)"); fi
    before=$(wc -l <"$LOG")
    ps+=("$(timed env PSTATE_DEBUG=INFO "$PSTATE" run --no-bind -n "$n" -- "$PSTATE" bench --op startup --tp "$tp" --pp "$pp")")
    run_log=$(mktemp)
    tail -n +"$((before + 1))" "$LOG" >"$run_log"
    counts=$(/usr/bin/python3 bench/startup_counts.py "$run_log" | /usr/bin/python3 -c '
import json, sys
c = json.load(sys.stdin)
out = {"server": c["server"]}
for phase, e in c["phases"].items():
    out[phase] = {k: v for k, v in e.items() if k != "ranks"}
print(json.dumps(out))' 2>/dev/null || echo null)
    rm -f "$run_log"
    # rank 0's line of that run: "# pstate bench startup, N ranks, rank 0: pstate_init X ms, initialize_model_parallel Y ms, ..."
    line=$(grep "# pstate bench startup, $n ranks" "$LOG" | tail -1 || true)
    v=$(sed -n 's/.*pstate_init \([0-9.]*\) ms.*/\1/p' <<<"$line" | cut -d. -f1)
    init+=("${v:-null}")
    v=$(sed -n 's/.*initialize_model_parallel \([0-9.]*\) ms.*/\1/p' <<<"$line" | cut -d. -f1)
    mp+=("${v:-null}")
    [ "${ps[-1]}" = null ] && init[-1]=null && mp[-1]=null
  done
  row=$(printf '{"ranks": %d, "tp": %d, "pp": %d, "mpi_ms": %s, "pstate_ms": %s, "pstate_init_ms": %s, "model_parallel_ms": %s, "mpi_runs_ms": [%s], "pstate_runs_ms": [%s], "counts": %s}' \
    "$n" "$tp" "$pp" "$(median "${mpi[@]}")" "$(median "${ps[@]}")" "$(median "${init[@]}")" "$(median "${mp[@]}")" "$(IFS=,; echo "${mpi[*]}")" "$(IFS=,; echo "${ps[*]}")" "$counts")
  log "$row"
  rows+=("$row")
done
{
  echo "{\"date\": \"$(date -u '+%Y-%m-%d %H:%M UTC')\", \"nproc\": $(nproc), \"repeats\": $REPEATS, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\","
  echo " \"commit\": \"$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo '+dirty')\","
  echo " \"sizes\": [$(IFS=,; echo "${rows[*]}")]}"
} >"$OUT"
log "wrote $OUT"
