#!/usr/bin/env bash
# mh_fault_stranger.sh — strangers at the store port, from another host, while a job runs.
#
# 2 test hosts x 2 ranks run a job of 300 checked all-reduces (paced, ~3 s). A third host on the
# same network, not part of the job, meanwhile: sends HTTP-ish garbage to the store port; sends
# a frame header announcing 2 GiB; opens a connection and says nothing; runs pstate_init claiming
# rank 1 with a wrong job token, and once with no token at all. Each stranger must be refused
# (pstate_init with PSTATE_ERR_AUTH), and the job must finish with every result exact.
# Needs root and ip netns (else skipped, 77).
set -euo pipefail
source "$(dirname "$0")/mh_lib.sh"
mh_init fault_stranger
mh_setup fx 3
export PSTATE_DEBUG=INFO
for r in 0 1 2 3; do
  # shellcheck disable=SC2046
  mh_start "job-r$r" $((r / 2)) $(mh_rank_env "$r" 4 $((r % 2)) 2) MH_OPS=300 MH_PACE_MS=10 MH_TIMEOUT_MS=20000 -- "$MH_RANK" job
done
for r in 0 1 2 3; do
  mh_wait_line "job-r$r" "job running" 30 || { mh_log "FAILED: rank $r did not start"; mh_show "$MH_LOGS/job-r$r.log"; exit 1; }
done
store="$(mh_addr 0)/$MH_PORT"
mh_log "stranger on host 2: garbage, a 2 GiB frame header, a silent connection, then wrong and missing tokens"
mh_start garbage 2 -- bash -c "exec 3<>/dev/tcp/$store; printf 'GET / HTTP/1.1\r\nHost: x\r\n\r\n\xff\xff\xff\xff garbage' >&3; sleep 0.5"
mh_start bigframe 2 -- bash -c "exec 3<>/dev/tcp/$store; printf '\xff\xff\xff\x7f\x01' >&3; sleep 0.5"
mh_start silent 2 -- bash -c "exec 3<>/dev/tcp/$store; sleep 2"
# shellcheck disable=SC2046
mh_start wrong_token 2 $(mh_rank_env 1 4 0 1) PSTATE_JOB_TOKEN=not-the-token MH_TIMEOUT_MS=5000 -- "$MH_RANK" stranger
# shellcheck disable=SC2046
mh_start no_token 2 $(mh_rank_env 1 4 0 1) PSTATE_JOB_TOKEN= MH_TIMEOUT_MS=5000 -- "$MH_RANK" stranger
for s in garbage bigframe silent; do mh_wait "$s" 10; done
for s in wrong_token no_token; do mh_wait "$s" 20; mh_expect "$s" 0; done
for r in 0 1 2 3; do mh_wait "job-r$r" 60; done
for r in 0 1 2 3; do mh_expect "job-r$r" 0; done
grep -h "mh: stranger" "$MH_LOGS"/wrong_token.log "$MH_LOGS"/no_token.log
grep -h "store: closing the connection of\|store: refused" "$MH_LOGS/job-r0.log" | head -10 || true
grep -h "job ok" "$MH_LOGS"/job-r*.log
mh_log "PASSED: strangers refused, the job unaffected"
