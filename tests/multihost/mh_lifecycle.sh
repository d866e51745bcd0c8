#!/usr/bin/env bash
# mh_lifecycle.sh — the whole lifecycle on 4 test hosts of 2 ranks each, started the way a
# multi-node job is: one `pstate run --nnodes 4 --node-rank K --master 198.18.0.10:29500 -n 2` per
# host (global ranks node-major), PSTATE_SOCKET_IFNAME=eth0, PSTATE_DEBUG=INFO.
#
# Proves: every operation of tests/multihost/mh_rank.c `lifecycle` gives exact results with TP=2
# inside each host and PP=4 across hosts, then TP=8 with EP=4 across hosts (moe_tp inside); TP
# groups stay inside a host and PP/EP groups have one rank per host (pstate_group_same_node);
# from the INFO logs: groups inside a host (TP=2, moe_tp) run their collectives on the
# shared-memory segment, groups across hosts (PP, EP, TP=8) on UCX; UCX itself used shared memory
# (sysv/cma) between ranks of one host and TCP on eth0 between every pair of hosts; every rank
# logged its interface and address; the TP=8 group that spans the hosts was reported as a warning
# naming its ranks.
# Needs root and ip netns; otherwise it is skipped (exit 77).
set -euo pipefail
source "$(dirname "$0")/mh_lib.sh"
mh_init lifecycle
mh_setup lc 4
export PSTATE_DEBUG=INFO
for k in 0 1 2 3; do
  mh_start "node$k" "$k" MH_EXPECT_LOCAL_TP=1 MH_TIMEOUT_MS=60000 -- \
    "$PSTATE_CLI" run --nnodes 4 --node-rank "$k" --master "$(mh_addr 0):$MH_PORT" -n 2 -- "$MH_RANK" lifecycle
done
for k in 0 1 2 3; do mh_wait "node$k" 300; done
for k in 0 1 2 3; do mh_expect "node$k" 0; done
grep -h "lifecycle ok" "$MH_LOGS"/node*.log
python3 "$MH_CHECK_LOGS" --per-host 2 --ifname eth0 --group tp=shm --group pp=ucx --group tp=ucx --group moe_ep=ucx \
  --group moe_tp=shm "$MH_LOGS"/node*.log
warn=$(grep -h "WARN group tp:0 (tensor parallel) spans 4 hosts" "$MH_LOGS"/node0.log || true)
[ -n "$warn" ] || { mh_log "FAILED: no warning about the TP group across hosts"; exit 1; }
echo "$warn"
echo "$warn" | grep -q "ranks 0,1 on .*; ranks 2,3 on .*; ranks 4,5 on .*; ranks 6,7 on " ||
  { mh_log "FAILED: the warning does not name the ranks of each host"; exit 1; }
if grep -h "WARN group tp" "$MH_LOGS"/node*.log | grep -v "spans 4 hosts"; then
  mh_log "FAILED: a TP group of 2 inside one host was reported as spanning hosts"; exit 1
fi
mh_log "PASSED: lifecycle on 4 hosts x 2 ranks"
