#!/usr/bin/env bash
# bench/device_call_cost.sh — pstate's own host time per eager device call (issue 28), in one run.
#
#   bench/device_call_cost.sh                 (writes bench/results/device_call/device_call.md)
#   NAME=before bench/device_call_cost.sh     (the same, written to before.md: a baseline)
#   WORLDS="1" ROUNDS=5 bench/device_call_cost.sh
#   BASE_REF=4f60ee6 NAME=before bench/device_call_cost.sh
#                                             (the library of another commit, as it shipped: built in
#                                             $BASE_BUILD, default build-base/, from a detached
#                                             worktree .bench-base/ kept for the next run; the
#                                             program, stand-ins and `pstate run` stay this tree's)
#
# Method: bench/device_call_cost.c's header. In short: pstate_all_reduce on a CUDA context against a
# direct ncclAllReduce through the same library, both on the no-work stand-ins of tests/devsim
# (built here as nowork/: collectives and cudaMemcpyAsync return at once, so nothing is moved and
# the direct call costs only its own call), at 8 B, 1 MiB and 256 MiB; ROUNDS rounds (default 11),
# each the median of SAMPLES samples of CALLS calls back to back per side and size, the side that
# goes first alternating; world 1 and world 2 (`pstate run -n 2`, stand-in NCCL between two
# processes, each rank on a core of its own). bench/device_call_report.py then writes, per world
# and size, the median and range over rounds of each side and of the paired difference pstate -
# direct (same round): pstate's host cost per device call, what docs/bench/device-call.md quotes.
#
# What it does not say: anything about GPU time, or what the real CUDA runtime's pointer query
# costs (the stand-in's is a map lookup under a mutex); tests/gpu/ measures on a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NAME=${NAME:-device_call}
WORLDS=${WORLDS:-1 2}
ROUNDS=${ROUNDS:-11}
SAMPLES=${SAMPLES:-2001}
CALLS=${CALLS:-16}
CASE_TIMEOUT=${CASE_TIMEOUT:-600}
OUT=${OUT:-$ROOT/bench/results/device_call}
mkdir -p "$OUT/raw"

log() { echo "bench/device_call_cost.sh: $*" >&2; }

[ -f "$BUILD_DIR/CMakeCache.txt" ] || cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD_DIR/CMakeCache.txt")
log "building $BUILD_DIR ($type): pstate, pstate_cli, the no-work stand-ins"
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target pstate pstate_cli pstate_devsim_nowork >/dev/null
BUILD=$(cd "$BUILD_DIR" && pwd)
STANDIN=$BUILD/tests/devsim/nowork
LIB=$BUILD  # the libpstate under test
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
if [ -n "${BASE_REF:-}" ]; then
  base_src=$ROOT/.bench-base
  if [ "$(git -C "$base_src" rev-parse HEAD 2>/dev/null)" != "$(git rev-parse "$BASE_REF^{commit}")" ]; then
    git worktree remove --force "$base_src" 2>/dev/null || rm -rf "$base_src"
    git worktree add --detach "$base_src" "$BASE_REF" >/dev/null
  fi
  BASE_BUILD=${BASE_BUILD:-build-base}
  log "building libpstate of $BASE_REF in $BASE_BUILD ($type)"
  cmake -S "$base_src" -B "$BASE_BUILD" -DCMAKE_BUILD_TYPE="$type" -DPSTATE_WERROR=ON >/dev/null
  cmake --build "$BASE_BUILD" -j "${JOBS:-$(nproc)}" --target pstate >/dev/null
  LIB=$(cd "$BASE_BUILD" && pwd)
  COMMIT=$(git rev-parse --short "$BASE_REF")
fi
PROG=$LIB/device_call_cost
cc -O2 -Wall -Wextra -Werror -I include -I "$CUDA_HOME/include" bench/device_call_cost.c -L "$LIB" \
  -Wl,-rpath,"$LIB" -lpstate -ldl -o "$PROG"

# As root the ranks run under SCHED_FIFO (chrt -f 10: ordinary processes cannot preempt them;
# RT=0 turns it off), each bound to a core of its own.
PRIO=()
if [ "${RT:-1}" = 1 ] && [ "$(id -u)" -eq 0 ] && command -v chrt >/dev/null; then PRIO=(chrt -f 10); fi

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for w in $WORLDS; do
  log "world $w: $ROUNDS rounds"
  timeout --kill-after=5 "$CASE_TIMEOUT" env PSTATE_CUDA_RUNTIME_LIBRARY="$STANDIN/libpstate_devsim_cudart.so" \
    PSTATE_NCCL_LIBRARY="$STANDIN/libpstate_devsim_nccl.so" "${PRIO[@]}" "$BUILD/pstate" run --bind-cores \
    -n "$w" -- "$PROG" "$ROUNDS" "$SAMPLES" "$CALLS" >"$OUT/raw/$NAME.w$w.txt"
done
COMMAND="bench/device_call_cost.sh"
[ "$NAME" = device_call ] || COMMAND="NAME=$NAME $COMMAND"
[ -z "${BASE_REF:-}" ] || COMMAND="BASE_REF=$BASE_REF $COMMAND"
# shellcheck disable=SC2086
LOAD="load average ${LOAD_START// /, } at start, $(cut -d' ' -f1-3 /proc/loadavg | sed 's/ /, /g') at end${PRIO:+, ranks under SCHED_FIFO}"
/usr/bin/python3 bench/device_call_report.py "$OUT" "$NAME" "$COMMIT" "$type" "$COMMAND" "$LOAD" $WORLDS
log "wrote $OUT/$NAME.md"
