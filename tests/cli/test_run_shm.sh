#!/usr/bin/env bash
# test_run_shm.sh PSTATE LAUNCH_RANK — Ctrl-C to `pstate run` leaves nothing of its job in
# /dev/shm (issue 27, item 11), and nothing of another job is touched.
#
# The job (tests/cli/launch_rank.c block): rank 0 waits in pstate_barrier on the world, rank 1 in
# pstate_recv from rank 0, so rank 0 has made the world's collective segment
# (/pstate-<job>-0-0-coll) and rank 1 the pair's point-to-point segment (/pstate-<job>-0-0-p2p-0-1),
# and neither name is unlinked by its ranks: a name goes once every rank of it attached, and the
# peer that would attach waits elsewhere. The test waits (bounded) until both names exist, sends
# SIGINT to `pstate run` (its ranks are then ended by SIGTERM, which runs no code of theirs), and
# checks that no /dev/shm name of the job is left once `pstate run` exited, while names of
# another job made beforehand (same form, another job id) are still there.
# Prints "N passed, M failed" and exits non-zero when any check failed.
set -u
PSTATE=$(realpath "$1")
RANK_PROG=$(realpath "$2")
pass=0 fail=0
check() {  # check NAME CONDITION-EXIT-STATUS
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi
}

work=$(mktemp -d /tmp/pstate-run-shm.XXXXXX)
other=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')  # another job's id: 16 hex digits, like a job's
decoys=("/dev/shm/pstate-$other-0-0-coll" "/dev/shm/pstate-$other-0-0-p2p-0-1" "/dev/shm/pstate-$other-5-2-mq")
job=""
launcher=""
cleanup() {
  [ -n "$launcher" ] && kill -KILL "$launcher" 2>/dev/null
  rm -f "${decoys[@]}"
  [ -n "$job" ] && rm -f /dev/shm/pstate-"$job"-*
  rm -rf "$work"
}
trap cleanup EXIT
for d in "${decoys[@]}"; do echo "another job" >"$d"; done

export LAUNCH_DIR=$work PSTATE_TRACE_DIR=$work/trace PSTATE_TIMEOUT_MS=120000
"$PSTATE" run -n 2 --grace-ms 500 -- "$RANK_PROG" block >"$work/out" 2>"$work/err" &
launcher=$!

# Both ranks blocked, and their names in /dev/shm (bounded: 60 s).
for _ in $(seq 600); do
  if [ -z "$job" ] && [ -s "$work/init-rank0.pstate-trace" ]; then
    job=$(sed -n 's/^job //p' "$work/init-rank0.pstate-trace")
  fi
  if [ -n "$job" ] && [ -e "/dev/shm/pstate-$job-0-0-coll" ] && [ -e "/dev/shm/pstate-$job-0-0-p2p-0-1" ]; then
    break
  fi
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.1
done
echo "job $job; its names in /dev/shm before Ctrl-C: $(ls /dev/shm | grep -F "pstate-$job-" | tr '\n' ' ')"
[ -n "$job" ] && [ -e "/dev/shm/pstate-$job-0-0-coll" ] && [ -e "/dev/shm/pstate-$job-0-0-p2p-0-1" ]
check "the ranks wait with the collective and the pair segment made (the premise)" $?

kill -INT "$launcher"
wait "$launcher"
rc=$?
launcher=""
[ $rc -eq 130 ]; check "Ctrl-C: pstate run exits 130 (got $rc)" $?
left=$(ls /dev/shm | grep -F "pstate-$job-" | tr '\n' ' ')
[ -n "$job" ] && [ -z "$left" ]; check "nothing of the job is left in /dev/shm (left: ${left:-none})" $?
for d in "${decoys[@]}"; do
  [ "$(cat "$d" 2>/dev/null)" = "another job" ]; check "another job's $d is untouched" $?
done

if [ $fail -ne 0 ]; then echo "--- pstate run's output:"; cat "$work/out" "$work/err"; fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
