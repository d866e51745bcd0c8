#!/usr/bin/env bash
# mh_fault_sigkill.sh — a rank on another host is SIGKILLed in the middle of an all-reduce.
#
# 3 test hosts x 2 ranks loop checked 256 KiB all-reduces on the world (pstate timeout 3 s);
# rank 3 (host 1) SIGKILLs itself from a second thread 1.5 s into the loop, so it dies inside a
# collective. Every survivor — its neighbour on host 1 (pidfd watch) and the ranks of hosts 0
# and 2 (UCX peer failure over TCP) — must fail with PEER_LOST or TIMEOUT within the timeout +
# 2 s of its last success, refuse further collectives with ABORTED and abort at once (mh_rank
# loop checks all of it and exits 0 only then). Every survivor's pstate_live_ranks is then the
# world less rank 3, on every host (the store saw its connection close), and stays so while they
# linger 6 s (longer than the spread of their failures) before aborting. Needs root and ip netns
# (else skipped, 77).
set -euo pipefail
source "$(dirname "$0")/mh_lib.sh"
mh_init fault_sigkill
mh_setup fk 3
export PSTATE_DEBUG=INFO
for r in 0 1 2 3 4 5; do
  victim=()
  [ "$r" -ne 3 ] || victim=(MH_SUICIDE_MS=1500)
  # shellcheck disable=SC2046
  mh_start "r$r" $((r / 2)) $(mh_rank_env "$r" 6 $((r % 2)) 2) MH_TIMEOUT_MS=3000 MH_EXPECT_DEAD=3 MH_LINGER_MS=6000 "${victim[@]}" -- "$MH_RANK" loop
done
for r in 0 1 2 3 4 5; do mh_wait "r$r" 60; done
mh_expect r3 137  # killed by SIGKILL (128 + 9)
for r in 0 1 2 4 5; do mh_expect "r$r" 0; done
grep -h "after .* ms (bound" "$MH_LOGS"/r*.log
grep -h "live ranks" "$MH_LOGS"/r*.log
mh_log "PASSED: every survivor failed within the timeout + 2 s and aborted"
