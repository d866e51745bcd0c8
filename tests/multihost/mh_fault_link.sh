#!/usr/bin/env bash
# mh_fault_link.sh — a host's network cable is cut (`ip link set eth0 down`) in the middle of
# collectives.
#
# 3 test hosts x 2 ranks loop checked all-reduces on the world (pstate timeout 3 s). Once every
# rank is looping, host 2's eth0 goes down: no FIN, no RST, packets just vanish. Every rank — the
# four on hosts 0 and 1, and the two cut off on host 2 — must fail with TIMEOUT (or PEER_LOST /
# TRANSPORT) within the timeout + 2 s of its last success, refuse further collectives with
# ABORTED and abort at once (mh_rank loop checks it and exits 0 only then).
# Needs root and ip netns (else skipped, 77).
set -euo pipefail
source "$(dirname "$0")/mh_lib.sh"
mh_init fault_link
mh_setup fl 3
export PSTATE_DEBUG=INFO
mh_start_world cut 3 2 MH_TIMEOUT_MS=3000 -- "$MH_RANK" loop
for r in 0 1 2 3 4 5; do
  mh_wait_line "cut-r$r" "looping" 60 || { mh_log "FAILED: rank $r never started looping"; mh_show "$MH_LOGS/cut-r$r.log"; exit 1; }
done
sleep 0.5
mh_log "cutting the cable of host 2"
ip -n "$(mh_host_ns 2)" link set eth0 down
for r in 0 1 2 3 4 5; do mh_wait "cut-r$r" 60; done
for r in 0 1 2 3 4 5; do mh_expect "cut-r$r" 0; done
grep -h "after .* ms (bound" "$MH_LOGS"/cut-r*.log
mh_log "PASSED: with host 2 cut off, every rank failed within the timeout + 2 s and aborted"
