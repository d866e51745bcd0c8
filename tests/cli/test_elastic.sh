#!/usr/bin/env bash
# test_elastic.sh PSTATE ELASTIC_SERVING — a job that survives a killed rank, end to end through
# the launcher: examples/elastic_serving under `pstate run` (the launcher serves the store).
#   --keep-going: rank 2 of 4 SIGKILLs itself inside step 20's all-reduce (or, when the machine is
#     so loaded that its killer thread runs late, right after it: then the survivors may have
#     finished step 20 and fail in 21); the three survivors shrink, re-initialize tp 3, redo the
#     step that failed (the one each says it failed in, the same on all three) and finish every
#     step exactly; the exit status is still rank 2's (137);
#   --respawn 1: the same kill, then the launcher starts a replacement with RANK=2 and
#     PSTATE_REJOIN=1, the survivors admit it with pstate_grow, the world is 4 again, every rank
#     (the replacement too) finishes exactly, and the job exits 0;
#   two kills with --respawn 1: the budget is spent on the first; the second failure stands.
#   --respawn with --rank0-store, or K < 1: usage errors (exit 2).
# Prints "N passed, M failed" and exits non-zero when any check failed.
set -u
PSTATE=$1
APP=$2
pass=0 fail=0
check() {  # check NAME CONDITION-EXIT-STATUS
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi
}

out=$(timeout 120 "$PSTATE" run -n 4 --keep-going -- "$APP" --steps 60 --kill-rank 2 --kill-at-step 20 --grow-every 0 2>&1)
rc=$?
echo "$out" | grep -E 'SIGKILL to myself|shrinking|exact on a world|steps done|pstate run' | sed 's/^/    /'
[ $rc -eq 137 ]; check "--keep-going: exit status of the killed rank (got $rc)" $?
echo "$out" | grep -Eq "^\[2\] launch rank 2: SIGKILL to myself (inside|after) step 20's all-reduce"
check "--keep-going: rank 2 dies at step 20 (inside its all-reduce, or right after it when its killer ran late)" $?
[ "$(echo "$out" | grep -c '60 steps done as rank [0-2] of 3 (1 shrink, 0 grows), all exact')" -eq 3 ]
check "--keep-going: the three survivors finish every step exactly on a world of 3" $?
# The step in flight when rank 2 died, as the survivors report it (the step whose all-reduce
# failed): 20, or 21 when the kill came after rank 2's part of step 20 was done (see the top). Each
# survivor's only failure and only redone step are that step, on a world of 3: the step that failed
# is redone (not skipped: none lost; not an earlier one: none done twice), the same on every rank.
failed=$(echo "$out" | sed -n 's/^\[0\] launch rank 0: step \([0-9]*\): PSTATE_ERR_[A-Z_]*: shrinking$/\1/p' | head -1)
redo_ok=1
case "$failed" in 20 | 21) redo_ok=0 ;; esac
for r in 0 1 3; do
  seq=$(echo "$out" | grep "^\[$r\] " | sed -n -e 's/.*: step \([0-9]*\): PSTATE_ERR_[A-Z_]*: shrinking$/failed \1;/p' \
    -e 's/.*: step \([0-9]*\) exact on a world of \([0-9]*\),.*/redone \1 on a world of \2;/p' | tr -d '\n')
  [ "$seq" = "failed $failed;redone $failed on a world of 3;" ] || { redo_ok=1; echo "    rank $r: $seq"; }
done
check "--keep-going: the step in flight (${failed:-none}) failed on every survivor and is redone on the new world" $redo_ok

out=$(timeout 120 "$PSTATE" run -n 4 --respawn 1 -- "$APP" --steps 80 --kill-rank 2 --kill-at-step 20 --grow-every 10 2>&1)
rc=$?
echo "$out" | grep -E 'exact on a world|joined|admitted|steps done|pstate run' | sed 's/^/    /'
[ $rc -eq 0 ]; check "--respawn: the job exits 0 once the replacement finished (got $rc)" $?
echo "$out" | grep -q 'rank 2 was killed by signal 9.*--respawn: starting a replacement with RANK=2 and PSTATE_REJOIN=1 (1 of 1)'
check "--respawn: the launcher names the death and the replacement" $?
echo "$out" | grep -q '^\[2\] launch rank 2 (replacement): admitted as rank 3 of 4'; check "--respawn: the replacement is admitted as the last rank" $?
[ "$(echo "$out" | grep -c '80 steps done as rank [0-2] of 4 (1 shrink, 1 grow), all exact')" -eq 3 ]
check "--respawn: the survivors shrink once, grow once, and end on a world of 4, exact" $?
echo "$out" | grep -q '^\[2\] launch rank 2: 80 steps done as rank 3 of 4 (0 shrinks, 0 grows), all exact'
check "--respawn: the replacement finishes exactly" $?

out=$(timeout 120 "$PSTATE" run -n 3 --respawn 1 -- sh -c '[ "$RANK" = 1 ] || exit 0; [ -n "${PSTATE_REJOIN:-}" ] && exit 3; kill -9 $$' 2>&1)
rc=$?
[ $rc -eq 3 ]; check "--respawn 1: a second failure stands once the budget is spent (got $rc)" $?

"$PSTATE" run -n 2 --respawn 1 --rank0-store -- true >/dev/null 2>&1
[ $? -eq 2 ]; check "--respawn with --rank0-store is a usage error" $?
"$PSTATE" run -n 2 --respawn 0 -- true >/dev/null 2>&1
[ $? -eq 2 ]; check "--respawn 0 is a usage error" $?

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
