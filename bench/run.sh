#!/usr/bin/env bash
# bench/run.sh — pstate against Open MPI on this machine, in one session, and BENCHMARKS.md.
#
#   bench/run.sh [--quick]
#
# Builds what it needs (the `pstate` command in $BUILD_DIR, default build/; bench/mpi_bench.c
# with mpicc; bench/memcpy_bw.c), then measures, case by case and MPI first then pstate, so
# both see the same machine load:
#   - single-core memcpy bandwidth of 64 MiB (the physical reference)
#   - 2 ranks: all_reduce 8 B..64 MiB; all_gather, reduce_scatter, broadcast 8 B..16 MiB;
#     all_to_all and send_recv 8 B..16 MiB (x4 steps)
#   - the same 2-rank all_reduce, all_gather, reduce_scatter, broadcast with every rank bound to
#     its own core on both sides (a scheduler that puts both ranks on one core costs pstate's
#     yielding waits microseconds per hand-off; see bench/analysis.md)
#   - 4 ranks on the 2 cores (oversubscribed): all_reduce 8 B..1 MiB
#   - 4 ranks: broadcast_object 64 B..64 KiB from rank 0 to 3 readers vs MPI_Bcast of the bytes
#   - start-up of 8 ranks to model parallel initialized (tp 4 x pp 2) and finalized, whole
#     processes, vs `mpirun -np 8` of MPI_Init + MPI_Finalize (median wall time of 5 runs each)
# and finally runs bench/report.py, which writes BENCHMARKS.md (tables, ratios, targets) and
# bench/results/time_vs_size.png (gnuplot). Raw JSON and logs stay in bench/results/.
#
# Open MPI runs with its fastest shared-memory path here: --mca pml ob1 --mca btl self,vader;
# oversubscribed runs add --oversubscribe --mca mpi_yield_when_idle 1. Ranks are not bound to
# cores on either side in the main cases (--bind-to none; `pstate run` does not bind), so both
# get the same scheduler; MPI_BIND=core changes that for MPI. The ".bound" cases bind both. --quick runs a few sizes only (a smoke test of
# this script, not a measurement, written under $BUILD_DIR/bench-quick/). Before measuring it
# waits up to QUIET_WAIT_S for the load average to drop below QUIET_LOAD. Every command is
# bounded by `timeout` (CASE_TIMEOUT seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
CASE_TIMEOUT=${CASE_TIMEOUT:-240}
MPI_BIND=${MPI_BIND:-none}
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
if [ "$QUICK" = 1 ]; then  # a smoke test never overwrites the real results
  RESULTS=${RESULTS:-$ROOT/$BUILD_DIR/bench-quick}
  REPORT=$RESULTS/BENCHMARKS.md
else
  RESULTS=${RESULTS:-$ROOT/bench/results}
  REPORT=$ROOT/BENCHMARKS.md
fi

log() { echo "bench/run.sh: $*" >&2; }

# ---- build ------------------------------------------------------------------------------------
build() {
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target pstate_cli >/dev/null
  mkdir -p "$RESULTS/bin"
  mpicc -O2 -Wall -Wextra -I src/cli bench/mpi_bench.c -o "$RESULTS/bin/mpi_bench"
  cc -O2 -Wall -Wextra -I src/cli bench/memcpy_bw.c -o "$RESULTS/bin/memcpy_bw"
}

PSTATE="$ROOT/$BUILD_DIR/pstate"
MPI_BENCH="$RESULTS/bin/mpi_bench"
MPIRUN=(mpirun --allow-run-as-root --bind-to "$MPI_BIND" --mca pml ob1 --mca btl self,vader)
MPIRUN_BOUND=(mpirun --allow-run-as-root --bind-to core --mca pml ob1 --mca btl self,vader)
MPIRUN_OVER=("${MPIRUN[@]}" --oversubscribe --mca mpi_yield_when_idle 1)

# Runs a command under `timeout`, its output appended to the case log; a failure is recorded in
# failures.txt and does not stop the other cases.
run_case() {
  local name=$1
  shift
  echo "\$ $(printf '%q ' "$@")" >>"$RESULTS/logs/$name.log"
  if ! timeout --kill-after=10 "$CASE_TIMEOUT" "$@" >>"$RESULTS/logs/$name.log" 2>&1; then
    log "FAILED: $name (see bench/results/logs/$name.log)"
    echo "$name" >>"$RESULTS/failures.txt"
    return 0
  fi
  log "done: $name"
}

# pair NAME RANKS OVERSUBSCRIBED BENCH-ARGS...: the MPI run, then the pstate run, same arguments.
pair() {
  local name=$1 ranks=$2 over=$3
  shift 3
  local mpirun=("${MPIRUN[@]}")
  [ "$over" = 1 ] && mpirun=("${MPIRUN_OVER[@]}")
  run_case "$name.mpi" "${mpirun[@]}" -np "$ranks" "$MPI_BENCH" "$@" --check --json "$RESULTS/$name.mpi.json"
  run_case "$name.pstate" "$PSTATE" run -n "$ranks" -- "$PSTATE" bench "$@" --check \
    --json "$RESULTS/$name.pstate.json"
}

# pair_bound NAME RANKS BENCH-ARGS...: like pair, with every rank bound to its own core on both
# sides (MPI --bind-to core; pstate run --bind-cores: core = LOCAL_RANK mod nproc).
pair_bound() {
  local name=$1 ranks=$2
  shift 2
  run_case "$name.mpi" "${MPIRUN_BOUND[@]}" -np "$ranks" "$MPI_BENCH" "$@" --check \
    --json "$RESULTS/$name.mpi.json"
  run_case "$name.pstate" "$PSTATE" run --bind-cores -n "$ranks" -- "$PSTATE" bench "$@" --check \
    --json "$RESULTS/$name.pstate.json"
}

# Median wall time in ms of 5 runs of a command (whole processes, launcher included).
wall_median_ms() {
  local name=$1
  shift
  local times=()
  for i in 1 2 3 4 5; do
    local t0 t1
    t0=$(date +%s%N)
    if ! timeout --kill-after=10 "$CASE_TIMEOUT" "$@" >>"$RESULTS/logs/$name.log" 2>&1; then
      log "FAILED: $name (see bench/results/logs/$name.log)"
      echo "$name" >>"$RESULTS/failures.txt"
      echo "null"
      return
    fi
    t1=$(date +%s%N)
    times+=($(((t1 - t0) / 1000)))
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n 3p | awk '{printf "%.1f\n", $1 / 1000}'
}

startup() {
  echo "\$ ${MPIRUN_OVER[*]} -np 8 $MPI_BENCH --op startup" >>"$RESULTS/logs/startup.log"
  local mpi_ms pstate_ms
  mpi_ms=$(wall_median_ms startup "${MPIRUN_OVER[@]}" -np 8 "$MPI_BENCH" --op startup)
  echo "\$ $PSTATE run -n 8 -- $PSTATE bench --op startup --tp 4 --pp 2" >>"$RESULTS/logs/startup.log"
  pstate_ms=$(wall_median_ms startup "$PSTATE" run -n 8 -- "$PSTATE" bench --op startup --tp 4 --pp 2)
  printf '{"ranks": 8, "runs": 5, "mpi_ms": %s, "pstate_ms": %s}\n' "$mpi_ms" "$pstate_ms" >"$RESULTS/startup.json"
  log "done: startup (MPI $mpi_ms ms, pstate $pstate_ms ms)"
}

machine() {
  {
    echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "nproc=$(nproc)"
    echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "kernel=$(uname -r)"
    echo "mem=$(free -g | awk '/Mem:/ {print $2 " GiB"}')"
    echo "openmpi=$(mpirun --version 2>/dev/null | head -1)"
    echo "pstate=$("$PSTATE" --version)"
    echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo '+dirty')"
    echo "build_type=$(grep -m1 CMAKE_BUILD_TYPE: "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2)"
    echo "mpi_bind=$MPI_BIND"
    echo "quick=$QUICK"
  } >"$RESULTS/machine.txt"
}

# Waits (at most QUIET_WAIT_S, default 120 s) for the 1-minute load average to fall below
# QUIET_LOAD (default 1.0): this machine is shared, and a build next door halves anyone's numbers.
wait_quiet() {
  local limit=$((SECONDS + ${QUIET_WAIT_S:-120})) load
  while :; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    if awk -v l="$load" -v q="${QUIET_LOAD:-1.0}" 'BEGIN { exit !(l < q) }'; then
      echo "quiet=yes (load $load)" >>"$RESULTS/machine.txt"
      return
    fi
    if [ $SECONDS -ge $limit ]; then
      log "machine still busy (load $load); measuring anyway"
      echo "quiet=no (load $load after waiting ${QUIET_WAIT_S:-120} s)" >>"$RESULTS/machine.txt"
      return
    fi
    sleep 5
  done
}

main() {
  local t_start=$SECONDS
  build
  rm -rf "$RESULTS/logs" "$RESULTS"/*.json "$RESULTS/failures.txt"
  mkdir -p "$RESULTS/logs"
  machine
  wait_quiet
  echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RESULTS/machine.txt"
  export PSTATE_TIMEOUT_MS=${PSTATE_TIMEOUT_MS:-60000}

  run_case memcpy "$RESULTS/bin/memcpy_bw" -s 64M --iters 30 --json "$RESULTS/memcpy.json"
  if [ "$QUICK" = 1 ]; then
    pair all_reduce.2 2 0 --op all_reduce -b 8 -e 64K -f 32
    pair_bound all_reduce.2.bound 2 --op all_reduce -b 8 -e 64K -f 32
    pair all_reduce.4 4 1 --op all_reduce -b 8 -e 1M -f 128 --iters 50
    pair broadcast_object.4 4 1 --op broadcast_object -b 1K -e 1K --iters 50
  else
    pair all_reduce.2 2 0 --op all_reduce -b 8 -e 64M -f 2
    for op in all_gather reduce_scatter broadcast; do
      pair "$op.2" 2 0 --op "$op" -b 8 -e 16M -f 2
    done
    for op in all_to_all send_recv; do
      pair "$op.2" 2 0 --op "$op" -b 8 -e 16M -f 4
    done
    for op in all_reduce all_gather reduce_scatter broadcast; do
      pair_bound "$op.2.bound" 2 --op "$op" -b 8 -e "$([ $op = all_reduce ] && echo 64M || echo 16M)" -f 2
    done
    pair all_reduce.4 4 1 --op all_reduce -b 8 -e 1M -f 2 --iters 200 --warmup 20
    pair broadcast_object.4 4 1 --op broadcast_object -b 64 -e 64K -f 4 --iters 200 --warmup 20
  fi
  startup
  echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RESULTS/machine.txt"
  echo "elapsed_s=$((SECONDS - t_start))" >>"$RESULTS/machine.txt"
  python3 bench/report.py "$RESULTS" "$REPORT"
  log "wrote $REPORT and $RESULTS/time_vs_size.png in $((SECONDS - t_start)) s"
}

main "$@"
