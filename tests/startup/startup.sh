#!/usr/bin/env bash
# startup.sh SCENARIO — a job deployed wrongly, as operators do (issue 19), and what every rank
# then says and how soon.
#
# Each scenario starts ranks by hand with the documented variables (RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT, PSTATE_*), one tests/startup/startup_rank process per rank, and checks
# each rank's one line: the status of pstate_init, the time it took (a bound of a few seconds
# where the cause is known) and the words of the message. Every rank's line is printed, so the
# same scenario run against an older libpstate (STARTUP_LIB_DIR=DIR puts DIR first on
# LD_LIBRARY_PATH; PSTATE_CLI names another `pstate`) gives the "before" of the table in the
# issue's closing note. Every process is bounded in time and killed at the end; a scenario that
# needs root (another user, namespaces) exits 77 (skipped) without it.
#
# Scenarios: wrong_world_size duplicate_rank rank_out_of_range wrong_token missing_rank
#   two_rank_zero foreign_service two_jobs_job_id two_jobs_no_id file_leftover_killed
#   file_leftover_finished file_other_user init_timeout run_max_wait run_root_cause
set -u
SCENARIO=${1:?usage: startup.sh SCENARIO}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${PSTATE_BUILD_DIR:-$ROOT/build}
STARTUP_RANK=${STARTUP_RANK:-$BUILD/tests/startup_rank}
PSTATE_CLI=${PSTATE_CLI:-$BUILD/pstate}
LOGS=${STARTUP_LOG_DIR:-$BUILD/startup-logs}/$SCENARIO
rm -rf "$LOGS"
mkdir -p "$LOGS"
[ -x "$STARTUP_RANK" ] || { echo "missing $STARTUP_RANK: build the tests first" >&2; exit 1; }
if [ -n "${STARTUP_LIB_DIR:-}" ]; then export LD_LIBRARY_PATH="$STARTUP_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
# Nothing of the caller's launch environment leaks into the ranks.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT GROUP_RANK OMPI_COMM_WORLD_RANK \
  OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS PSTATE_TIMEOUT_MS PSTATE_INIT_TIMEOUT_MS PSTATE_JOB_TOKEN \
  PSTATE_JOB_ID PSTATE_SOCKET_IFNAME PSTATE_DEBUG
declare -A PID RC
FAILED=0
EXTRA_PIDS=()

log() { echo "[$(date +%H:%M:%S.%3N)] $*"; }
cleanup() {
  local p
  for p in "${PID[@]}" "${EXTRA_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

free_port() { "$STARTUP_RANK" --free-port; }

# launch NAME [VAR=VALUE...] [-- STARTUP_RANK ARGS...]: one rank in the background; output in
# $LOGS/NAME.log.
launch() {
  local name=$1
  shift
  local vars=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  env "${vars[@]}" "$STARTUP_RANK" "$@" >"$LOGS/$name.log" 2>&1 &
  PID[$name]=$!
}

# finish NAME SECONDS: waits for NAME, killing it after SECONDS (RC 124: it hung).
finish() {
  local name=$1 seconds=$2 waited=0 pid=${PID[$1]}
  while kill -0 "$pid" 2>/dev/null && [ $waited -lt $((seconds * 20)) ]; do
    sleep 0.05
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    RC[$name]=124
    echo "startup_rank: (still running after ${seconds} s: killed)" >>"$LOGS/$name.log"
  else
    wait "$pid"
    RC[$name]=$?
  fi
  unset "PID[$name]"
}

# wait_line NAME REGEX SECONDS: 0 once NAME's log has a matching line.
wait_line() {
  local i
  for ((i = 0; i < $3 * 20; i++)); do
    grep -qE "$2" "$LOGS/$1.log" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

result() { grep -m1 -E '^startup_rank: rank [^ ]+: ' "$LOGS/$1.log" || grep -m1 'still running' "$LOGS/$1.log" || echo "(no result line)"; }
show() { echo "  $1: $(result "$1")"; }

fail() {
  FAILED=$((FAILED + 1))
  log "FAIL: $*"
}

# expect NAME STATUS MAX_MS [WORD...]: NAME's pstate_init returned STATUS (PSTATE_OK,
# PSTATE_ERR_MISMATCH, ... or "!PSTATE_OK" for any error) within MAX_MS, and its message has every
# WORD (fixed strings).
expect() {
  local name=$1 status=$2 max_ms=$3 line ms word
  shift 3
  line=$(result "$name")
  show "$name"
  ms=$(echo "$line" | sed -nE 's/^startup_rank: rank [^ ]+: [A-Z_]+ in ([0-9]+) ms.*/\1/p')
  if [ -z "$ms" ]; then fail "$name: no result (it hung or crashed): $(tail -n 3 "$LOGS/$name.log")"; return; fi
  if [ "$status" = '!PSTATE_OK' ]; then
    echo "$line" | grep -q ': PSTATE_OK in' && fail "$name: pstate_init succeeded"
  else
    echo "$line" | grep -q ": $status in" || fail "$name: expected $status"
  fi
  [ "$ms" -le "$max_ms" ] || fail "$name: took $ms ms (bound $max_ms ms)"
  for word in "$@"; do
    echo "$line" | grep -qF -- "$word" || fail "$name: the message lacks '$word'"
  done
}

# expect_log NAME WORD: NAME's whole output (its log lines included) has WORD.
expect_log() { grep -qF -- "$2" "$LOGS/$1.log" || fail "$1: its output lacks '$2'"; }

tcp_env() {  # tcp_env PORT: the variables every rank of a hand-started TCP job shares
  echo "MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 PSTATE_TIMEOUT_MS=${TIMEOUT_MS:-5000}"
}

need_root() { [ "$(id -u)" -eq 0 ] || { echo "SKIPPED: $SCENARIO needs root"; exit 77; }; }

# ---- scenarios ----------------------------------------------------------------------------------

# Item 1: one rank has a wrong WORLD_SIZE: it is refused at once, and so are the ranks that wait.
wrong_world_size() {
  local port common
  port=$(free_port)
  common="$(tcp_env "$port") PSTATE_JOB_TOKEN=tok-$$"
  launch r0 $common RANK=0 WORLD_SIZE=3
  sleep 0.3
  launch r1 $common RANK=1 WORLD_SIZE=3
  sleep 0.3
  launch r2 $common RANK=2 WORLD_SIZE=4
  for r in r0 r1 r2; do finish $r 15; done
  expect r2 PSTATE_ERR_MISMATCH 2000 "world_size 4"
  expect r0 PSTATE_ERR_MISMATCH 2000 "rank 2" "world_size 4"
  expect r1 PSTATE_ERR_MISMATCH 2000 "rank 2" "world_size 4"
}

# Item 1: two processes with RANK=1 (and so no rank 2).
duplicate_rank() {
  local port common
  port=$(free_port)
  common="$(tcp_env "$port") PSTATE_JOB_TOKEN=tok-$$ WORLD_SIZE=3"
  launch r0 $common RANK=0
  sleep 0.3
  launch r1 $common RANK=1
  sleep 0.3
  launch r1b $common RANK=1
  for r in r0 r1 r1b; do finish $r 15; done
  expect r1b PSTATE_ERR_MISMATCH 2000 "rank 1 is already taken"
  expect r0 PSTATE_ERR_MISMATCH 2000 "rank 1 is already taken"
  expect r1 PSTATE_ERR_MISMATCH 2000 "rank 1 is already taken"
}

# Item 1: RANK=3 in a world of 3: refused on its host, and the store hears of it.
rank_out_of_range() {
  local port common
  port=$(free_port)
  common="$(tcp_env "$port") PSTATE_JOB_TOKEN=tok-$$ WORLD_SIZE=3"
  launch r0 $common RANK=0
  sleep 0.3
  launch r1 $common RANK=1
  sleep 0.3
  launch r3 $common RANK=3
  for r in r0 r1 r3; do finish $r 15; done
  expect r3 PSTATE_ERR_INVALID_ARGUMENT 2000 "rank 3 is out of range for world_size 3"
  expect r0 '!PSTATE_OK' 2000 "rank 3" "out of range"
  expect r1 '!PSTATE_OK' 2000 "rank 3" "out of range"
}

# Item 1: a rank with another job token. The token is what keeps strangers out, so a refused
# token does not end the job (a stranger could end any job otherwise), but the waiting ranks name
# the rank and the refusal when they give up, and log it while they wait.
wrong_token() {
  local port common
  port=$(free_port)
  TIMEOUT_MS=3000
  common="$(tcp_env "$port") WORLD_SIZE=2 PSTATE_DEBUG=INFO"
  launch r0 $common RANK=0 PSTATE_JOB_TOKEN=right-$$
  sleep 0.3
  launch r1 $common RANK=1 PSTATE_JOB_TOKEN=wrong-$$
  for r in r0 r1; do finish $r 15; done
  expect r1 PSTATE_ERR_AUTH 2000 "job token refused"
  expect r0 PSTATE_ERR_TIMEOUT 4500 "rank 1 of 0..1 never joined" "job token refused"
}

# Item 1: rank 2 never starts: the others say who is missing, and log progress while waiting.
missing_rank() {
  local port common
  port=$(free_port)
  TIMEOUT_MS=4000
  common="$(tcp_env "$port") PSTATE_JOB_TOKEN=tok-$$ WORLD_SIZE=3 PSTATE_DEBUG=INFO"
  launch r0 $common RANK=0
  launch r1 $common RANK=1
  for r in r0 r1; do finish $r 15; done
  expect r0 PSTATE_ERR_TIMEOUT 5500 "rank 2 of 0..2 never connected; last seen: none"
  expect r1 PSTATE_ERR_TIMEOUT 5500 "rank 2 of 0..2 never connected; last seen: none"
  expect_log r1 "2 of 3 ranks joined; waiting for 2"
}

# Item 2: two processes with RANK=0.
two_rank_zero() {
  local port common
  port=$(free_port)
  common="$(tcp_env "$port") PSTATE_JOB_TOKEN=tok-$$ WORLD_SIZE=2"
  launch r0 $common RANK=0
  sleep 0.3
  launch r0b $common RANK=0
  for r in r0 r0b; do finish $r 15; done
  expect r0b PSTATE_ERR_MISMATCH 2000 "rank 0 is already taken"
  expect r0 PSTATE_ERR_MISMATCH 2000 "rank 0 is already taken"
}

# Item 3: an HTTP server on MASTER_PORT.
foreign_service() {
  local port i
  port=$(free_port)
  command -v python3 >/dev/null || { echo "SKIPPED: needs python3 for the HTTP server"; exit 77; }
  (cd "$LOGS" && exec python3 -m http.server "$port" --bind 127.0.0.1) >"$LOGS/http.log" 2>&1 &
  EXTRA_PIDS+=($!)
  for ((i = 0; i < 100; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
  done
  launch r1 $(tcp_env "$port") PSTATE_JOB_TOKEN=tok-$$ WORLD_SIZE=2 RANK=1
  finish r1 15
  expect r1 PSTATE_ERR_TRANSPORT 1500 "is not a pstate store" "HTTP"
  launch r0 $(tcp_env "$port") PSTATE_JOB_TOKEN=tok-$$ WORLD_SIZE=2 RANK=0
  finish r0 15
  expect r0 PSTATE_ERR_TRANSPORT 1500 "is not a pstate store" "HTTP"
}

# Item 5: two jobs on one port, interleaved (A0, B1, B0, A1), each with its PSTATE_JOB_ID.
two_jobs_job_id() {
  local port common
  port=$(free_port)
  common="$(tcp_env "$port") WORLD_SIZE=2"
  launch a0 $common RANK=0 PSTATE_JOB_ID=job-A
  sleep 0.3
  launch b1 $common RANK=1 PSTATE_JOB_ID=job-B
  finish b1 15
  launch b0 $common RANK=0 PSTATE_JOB_ID=job-B
  finish b0 15
  launch a1 $common RANK=1 PSTATE_JOB_ID=job-A
  for r in a0 a1; do finish $r 15; done
  expect b1 PSTATE_ERR_MISMATCH 2000 "belongs to job 'job-A', you are job 'job-B'"
  expect b0 PSTATE_ERR_MISMATCH 2000 "belongs to job 'job-A', you are job 'job-B'"
  expect a0 PSTATE_OK 5000
  expect a1 PSTATE_OK 5000
}

# Item 5: the same without job ids nor tokens: A0 and B1 form a world; A1 then finds rank 1
# taken, and rank 0 warns that more ranks connected than its world holds.
two_jobs_no_id() {
  local port common
  port=$(free_port)
  common="$(tcp_env "$port") WORLD_SIZE=2"
  launch a0 $common RANK=0 -- --after hang
  sleep 0.3
  launch b1 $common RANK=1 -- --after hang
  wait_line a0 'PSTATE_OK' 10
  launch a1 $common RANK=1
  finish a1 15
  wait_line a0 'claimed ranks of' 5
  for r in a0 b1; do kill -TERM "${PID[$r]}"; finish $r 5; done
  expect a1 PSTATE_ERR_MISMATCH 2000 "rank 1 is already taken"
  expect_log a0 "3 processes claimed ranks of this world of 2"
  expect_log a0 "PSTATE_JOB_ID"
}

file_job() {  # file_job PREFIX DIR AFTER: a world of 2 on file://DIR
  launch "$1-r0" RANK=0 WORLD_SIZE=2 PSTATE_TIMEOUT_MS=5000 PSTATE_DEBUG=INFO -- --init-method "file://$2" --after "$3"
  launch "$1-r1" RANK=1 WORLD_SIZE=2 PSTATE_TIMEOUT_MS=5000 PSTATE_DEBUG=INFO -- --init-method "file://$2" --after "$3"
}

# Item 6: the directory of a SIGKILLed job is recognised and reclaimed by the next job.
file_leftover_killed() {
  local base dir
  base=$(mktemp -d)
  dir=$base/store
  file_job old "$dir" hang
  wait_line old-r0 PSTATE_OK 10
  wait_line old-r1 PSTATE_OK 10
  kill -KILL "${PID[old-r0]}" "${PID[old-r1]}"
  finish old-r0 5
  finish old-r1 5
  file_job new "$dir" finalize
  finish new-r0 15
  finish new-r1 15
  expect new-r0 PSTATE_OK 3000
  expect new-r1 PSTATE_OK 3000
  grep -qF "reclaimed the store of an earlier job" "$LOGS/new-r0.log" "$LOGS/new-r1.log" ||
    fail "no rank said it reclaimed the earlier job's store"
  rm -rf "$base"
}

# Item 6: a job that finished cleanly leaves nothing; the next job in the same directory works.
file_leftover_finished() {
  local base dir
  base=$(mktemp -d)
  dir=$base/store
  file_job old "$dir" finalize
  finish old-r0 15
  finish old-r1 15
  expect old-r0 PSTATE_OK 3000
  expect old-r1 PSTATE_OK 3000
  [ ! -e "$dir" ] || fail "the finished job left $dir behind: $(ls -R "$dir" | head -20 | tr '\n' ' ')"
  file_job new "$dir" finalize
  finish new-r0 15
  finish new-r1 15
  expect new-r0 PSTATE_OK 3000
  expect new-r1 PSTATE_OK 3000
  rm -rf "$base"
}

# Item 6: rank 1 runs as another user and cannot use rank 0's private (0700) directory: it is
# told why, and rank 0 hears of it at once.
file_other_user() {
  need_root
  local base dir
  base=$(mktemp -d)
  chmod 1777 "$base"
  dir=$base/store
  command -v setpriv >/dev/null || { echo "SKIPPED: needs setpriv (util-linux)"; exit 77; }
  launch r0 RANK=0 WORLD_SIZE=2 PSTATE_TIMEOUT_MS=5000 -- --init-method "file://$dir"
  sleep 0.5
  # rank 1 as user nobody
  setpriv --reuid=65534 --regid=65534 --clear-groups env RANK=1 WORLD_SIZE=2 PSTATE_TIMEOUT_MS=5000 \
    "$STARTUP_RANK" --init-method "file://$dir" >"$LOGS/r1.log" 2>&1 &
  PID[r1]=$!
  for r in r0 r1; do finish $r 15; done
  expect r1 PSTATE_ERR_TRANSPORT 2000 "permission denied" "uid 0"
  expect r0 '!PSTATE_OK' 2000 "rank 1" "permission denied"
  rm -rf "$base"
}

# Item 8: the rendezvous has its own deadline (PSTATE_INIT_TIMEOUT_MS; default 120 s), not the
# collectives' 600 s.
init_timeout() {
  local port
  port=$(free_port)
  launch r0 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" PSTATE_JOB_TOKEN=tok-$$ WORLD_SIZE=2 RANK=0 PSTATE_INIT_TIMEOUT_MS=2000
  finish r0 10
  expect r0 PSTATE_ERR_TIMEOUT 3500 "rank 1 of 0..1 never connected" "PSTATE_INIT_TIMEOUT_MS"
}

# Item 7: one rank hangs after the others exited: pstate run says so every --status-every
# seconds and --max-wait ends the job.
run_max_wait() {
  local start took rc
  start=$(date +%s%N)
  "$PSTATE_CLI" run -n 3 --max-wait 2 --status-every 1 -- sh -c 'if [ "$RANK" = 1 ]; then echo busy; exec sleep 30; fi' \
    >"$LOGS/run.log" 2>&1
  rc=$?
  took=$((($(date +%s%N) - start) / 1000000))
  echo "  pstate run: exit $rc in $took ms: $(grep -m1 'pstate run:' "$LOGS/run.log")"
  [ $rc -ne 0 ] || fail "pstate run succeeded although rank 1 never finished"
  [ $took -lt 8000 ] || fail "pstate run took $took ms (bound 8000 with --max-wait 2)"
  grep -qE 'pstate run: still waiting for rank 1 \(pid [0-9]+, last output [0-9]+ s ago\)' "$LOGS/run.log" ||
    fail "no progress line naming rank 1, its pid and its last output"
  grep -qF -- "--max-wait 2 s" "$LOGS/run.log" || fail "the end does not name --max-wait"
}

# Issue 18 item 7: rank 3 is SIGKILLed; the survivors report what they saw (they take 1.5 s to
# write it, as a Python rank printing a traceback may) before anything stops them, and the summary
# names rank 3 and its signal first. Then the case that blamed the wrong rank: the launcher sees
# rank 3's death and the survivors' exits in one look (it is stopped meanwhile, as a busy launcher
# can be); rank 3, killed by a signal, is still named first, not rank 0 that exited after it.
run_root_cause() {
  local rc first pid flag i
  "$PSTATE_CLI" run -n 4 --no-bind -- env STARTUP_VICTIM=3 STARTUP_REPORT_DELAY_MS=1500 PSTATE_TIMEOUT_MS=10000 \
    "$STARTUP_RANK" --after fault >"$LOGS/run.log" 2>&1
  rc=$?
  echo "  pstate run: exit $rc: $(grep 'pstate run:' "$LOGS/run.log" | tr '\n' '|')"
  [ $rc -eq 137 ] || fail "exit status $rc, expected 137 (rank 3's SIGKILL)"
  for r in 0 1 2; do
    grep -qE "^\[$r\] startup_rank: rank $r reported: PSTATE_ERR_(PEER_LOST|TIMEOUT)" "$LOGS/run.log" ||
      fail "rank $r was stopped before it could report"
  done
  first=$(grep -m1 'pstate run:' "$LOGS/run.log")
  echo "$first" | grep -qF "rank 3 was killed by signal 9" || fail "the first summary line does not blame rank 3: $first"

  flag=$LOGS/kill-now
  "$PSTATE_CLI" run -n 4 --no-bind -- env STARTUP_VICTIM=3 STARTUP_VICTIM_FILE="$flag" PSTATE_TIMEOUT_MS=10000 \
    "$STARTUP_RANK" --after fault >"$LOGS/run2.log" 2>&1 &
  pid=$!
  for ((i = 0; i < 200 && $(grep -c 'PSTATE_OK' "$LOGS/run2.log") < 4; i++)); do sleep 0.05; done
  kill -STOP "$pid"
  touch "$flag"
  sleep 1.5  # rank 3 dies, the others see it and exit 1, all while the launcher looks away
  kill -CONT "$pid"
  wait "$pid"
  rc=$?
  echo "  pstate run (launcher stopped while ranks ended): exit $rc: $(grep 'pstate run:' "$LOGS/run2.log" | tr '\n' '|')"
  first=$(grep -m1 'pstate run:' "$LOGS/run2.log")
  echo "$first" | grep -qF "rank 3 was killed by signal 9" || fail "the first summary line does not blame rank 3: $first"
  [ $rc -eq 137 ] || fail "exit status $rc, expected 137 (rank 3's SIGKILL)"
}

case "$SCENARIO" in
  wrong_world_size | duplicate_rank | rank_out_of_range | wrong_token | missing_rank | two_rank_zero | \
    foreign_service | two_jobs_job_id | two_jobs_no_id | file_leftover_killed | file_leftover_finished | \
    file_other_user | init_timeout | run_max_wait | run_root_cause)
    log "scenario $SCENARIO"
    "$SCENARIO"
    ;;
  *)
    echo "unknown scenario $SCENARIO" >&2
    exit 2
    ;;
esac
if [ $FAILED -ne 0 ]; then
  log "FAILED: $SCENARIO: $FAILED checks (logs in $LOGS)"
  for f in "$LOGS"/*.log; do echo "----- $f"; tail -n 15 "$f"; done
  exit 1
fi
log "PASSED: $SCENARIO"
