#!/usr/bin/env bash
# bench/agreement_instructions.sh — what the agreement costs per call on UCX, in instructions:
# a measure that a shared machine does not move (bench/agreement_cost.sh's nanoseconds do).
#
#   bench/agreement_instructions.sh [OP BYTES]      (default: all_reduce 8; 2 ranks, PSTATE_SHM=0)
#   BASE_DIR=DIR [SHM=1] bench/agreement_instructions.sh [OP BYTES]
#
# Builds libpstate as it ships ($BUILD_DIR, default build/) and with the agreement compiled out
# (-DPSTATE_AGREEMENT=OFF, $OFF_DIR, default build-noagree/, as agreement_cost.sh does), runs
# bench/agreement_loop.c under valgrind's callgrind on both (CALLS untimed + CALLS timed calls
# + the final check, collected inside the pstate_ entry point only), and prints per call and
# rank 0: all instructions, those inside UcxWorker::wait (progress and the spin until the peer's
# message is there: they grow with how long the peer takes, so they differ between runs) and
# those outside it (the work of the call itself: the stable number to compare), then the
# functions whose instructions per call differ most between on and off. The callgrind files stay
# in $OUT (default $BUILD_DIR/agreement_instructions/) for callgrind_annotate.
#
# BASE_DIR=DIR compares two builds instead (a change against main, say): DIR ("base", built as it
# is) against $BUILD_DIR ("this"), no agreement-off build. SHM=1 runs the ranks on shared memory
# (PSTATE_SHM unset) instead of UCX. OP may also be broadcast_object (BYTES from root 0). "in
# wait" is then the transports' own part: inside UcxWorker::wait, and inside the shared-memory
# protocol's entry points (ShmGroup::all_reduce, ShmGroup::arrive, ShmMessageQueue::enqueue and
# ::dequeue), whose spinning, inlined into them, also grows with how long the peer takes; what is
# outside them is the work of the library around the transport, the number to compare.
#
# PEER_NATIVE=1 runs rank 1 without valgrind (rank 0, the one counted, then seldom waits: the
# count of a loaded machine stays the call's own).
#
# LAUNCHER=PATH runs both sides' ranks with that `pstate` command (e.g. the base build's) instead of
# each build's own, and builds only libpstate here: the launcher only starts the ranks and serves
# their store, and callgrind counts inside the library's entry point alone.
#
# perf stat would count the same on real hardware; this VM exposes no hardware counters.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
OFF_DIR=${OFF_DIR:-build-noagree}
OP=${1:-all_reduce}
BYTES=${2:-8}
CALLS=${CALLS:-2000}
OUT=${OUT:-$ROOT/$BUILD_DIR/agreement_instructions}  # callgrind files (ignored by git)
BASE_DIR=${BASE_DIR:-}
SHM=${SHM:-0}
mkdir -p "$OUT"
log() { echo "bench/agreement_instructions.sh: $*" >&2; }
command -v valgrind >/dev/null || { log "needs valgrind (./build.sh deps installs it)"; exit 1; }
if [ "$SHM" = 1 ]; then unset PSTATE_SHM; transport="shared memory"; else export PSTATE_SHM=0; transport="PSTATE_SHM=0"; fi

type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || true)
[ -f "$BUILD_DIR/CMakeCache.txt" ] || cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
type=${type:-RelWithDebInfo}
LAUNCHER=${LAUNCHER:-}
if [ -n "$LAUNCHER" ]; then
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target pstate >/dev/null
else
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target pstate_cli pstate >/dev/null
fi
if [ -n "$BASE_DIR" ]; then
  sides=(this base)
else
  sides=(on off)
  cmake -S . -B "$OFF_DIR" -DCMAKE_BUILD_TYPE="$type" -DPSTATE_AGREEMENT=OFF -DPSTATE_BUILD_TESTS=OFF >/dev/null
  cmake --build "$OFF_DIR" -j "$(nproc)" --target pstate_cli pstate >/dev/null
fi

entry=pstate_$OP  # the C entry point the loop calls
for side in "${sides[@]}"; do
  dir=$BUILD_DIR
  [ "$side" = off ] && dir=$OFF_DIR
  [ "$side" = base ] && dir=$BASE_DIR
  case "$dir" in /*) lib=$dir ;; *) lib=$ROOT/$dir ;; esac
  cc -O2 -Wall -Wextra -I include bench/agreement_loop.c -L "$lib" -Wl,-rpath,"$lib" -lpstate \
    -o "$OUT/agreement_loop.$side"
  rm -f "$OUT/callgrind.$side".*
  # a long deadline: every call is ~50x slower under valgrind
  # PEER_NATIVE=1: rank 1 runs without valgrind, ~50x faster than rank 0, so rank 0 finds its part
  # there on arrival and barely waits: the polling that grows with a wait (and with the machine's
  # load) all but leaves rank 0's count, which is then the call's own work.
  PSTATE_TIMEOUT_MS=600000 timeout 900 "${LAUNCHER:-$dir/pstate}" run --bind-cores -n 2 -- sh -c \
    "if [ \"\$RANK\" != 0 ] && [ \"${PEER_NATIVE:-0}\" = 1 ]; then exec $OUT/agreement_loop.$side $OP $BYTES $CALLS 1; fi
     valgrind --tool=callgrind --toggle-collect=$entry --callgrind-out-file=$OUT/callgrind.$side.\$RANK \
       $OUT/agreement_loop.$side $OP $BYTES $CALLS 1 2>$OUT/valgrind.$side.\$RANK.log" >/dev/null
done

/usr/bin/python3 - "$OUT" $((2 * CALLS + 1)) "$OP" "$BYTES" "$transport" "${sides[@]}" <<'EOF'
import collections, re, subprocess, sys
out, calls, op, nbytes, transport, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
# The transports' own parts (inclusive): the UCX worker's waits, the shared-memory protocols.
WAITS = ('pstate::UcxWorker::wait(', 'pstate::shm::ShmGroup::all_reduce(', 'pstate::shm::ShmGroup::arrive(',
         'pstate::shm::ShmMessageQueue::enqueue(', 'pstate::shm::ShmMessageQueue::dequeue(')

def annotate(path, inclusive):
    text = subprocess.run(['callgrind_annotate', '--threshold=100', f'--inclusive={"yes" if inclusive else "no"}', path],
                          capture_output=True, text=True, check=True).stdout
    rows = collections.Counter()
    for line in text.splitlines():
        m = re.match(r'\s*([\d,]+) \([ \d.]+%\)\s+(.*)$', line)
        if m:
            name = re.sub(r' \[/[^\]]*\]$', '', m.group(2))
            rows[re.sub(r'^(\?\?\?|[^:]*\.[chS](pp)?):', '', name)] += int(m.group(1).replace(',', ''))
    return rows

summary, self_cost = {}, {}
for side in (a, b):
    inc = annotate(f'{out}/callgrind.{side}.0', True)
    total = inc['PROGRAM TOTALS']
    wait = sum(max((v for k, v in inc.items() if k.startswith(w)), default=0) for w in WAITS)
    summary[side] = (total / calls, wait / calls, (total - wait) / calls)
    self_cost[side] = annotate(f'{out}/callgrind.{side}.0', False)
print(f'{op} {nbytes} B, 2 ranks, {transport}, rank 0, instructions per call ({calls} calls):')
print(f'{"":6} {"all":>8} {"in wait":>8} {"outside":>8}')
for side in (a, b):
    print(f'{side:6} ' + ' '.join(f'{v:8.0f}' for v in summary[side]))
diff = summary[a][2] - summary[b][2]
print(f'{a}-{b} {diff:+{33 - len(a) - len(b)}.0f} outside the wait ({100 * diff / summary[b][2]:+.1f}% of {b})')
print('\nfunctions (self instructions per call; wait-loop functions vary with timing):')
on, off = self_cost[a], self_cost[b]
names = sorted((set(on) | set(off)) - {'PROGRAM TOTALS'}, key=lambda k: -abs(on[k] - off[k]))
for k in names[:25]:
    if abs(on[k] - off[k]) / calls < 2:
        break
    print(f'{on[k] / calls:8.1f} {off[k] / calls:8.1f} {(on[k] - off[k]) / calls:+8.1f}  {k[:100]}')
EOF
