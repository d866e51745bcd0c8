#!/usr/bin/env bash
# mh_shrink.sh — a rank on another host dies; the survivors on every host shrink and go on.
#
# 3 test hosts x 2 ranks; the job's store is a `pstate store` on host 0 (a process of its own, as
# `pstate run` serves it), so it outlives any rank; the ranks get PSTATE_STORE_EXTERNAL=1. They
# loop checked all-reduces on the world; rank 3 (host 1) SIGKILLs itself from a second thread
# 1.5 s into the loop, so it dies inside a collective. Every survivor — its neighbour on host 1
# (pidfd watch), the ranks of hosts 0 and 2 (UCX over TCP, the store, failure notices) — must
# fail, call pstate_shrink and get the same new world (0 1 2 -1 3 4), then run the group suite
# exactly on the world of 5 (across hosts) and on tp 5, and finalize (mh_rank shrink checks it
# all and exits 0 only then). Prints each survivor's time from its failed call to its first exact
# collective. Needs root and ip netns (else skipped, 77).
set -euo pipefail
source "$(dirname "$0")/mh_lib.sh"
mh_init shrink
mh_setup sh 3
export PSTATE_DEBUG=INFO
mh_start store 0 -- "$PSTATE_CLI" store --world-size 6 --host "$(mh_addr 0)" --port "$MH_PORT"
mh_wait_line store "pstate store: serving" 20 || { mh_log "FAILED: pstate store did not start"; mh_show "$MH_LOGS/store.log"; exit 1; }
for r in 0 1 2 3 4 5; do
  victim=()
  [ "$r" -ne 3 ] || victim=(MH_SUICIDE_MS=1500)
  # shellcheck disable=SC2046
  mh_start "r$r" $((r / 2)) $(mh_rank_env "$r" 6 $((r % 2)) 2) PSTATE_STORE_EXTERNAL=1 MH_TIMEOUT_MS=10000 \
    MH_EXPECT_DEAD=3 "${victim[@]}" -- "$MH_RANK" shrink
done
for r in 0 1 2 3 4 5; do mh_wait "r$r" 90; done
kill -TERM "${MH_PID[store]}" 2>/dev/null || true
mh_wait store 10
mh_expect r3 137  # killed by SIGKILL (128 + 9)
for r in 0 1 2 4 5; do mh_expect "r$r" 0; done
grep -h "first exact collective\|survived" "$MH_LOGS"/r*.log
mh_log "PASSED: the survivors of 3 hosts shrank to a world of 5 and every collective is exact"
