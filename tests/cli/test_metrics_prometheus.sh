#!/usr/bin/env bash
# test_metrics_prometheus.sh PSTATE LAUNCH_RANK — the metrics read by the real thing (issue 45,
# items 1-2): Debian's Prometheus server scrapes a 4-rank job run by `pstate run --metrics` (the
# launcher's endpoint, every rank's series labelled rank and host) and each rank's own endpoint
# (PSTATE_METRICS_ADDR, one port per local rank), and the counters are checked through
# Prometheus' HTTP query API (PromQL), against the numbers of calls the ranks made
# (tests/cli/launch_rank.c metrics: 5 all_reduce, 3 all_gather, 2 broadcast, 4 barrier and the
# one that ends pstate_init, one MISMATCH on every rank, one TIMEOUT on rank 0), not against
# anything the library computed.
# `promtool check metrics` must pass on both endpoints' text. Skips (77) without prometheus.
# Prints "N passed, M failed"; exits non-zero when one failed.
set -u
PSTATE=$1
LAUNCH_RANK=$2
command -v prometheus >/dev/null && command -v promtool >/dev/null || {
  echo "SKIP: prometheus and promtool are not installed (Debian: prometheus; ./build.sh deps)"
  exit 77
}
pass=0 fail=0
check() {  # check NAME CONDITION-EXIT-STATUS
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi
}
DIR=$(mktemp -d)
JOB_PID= PROM_PID=
cleanup() {
  touch "$DIR/finish"
  [ -n "$PROM_PID" ] && kill "$PROM_PID" 2>/dev/null && wait "$PROM_PID" 2>/dev/null
  [ -n "$JOB_PID" ] && { sleep 1; kill "$JOB_PID" 2>/dev/null; wait "$JOB_PID" 2>/dev/null; }
  rm -rf "$DIR"
}
trap cleanup EXIT
export PSTATE_CPU_CLAIM_DIR=$DIR/claims PSTATE_TRACE_DIR=$DIR/trace LAUNCH_DIR=$DIR

# Free loopback ports: the launcher's, 4 consecutive for the ranks, Prometheus'.
read -r LPORT RBASE PPORT < <(/usr/bin/python3 - <<'EOF'
import socket, random
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
rng = random.Random()
while True:
    base = rng.randrange(20000, 60000)
    if all(free(base + i) for i in range(7)):
        print(base, base + 1, base + 6); break
EOF
)

# UCX between the ranks (a MISMATCH leaves the context usable), a short per-call timeout (rank 0's
# recv that never comes).
PSTATE_SHM=0 PSTATE_TIMEOUT_MS=3000 PSTATE_METRICS_ADDR=127.0.0.1:$RBASE \
  "$PSTATE" run -n 4 --no-bind --metrics "127.0.0.1:$LPORT" -- "$LAUNCH_RANK" metrics >"$DIR/out" 2>"$DIR/err" &
JOB_PID=$!
for _ in $(seq 1 600); do
  [ "$(ls "$DIR"/done-* 2>/dev/null | wc -l)" -eq 4 ] && break
  kill -0 $JOB_PID 2>/dev/null || break
  sleep 0.1
done
[ "$(ls "$DIR"/done-* 2>/dev/null | wc -l)" -eq 4 ]; check "the job made its calls on every rank (done-0..3)" $?

curl -sf "http://127.0.0.1:$RBASE/metrics" >"$DIR/rank0.txt"; check "rank 0 answers at PSTATE_METRICS_ADDR's port" $?
curl -sf "http://127.0.0.1:$((RBASE + 3))/metrics" >"$DIR/rank3.txt"; check "rank 3 answers at the port + its local rank" $?
curl -sf "http://127.0.0.1:$LPORT/metrics" >"$DIR/launcher.txt"; check "the launcher answers at --metrics' port" $?
promtool check metrics <"$DIR/rank0.txt" >"$DIR/promtool0" 2>&1; check "promtool check metrics: a rank's text" $?
promtool check metrics <"$DIR/launcher.txt" >"$DIR/promtoolL" 2>&1; check "promtool check metrics: the launcher's merged text" $?
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$RBASE/nothing")" = 404 ]; check "another path is 404" $?

cat >"$DIR/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: ranks
    static_configs:
      - targets: ['127.0.0.1:$RBASE', '127.0.0.1:$((RBASE + 1))', '127.0.0.1:$((RBASE + 2))', '127.0.0.1:$((RBASE + 3))']
  - job_name: launcher
    static_configs:
      - targets: ['127.0.0.1:$LPORT']
EOF
promtool check config "$DIR/prometheus.yml" >/dev/null 2>&1; check "promtool check config: the scrape config" $?
prometheus --config.file="$DIR/prometheus.yml" --storage.tsdb.path="$DIR/tsdb" \
  --web.listen-address="127.0.0.1:$PPORT" >"$DIR/prometheus.log" 2>&1 &
PROM_PID=$!

# PromQL through the HTTP API; the expectations are computed in prom_check.py from the calls
# launch_rank made.
/usr/bin/python3 "$(dirname "$0")/prom_check.py" "$PPORT" --ranks 4 --launchers 1 --hosts 1 --path ucx
check "Prometheus' PromQL answers equal the calls made (above)" $?

# Error paths: an address in use fails pstate_init with the kernel's reason (Prometheus holds
# PPORT now); --metrics without a usable port is a usage error.
PSTATE_METRICS_ADDR=127.0.0.1:$PPORT "$PSTATE" run -n 1 --no-bind -- "$LAUNCH_RANK" metrics >/dev/null 2>"$DIR/inuse"
rc=$?
[ $rc -ne 0 ] && grep -q "metrics endpoint: cannot serve 127.0.0.1:$PPORT (Address already in use)" "$DIR/inuse"
check "a rank's address in use: pstate_init fails naming it and why (exit $rc)" $?
"$PSTATE" run -n 1 --metrics 0 -- true >/dev/null 2>"$DIR/usage"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--metrics needs a port" "$DIR/usage"; check "--metrics 0: a usage error (exit $rc)" $?

touch "$DIR/finish"
wait $JOB_PID
rc=$?
JOB_PID=
[ $rc -eq 0 ]; check "the job ended (pstate run exit $rc)" $?
[ $fail -eq 0 ] || { echo "--- job stderr:"; tail -40 "$DIR/err"; echo "--- prometheus log:"; tail -20 "$DIR/prometheus.log"; }
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
