#!/usr/bin/env bash
# bench/agreement_cost.sh — what the always-on agreement of collectives costs, in one run.
#
#   bench/agreement_cost.sh            (REPEATS=11 by default; writes bench/results/agreement/)
#
# Ranks that disagree about a collective get PSTATE_ERR_MISMATCH because every call carries its
# descriptor (src/common/op_descriptor.hpp): in the flag words of the shared-memory protocol, and
# by a descriptor exchange on UCX groups; plus one atomic per call that refuses a second thread
# on a context. This script builds libpstate twice — as it ships ($BUILD_DIR, default build/) and
# with the agreement compiled out (CMake -DPSTATE_AGREEMENT=OFF, in build-noagree/; nothing else
# differs) — and runs the same `pstate bench` cases alternately, REPEATS times each (on, off, on,
# off, ...), so both see the same machine; Open MPI's number for the same case is measured in the
# same rounds as the peer. bench/agreement_report.py then takes per case the median over rounds
# of each side and of the paired differences (on - off of the same round) and writes
# bench/results/agreement/agreement.md, which BENCHMARKS.md quotes.
#
# Cases (2 ranks on this host, each bound to its own core, 2000 timed calls after 200 untimed):
#   all_reduce 8 B float32   the fast path of the target (<= 2% or <= 0.01 us)
#   all_reduce 1 KiB, all_gather 8 B, broadcast 8 B (broadcast's root now waits for every rank's
#   arrival), shared memory; all_reduce 8 B with PSTATE_SHM=0 (UCX: the descriptor exchange).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
OFF_DIR=${OFF_DIR:-build-noagree}
REPEATS=${REPEATS:-11}
CASE_TIMEOUT=${CASE_TIMEOUT:-120}
OUT=${OUT:-$ROOT/bench/results/agreement}
mkdir -p "$OUT/raw"
rm -f "$OUT"/raw/*.json

log() { echo "bench/agreement_cost.sh: $*" >&2; }

type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || true)
[ -f "$BUILD_DIR/CMakeCache.txt" ] || cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
type=${type:-RelWithDebInfo}
log "building $BUILD_DIR (agreement on) and $OFF_DIR (-DPSTATE_AGREEMENT=OFF), CMAKE_BUILD_TYPE=$type"
cmake --build "$BUILD_DIR" -j "$(nproc)" --target pstate_cli >/dev/null
cmake -S . -B "$OFF_DIR" -DCMAKE_BUILD_TYPE="$type" -DPSTATE_AGREEMENT=OFF -DPSTATE_BUILD_TESTS=OFF >/dev/null
cmake --build "$OFF_DIR" -j "$(nproc)" --target pstate_cli >/dev/null
mpicc -O2 -Wall -Wextra -I src/cli bench/mpi_bench.c -o "$OUT/mpi_bench"

# name | environment | bench arguments
CASES=(
  "all_reduce.8B.shm||--op all_reduce --dtype float32 -b 8 -e 8"
  "all_reduce.1KiB.shm||--op all_reduce --dtype float32 -b 1K -e 1K"
  "all_gather.8B.shm||--op all_gather --dtype float32 -b 8 -e 8"
  "broadcast.8B.shm||--op broadcast --dtype float32 -b 8 -e 8"
  "all_reduce.8B.ucx|PSTATE_SHM=0|--op all_reduce --dtype float32 -b 8 -e 8"
)

one() {  # one NAME SIDE DIR ENV ARGS...
  local name=$1 side=$2 dir=$3 env=$4 rep=$5
  shift 5
  # shellcheck disable=SC2086
  if ! timeout --kill-after=5 "$CASE_TIMEOUT" env $env "$ROOT/$dir/pstate" run --bind-cores -n 2 -- \
      "$ROOT/$dir/pstate" bench "$@" --iters 2000 --warmup 200 --check \
      --json "$OUT/raw/$name.$side.$rep.json" >>"$OUT/raw/log.txt" 2>&1; then
    log "FAILED: $name $side (see $OUT/raw/log.txt)"
  fi
}

for rep in $(seq 1 "$REPEATS"); do
  for c in "${CASES[@]}"; do
    IFS='|' read -r name env args <<<"$c"
    # shellcheck disable=SC2086
    if [ $((rep % 2)) -eq 1 ]; then
      one "$name" on "$BUILD_DIR" "$env" "$rep" $args
      one "$name" off "$OFF_DIR" "$env" "$rep" $args
    else
      one "$name" off "$OFF_DIR" "$env" "$rep" $args
      one "$name" on "$BUILD_DIR" "$env" "$rep" $args
    fi
    case $name in *.shm)
      # shellcheck disable=SC2086
      timeout --kill-after=5 "$CASE_TIMEOUT" mpirun --allow-run-as-root --bind-to core --mca pml ob1 \
        --mca btl self,vader -np 2 "$OUT/mpi_bench" $args --iters 2000 --warmup 200 \
        --json "$OUT/raw/$name.mpi.$rep.json" >>"$OUT/raw/log.txt" 2>&1 || log "FAILED: $name mpi" ;;
    esac
  done
  log "round $rep of $REPEATS done"
done
/usr/bin/python3 bench/agreement_report.py "$OUT" "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" "$REPEATS"
log "wrote $OUT/agreement.md"
