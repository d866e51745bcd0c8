#!/usr/bin/env bash
# test_run_dumps.sh PSTATE LAUNCH_RANK — how `pstate run` asks its ranks for flight-recorder
# dumps (issue 27, items 13 and 16): through the job's store, never with a signal the program
# did not ask for.
#
#   - a rank that fails before it loads libpstate, while another rank sleeps in a program without
#     pstate: the sleeper is stopped by pstate run, never "killed by signal 10" (SIGUSR1);
#   - a rank fails while another waits in pstate_recv and a third sits in its own code, each with
#     program threads in nanosleep and in poll + read (tests/cli/launch_rank.c undisturbed): both
#     dumps are written, asked for through the store, and no nanosleep returns early, no poll or
#     read fails with EINTR; the pair segment rank 1 made for its recv is gone from /dev/shm;
#   - --dump-signal (opt-in) still sends SIGUSR1, and sets PSTATE_TRACE_SIGNAL=1 in the ranks.
# Prints "N passed, M failed" and exits non-zero when any check failed.
set -u
PSTATE=$(realpath "$1")
RANK_PROG=$(realpath "$2")
pass=0 fail=0
check() {  # check NAME CONDITION-EXIT-STATUS
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi
}
work=$(mktemp -d /tmp/pstate-run-dumps.XXXXXX)
job=""
trap 'rm -rf "$work"; [ -n "$job" ] && rm -f /dev/shm/pstate-"$job"-*' EXIT
show() { echo "--- $1:"; cat "$2"; }

# 1. Rank 0 fails before it loads libpstate; rank 1 is a shell that sleeps (no pstate at all).
out=$(cd "$work" && "$PSTATE" run -n 2 --grace-ms 500 -- sh -c '[ "$RANK" = 0 ] && exit 1; exec sleep 60' 2>&1)
rc=$?
[ $rc -eq 1 ]; check "the failed rank's status is the job's (got $rc)" $?
! grep -q 'signal 10' <<<"$out"; check "no rank is killed by SIGUSR1 (signal 10)" $?
grep -q 'failed: rank 0 exited with status 1 first; then rank 1 was stopped by pstate run' <<<"$out"
check "the sleeping rank is stopped by pstate run" $?
[ $fail -eq 0 ] || echo "$out"

# 2. Ranks whose own threads sleep in system calls while pstate run asks for dumps.
mkdir -p "$work/2"
LAUNCH_DIR=$work/2 PSTATE_TRACE_DIR=$work/2/trace PSTATE_TIMEOUT_MS=120000 \
  "$PSTATE" run -n 3 --grace-ms 5000 -- "$RANK_PROG" undisturbed >"$work/2/out" 2>"$work/2/err"
rc=$?
before=$fail
[ $rc -eq 1 ]; check "undisturbed: the job fails with rank 0's status (got $rc)" $?
for r in 1 2; do
  grep -q "^\[$r\] rank $r: undisturbed: no nanosleep returned early; poll and read returned the byte$" "$work/2/out"
  check "rank $r's nanosleep, poll and read were not interrupted" $?
  dump=$work/2/trace/rank$r.pstate-trace
  grep -q '^reason a request through the store (pstate run: rank 0 exited with status 1)$' "$dump" 2>/dev/null
  check "rank $r's dump was asked for through the store" $?
done
grep -q '^in_call pstate_recv$' "$work/2/trace/rank1.pstate-trace" 2>/dev/null
check "rank 1's dump shows it waiting in pstate_recv" $?
grep -q '^in_call -$' "$work/2/trace/rank2.pstate-trace" 2>/dev/null
check "rank 2's dump shows it idle in its own code" $?
! grep -q 'signal 10' "$work/2/err"; check "undisturbed: no rank is killed by SIGUSR1" $?
grep -q "flight-recorder dumps of ranks 1, 2 (none from 0) are in $work/2/trace" "$work/2/err"
check "pstate run says where the dumps are" $?
# rank 1 made the pair's segment for its recv, which rank 2 never opened: pstate run removes it
job=$(sed -n 's/^job //p' "$work/2/trace/rank1.pstate-trace" 2>/dev/null)
left=$(ls /dev/shm | grep -F "pstate-$job-" | tr '\n' ' ')
[ -n "$job" ] && [ -z "$left" ]; check "nothing of the failed job is left in /dev/shm (left: ${left:-none})" $?
[ $fail -eq $before ] || { show "pstate run's stdout" "$work/2/out"; show "its stderr" "$work/2/err"; }

# 3. --dump-signal: the ranks install pstate's SIGUSR1 handler (PSTATE_TRACE_SIGNAL=1) and get
#    the signal as well; a program without the handler is ended by it (the opt-in's price).
#    (rank 0 fails once rank 1 has said what it got: the file 3.said)
out=$(cd "$work" && "$PSTATE" run -n 2 --grace-ms 500 --dump-signal -- sh -c '
        if [ "$RANK" = 0 ]; then
          i=0; while [ ! -e 3.said ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done; exit 1
        fi
        echo "signal=$PSTATE_TRACE_SIGNAL"; touch 3.said; exec sleep 60' 2>&1)
grep -q '^\[1\] signal=1$' <<<"$out"; check "--dump-signal sets PSTATE_TRACE_SIGNAL=1 in the ranks" $?
grep -q 'rank 1 was killed by signal 10' <<<"$out"; check "--dump-signal sends SIGUSR1" $?

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
