#!/usr/bin/env bash
# bench/agreement_cost.sh — what the always-on agreement of collectives costs, in one run.
#
#   bench/agreement_cost.sh            (REPEATS=11 by default; writes bench/results/agreement/)
#   BASE_REF=6dd6a27 bench/agreement_cost.sh
#                                      the same cases against another commit as it shipped (built in
#                                      build-base/ from a detached worktree .bench-base/): what a
#                                      change of the protocol costs (issue 27), written to protocol.md
#   BASE_REF=6dd6a27 BASE_PICK=8865268 bench/agreement_cost.sh
#                                      the base with commits cherry-picked onto it (space-separated):
#                                      the protocol's cost alone when HEAD also changed something else
#                                      (8865268: the UCX wait policy), written to protocol-picked.md
#
# Ranks that disagree about a collective get PSTATE_ERR_MISMATCH because every call carries its
# descriptor (src/common/op_descriptor.hpp): in the flag words of the shared-memory protocol, and
# by a descriptor exchange on UCX groups; plus one atomic per call that refuses a second thread
# on a context. This script builds libpstate twice — as it ships ($BUILD_DIR, default build/) and
# with the agreement compiled out (CMake -DPSTATE_AGREEMENT=OFF, in build-noagree/; nothing else
# differs) — and runs the same cases alternately, REPEATS times each (on, off, on, off, ...), so
# both see the same machine, in the same rounds (the peer here is the library itself without the agreement; bench/run.sh compares
# with Open MPI). bench/agreement_report.py then takes per case the median over rounds
# of each side and of the paired differences (on - off of the same round) and writes
# bench/results/agreement/agreement.md, which docs/bench/agreement.md and BENCHMARKS.md quote.
#
# Cases (2 ranks on this host, each bound to its own core; bench/agreement_loop.c: 100,000 calls
# back to back per batch, median of 9 batches, ns per call):
#   all_reduce 8 B float32   the fast path of the target (<= 2% or <= 0.01 us)
#   all_reduce 1 KiB (staged: an arrival line), all_gather 8 B, broadcast 8 B (the root now
#   waits for every rank's arrival), barrier, in shared memory; all_reduce 8 B with PSTATE_SHM=0
#   (UCX: the descriptor exchange).
# bench/agreement_instructions.sh counts the UCX case in instructions per call instead (callgrind),
# which the load of a shared machine does not move.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
OFF_DIR=${OFF_DIR:-build-noagree}
REPEATS=${REPEATS:-11}
CASE_TIMEOUT=${CASE_TIMEOUT:-120}
OUT=${OUT:-$ROOT/bench/results/agreement}
mkdir -p "$OUT/raw"
rm -f "$OUT"/raw/*.txt

log() { echo "bench/agreement_cost.sh: $*" >&2; }

type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || true)
[ -f "$BUILD_DIR/CMakeCache.txt" ] || cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
type=${type:-RelWithDebInfo}
log "building $BUILD_DIR (agreement on) and $OFF_DIR (-DPSTATE_AGREEMENT=OFF), CMAKE_BUILD_TYPE=$type"
cmake --build "$BUILD_DIR" -j "$(nproc)" --target pstate_cli pstate >/dev/null
KIND=agreement
if [ -n "${BASE_REF:-}" ]; then  # the "off" side is another commit as it shipped
  KIND=protocol
  OFF_DIR=build-base
  base_src=$ROOT/.bench-base
  git worktree remove --force "$base_src" 2>/dev/null || rm -rf "$base_src"
  git worktree add --detach "$base_src" "$BASE_REF" >/dev/null
  for pick in ${BASE_PICK:-}; do
    git -C "$base_src" cherry-pick --no-commit "$pick" >/dev/null || { log "cannot cherry-pick $pick onto $BASE_REF"; exit 1; }
  done
  log "building $BASE_REF in $OFF_DIR"
  cmake -S "$base_src" -B "$OFF_DIR" -DCMAKE_BUILD_TYPE="$type" -DPSTATE_BUILD_TESTS=OFF >/dev/null
else
  cmake -S . -B "$OFF_DIR" -DCMAKE_BUILD_TYPE="$type" -DPSTATE_AGREEMENT=OFF -DPSTATE_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$OFF_DIR" -j "$(nproc)" --target pstate_cli pstate >/dev/null
for side in on off; do
  dir=$BUILD_DIR
  [ "$side" = off ] && dir=$OFF_DIR
  cc -O2 -Wall -Wextra -I include bench/agreement_loop.c -L "$dir" -Wl,-rpath,"$ROOT/$dir" -lpstate \
    -o "$OUT/agreement_loop.$side"
done

# name | environment | agreement_loop arguments
CASES=(
  "all_reduce.8B.shm||all_reduce 8"
  "all_reduce.1KiB.shm||all_reduce 1024"
  "all_gather.8B.shm||all_gather 8"
  "broadcast.8B.shm||broadcast 8"
  "barrier.shm||barrier 0"
  "all_reduce.8B.ucx|PSTATE_SHM=0|all_reduce 8 20000"
)

# A few nanoseconds are measured on a machine others may share: as root the ranks run under
# SCHED_FIFO (chrt -f 10, so ordinary processes cannot preempt them; RT=0 turns it off).
PRIO=()
if [ "${RT:-1}" = 1 ] && [ "$(id -u)" -eq 0 ] && command -v chrt >/dev/null; then PRIO=(chrt -f 10); fi

one() {  # one NAME SIDE ENV REP ARGS...
  local name=$1 side=$2 env=$3 rep=$4 dir=$BUILD_DIR
  shift 4
  [ "$side" = off ] && dir=$OFF_DIR
  # shellcheck disable=SC2086
  if ! timeout --kill-after=5 "$CASE_TIMEOUT" env $env "${PRIO[@]}" "$ROOT/$dir/pstate" run --bind-cores -n 2 -- \
      "$OUT/agreement_loop.$side" "$@" >"$OUT/raw/$name.$side.$rep.txt" 2>>"$OUT/raw/log.txt"; then
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
  log "round $rep of $REPEATS done"
done
/usr/bin/python3 bench/agreement_report.py "$OUT" "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" "$REPEATS" \
  "$KIND" "$(git rev-parse --short "${BASE_REF:-HEAD}" 2>/dev/null || echo '?')"
[ -z "${BASE_REF:-}" ] || git worktree remove --force "$ROOT/.bench-base" 2>/dev/null || true
log "wrote $OUT/$KIND.md"
