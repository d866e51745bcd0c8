#!/bin/bash
# doctor_fixtures.sh PSTATE — `pstate doctor` on the hand-written dumps of tests/trace/fixtures/.
#
# Each fixture folder is one scenario designed by hand (docs/trace-format.md): the expected exit
# status and verdict line below come from that design (which rank was made to stay away, which
# group and collective), not from a run of the doctor. Checks: the first line of the text output,
# the exit status, the --json object (parsed by python3: verdict, culprits, first finding), the
# refusals of unreadable input (exit 2, the file and line named), and --timeline: the JSON's one
# process per rank and its "(stuck)" events, the PNG's magic bytes, gnuplot missing from PATH.
set -u
PSTATE=$1
FIX=$(cd "$(dirname "$0")" && pwd)/fixtures
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# run DIR [options]: runs the doctor; sets rc, out (stdout), err (stderr)
run() {
  "$PSTATE" doctor "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  out=$(cat "$TMP/out")
  err=$(cat "$TMP/err")
}

# expect SCENARIO STATUS VERDICT: exit status and the exact first line
expect() {
  local scenario=$1 status=$2 verdict=$3
  run "$FIX/$scenario"
  [ "$rc" = "$status" ] || fail "$scenario: exit status $rc, expected $status (stderr: $err)"
  local first
  first=$(head -n 1 "$TMP/out")
  [ "$first" = "$verdict" ] || fail "$scenario: first line
  got:      $first
  expected: $verdict"
}

# expect_json SCENARIO STATUS 'PYTHON CHECKS on d (the object) and verdict': --json parses and agrees
expect_json() {
  local scenario=$1 status=$2 checks=$3
  local verdict
  run "$FIX/$scenario"
  verdict=$(head -n 1 "$TMP/out")
  run "$FIX/$scenario" --json
  [ "$rc" = "$status" ] || fail "$scenario --json: exit status $rc, expected $status"
  "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
verdict = sys.argv[2]
for key in ("verdict", "exit_status", "job", "culprit_ranks", "findings", "missing_ranks", "groups"):
    assert key in d, "no key " + key
assert d["verdict"] == verdict, "verdict differs from the text output: " + d["verdict"]
for f in d["findings"]:
    assert set(f) >= {"kind", "group", "seq", "op", "ranks", "waiting_ranks", "text"}, f
for g in d["groups"]:
    assert set(g) >= {"name", "members", "progress"}, g
' "$TMP/out" "$verdict" || fail "$scenario --json: malformed"
  "$PY" -c "import json, sys
d = json.load(open(sys.argv[1]))
f = d['findings'][0] if d['findings'] else None
$checks" "$TMP/out" || fail "$scenario --json: $checks"
}

# expect_refused SCENARIO_DIR TEXT: exit 2, nothing on stdout, stderr contains TEXT
expect_refused() {
  local dir=$1 text=$2
  run "$dir"
  [ "$rc" = 2 ] || fail "$dir: exit status $rc, expected 2 (stdout: $out)"
  [ -z "$out" ] || fail "$dir: refused input printed on stdout: $out"
  case "$err" in
    *"$text"*) ;;
    *) fail "$dir: stderr lacks '$text': $err" ;;
  esac
}

# ---- verdicts ------------------------------------------------------------------------------
expect mismatch 1 "pstate doctor: rank 2 called all_gather (count 8 float32) as collective #5 of tp:0, where ranks 0, 1, 3 called all_reduce (count 8 float32 sum)"
expect behind-idle 1 "pstate doctor: rank 3 is behind on tp:0: ranks 0, 1, 2 wait in all_reduce #9 (count 4 float32 sum) that rank 3 never called (it is idle outside pstate, last call returned 5.0 s earlier)"
# rank 3 posted all_reduce #7 of tp:1 (1 waiter) before ranks 0-2 posted barrier #3 of world (3
# waiters): the group with the most waiting ranks decides, so rank 3, not rank 2.
expect cycle 1 "pstate doctor: rank 3 is behind on world: ranks 0, 1, 2 wait in barrier #3 that rank 3 never called (it is inside pstate_all_reduce, waiting in all_reduce #7 of tp:1, which rank 2 never called); a cycle: the ranks call collectives on these groups in different orders"
expect missing-dead 1 "pstate doctor: rank 3 left no dump: its peers lost it (PEER_LOST in all_reduce #7 on tp:0): it died or was killed"
expect missing-stopped 1 "pstate doctor: rank 3 left no dump and never arrived at broadcast #3 of world where ranks 0, 1, 2 waited (TIMEOUT): it is stopped, hung or dead"
expect p2p-send-without-recv 1 "pstate doctor: rank 1 is behind on pp:0: rank 0 waits in send #4 to rank 1 (count 1024 bfloat16) that rank 1 never received (it is idle outside pstate, last call returned 2.5 s earlier)"
# rank 1's all_reduce #9 failed with TRANSPORT; 0, 2, 3 called it too and still wait: the failure
# is the verdict, the others are "stuck" (no rank stayed away).
expect transport-failed 1 "pstate doctor: rank 1's all_reduce #9 of tp:0 failed with TRANSPORT (TRANSPORT: tp:0 all_reduce #9: shm ring: peer 2 wrote a bad sequence number)"
expect all-good 0 "pstate doctor: no problem found in 2 dumps of job j-good"
# j-new (ranks 0, 1, world 2) dumped after j-old (ranks 2, 3 of world 4): j-new is analysed, two
# ranks that disagree are both named.
expect two-jobs 1 "pstate doctor: ranks 0, 1 disagree on collective #2 of world: rank 0 called all_reduce (count 4 float32 sum), rank 1 called broadcast (count 4 float32 root 0)"
grep -qx "ignored 2 dumps of other jobs (j-old): job j-new dumped last" "$TMP/out" || fail "two-jobs: the ignored dumps are not reported: $out"
grep -q "^group tp:0 (ranks 0,1,2,3): collectives called: rank 0 10, rank 1 10, rank 2 10, rank 3 9$" <("$PSTATE" doctor "$FIX/behind-idle") ||
  fail "behind-idle: no per-group progress line"
# Epochs (tests/trace/make_shrink_fixtures.py): rank 2 died in tp:0's all_reduce #3; ranks 0, 1, 3
# shrank the world (epoch 1: world:0 and tp:0 again, of ranks 0, 1, 3) and went on. shrink-behind:
# rank 1 then stayed away from the new tp:0's all_reduce #2, idle since 3.51 s; ranks 0 and 3 timed
# out and dumped at 6.01 / 6.02 s. The verdict is rank 1 on the new group; the death before the
# shrink is listed as recovered, not blamed.
expect shrink-behind 1 "pstate doctor: rank 1 is behind on tp:0 (epoch 1): ranks 0, 3 waited in all_reduce #2 (count 4 float32 sum) (TIMEOUT) that rank 1 never called (it is idle outside pstate, last call returned 2.5 s earlier)"
grep -qx "recovered: before the world was rebuilt (epoch 0; now epoch 1): rank 2 left no dump: its peers lost it (PEER_LOST in all_reduce #3 on tp:0 (epoch 0)): it died or was killed" "$TMP/out" ||
  fail "shrink-behind: rank 2's death is not listed as recovered: $out"
grep -qx "group tp:0 (epoch 1) (ranks 0,1,3): collectives called: rank 0 3, rank 1 2, rank 3 3" "$TMP/out" ||
  fail "shrink-behind: no progress line of the new tp:0: $out"
# shrink-stale: the same, but rank 1's only dump is the one of its PEER_LOST before the shrink: it
# tells nothing of the new groups, so rank 1 counts as missing there (not as having called none).
expect shrink-stale 1 "pstate doctor: rank 1 left no dump of epoch 1 (only an older one, from before the world was rebuilt) and never arrived at all_reduce #2 of tp:0 (epoch 1) where ranks 0, 3 waited (TIMEOUT): it is stopped, hung or dead"
# shrink-recovered: after the shrink all finished the new tp:0's all_reduce #0-#2; nothing is wrong now.
expect shrink-recovered 0 "pstate doctor: no problem found in 3 dumps of job j-shrok (its world of epoch 1; 1 recovered problem before it, listed below)"
# grow-recovered: then a replacement for rank 2 was admitted (epoch 2, appended last); its dump
# (first group of epoch 2) is not the dead rank 2's: that one is still the recovered death, not a
# rank "behind" on the old tp:0.
expect grow-recovered 0 "pstate doctor: no problem found in 4 dumps of job j-grow (its world of epoch 2; 1 recovered problem before it, listed below)"
grep -qx "  rank 2: no dump of epoch 0 (its dump is of epoch 2)" "$TMP/out" || fail "grow-recovered: the replacement's dump is read as the dead rank's: $out"

# ---- --json --------------------------------------------------------------------------------
expect_json mismatch 1 "assert d['culprit_ranks'] == [2] and (f['kind'], f['group'], f['seq'], f['op']) == ('mismatch', 'tp:0', 5, 'all_gather') and d['missing_ranks'] == []"
expect_json behind-idle 1 "assert d['culprit_ranks'] == [3] and (f['kind'], f['group'], f['seq'], f['op'], f['ranks'], f['waiting_ranks']) == ('behind', 'tp:0', 9, 'all_reduce', [3], [0, 1, 2]) and [g['progress'] for g in d['groups'] if g['name'] == 'tp:0'] == [{'0': 10, '1': 10, '2': 10, '3': 9}]"
expect_json cycle 1 "assert d['culprit_ranks'] == [3] and (f['kind'], f['group'], f['seq'], f['op']) == ('behind', 'world', 3, 'barrier') and any(x['group'] == 'tp:1' and x['ranks'] == [2] for x in d['findings'])"
expect_json missing-dead 1 "assert d['culprit_ranks'] == [3] and d['missing_ranks'] == [3] and (f['kind'], f['group'], f['seq'], f['op'], f['waiting_ranks']) == ('missing', 'tp:0', 7, 'all_reduce', [0, 1, 2])"
expect_json missing-stopped 1 "assert d['culprit_ranks'] == [3] and d['missing_ranks'] == [3] and (f['kind'], f['group'], f['seq'], f['op']) == ('missing', 'world', 3, 'broadcast')"
expect_json p2p-send-without-recv 1 "assert d['culprit_ranks'] == [1] and (f['kind'], f['group'], f['seq'], f['op'], f['waiting_ranks']) == ('behind', 'pp:0', 4, 'send', [0])"
expect_json transport-failed 1 "assert d['culprit_ranks'] == [1] and (f['kind'], f['group'], f['seq'], f['op']) == ('failed', 'tp:0', 9, 'all_reduce') and [(x['kind'], x['waiting_ranks']) for x in d['findings'][1:]] == [('stuck', [0, 2, 3])]"
expect_json all-good 0 "assert d['culprit_ranks'] == [] and d['findings'] == [] and d['exit_status'] == 0 and d['dumps'] == 2"
expect_json shrink-behind 1 "assert d['epoch'] == 1 and d['culprit_ranks'] == [1] and d['missing_ranks'] == [2] and (f['kind'], f['group'], f['epoch'], f['seq'], f['waiting_ranks']) == ('behind', 'tp:0', 1, 2, [0, 3]) and [(x['kind'], x['epoch'], x['ranks']) for x in d['findings'][1:]] == [('recovered', 0, [2])] and sorted((g['name'], g['epoch']) for g in d['groups'] if g['progress'] and any(g['progress'].values()))[:2] == [('tp:0', 0), ('tp:0', 1)]"
expect_json shrink-stale 1 "assert d['culprit_ranks'] == [1] and (f['kind'], f['group'], f['epoch'], f['ranks']) == ('missing', 'tp:0', 1, [1]) and [g['progress'] for g in d['groups'] if (g['name'], g['epoch']) == ('tp:0', 1)] == [{'0': 3, '3': 3}]"
expect_json shrink-recovered 0 "assert d['exit_status'] == 0 and d['culprit_ranks'] == [] and [(x['kind'], x['epoch'], x['ranks']) for x in d['findings']] == [('recovered', 0, [2])]"
expect_json grow-recovered 0 "assert d['epoch'] == 2 and d['missing_ranks'] == [] and [(x['kind'], x['epoch'], x['ranks']) for x in d['findings']] == [('recovered', 0, [2])] and [g['members'] for g in d['groups'] if (g['name'], g['epoch']) == ('tp:0', 2)] == [[0, 1, 3, 2]]"
expect_json two-jobs 1 "assert d['job'] == 'j-new' and d['ignored_dumps'] == 2 and d['culprit_ranks'] == [0, 1] and (f['kind'], f['group'], f['seq']) == ('mismatch', 'world', 2)"

# ---- unreadable input: exit 2, the file and the line named ----------------------------------
expect_refused "$FIX/torn" "torn/rank1.pstate-trace:23: torn: no end line (was it copied while being written?)"
expect_refused "$FIX/foreign" "foreign/rank1.pstate-trace:1: not a pstate trace dump: first line is '{\"traceEvents\": []}'"
expect_refused "$FIX/bad-count" "bad-count/rank0.pstate-trace:24: 'entries 5' announced, but only 4 e lines follow"
expect_refused "$TMP/no-such-folder" "no such folder"
mkdir -p "$TMP/empty" && touch "$TMP/empty/rank0.pstate-trace.tmp.77"  # a dump still being written is not a dump
expect_refused "$TMP/empty" "no *.pstate-trace dumps in"
mkdir -p "$TMP/renamed" && cp "$FIX/all-good/rank0.pstate-trace" "$TMP/renamed/rank7.pstate-trace"
expect_refused "$TMP/renamed" "the file name says rank 7, the dump says rank 0"
mkdir -p "$TMP/newer" && sed '1s/.*/pstate-trace 2/' "$FIX/all-good/rank0.pstate-trace" >"$TMP/newer/rank0.pstate-trace"
expect_refused "$TMP/newer" "rank0.pstate-trace:1: pstate-trace format version '2'"
mkdir -p "$TMP/epochs" && sed 's/^epochs 1:2$/epochs 1:2,1:3/' "$FIX/shrink-behind/rank0.pstate-trace" >"$TMP/epochs/rank0.pstate-trace"
expect_refused "$TMP/epochs" "rank0.pstate-trace:16: epochs are not ascending: '1:2,1:3'"

# ---- --timeline ------------------------------------------------------------------------------
mkdir -p "$TMP/tl"
run "$FIX/behind-idle" --timeline "$TMP/tl/hang.json"
[ "$rc" = 1 ] || fail "--timeline json: exit status $rc, expected 1 ($err)"
[ "$(head -n 1 "$TMP/out")" = "pstate doctor: rank 3 is behind on tp:0: ranks 0, 1, 2 wait in all_reduce #9 (count 4 float32 sum) that rank 3 never called (it is idle outside pstate, last call returned 5.0 s earlier)" ] ||
  fail "--timeline json: the verdict is not printed"
"$PY" -c 'import json, sys
t = json.load(open(sys.argv[1]))
assert t["displayTimeUnit"] == "ms"
ev = t["traceEvents"]
procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert procs == {r: "rank %d (node0, pid %d)" % (r, 4100 + r) for r in range(4)}, procs
threads = {(e["pid"], e["args"]["name"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
assert all((r, "tp:0") in threads and (r, "world") in threads for r in range(4)), threads
spans = [e for e in ev if e["ph"] == "X"]
assert all(e["ts"] >= 0 and e["dur"] >= 0 and {"seq", "count", "dtype", "state", "status", "path"} <= set(e["args"]) for e in spans)
stuck = sorted((e["pid"], e["name"], e["dur"]) for e in spans if e["name"].endswith(" (stuck)"))
# posted at 15.0 s, dumped at 20.0 / 20.05 / 20.1 s: stuck until each rank dumped
assert stuck == [(0, "all_reduce #9 (stuck)", 5000000.0), (1, "all_reduce #9 (stuck)", 5050000.0), (2, "all_reduce #9 (stuck)", 5100000.0)], stuck
assert len(spans) == 4 * 11 + 3, len(spans)
' "$TMP/tl/hang.json" || fail "--timeline json: wrong trace events"

run "$FIX/missing-dead" --timeline "$TMP/tl/dead.json"
"$PY" -c 'import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
assert sorted(e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name") == [0, 1, 2]
' "$TMP/tl/dead.json" || fail "--timeline json: missing-dead should have one process per dump (ranks 0-2)"

# a rebuilt world: one thread per (epoch, group), named with the epoch
run "$FIX/shrink-behind" --timeline "$TMP/tl/shrink.json"
"$PY" -c 'import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
threads = {(e["pid"], e["tid"], e["args"]["name"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
want = {"world:0 (epoch 0)", "tp:0 (epoch 0)", "world:0 (epoch 1)", "tp:0 (epoch 1)"}
for r in (0, 1, 3):
    mine = {(tid, name) for pid, tid, name in threads if pid == r and name != "lifecycle"}
    assert {name for _, name in mine} == want and len({tid for tid, _ in mine}) == 4, (r, mine)
' "$TMP/tl/shrink.json" || fail "--timeline json: shrink-behind should have a thread per epoch and group"

if command -v gnuplot >/dev/null; then
  run "$FIX/cycle" --timeline "$TMP/tl/hang.png"
  [ "$rc" = 1 ] || fail "--timeline png: exit status $rc, expected 1 ($err)"
  [ "$(head -c 4 "$TMP/tl/hang.png" | od -An -tx1 | tr -d ' \n')" = 89504e47 ] || fail "--timeline png: not a PNG"
else
  echo "note: gnuplot is not on PATH here: the PNG itself is not checked"
fi
ls "$TMP/tl" | grep -q '\.tmp\.' && fail "--timeline left a temporary file: $(ls "$TMP/tl")"

# without gnuplot on PATH: the verdict still prints, then exit 2 naming gnuplot, no file
PATH=/nonexistent "$PSTATE" doctor "$FIX/behind-idle" --timeline "$TMP/tl/nognuplot.png" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" = 2 ] || fail "--timeline png without gnuplot: exit status $rc, expected 2"
grep -q "gnuplot is not on PATH" "$TMP/err" || fail "--timeline png without gnuplot: stderr: $(cat "$TMP/err")"
grep -q "^pstate doctor: rank 3 is behind on tp:0" "$TMP/out" || fail "--timeline png without gnuplot: no verdict"
[ ! -e "$TMP/tl/nognuplot.png" ] || fail "--timeline png without gnuplot: a file was written"

run "$FIX/all-good" --timeline "$TMP/tl/x.svg"
[ "$rc" = 2 ] || fail "--timeline x.svg: exit status $rc, expected 2 (a usage error)"

if [ "$failures" -ne 0 ]; then
  echo "doctor_fixtures: $failures failure(s)"
  exit 1
fi
echo "doctor_fixtures: all checks passed"
