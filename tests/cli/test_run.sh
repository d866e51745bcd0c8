#!/usr/bin/env bash
# test_run.sh PSTATE — `pstate run` as a launcher: environment, prefixes, failure propagation.
# Prints "N passed, M failed" and exits non-zero when any check failed.
set -u
PSTATE=$1
pass=0 fail=0
# A record of pinned CPUs of this test's own (src/cli/cpu_claims.hpp): jobs of other tests running
# at the same time would otherwise hold CPU 0 now and then.
CLAIMS=$(mktemp -d)
export PSTATE_CPU_CLAIM_DIR=$CLAIMS/first
trap 'rm -rf "$CLAIMS"' EXIT
check() {  # check NAME CONDITION-EXIT-STATUS
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi
}

out=$("$PSTATE" run -n 3 -- sh -c 'echo "r=$RANK w=$WORLD_SIZE l=$LOCAL_RANK lw=$LOCAL_WORLD_SIZE a=$MASTER_ADDR p=$MASTER_PORT t=${#PSTATE_JOB_TOKEN}"' 2>&1)
rc=$?
check "all ranks succeed -> exit 0" $rc
echo "$out" | grep -q '^\[1\] r=1 w=3 l=1 lw=3 a=127.0.0.1 p=[0-9][0-9]* t=32$'; check "torchrun variables and a 32-hex-digit job token" $?
[ "$(echo "$out" | grep -c '^\[[0-2]\] r=')" -eq 3 ]; check "one prefixed line per rank" $?

start=$(date +%s)
out=$("$PSTATE" run -n 3 --grace-ms 500 -- sh -c '[ "$RANK" = 1 ] && exit 7; sleep 60' 2>&1)
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 7 ]; check "a failing rank's exit status is propagated (got $rc)" $?
[ $took -lt 30 ]; check "the other ranks are stopped, not waited for (${took}s)" $?
echo "$out" | grep -q 'rank 1 exited with status 7'; check "the failing rank is named" $?

out=$("$PSTATE" run -n 2 -- sh -c '[ "$RANK" = 0 ] && kill -9 $$; sleep 60' 2>&1)
rc=$?
[ $rc -eq 137 ]; check "a killed rank gives 128+9 (got $rc)" $?
echo "$out" | grep -q 'rank 0 was killed by signal 9'; check "the signal is named" $?

out=$("$PSTATE" run -n 3 --keep-going -- sh -c '[ "$RANK" = 1 ] && kill -9 $$; sleep 1; echo "survived $RANK"' 2>&1)
rc=$?
[ $rc -eq 137 ]; check "--keep-going: the exit status is still the failed rank's (got $rc)" $?
[ "$(echo "$out" | grep -c '^\[[02]\] survived [02]$')" -eq 2 ]; check "--keep-going: the other ranks run to their end" $?
echo "$out" | grep -q 'rank 1 was killed by signal 9.*--keep-going: the other ranks go on'; check "--keep-going: the failure is named at once" $?

"$PSTATE" run -n 2 -- /nonexistent/program >/dev/null 2>&1
[ $? -eq 127 ]; check "a program that cannot start gives 127" $?

"$PSTATE" run -- true >/dev/null 2>&1
[ $? -eq 2 ]; check "missing -n is a usage error (exit 2)" $?

# The `sleep 60` of the ranks stopped above outlive them and keep their CPUs claimed (they
# inherited the locks): the checks of pinning start from a record of their own.
export PSTATE_CPU_CLAIM_DIR=$CLAIMS/pinning
out=$("$PSTATE" run -n 2 --bind-cores -- sh -c 'grep Cpus_allowed_list /proc/self/status' 2>&1)
[ "$(echo "$out" | grep -c 'Cpus_allowed_list')" -eq 2 ]; check "--bind-cores pins every rank" $?

out=$("$PSTATE" run -n 1 -- sh -c 'grep Cpus_allowed_list /proc/self/status' 2>&1)
echo "$out" | grep -q 'Cpus_allowed_list:[[:space:]]*0$'; check "ranks that fit on the CPUs are pinned by default" $?
out=$("$PSTATE" run -n 1 --no-bind -- sh -c 'grep Cpus_allowed_list /proc/self/status' 2>&1)
[ "$(echo "$out" | grep -c 'Cpus_allowed_list:[[:space:]]*0$')" -eq 0 ] || [ "$(nproc)" -eq 1 ]; check "--no-bind leaves the affinity alone" $?

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
