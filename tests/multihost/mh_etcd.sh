#!/usr/bin/env bash
# mh_etcd.sh — the job's store on a 3-member etcd cluster survives losing any host, the first one
# included (issue 34).
#
# 4 test hosts. Hosts 0-2 each run an etcd member (Debian's etcd-server) and `pstate run --store
# etcd://h0:2379,h1:2379,h2:2379/PREFIX --nnodes 3 -n 2 -- mh_rank etcd`: 3 hosts x 2 ranks, no
# store in any launcher or rank. Host 3 is spare. Lease TTL 2 s (PSTATE_ETCD_LEASE_TTL_S).
#   1. While the ranks loop checked all-reduces, the etcd member on host 0 (the endpoint every
#      rank talks to first) restarts: no effect (the ranks fail over to host 1's member, every
#      rank keeps its lease, the loop goes on).
#   2. Host 0 dies entirely: its cable goes down first (no FIN, no RST reaches anyone), then its
#      ranks, its launcher and its etcd member are SIGKILLed. Polling etcd from host 1 measures
#      when the dead ranks' leases lapse (must be within the TTL + 1 s of the kill, plus the
#      poll's own 0.1 s). The 4 survivors' all-reduce fails with PEER_LOST when the leases lapse
#      (the store's lease watch marks ranks 0 and 1 departed for the UCX waits, which cannot see
#      a vanished host themselves), well before its 10 s timeout; pstate_live_ranks (the leases)
#      says ranks 0 and 1 are gone; they shrink to a world of 4 and compute exactly.
#   3. A replacement of rank 0 starts on host 3 once etcd dropped rank 0 (PSTATE_REJOIN=1); the survivors admit it with
#      pstate_grow; the world of 5 computes exactly.
#   4. Quorum is lost (host 2's member is killed: 1 of 3 left): every rank's next store call
#      (pstate_shrink) fails with PEER_LOST naming etcd within its deadline (MH_TIMEOUT_MS + 3 s),
#      no hang.
# Skipped (77) without root, ip netns or the etcd binary.
set -euo pipefail
source "$(dirname "$0")/mh_lib.sh"
mh_init etcd
ETCD=${PSTATE_ETCD_BIN:-$(command -v etcd || true)}
ETCDCTL=$(command -v etcdctl || true)
[ -n "$ETCD" ] && [ -n "$ETCDCTL" ] || mh_skip "etcd / etcdctl are not installed (./build.sh deps installs etcd-server and etcd-client)"
mh_setup etcdst 4
TTL=2
TIMEOUT_MS=10000  # the collective and store-call deadline: room for an etcd election on a loaded machine
PREFIX="pmh/etcd-$$"
ENDPOINTS="$(mh_addr 0):2379,$(mh_addr 1):2379,$(mh_addr 2):2379"
URL="etcd://$ENDPOINTS/$PREFIX"
CLUSTER="m0=http://$(mh_addr 0):2380,m1=http://$(mh_addr 1):2380,m2=http://$(mh_addr 2):2380"
QUORUM_GONE="$MH_LOGS/quorum-gone"
ETCD_DATA=$(mktemp -d /tmp/pmh-etcdst-XXXXXX)  # etcd preallocates its WAL: not in the kept logs
trap 'mh_cleanup; rm -rf "$ETCD_DATA"' EXIT
# The job id the launchers and the replacement share (pstate run would derive one from the token).
export PSTATE_DEBUG=INFO PSTATE_ETCD_LEASE_TTL_S=$TTL ETCDCTL_API=3 PSTATE_JOB_ID="mh-etcd-$$" PSTATE_TRACE_DIR="$MH_LOGS/trace"

# etcd member k on host k (state: new or existing); its data under $ETCD_DATA/m$k.
start_member() {
  local k=$1 state=$2 a
  a=$(mh_addr "$k")
  mh_start "etcd$k-$state" "$k" -- "$ETCD" --name "m$k" --data-dir "$ETCD_DATA/m$k" \
    --listen-client-urls "http://$a:2379" --advertise-client-urls "http://$a:2379" \
    --listen-peer-urls "http://$a:2380" --initial-advertise-peer-urls "http://$a:2380" \
    --initial-cluster "$CLUSTER" --initial-cluster-state "$state" --initial-cluster-token "pmh-etcdst-$$" \
    --log-level warn
  MEMBER[$k]="etcd$k-$state"
}
ctl() {  # ctl HOST ARGS...: etcdctl from HOST against its own member
  ip netns exec "$(mh_host_ns "$1")" "$ETCDCTL" --endpoints "http://$(mh_addr "$1"):2379" --command-timeout=1s "${@:2}"
}
rank_keys() { ctl "$1" get --prefix --keys-only "$PREFIX/@/rank/" 2>/dev/null | grep -c . || true; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
fail() { mh_log "FAILED: $*"; for f in "$MH_LOGS"/*.log; do mh_show "$f"; done; exit 1; }

declare -A MEMBER
for k in 0 1 2; do start_member "$k" new; done
for k in 0 1 2; do
  for i in $(seq 100); do ctl "$k" endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
  ctl "$k" endpoint health >/dev/null 2>&1 || fail "etcd member $k is not healthy"
done
mh_log "etcd: 3 members up ($ENDPOINTS)"

for k in 0 1 2; do
  mh_start "L$k" "$k" MH_TIMEOUT_MS=$TIMEOUT_MS MH_EXPECT_DEAD=0,1 MH_QUORUM_GONE="$QUORUM_GONE" -- \
    "$PSTATE_CLI" run --store "$URL" --nnodes 3 --node-rank "$k" -n 2 --no-bind -- "$MH_RANK" etcd
done
for k in 0 1 2; do
  for i in $(seq 600); do [ "$(grep -c "looping" "$MH_LOGS/L$k.log" 2>/dev/null || true)" -ge 2 ] && break; sleep 0.1; done
  [ "$(grep -c "looping" "$MH_LOGS/L$k.log" || true)" -ge 2 ] || fail "the ranks of host $k did not start looping"
done
mh_log "6 ranks on 3 hosts loop all-reduces; $(rank_keys 1) rank leases in etcd"

# 1. A member restarts mid-job (the one every rank talks to first).
kill -TERM "${MH_PID[${MEMBER[0]}]}"
mh_wait "${MEMBER[0]}" 10
start_member 0 existing
for i in $(seq 100); do ctl 0 endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
ctl 0 endpoint health >/dev/null 2>&1 || fail "etcd member 0 did not come back"
sleep $((TTL + 1))  # longer than a lease: a rank that lost its lease would show now
[ "$(rank_keys 1)" = 6 ] || fail "after etcd member 0 restarted, $(rank_keys 1) rank leases are left (expected 6)"
grep -q "loop ended" "$MH_LOGS"/L*.log && fail "a rank's loop ended while etcd member 0 restarted"
mh_log "etcd member 0 restarted: no effect (6 leases, every rank still looping)"

# 2. Host 0 dies: the cable first (no FIN/RST), then every process in it.
ip -n "$(mh_host_ns 0)" link set eth0 down
t_kill=$(now_ms)
for pid in $(ip netns pids "$(mh_host_ns 0)"); do kill -KILL "$pid" 2>/dev/null || true; done
for i in $(seq 50); do [ -z "$(ip netns pids "$(mh_host_ns 0)")" ] && break; sleep 0.02; done
[ -z "$(ip netns pids "$(mh_host_ns 0)")" ] || fail "processes of host 0 survived SIGKILL"
mh_log "host 0 is gone (cable down, ranks 0 and 1, its launcher and etcd member killed)"
detected="" gone0="" gone1=""
for i in $(seq 200); do
  keys=$(ctl 1 get --prefix --keys-only "$PREFIX/@/rank/" 2>/dev/null || true)
  if [ -n "$keys" ] && [ -z "$gone0" ] && ! grep -qE "/rank/0$" <<<"$keys"; then gone0=$(($(now_ms) - t_kill)); fi
  if [ -n "$keys" ] && [ -z "$gone1" ] && ! grep -qE "/rank/1$" <<<"$keys"; then gone1=$(($(now_ms) - t_kill)); fi
  if [ -n "$gone0" ] && [ -n "$gone1" ]; then detected=$((gone0 > gone1 ? gone0 : gone1)); break; fi
  sleep 0.1
done
[ -n "$detected" ] || fail "etcd still lists host 0's ranks 20 s after the kill"
mh_log "etcd dropped rank 0 ${gone0} ms and rank 1 ${gone1} ms after the kill (lease TTL ${TTL} s; bound $((TTL * 1000 + 1000)) ms + 100 ms of polling)"
[ "$detected" -le $((TTL * 1000 + 1100)) ] || fail "detection took ${detected} ms, over the TTL + 1 s"
for i in $(seq 300); do
  [ "$(cat "$MH_LOGS"/L1.log "$MH_LOGS"/L2.log | grep -c "first exact collective")" -ge 4 ] && break
  sleep 0.1
done
[ "$(cat "$MH_LOGS"/L1.log "$MH_LOGS"/L2.log | grep -c "first exact collective")" -ge 4 ] || fail "the survivors did not shrink"
recovered=$(($(now_ms) - t_kill))
mh_log "the 4 survivors shrank and computed exactly ${recovered} ms after the kill (collective timeout ${TIMEOUT_MS} ms)"
[ "$(cat "$MH_LOGS"/L1.log "$MH_LOGS"/L2.log | grep "loop ended" | grep -c "PSTATE_ERR_PEER_LOST")" = 4 ] ||
  fail "a survivor's all-reduce did not fail with PEER_LOST (the lease watch), but with its timeout"
[ "$recovered" -lt "$TIMEOUT_MS" ] || fail "the survivors recovered only after the collective timeout"
mh_wait L0 5
# 3. A replacement of rank 0 on host 3 (it waits to be admitted; its rendezvous deadline covers
# the survivors' failed call, at their timeout, and their shrink).
# shellcheck disable=SC2046
mh_start R0 3 $(mh_rank_env 0 6 0 1) PSTATE_STORE="$URL" PSTATE_REJOIN=1 MH_REPLACEMENT=1 PSTATE_INIT_TIMEOUT_MS=60000 \
  MH_TIMEOUT_MS=$TIMEOUT_MS MH_QUORUM_GONE="$QUORUM_GONE" -- "$MH_RANK" etcd
for k in 1 2; do
  for i in $(seq 600); do [ "$(grep -c "grown" "$MH_LOGS/L$k.log" 2>/dev/null || true)" -ge 2 ] && break; sleep 0.1; done
  [ "$(grep -c "grown" "$MH_LOGS/L$k.log" || true)" -ge 2 ] || fail "the survivors of host $k did not grow back"
done
mh_wait_line R0 "grown" 30 || fail "the replacement did not join"
t_grown=$(now_ms)
mh_log "survivors shrank to 4 and grew to 5 with the replacement on host 3 ($((t_grown - t_kill)) ms after the kill)"

# 4. Quorum lost: host 2's member too (1 of 3 left).
kill -KILL "${MH_PID[${MEMBER[2]}]}"
mh_wait "${MEMBER[2]}" 5
touch "$QUORUM_GONE"
for k in 1 2; do mh_wait "L$k" $((TIMEOUT_MS / 1000 + 20)); done
mh_wait R0 $((TIMEOUT_MS / 1000 + 20))
for n in L1 L2 R0; do mh_expect "$n" 0; done
[ "$(cat "$MH_LOGS"/L1.log "$MH_LOGS"/L2.log "$MH_LOGS"/R0.log | grep -c "without etcd quorum")" = 5 ] ||
  fail "not every rank reported the lost quorum"
grep -h "first exact collective\|without etcd quorum\|loop ended" "$MH_LOGS"/L*.log "$MH_LOGS"/R0.log | cut -c1-300
mh_log "PASSED: detection ${detected} ms after the kill (TTL ${TTL} s); survivors exact again ${recovered} ms after it; grow done $((t_grown - t_kill)) ms after the kill; quorum loss named etcd on every rank"
