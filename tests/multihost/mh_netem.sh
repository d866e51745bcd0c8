#!/usr/bin/env bash
# mh_netem.sh — a slow, lossy link: 50 ms +- 20 ms delay and 1% loss each way on host 1's cable.
#
# 2 test hosts x 2 ranks run the whole mh_rank lifecycle (every operation checked, messages from
# 1 B to 1 MiB, TP inside the hosts, PP and EP across the slow link) with a generous timeout:
# every result must still be exact. The impairment is tc netem where the kernel has it, else the
# user-space linkemu (see mh_lib.sh); its statistics must show frames actually lost.
# Needs root and ip netns (else skipped, 77).
set -euo pipefail
source "$(dirname "$0")/mh_lib.sh"
mh_init netem
mh_setup ne 2 1
export PSTATE_DEBUG=INFO
start=$(date +%s)
for k in 0 1; do
  mh_start "node$k" "$k" MH_EXPECT_LOCAL_TP=1 MH_ROUNDS=1 MH_TIMEOUT_MS=120000 -- \
    "$PSTATE_CLI" run --nnodes 2 --node-rank "$k" --master "$(mh_addr 0):$MH_PORT" -n 2 -- "$MH_RANK" lifecycle
done
for k in 0 1; do mh_wait "node$k" 400; done
for k in 0 1; do mh_expect "node$k" 0; done
mh_log "lifecycle over the impaired link took $(($(date +%s) - start)) s"
grep -h "lifecycle ok" "$MH_LOGS"/node*.log
python3 "$MH_CHECK_LOGS" --per-host 2 --ifname eth0 "$MH_LOGS"/node*.log
mh_stop_emulators
if [ -f "$MH_LOGS/linkemu-h1.log" ]; then
  cat "$MH_LOGS/linkemu-h1.log"
  lost=$(sed -nE 's/.*host->switch [0-9]+ forwarded, ([0-9]+) lost.*switch->host [0-9]+ forwarded, ([0-9]+) lost.*/\1 \2/p' "$MH_LOGS/linkemu-h1.log")
  [ -n "$lost" ] && [ $((${lost% *} + ${lost#* })) -gt 0 ] || { mh_log "FAILED: the link lost no frame"; exit 1; }
else
  ip netns exec "$(mh_host_ns 1)" tc -s qdisc show dev eth0
fi
mh_log "PASSED: exact results over a 50 ms +- 20 ms, 1% loss link"
