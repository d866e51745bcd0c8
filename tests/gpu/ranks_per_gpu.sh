#!/usr/bin/env bash
# tests/gpu/ranks_per_gpu.sh PSTATE_CLI GPU_MULTI_CHECK OUT_DIR — several ranks on ONE GPU (issue 28).
#
# Runs gpu_multi_check (tests/gpu/gpu_multi_check.cpp) at world 2 and 4 under `pstate run -n W`,
# every rank started through tests/gpu/own_host_id.sh: on CUDA device 0, as an NCCL host of its
# own (NCCL_HOSTID), over NCCL's socket transport on loopback. Semantics, not speed. Called by
# `tests/gpu/run.sh --ranks-per-gpu` on a GPU (and with --devsim on the stand-ins), and by ctest
# (devsim_ranks_per_gpu_w2, _w4) with the programs CMake built against the stand-ins.
#
# Steps per world W, each under its own timeout, logs in OUT_DIR/ranks_per_gpu_w<W>_<step>.log:
#   ops    every device collective x dtype x op on world, tp and a pstate_new_group, p2p, dicts,
#          a graph replayed 100 times on two streams: exit 0, every rank "0 failed"
#   kill   (--keep-going, PSTATE_DEBUG=INFO) rank W-1 SIGKILLed amid device all_reduces: the
#          launcher reports its signal 9, every survivor passes (PEER_LOST/ABORTED in time,
#          pstate_shrink, exact collectives after); the new world's NCCL communicators are counted
#          from pstate's INFO lines: shrunk (ncclCommShrink) against made anew (a bootstrap)
#   stall  (PSTATE_CHECK=1, --max-wait) rank W-1 never enters device all_reduce #5: the others
#          pass (TIMEOUT in time), pstate run stops it (exit 124), and `pstate doctor` names
#          rank W-1 and all_reduce in its verdict
#   check  (PSTATE_CHECK=1) count mismatches on the device are MISMATCH on every rank: exit 0
# OUT_DIR/ranks_per_gpu.md gets one row per step (result, wall time, what was seen).
#
# Env: RANKS_PER_GPU_WORLDS (default "2 4"), FAULT_TIMEOUT_MS (the fault steps' pstate timeout,
# default 6000), OPS_TIMEOUT_S and FAULT_STEP_TIMEOUT_S (the steps' wall limits, default 100 s and
# 45 s each: all of it ends within 2 x (100 + 3 x 45) = 470 s). Exit 0 when all passed.
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: tests/gpu/ranks_per_gpu.sh PSTATE_CLI GPU_MULTI_CHECK OUT_DIR" >&2; exit 2; }
PSTATE_CLI=$1
PROGRAM=$2
OUT=$3
WRAP=$(cd "$(dirname "$0")" && pwd)/own_host_id.sh
WORLDS=${RANKS_PER_GPU_WORLDS:-2 4}
FAULT_MS=${FAULT_TIMEOUT_MS:-6000}
OPS_S=${OPS_TIMEOUT_S:-100}
FAULT_S=${FAULT_STEP_TIMEOUT_S:-45}
mkdir -p "$OUT"
REPORT=$OUT/ranks_per_gpu.md
echo "| world | step | result | wall s | seen |" >"$REPORT"
echo "| ---: | --- | --- | ---: | --- |" >>"$REPORT"
status=0
say() { echo "ranks_per_gpu: $*" >&2; }

# run_step W NAME SECONDS [pstate run options...] -- [env assignments...]: runs the step (on timeout
# pstate run stops its ranks); its launcher exit status in $rc, log in $log, wall time in $wall.
run_step() {
  local w=$1 name=$2 seconds=$3 opts=() envs=()
  shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  envs=("$@")
  log=$OUT/ranks_per_gpu_w${w}_$name.log
  say "== world $w: $name (limit ${seconds} s)"
  local t0=$SECONDS
  env "${envs[@]}" timeout --kill-after=10 "$seconds" "$PSTATE_CLI" run -n "$w" --grace-ms 1000 "${opts[@]}" -- \
    "$WRAP" "$PROGRAM" "$name" >"$log" 2>&1
  rc=$?
  wall=$((SECONDS - t0))
}

# passed_ranks MODE: how many ranks printed their summary with 0 failures.
passed_ranks() { grep -c "gpu_multi_check $1 rank [0-9]* of [0-9]* (cuda:[0-9]*): [0-9]* checks passed, 0 failed" "$log"; }

record() {  # record W STEP OK DETAIL
  local result=PASS
  [ "$3" = 1 ] || { result=FAIL; status=1; say "FAILED: world $1 $2: $4 (log $log)"; grep -h "FAIL\|FATAL" "$log" | head -20 >&2; }
  [ "$3" = 1 ] && say "ok: world $1 $2: $4"
  echo "| $1 | $2 | $result | $wall | $4 |" >>"$REPORT"
}

for w in $WORLDS; do
  last=$((w - 1))

  run_step "$w" ops "$OPS_S" -- GPU_CHECK_TIMEOUT_MS=60000  # a hang ends within the step's limit
  n=$(passed_ranks ops)
  ok=0; [ "$rc" = 0 ] && [ "$n" = "$w" ] && ok=1
  record "$w" ops $ok "exit $rc; $n of $w ranks passed every check ($(grep -o 'ops rank 0 of [0-9]* (cuda:[0-9]*): [0-9]* checks' "$log" | grep -o '[0-9]* checks') on rank 0)"

  run_step "$w" kill "$FAULT_S" --keep-going -- GPU_CHECK_TIMEOUT_MS="$FAULT_MS" PSTATE_DEBUG=INFO
  n=$(passed_ranks kill)
  shrunk=$(grep -c "NCCL communicator ready, shrunk from world" "$log")
  anew=$(grep -c "world:0: .*NCCL communicator ready, made by a bootstrap .*rank [0-9]* of $last," "$log")
  lost=$(grep -o "PSTATE_ERR_[A-Z_]* [0-9]* ms after its last completed all_reduce" "$log" | sed 's/ after its last.*//' | paste -sd, - | sed 's/,/, /g')
  ok=0
  # the victim died of SIGKILL (137); every survivor passed; with 2+ survivors each made the new
  # world's communicator one way or the other
  if [ "$rc" = 137 ] && grep -q "rank $last was killed by signal 9" "$log" && [ "$n" = "$last" ] &&
     { [ "$last" -lt 2 ] || [ $((shrunk + anew)) = "$last" ]; }; then ok=1; fi
  record "$w" kill $ok "exit $rc; $n of $last survivors passed; survivors got ${lost:-nothing} (after their last completed all_reduce); new world's NCCL communicator: made by ncclCommShrink (reused) on $shrunk survivors, by a new bootstrap (re-initialised) on $anew"

  trace=$OUT/ranks_per_gpu_w${w}_stall.trace
  rm -rf "$trace"
  run_step "$w" stall "$FAULT_S" --max-wait 2 -- GPU_CHECK_TIMEOUT_MS="$FAULT_MS" PSTATE_TRACE_DIR="$trace"
  n=$(passed_ranks stall)
  "$PSTATE_CLI" doctor "$trace" >"$OUT/ranks_per_gpu_w${w}_doctor.txt" 2>&1
  doctor_rc=$?
  verdict=$(head -n 1 "$OUT/ranks_per_gpu_w${w}_doctor.txt")
  ok=0
  if [ "$rc" = 124 ] && [ "$n" = "$last" ] && [ "$doctor_rc" = 1 ] && grep -qw "rank $last" <<<"$verdict" &&
     grep -qw all_reduce <<<"$verdict"; then ok=1; fi
  record "$w" stall $ok "exit $rc; $n of $last waiting ranks passed (TIMEOUT in time); pstate doctor (exit $doctor_rc): ${verdict//|//}"

  run_step "$w" check "$FAULT_S" -- GPU_CHECK_TIMEOUT_MS="$FAULT_MS"
  n=$(passed_ranks check)
  ok=0; [ "$rc" = 0 ] && [ "$n" = "$w" ] && ok=1
  record "$w" check $ok "exit $rc; $n of $w ranks passed (PSTATE_CHECK=1 count mismatches: MISMATCH on every rank)"
done
cat "$REPORT"
exit $status
