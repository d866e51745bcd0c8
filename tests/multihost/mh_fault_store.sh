#!/usr/bin/env bash
# mh_fault_store.sh — rank 0, which serves the rendezvous store, dies during rendezvous.
#
# 2 test hosts x 2 ranks; ranks 0, 1 and 2 start pstate_init (timeout 10 s) while rank 3 is held
# back, so the rendezvous cannot complete. Once ranks 1 (host 0) and 2 (host 1) are connected to
# the store and waiting, rank 0 is SIGKILLed. Both must fail pstate_init within the timeout + 2 s
# with a message naming the store; then rank 3 starts late and must fail too (nobody serves the
# store). mh_rank init_fails checks each and exits 0 only then.
# Needs root and ip netns (else skipped, 77).
set -euo pipefail
source "$(dirname "$0")/mh_lib.sh"
mh_init fault_store
mh_setup fs 2
export PSTATE_DEBUG=INFO
for r in 0 1 2; do
  # shellcheck disable=SC2046
  mh_start "r$r" $((r / 2)) $(mh_rank_env "$r" 4 $((r % 2)) 2) MH_TIMEOUT_MS=10000 -- "$MH_RANK" init_fails
done
for r in 1 2; do
  mh_wait_line "r$r" "store: rank $r connected" 30 || { mh_log "FAILED: rank $r never reached the store"; mh_show "$MH_LOGS/r$r.log"; exit 1; }
done
sleep 0.5
mh_log "SIGKILL to rank 0 (the store) during rendezvous"
kill -KILL "${MH_PID[r0]}"
mh_wait r0 10
for r in 1 2; do mh_wait "r$r" 30; done
for r in 1 2; do mh_expect "r$r" 0; done
# shellcheck disable=SC2046
mh_start r3 1 $(mh_rank_env 3 4 1 2) MH_TIMEOUT_MS=3000 -- "$MH_RANK" init_fails
mh_wait r3 30
mh_expect r3 0
grep -h "pstate_init ->" "$MH_LOGS"/r[123].log
mh_log "PASSED: with the store gone, every other rank failed pstate_init with a message naming it"
