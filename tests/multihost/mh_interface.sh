#!/usr/bin/env bash
# mh_interface.sh — the wrong network interface, across 2 test hosts (issue 19, item 4), and the
# NCCL_SOCKET_IFNAME syntax of PSTATE_SOCKET_IFNAME; plus rank 0 serving without a token on an
# address other hosts reach (item 5). One rank per host, started by hand (startup_rank).
#
#   A. rank 1 (host 1) names lo while MASTER_ADDR is host 0's eth0: rank 1 is told at once that
#      lo has no route there (not "is rank 0 running?"); rank 0 names rank 1 when it gives up.
#   B. rank 0 alone names lo: the store works (it is local to rank 0), but its UCX addresses are
#      loopback: both ranks fail at once naming both ranks' interfaces, before UCX tries.
#   C. ^lo (all but loopback), =eth0 (exact) and eth (prefix) each start the job.
#   D. no job token on 198.18.0.10: rank 0 warns that anyone who reaches the port can join.
# Needs root and ip netns (else skipped, 77).
set -euo pipefail
source "$(dirname "$0")/mh_lib.sh"
mh_init interface
STARTUP_RANK=${STARTUP_RANK:-$(dirname "$MH_RANK")/startup_rank}
[ -x "$STARTUP_RANK" ] || { echo "missing $STARTUP_RANK" >&2; exit 1; }
mh_setup if 2
unset PSTATE_SOCKET_IFNAME
env_of() {  # env_of RANK PORT: a world of 2, one rank per host
  echo "RANK=$1 WORLD_SIZE=2 MASTER_ADDR=$(mh_addr 0) MASTER_PORT=$2 PSTATE_TIMEOUT_MS=4000"
}
line_of() { grep -m1 '^startup_rank: rank' "$MH_LOGS/$1.log" || echo "(no result line)"; }
ms_of() { line_of "$1" | sed -nE 's/.* in ([0-9]+) ms.*/\1/p'; }
check() {  # check NAME MAX_MS WORD...: NAME failed within MAX_MS and its line has every WORD
  local name=$1 max=$2 line ms
  shift 2
  line=$(line_of "$name")
  mh_log "$name: $line"
  ms=$(ms_of "$name")
  [ -n "$ms" ] && [ "$ms" -le "$max" ] || { mh_log "FAILED: $name took ${ms:-?} ms (bound $max)"; mh_show "$MH_LOGS/$name.log"; exit 1; }
  for w in "$@"; do
    echo "$line" | grep -qF -- "$w" || { mh_log "FAILED: $name: the message lacks '$w'"; mh_show "$MH_LOGS/$name.log"; exit 1; }
  done
}

# A. the rank that names lo is told why at once
# shellcheck disable=SC2046
mh_start a0 0 $(env_of 0 29600) PSTATE_SOCKET_IFNAME=eth0 -- "$STARTUP_RANK"
sleep 0.3
# shellcheck disable=SC2046
mh_start a1 1 $(env_of 1 29600) PSTATE_SOCKET_IFNAME=lo -- "$STARTUP_RANK"
mh_wait a1 20
mh_wait a0 20
check a1 2000 "interface lo (127.0.0.1) has no route to $(mh_addr 0)" "PSTATE_SOCKET_IFNAME"
check a0 6000 "rank 1 of 0..1 never connected"

# B. rank 0 alone names lo: both ranks are told, naming both ranks' interfaces
# shellcheck disable=SC2046
mh_start b0 0 $(env_of 0 29601) PSTATE_SOCKET_IFNAME=lo -- "$STARTUP_RANK"
sleep 0.3
# shellcheck disable=SC2046
mh_start b1 1 $(env_of 1 29601) PSTATE_SOCKET_IFNAME=eth0 -- "$STARTUP_RANK"
mh_wait b0 20
mh_wait b1 20
for b in b0 b1; do
  check $b 3000 "rank 0" "loopback interfaces (lo 127.0.0.1)" "rank 1" "eth0 $(mh_addr 1)" "PSTATE_SOCKET_IFNAME"
done
if grep -q "Destination is unreachable" "$MH_LOGS/b0.log" "$MH_LOGS/b1.log"; then
  mh_log "FAILED: UCX's own error reached the output"
  exit 1
fi

# C. NCCL's syntax: exclusions, exact names, prefixes
port=29602
for rule in '^lo' '=eth0' 'eth'; do
  # shellcheck disable=SC2046
  mh_start c0 0 $(env_of 0 $port) PSTATE_SOCKET_IFNAME="$rule" PSTATE_DEBUG=INFO -- "$STARTUP_RANK"
  # shellcheck disable=SC2046
  mh_start c1 1 $(env_of 1 $port) PSTATE_SOCKET_IFNAME="$rule" PSTATE_DEBUG=INFO -- "$STARTUP_RANK"
  mh_wait c0 30
  mh_wait c1 30
  mh_expect c0 0
  mh_expect c1 0
  for r in 0 1; do
    grep -q "init: interface eth0 address $(mh_addr $r) carries the store connection; UCX TCP uses eth0 $(mh_addr $r)" \
      "$MH_LOGS/c$r.log" || { mh_log "FAILED: rule '$rule' did not select eth0 alone on rank $r"; mh_show "$MH_LOGS/c$r.log"; exit 1; }
  done
  mh_log "rule '$rule': $(line_of c0) / $(line_of c1)"
  port=$((port + 1))
done

# D. no token on an address other hosts reach: rank 0 says so
# shellcheck disable=SC2046
mh_start d0 0 $(env_of 0 29610) PSTATE_SOCKET_IFNAME=eth0 PSTATE_JOB_TOKEN= -- "$STARTUP_RANK"
# shellcheck disable=SC2046
mh_start d1 1 $(env_of 1 29610) PSTATE_SOCKET_IFNAME=eth0 PSTATE_JOB_TOKEN= -- "$STARTUP_RANK"
mh_wait d0 30
mh_wait d1 30
mh_expect d0 0
mh_expect d1 0
grep -q "without a job token: any process that reaches this port can join" "$MH_LOGS/d0.log" ||
  { mh_log "FAILED: rank 0 served $(mh_addr 0) without a token and did not warn"; mh_show "$MH_LOGS/d0.log"; exit 1; }
mh_log "PASSED: a wrong interface is named at once on the rank that has it, loopback-only UCX on both ranks; NCCL's syntax works; no token is warned about"
