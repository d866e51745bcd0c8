#!/usr/bin/env bash
# bench/etcd_startup.sh — start-up on the etcd store against the TCP store, at the same rank
# counts, with the etcd store's requests per rank (issue 34).
#
#   bench/etcd_startup.sh [OUT.json]      (default bench/results/etcd_startup.json)
#
# Starts one etcd (Debian's etcd-server) on 127.0.0.1 with a free port and a temporary data dir
# (killed and removed at the end). For N in SIZES (default 4 8 16; oversubscribed on this
# machine), REPEATS times (default 3), alternating:
#   tcp   `pstate run -n N -- pstate bench --op startup --tp T --pp N/T` (T = min(N, 8)): the
#         launcher serves the TCP store
#   etcd  the same with `pstate run --store etcd://127.0.0.1:PORT/bench-N-REP`: no launcher store,
#         every rank talks to etcd (lease, claim, rendezvous keys, waits by watches)
# Each run: wall time of the whole job, rank 0's pstate_init and initialize_model_parallel times
# (its "# pstate bench startup" line), and for etcd the requests each rank sent to etcd (its
# "closed ... after K requests to etcd" INFO line at pstate_finalize; lease renewals included).
# Writes medians to OUT.json and prints the markdown table bench/etcd_startup.md
# carries (docs/bench/startup.md).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
OUT=${1:-$ROOT/bench/results/etcd_startup.json}
SIZES=${SIZES:-"4 8 16"}
REPEATS=${REPEATS:-3}
CASE_TIMEOUT=${CASE_TIMEOUT:-300}
PSTATE=${PSTATE:-$ROOT/$BUILD_DIR/pstate}
LOG=$(dirname "$OUT")/logs/etcd_startup.log
mkdir -p "$(dirname "$LOG")"
: >"$LOG"
log() { echo "bench/etcd_startup.sh: $*" >&2; }
[ -x "$PSTATE" ] || { log "no $PSTATE: build first (./build.sh build)"; exit 2; }
ETCD=$(command -v etcd) || { log "no etcd: ./build.sh deps installs etcd-server"; exit 2; }
export PSTATE_TIMEOUT_MS=${PSTATE_TIMEOUT_MS:-240000}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
DATA=$(mktemp -d /tmp/pstate-bench-etcd-XXXXXX)
PORT=$(free_port)
PEER=$(free_port)
"$ETCD" --name b --data-dir "$DATA/d" --listen-client-urls "http://127.0.0.1:$PORT" \
  --advertise-client-urls "http://127.0.0.1:$PORT" --listen-peer-urls "http://127.0.0.1:$PEER" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PEER" --initial-cluster "b=http://127.0.0.1:$PEER" \
  --log-level error >"$DATA/etcd.log" 2>&1 &
ETCD_PID=$!
trap 'kill -KILL $ETCD_PID 2>/dev/null || true; wait $ETCD_PID 2>/dev/null || true; rm -rf "$DATA"' EXIT
for i in $(seq 100); do curl -s -X POST "http://127.0.0.1:$PORT/v3/kv/range" -d '{"key":"eA=="}' >/dev/null && break; sleep 0.1; done

# One run: prints "WALL_MS INIT_MS MP_MS REQ_MEAN REQ_MAX" (null where not measured).
run_one() {
  local n=$1 store=$2 tp pp t0 t1 out line init mp reqs
  tp=$((n < 8 ? n : 8))
  pp=$((n / tp))
  out=$(mktemp)
  local args=()
  [ "$store" = tcp ] || args=(--store "$store")
  t0=$(date +%s%N)
  if ! PSTATE_DEBUG=INFO timeout --kill-after=10 "$CASE_TIMEOUT" "$PSTATE" run --no-bind "${args[@]}" -n "$n" -- \
      "$PSTATE" bench --op startup --tp "$tp" --pp "$pp" >"$out" 2>&1; then
    { echo "\$ pstate run ${args[*]} -n $n (failed)"; tail -20 "$out"; } >>"$LOG"
    rm -f "$out"
    echo "null null null null null"
    return
  fi
  t1=$(date +%s%N)
  # the log keeps what the numbers come from (the INFO output of every rank would be ~1 MB)
  { echo "\$ pstate run ${args[*]} -n $n"; grep -E "# pstate bench startup|requests to etcd" "$out"; } >>"$LOG"
  line=$(grep "# pstate bench startup, $n ranks" "$out" | tail -1 || true)
  init=$(sed -n 's/.*pstate_init \([0-9.]*\) ms.*/\1/p' <<<"$line" | cut -d. -f1)
  mp=$(sed -n 's/.*initialize_model_parallel \([0-9.]*\) ms.*/\1/p' <<<"$line" | cut -d. -f1)
  reqs=$(sed -n 's/.*after \([0-9]*\) requests to etcd.*/\1/p' "$out" | awk '{s += $1; if ($1 > m) m = $1; n++} END {if (n) printf "%.1f %d", s / n, m; else print "null null"}')
  rm -f "$out"
  echo "$(((t1 - t0) / 1000000)) ${init:-null} ${mp:-null} $reqs"
}

median() { printf '%s\n' "$@" | grep -v null | sort -n | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "null"}'; }

rows=()
table="| ranks | TCP store: job wall ms | etcd: job wall ms | TCP: rank 0 pstate_init ms | etcd: rank 0 pstate_init ms | etcd requests per rank (mean / max) |
| --- | --- | --- | --- | --- | --- |"
for n in $SIZES; do
  tw=() ti=() ew=() ei=() em=() ex=()
  for rep in $(seq 1 "$REPEATS"); do
    read -r w i _ _ _ <<<"$(run_one "$n" tcp)"
    tw+=("$w") ti+=("$i")
    read -r w i _ m x <<<"$(run_one "$n" "etcd://127.0.0.1:$PORT/bench-$n-$rep-$$")"
    ew+=("$w") ei+=("$i") em+=("$m") ex+=("$x")
  done
  row=$(printf '{"ranks": %d, "tcp_wall_ms": %s, "etcd_wall_ms": %s, "tcp_init_ms": %s, "etcd_init_ms": %s, "etcd_requests_mean": %s, "etcd_requests_max": %s, "tcp_runs_ms": [%s], "etcd_runs_ms": [%s]}' \
    "$n" "$(median "${tw[@]}")" "$(median "${ew[@]}")" "$(median "${ti[@]}")" "$(median "${ei[@]}")" \
    "$(median "${em[@]}")" "$(median "${ex[@]}")" "$(IFS=,; echo "${tw[*]}")" "$(IFS=,; echo "${ew[*]}")")
  log "$row"
  rows+=("$row")
  table+="
| $n | $(median "${tw[@]}") | $(median "${ew[@]}") | $(median "${ti[@]}") | $(median "${ei[@]}") | $(median "${em[@]}") / $(median "${ex[@]}") |"
done
{
  echo "{\"date\": \"$(date -u '+%Y-%m-%d %H:%M UTC')\", \"nproc\": $(nproc), \"repeats\": $REPEATS, \"etcd\": \"$("$ETCD" --version | head -1)\","
  echo " \"commit\": \"$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo '+dirty')\","
  echo " \"sizes\": [$(IFS=,; echo "${rows[*]}")]}"
} >"$OUT"
echo "$table"
