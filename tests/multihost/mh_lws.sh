#!/usr/bin/env bash
# mh_lws.sh — multi-host starts as a Kubernetes LeaderWorkerSet starts them (issue 31 item 15):
# each test host is a pod of the group, and the ranks get only what LWS puts in every pod —
# LWS_LEADER_ADDRESS (the leader pod's address), LWS_GROUP_SIZE, LWS_WORKER_INDEX — plus, for
# several ranks per pod, LOCAL_WORLD_SIZE and LOCAL_RANK. No RANK, WORLD_SIZE, MASTER_ADDR or
# MASTER_PORT: pstate derives rank, world size and the store (the leader's address, port 29500).
#
# Run 1: 3 pods x 1 rank (LWS variables only). Run 2: 2 pods x 2 ranks (LOCAL_WORLD_SIZE=2,
# LOCAL_RANK), rank = worker index x 2 + local rank. Both run the checked lifecycle; the logs must
# say each rank's derived rank and the launcher, and that every rank joined the leader's store.
# Needs root and ip netns (else skipped, 77).
set -euo pipefail
source "$(dirname "$0")/mh_lib.sh"
mh_init lws
mh_setup lws 3
export PSTATE_DEBUG=INFO
# What a pod of a LeaderWorkerSet has; the rest of the launch variables empty (= unset).
lws_pod() {
  echo "LWS_LEADER_ADDRESS=$(mh_addr 0) LWS_GROUP_SIZE=$1 LWS_WORKER_INDEX=$2 LWS_NAME=pstate-lws" \
    "RANK= WORLD_SIZE= LOCAL_RANK= LOCAL_WORLD_SIZE= MASTER_ADDR= MASTER_PORT="
}

for pod in 0 1 2; do
  # shellcheck disable=SC2046  # the words of lws_pod are VAR=VALUE each
  mh_start "pods3-w$pod" "$pod" $(lws_pod 3 "$pod") MH_ROUNDS=1 -- "$MH_RANK" lifecycle
done
for pod in 0 1 2; do mh_wait "pods3-w$pod" 120; done
for pod in 0 1 2; do mh_expect "pods3-w$pod" 0; done
for pod in 0 1 2; do
  log="$MH_LOGS/pods3-w$pod.log"
  grep -q "rank $pod of 3 (.*from LeaderWorkerSet), store tcp://$(mh_addr 0):29500" "$log" ||
    { mh_log "FAILED: pod $pod did not derive rank $pod of 3 and the leader's store from LWS_*"; cat "$log"; exit 1; }
done

for r in 0 1 2 3; do
  pod=$((r / 2))
  # shellcheck disable=SC2046
  mh_start "pods2x2-r$r" "$pod" $(lws_pod 2 "$pod") LOCAL_WORLD_SIZE=2 LOCAL_RANK=$((r % 2)) \
    MH_EXPECT_LOCAL_TP=1 MH_ROUNDS=1 -- "$MH_RANK" lifecycle
done
for r in 0 1 2 3; do mh_wait "pods2x2-r$r" 120; done
for r in 0 1 2 3; do mh_expect "pods2x2-r$r" 0; done
for r in 0 1 2 3; do
  log="$MH_LOGS/pods2x2-r$r.log"
  grep -q "rank $r of 4 (local $((r % 2)) of 2, from LeaderWorkerSet), store tcp://$(mh_addr 0):29500" "$log" ||
    { mh_log "FAILED: rank $r (pod $((r / 2)), local $((r % 2))) did not derive its rank from LWS_* and LOCAL_*"; cat "$log"; exit 1; }
done
python3 "$MH_CHECK_LOGS" --per-host 2 --ifname eth0 --group tp=shm --group pp=ucx "$MH_LOGS"/pods2x2-r*.log
mh_log "PASSED: LeaderWorkerSet starts, 3 pods x 1 rank and 2 pods x 2 ranks, from LWS_* alone"
