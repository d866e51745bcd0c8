#!/usr/bin/env bash
# mh_metrics.sh — the metrics read by the real thing across hosts (issue 45, item 2): a 4-rank job
# on 2 test hosts of 2 ranks, started as a multi-node job is (one `pstate run --nnodes 2
# --node-rank K --metrics <host>:9300 -n 2` per host, each host with a host name of its own: a UTS
# namespace), and Debian's Prometheus server, run on host 0, scraping every rank's own endpoint
# (PSTATE_METRICS_ADDR=<host>:9400, one port per local rank) and both launchers' merged endpoints
# across the hosts' network.
#
# Proves, through Prometheus' HTTP query API (tests/cli/prom_check.py): every counter equals the
# calls tests/cli/launch_rank.c `metrics` made (5 all_reduce, 3 all_gather, 2 broadcast, 4 barrier
# on the world, one MISMATCH on every rank, one TIMEOUT on rank 0), both through the ranks and
# through the launchers; the world's calls took UCX (the world spans hosts); the launchers label
# each rank with its own host (two host values, ranks 2 and 3 on host 1); a histogram quantile is
# sane; `promtool check metrics` passes on a rank's and each launcher's text.
# Needs root, ip netns, unshare and prometheus; otherwise it is skipped (exit 77).
set -euo pipefail
source "$(dirname "$0")/mh_lib.sh"
mh_init metrics
command -v prometheus >/dev/null && command -v promtool >/dev/null ||
  mh_skip "prometheus and promtool are not installed (Debian: prometheus; ./build.sh deps)"
command -v unshare >/dev/null || mh_skip "unshare (util-linux) is not installed"
command -v curl >/dev/null || mh_skip "curl is not installed"
LAUNCH_RANK=${LAUNCH_RANK:-$(dirname "$MH_RANK")/launch_rank}
[ -x "$LAUNCH_RANK" ] || { echo "missing $LAUNCH_RANK: build the tests first" >&2; exit 1; }
PROM_CHECK=$(cd "$(dirname "$0")/../cli" && pwd)/prom_check.py
mh_setup mx 2

export PSTATE_CPU_CLAIM_DIR=$MH_LOGS/claims PSTATE_TRACE_DIR=$MH_LOGS/trace LAUNCH_DIR=$MH_LOGS/launch
mkdir -p "$LAUNCH_DIR"
LPORT=9300 RPORT=9400 PPORT=9090
in_host() {  # in_host K COMMAND...: runs COMMAND in host K's namespace
  local k=$1
  shift
  ip netns exec "$(mh_host_ns "$k")" "$@"
}
finish() { touch "$LAUNCH_DIR/finish"; }
trap 'finish; mh_cleanup' EXIT

for k in 0 1; do
  mh_start "node$k" "$k" PSTATE_SHM=0 PSTATE_TIMEOUT_MS=3000 "PSTATE_METRICS_ADDR=$(mh_addr "$k"):$RPORT" -- \
    unshare --uts -- bash -c 'hostname "$0" && exec "$@"' "pmh-metrics-h$k" \
    "$PSTATE_CLI" run --nnodes 2 --node-rank "$k" --master "$(mh_addr 0):$MH_PORT" -n 2 --no-bind \
    --metrics "$(mh_addr "$k"):$LPORT" -- "$LAUNCH_RANK" metrics
done
for _ in $(seq 1 1200); do
  [ "$(ls "$LAUNCH_DIR"/done-* 2>/dev/null | wc -l)" -eq 4 ] && break
  kill -0 "${MH_PID[node0]}" 2>/dev/null && kill -0 "${MH_PID[node1]}" 2>/dev/null || break
  sleep 0.1
done
if [ "$(ls "$LAUNCH_DIR"/done-* 2>/dev/null | wc -l)" -ne 4 ]; then
  mh_log "FAILED: the ranks did not all make their calls"
  mh_show "$MH_LOGS"/node*.log
  exit 1
fi
mh_log "the 4 ranks made their calls; scraping from host 0"

# Every endpoint answers from host 0, across the hosts' network; promtool reads a rank's and each
# launcher's text.
for k in 0 1; do
  in_host 0 curl -sf "http://$(mh_addr "$k"):$LPORT/metrics" >"$MH_LOGS/launcher$k.txt" ||
    { mh_log "FAILED: launcher $k's endpoint $(mh_addr "$k"):$LPORT did not answer host 0"; exit 1; }
  promtool check metrics <"$MH_LOGS/launcher$k.txt" ||
    { mh_log "FAILED: promtool check metrics on launcher $k's text"; exit 1; }
  for l in 0 1; do
    in_host 0 curl -sf "http://$(mh_addr "$k"):$((RPORT + l))/metrics" >"$MH_LOGS/rank$((2 * k + l)).txt" ||
      { mh_log "FAILED: rank $((2 * k + l))'s endpoint $(mh_addr "$k"):$((RPORT + l)) did not answer"; exit 1; }
  done
done
promtool check metrics <"$MH_LOGS/rank3.txt" || { mh_log "FAILED: promtool check metrics on rank 3's text"; exit 1; }
# Each launcher labels its own ranks with its own host name (the UTS namespace's).
for r in 0 1 2 3; do
  k=$((r / 2))
  grep -q "^pstate_rank_up{rank=\"$r\",host=\"pmh-metrics-h$k\"} 1\$" "$MH_LOGS/launcher$k.txt" ||
    { mh_log "FAILED: launcher $k does not report rank $r up on host pmh-metrics-h$k"; grep pstate_rank_up "$MH_LOGS/launcher$k.txt"; exit 1; }
done

cat >"$MH_LOGS/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: ranks
    static_configs:
      - targets: ['$(mh_addr 0):$RPORT', '$(mh_addr 0):$((RPORT + 1))', '$(mh_addr 1):$RPORT', '$(mh_addr 1):$((RPORT + 1))']
  - job_name: launcher
    static_configs:
      - targets: ['$(mh_addr 0):$LPORT', '$(mh_addr 1):$LPORT']
EOF
promtool check config "$MH_LOGS/prometheus.yml" >/dev/null || { mh_log "FAILED: promtool check config"; exit 1; }
mh_start prometheus 0 -- prometheus --config.file="$MH_LOGS/prometheus.yml" --storage.tsdb.path="$MH_LOGS/tsdb" \
  --web.listen-address="127.0.0.1:$PPORT"
if ! in_host 0 /usr/bin/python3 "$PROM_CHECK" "$PPORT" --ranks 4 --launchers 2 --hosts 2 --path ucx; then
  mh_log "FAILED: Prometheus' answers differ from the calls made (above)"
  mh_show "$MH_LOGS/prometheus.log" "$MH_LOGS"/node*.log
  exit 1
fi

kill -TERM "${MH_PID[prometheus]}" && mh_wait prometheus 30
finish
for k in 0 1; do mh_wait "node$k" 60; done
for k in 0 1; do mh_expect "node$k" 0; done
mh_log "PASSED: Prometheus on host 0 read 4 ranks and 2 launchers on 2 hosts; every counter equals the calls made"
