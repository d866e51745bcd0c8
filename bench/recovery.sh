#!/usr/bin/env bash
# bench/recovery.sh — what a dead rank costs: surviving it (pstate_shrink) against restarting the
# job (what a job without shrink must do; Open MPI's and pstate's own start-up, model reload not
# counted).
#
#   bench/recovery.sh [OUT.json]      (default bench/results/recovery.json)
#
# N ranks (default 6) on this host, REPEATS times (default 5), alternating:
#   shrink   `pstate run -n N --keep-going -- elastic_serving --kill-rank 3 --kill-at-step 20`:
#            rank 3 SIGKILLs itself inside an all-reduce of 2 MiB (it prints the CLOCK_MONOTONIC
#            time just before); the survivors shrink, re-initialize tp N-1 and redo the step that
#            failed (20, or 21 on a loaded machine: the one they print); each prints the time its
#            step was exact. Recovery = the last survivor's exact step - the kill.
#   restart  `mpirun -np N mpi_bench --op startup` (MPI_Init, a barrier, MPI_Finalize) and
#            `pstate run -n N -- pstate bench --op startup` (pstate_init, initialize_model_parallel,
#            finalize): the least a restart costs, whole processes, wall time.
# Writes the medians (and every run) to OUT.json; docs/bench/recovery.md quotes it
# (`python3 bench/report.py --topic recovery`).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
OUT=${1:-$ROOT/bench/results/recovery.json}
N=${N:-6}
REPEATS=${REPEATS:-5}
PSTATE=$ROOT/$BUILD_DIR/pstate
APP=$ROOT/$BUILD_DIR/elastic_serving
BIN=$(dirname "$OUT")/bin
LOG=$(dirname "$OUT")/logs/recovery.log
mkdir -p "$BIN" "$(dirname "$LOG")"
: >"$LOG"
log() { echo "bench/recovery.sh: $*" >&2; }
[ -x "$PSTATE" ] && [ -x "$APP" ] || { log "build first (./build.sh build)"; exit 2; }
mpicc -O2 -Wall -Wextra -I src/cli bench/mpi_bench.c -o "$BIN/mpi_bench"
MPIRUN=(mpirun --allow-run-as-root --bind-to none --oversubscribe --mca pml ob1 --mca btl self,vader)

wall_ms() {  # wall_ms COMMAND...: prints the wall time in ms, or null when it failed
  local t0 t1
  echo "\$ $*" >>"$LOG"
  t0=$(date +%s%N)
  if ! timeout 120 "$@" >>"$LOG" 2>&1; then echo null; return; fi
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}

shrink_ms() {  # one survival: kill -> the last survivor's first exact step on the new world
  local out kill step last
  out=$(timeout 120 "$PSTATE" run -n "$N" --keep-going -- "$APP" --steps 40 --kill-rank 3 --kill-at-step 20 \
    --grow-every 0 2>&1) || true
  echo "$out" >>"$LOG"
  kill=$(sed -n 's/.*SIGKILL to myself.*(monotonic \([0-9.]*\) ms).*/\1/p' <<<"$out" | head -1)
  step=$(sed -n 's/.*: step \([0-9]*\): PSTATE_ERR_[A-Z_]*: shrinking$/\1/p' <<<"$out" | head -1)
  last=$(sed -n "s/.*: step ${step:-none} exact on a world of .*(monotonic \([0-9.]*\) ms).*/\1/p" <<<"$out" | sort -n | tail -1)
  if [ -z "$kill" ] || [ -z "$last" ] || [ "$(grep -c 'all exact' <<<"$out")" -ne $((N - 1)) ]; then echo null; return; fi
  awk -v a="$kill" -v b="$last" 'BEGIN {printf "%.0f", b - a}'
}

median() { printf '%s\n' "$@" | grep -v null | sort -n | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "null"}'; }

shrink=() mpi=() ps=()
for rep in $(seq 1 "$REPEATS"); do
  shrink+=("$(shrink_ms)")
  mpi+=("$(wall_ms "${MPIRUN[@]}" -np "$N" "$BIN/mpi_bench" --op startup)")
  ps+=("$(wall_ms "$PSTATE" run -n "$N" -- "$PSTATE" bench --op startup --tp "$N" --pp 1)")
  log "run $rep: shrink ${shrink[-1]} ms, mpirun restart ${mpi[-1]} ms, pstate restart ${ps[-1]} ms"
done
{
  echo "{\"date\": \"$(date -u '+%Y-%m-%d %H:%M UTC')\", \"nproc\": $(nproc), \"ranks\": $N, \"repeats\": $REPEATS,"
  echo " \"commit\": \"$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo '+dirty')\","
  echo " \"shrink_ms\": $(median "${shrink[@]}"), \"mpi_restart_ms\": $(median "${mpi[@]}"), \"pstate_restart_ms\": $(median "${ps[@]}"),"
  echo " \"shrink_runs_ms\": [$(IFS=,; echo "${shrink[*]}")], \"mpi_restart_runs_ms\": [$(IFS=,; echo "${mpi[*]}")],"
  echo " \"pstate_restart_runs_ms\": [$(IFS=,; echo "${ps[*]}")]}"
} >"$OUT"
cat "$OUT"
