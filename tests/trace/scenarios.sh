#!/usr/bin/env bash
# tests/trace/scenarios.sh SCENARIO — a job of 4 ranks that goes wrong on purpose (issue 14), run
# by `pstate run` with the flight recorder on; then `pstate doctor` must name the right rank,
# group and operation in the first line of its verdict and exit 1.
#
#   skip      rank 3 skips all_reduce #5 on tp, then waits in a barrier on world: the others wait
#             in the tp all_reduce it never calls; the timeout ends the hang
#   kind      rank 2 calls all_gather where the others call all_reduce (MISMATCH on every rank)
#   count     rank 1 passes 16 elements where the others pass 8 (MISMATCH)
#   sigstop   rank 2 is stopped (SIGSTOP) while the others wait in a broadcast on world: it
#             leaves no dump (a stopped process cannot answer: its dump watcher is stopped too)
#   usercode  rank 3 sits in its own code and never enters all_reduce #5: the others time out;
#             `pstate run` asks it for a dump (through the job's store, which a thread of
#             pstate's own watches) while it is idle outside pstate
#   dies      rank 1 SIGKILLs itself before all_reduce #5: the others get PEER_LOST
#   good      the control: nothing goes wrong, doctor exits 0
#   shrunk    (--keep-going) rank 1 dies; the survivors shrink and go on; then rank 3 sits in its
#             own code (and exits there) while the others wait in the new tp's all_reduce: the
#             verdict names rank 3 on tp:0 of epoch 1 (its only dump is from before the shrink),
#             and rank 1's death only as recovered
#   ctrlc     usercode with a 60 s timeout, and Ctrl-C (SIGINT) to `pstate run` once rank 3 says
#             it sits in its own code (and 1 s more, for the others to enter all_reduce #5; waited
#             for, not a fixed time from the start, which a loaded machine may not reach): it asks
#             every rank for a dump before it stops them, the three in all_reduce still waiting
#
# Env: PSTATE_CLI (the pstate command), HANG_RANK (tests/trace/hang_rank). The timeout is 2 s,
# so each scenario takes 1-8 s.
set -euo pipefail
scenario=$1
: "${PSTATE_CLI:?}" "${HANG_RANK:?}"
work=$(mktemp -d /tmp/pstate-trace-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
export PSTATE_TRACE_DIR=$work/dumps PSTATE_TIMEOUT_MS=2000

# expected: culprit rank, group, operation (words the verdict's first line must hold)
case $scenario in
  skip)     culprit=3 group=tp:0 op=all_reduce ;;
  kind)     culprit=2 group=tp:0 op=all_gather; export HANG_CULPRIT=2 ;;
  count)    culprit=1 group=tp:0 op=all_reduce; export HANG_CULPRIT=1 ;;
  sigstop)  culprit=2 group=world:0 op=broadcast; export HANG_CULPRIT=2 ;;
  usercode) culprit=3 group=tp:0 op=all_reduce ;;
  dies)     culprit=1 group=tp:0 op=all_reduce; export HANG_CULPRIT=1 ;;
  good)     culprit= group= op= ;;
  ctrlc)    culprit=3 group=tp:0 op=all_reduce ;;
  shrunk)   culprit=3 group="tp:0 (epoch 1)" op=all_reduce; export HANG_CULPRIT=1 ;;
  *) echo "unknown scenario $scenario"; exit 2 ;;
esac

set +e
if [ "$scenario" = ctrlc ]; then
  PSTATE_TIMEOUT_MS=60000 "$PSTATE_CLI" run -n 4 --grace-ms 500 -- "$HANG_RANK" usercode >"$work/run.out" 2>"$work/run.err" &
  launcher=$!
  for _ in $(seq 600); do  # at most 60 s
    grep -q 'hang_rank 3: in user code' "$work/run.err" 2>/dev/null && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
  done
  sleep 1
  kill -INT "$launcher"
  wait "$launcher"
elif [ "$scenario" = shrunk ]; then
  "$PSTATE_CLI" run -n 4 --grace-ms 500 --keep-going -- "$HANG_RANK" "$scenario" >"$work/run.out" 2>"$work/run.err"
else
  "$PSTATE_CLI" run -n 4 --grace-ms 500 -- "$HANG_RANK" "$scenario" >"$work/run.out" 2>"$work/run.err"
fi
run_rc=$?
set -e
echo "--- pstate run (exit $run_rc), its own lines:"
grep '^pstate run' "$work/run.err" || true
ls "$PSTATE_TRACE_DIR" 2>/dev/null | sed 's/^/dump: /' || true

set +e
"$PSTATE_CLI" doctor "$PSTATE_TRACE_DIR" >"$work/doctor.out" 2>"$work/doctor.err"
doctor_rc=$?
set -e
echo "--- pstate doctor $PSTATE_TRACE_DIR (exit $doctor_rc):"
cat "$work/doctor.out" "$work/doctor.err"

fail() { echo "FAIL ($scenario): $*"; echo "--- rank output:"; cat "$work/run.err"; exit 1; }
if [ "$scenario" = good ]; then
  [ "$run_rc" = 0 ] || fail "the control job failed (exit $run_rc)"
  [ "$doctor_rc" = 0 ] || fail "doctor found a problem in a good job (exit $doctor_rc)"
  [ "$(ls "$PSTATE_TRACE_DIR" | wc -l)" = 4 ] || fail "not every rank wrote its pstate_trace_dump"
  echo "PASS ($scenario): $(head -n 1 "$work/doctor.out")"
  exit 0
fi
[ "$run_rc" != 0 ] || fail "the job was meant to fail but pstate run exited 0"
# a rank stopped while it wrote a dump leaves its temporary file; pstate run removes this job's
! ls "$PSTATE_TRACE_DIR" | grep -q '\.tmp\.' || fail "pstate run left temporary dump files: $(ls "$PSTATE_TRACE_DIR")"
grep -q "pstate doctor $PSTATE_TRACE_DIR" "$work/run.err" || fail "pstate run did not say where the dumps are"
[ "$doctor_rc" = 1 ] || fail "pstate doctor exited $doctor_rc, expected 1 (a culprit named)"
first=$(head -n 1 "$work/doctor.out")
grep -qw "rank $culprit" <<<"$first" || fail "the verdict does not name rank $culprit: $first"
grep -qF "$group" <<<"$first" || fail "the verdict does not name group $group: $first"
grep -qw "$op" <<<"$first" || fail "the verdict does not name $op: $first"
case $scenario in
  ctrlc)    [ "$run_rc" = 130 ] || fail "pstate run exited $run_rc after SIGINT, expected 130"
            grep -qi "outside pstate" <<<"$first" || fail "the verdict does not say rank 3 is outside pstate: $first"
            for r in 0 1 2; do grep -q '^in_call pstate_all_reduce$' "$PSTATE_TRACE_DIR/rank$r.pstate-trace" ||
              fail "rank $r's dump does not show it blocked in pstate_all_reduce"; done ;;
  usercode) grep -qi "outside pstate" <<<"$first" || fail "the verdict does not say rank 3 is outside pstate: $first"
            grep -q '^in_call -$' "$PSTATE_TRACE_DIR/rank3.pstate-trace" || fail "rank 3's requested dump is not idle"
            grep -q '^reason a request through the store (pstate run: ' "$PSTATE_TRACE_DIR/rank3.pstate-trace" ||
              fail "rank 3's dump was not asked for through the store" ;;
  sigstop)  [ ! -e "$PSTATE_TRACE_DIR/rank2.pstate-trace" ] || fail "the stopped rank 2 left a dump"
            grep -q "none from 2" "$work/run.err" || fail "pstate run did not say rank 2 left no dump" ;;
  dies)     grep -q ' PEER_LOST ' "$PSTATE_TRACE_DIR/rank0.pstate-trace" || fail "rank 0's dump has no PEER_LOST entry" ;;
  shrunk)   grep -q '^epochs 1:' "$PSTATE_TRACE_DIR/rank0.pstate-trace" || fail "rank 0's dump has no epochs line"
            grep -q "rank 3 left no dump of epoch 1 (only an older one" <<<"$first" || fail "rank 3's old dump is not said to be old: $first"
            grep -q "^recovered: .*rank 1 left no dump: its peers lost it" "$work/doctor.out" ||
              fail "rank 1's death before the shrink is not listed as recovered" ;;
  kind|count) grep -q ' MISMATCH ' "$PSTATE_TRACE_DIR/rank0.pstate-trace" || fail "rank 0's dump has no MISMATCH entry" ;;
esac
# the timeline of the same dumps: a trace-event file with one process per rank that left a dump
"$PSTATE_CLI" doctor "$PSTATE_TRACE_DIR" --timeline "$work/timeline.json" >/dev/null || [ $? = 1 ] || fail "--timeline failed"
/usr/bin/python3 - "$work/timeline.json" "$PSTATE_TRACE_DIR" <<'EOF' || fail "the timeline is wrong"
import json, os, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
ranks = {e["pid"] for e in events if e.get("ph") == "X"}
dumps = len([f for f in os.listdir(sys.argv[2]) if f.endswith(".pstate-trace")])
assert len(ranks) == dumps, (ranks, dumps)
EOF
echo "PASS ($scenario): $first"
