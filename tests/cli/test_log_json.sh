#!/usr/bin/env bash
# test_log_json.sh PSTATE LAUNCH_RANK — PSTATE_LOG_FORMAT=json (issue 45, item 4): a 2-rank job
# under `pstate run` at PSTATE_DEBUG=INFO (tests/cli/launch_rank.c log_json: a MISMATCH on both
# ranks, rank 1 exits 3) writes only JSON objects on stderr, each with every key, the failed call's
# line with its group, call and status, and the launcher's own lines too; log_json_check.py parses
# them with Python's json module, independently of the library. Without PSTATE_LOG_FORMAT the same
# job's lines are text, as they were. Prints "N passed, M failed"; exits non-zero when one failed.
set -u
PSTATE=$1
LAUNCH_RANK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
pass=0 fail=0
check() {  # check NAME CONDITION-EXIT-STATUS
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi
}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
export PSTATE_CPU_CLAIM_DIR=$DIR/claims PSTATE_TRACE_DIR=$DIR/trace LAUNCH_DIR=$DIR

PSTATE_DEBUG=INFO PSTATE_LOG_FORMAT=json "$PSTATE" run -n 2 -- "$LAUNCH_RANK" log_json >"$DIR/out" 2>"$DIR/err"
rc=$?
[ $rc -eq 3 ]; check "json: the job ran (rank 1 exits 3; got $rc)" $?
/usr/bin/python3 "$HERE/log_json_check.py" "$DIR/err"; check "json: every stderr line is a JSON log line with the fields (log_json_check.py)" $?

PSTATE_DEBUG=INFO "$PSTATE" run -n 2 -- "$LAUNCH_RANK" log_json >"$DIR/out" 2>"$DIR/err"
rc=$?
[ $rc -eq 3 ]; check "text: the job ran (got $rc)" $?
! grep -q '{"time"' "$DIR/err"; check "text: no JSON line without PSTATE_LOG_FORMAT" $?
grep -q '^\[1\] \[pstate 1\] INFO group world:0: all_reduce failed (PSTATE_ERR_MISMATCH): ' "$DIR/err"
check "text: the failed call's line in the text format" $?
grep -q '^pstate run: failed: rank 1 exited with status 3' "$DIR/err"; check "text: the launcher's line as before" $?
[ "$(grep -cv '^\(\[[01]\] \)\?\[pstate\( [01]\)\?\] \(INFO\|WARN\) \|^pstate run: ' "$DIR/err")" -eq 0 ]
check "text: every line is '[R] [pstate R] LEVEL ...', '[pstate] LEVEL ...' (the launcher's store) or 'pstate run: ...'" $?
[ $fail -eq 0 ] || { echo "--- stderr of the last job:"; cat "$DIR/err"; }

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
