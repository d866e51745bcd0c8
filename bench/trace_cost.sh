#!/usr/bin/env bash
# bench/trace_cost.sh — what the always-on flight recorder costs (issue 14), in one run.
#
#   bench/trace_cost.sh            (REPEATS=11 by default; writes bench/results/trace/)
#
# Every call of every group writes one entry into its rank's ring (src/common/trace.hpp: eight
# relaxed 64-bit stores and two time-stamp-counter reads, two more stores at completion). The
# recorder is switched at run time (PSTATE_TRACE_ENTRIES=0 turns it off), so one build of
# libpstate ($BUILD_DIR, default build/) runs every case with the recorder on (the default, 4096
# entries) and off, alternately, REPEATS times (on, off, off, on, ...: both sides see the same
# machine in the same rounds); Open MPI's MPI_Allreduce runs the same loop in each round as the
# benchmark peer (bench/trace_cost_mpi.c). bench/agreement_report.py (kind "trace") takes per case
# the median over rounds of each side and of the paired differences, and writes
# bench/results/trace/trace.md, which docs/bench/trace.md quotes.
#
# Cases (2 ranks on this host, each bound to its own core; bench/agreement_loop.c: 100,000 calls
# back to back per batch, median of 9 batches, ns per call):
#   all_reduce 8 B float32   the fast path of the target (recorder on costs <= 2%)
#   all_reduce 1 KiB, barrier in shared memory; all_reduce 8 B with PSTATE_SHM=0 (UCX)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
REPEATS=${REPEATS:-11}
CASE_TIMEOUT=${CASE_TIMEOUT:-120}
OUT=${OUT:-$ROOT/bench/results/trace}
mkdir -p "$OUT/raw"
rm -f "$OUT"/raw/*.txt

log() { echo "bench/trace_cost.sh: $*" >&2; }

[ -f "$BUILD_DIR/CMakeCache.txt" ] || cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
log "building $BUILD_DIR (pstate, pstate_cli)"
cmake --build "$BUILD_DIR" -j "$(nproc)" --target pstate_cli pstate >/dev/null
cc -O2 -Wall -Wextra -I include bench/agreement_loop.c -L "$BUILD_DIR" -Wl,-rpath,"$ROOT/$BUILD_DIR" -lpstate \
  -o "$OUT/agreement_loop"
mpicc -O2 -Wall -Wextra bench/trace_cost_mpi.c -o "$OUT/trace_cost_mpi"

# name | environment | agreement_loop arguments
CASES=(
  "all_reduce.8B.shm||all_reduce 8"
  "all_reduce.1KiB.shm||all_reduce 1024"
  "barrier.shm||barrier 0"
  "all_reduce.8B.ucx|PSTATE_SHM=0|all_reduce 8 20000"
)
# the peer's cases: name | bytes
MPI_CASES=("all_reduce.8B.shm|8" "all_reduce.1KiB.shm|1024")

PRIO=()
if [ "${RT:-1}" = 1 ] && [ "$(id -u)" -eq 0 ] && command -v chrt >/dev/null; then PRIO=(chrt -f 10); fi

one() {  # one NAME SIDE ENV REP ARGS...
  local name=$1 side=$2 env=$3 rep=$4
  shift 4
  [ "$side" = off ] && env="$env PSTATE_TRACE_ENTRIES=0"
  # shellcheck disable=SC2086
  if ! timeout --kill-after=5 "$CASE_TIMEOUT" env $env "${PRIO[@]}" "$ROOT/$BUILD_DIR/pstate" run --bind-cores -n 2 -- \
      "$OUT/agreement_loop" "$@" >"$OUT/raw/$name.$side.$rep.txt" 2>>"$OUT/raw/log.txt"; then
    log "FAILED: $name $side (see $OUT/raw/log.txt)"
  fi
}

for rep in $(seq 1 "$REPEATS"); do
  for c in "${CASES[@]}"; do
    IFS='|' read -r name env args <<<"$c"
    # shellcheck disable=SC2086
    if [ $((rep % 2)) -eq 1 ]; then
      one "$name" on "$env" "$rep" $args
      one "$name" off "$env" "$rep" $args
    else
      one "$name" off "$env" "$rep" $args
      one "$name" on "$env" "$rep" $args
    fi
  done
  for c in "${MPI_CASES[@]}"; do
    IFS='|' read -r name bytes <<<"$c"
    timeout --kill-after=5 "$CASE_TIMEOUT" "${PRIO[@]}" mpirun --allow-run-as-root --bind-to core --mca pml ob1 \
      --mca btl self,vader -np 2 "$OUT/trace_cost_mpi" "$bytes" >"$OUT/raw/$name.mpi.$rep.txt" 2>>"$OUT/raw/log.txt" ||
      log "FAILED: $name mpi (see $OUT/raw/log.txt)"
  done
  log "round $rep of $REPEATS done"
done
/usr/bin/python3 bench/agreement_report.py "$OUT" "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" "$REPEATS" trace
log "wrote $OUT/trace.md"
