#!/usr/bin/env bash
# mh_order_by_host.sh — a launcher that interleaves ranks across hosts (host k gets launcher
# ranks k and k + 2, as srun --distribution=cyclic would), on 2 test hosts of 2 ranks.
#
# Run 1, as launched: the lifecycle still works, and each TP group of 2, now across the hosts, is
# reported as a warning that names its ranks and where they run, and the fix.
# Run 2, PSTATE_ORDER_RANKS_BY_HOST=1: pstate renumbers ranks host by host (launcher rank 1
# becomes rank 2), so TP groups stay inside a host and PP/EP groups have one rank per host
# (checked by mh_rank with pstate_group_same_node), no TP group of 2 is reported, and the INFO
# logs show shared memory inside each host and TCP across.
# Needs root and ip netns; otherwise it is skipped (exit 77).
set -euo pipefail
source "$(dirname "$0")/mh_lib.sh"
mh_init order_by_host
mh_setup ob 2
export PSTATE_DEBUG=INFO

# run NAME EXPECT_LOCAL [VAR=VALUE...]: the 4 interleaved ranks, all must pass.
run() {
  local name=$1 expect=$2 r
  shift 2
  for r in 0 1 2 3; do
    # shellcheck disable=SC2046
    mh_start "$name-r$r" $((r % 2)) $(mh_rank_env "$r" 4 $((r / 2)) 2) MH_EXPECT_LOCAL_TP="$expect" MH_ROUNDS=1 "$@" \
      -- "$MH_RANK" lifecycle
  done
  for r in 0 1 2 3; do mh_wait "$name-r$r" 120; done
  for r in 0 1 2 3; do mh_expect "$name-r$r" 0; done
}

run interleaved 0
grep -h "WARN group tp:" "$MH_LOGS"/interleaved-r*.log
grep -qE "WARN group tp:0 \(tensor parallel\) spans 2 hosts: rank 0 on .*; rank 1 on .*PSTATE_ORDER_RANKS_BY_HOST=1" \
  "$MH_LOGS/interleaved-r0.log" || { mh_log "FAILED: interleaved TP group not reported"; exit 1; }

MH_PORT=29501
run ordered 1 PSTATE_ORDER_RANKS_BY_HOST=1
grep -h "PSTATE_ORDER_RANKS_BY_HOST=1: launcher rank" "$MH_LOGS"/ordered-r*.log
grep -q "launcher rank 1 is rank 2 " "$MH_LOGS/ordered-r1.log" || { mh_log "FAILED: launcher rank 1 was not renumbered to 2"; exit 1; }
if grep -hE "WARN group tp:. \(tensor parallel\) spans 2 hosts: rank [0-9] on" "$MH_LOGS"/ordered-r*.log; then
  mh_log "FAILED: with PSTATE_ORDER_RANKS_BY_HOST=1 a TP group of 2 still spans hosts"; exit 1
fi
python3 "$MH_CHECK_LOGS" --per-host 2 --ifname eth0 --group tp=shm --group pp=ucx "$MH_LOGS"/ordered-r*.log
mh_log "PASSED: interleaved ranks reported; PSTATE_ORDER_RANKS_BY_HOST=1 keeps TP inside hosts"
