#!/usr/bin/env bash
# bench/across_hosts.sh — pstate across hosts against torch.distributed gloo, Open MPI over TCP and
# the wire's floor (ucx_perftest), in one run; writes the "Across hosts" section of
# docs/bench/across-hosts.md.
#
#   sudo bench/across_hosts.sh            (after ./build.sh build; REPEATS=3 HOSTS="2 4" by default)
#
# Needs: root (network namespaces), iproute2 and util-linux (unshare), the `pstate` command in
# $BUILD_DIR (default build/), and the Debian packages openmpi-bin + libopenmpi-dev (mpirun,
# mpicc), python3-torch (torch.distributed's gloo with Debian's /usr/bin/python3), ucx-utils
# (ucx_perftest), linux-perf (perf stat), gnuplot (the plot) — all in build.sh's PACKAGES (`./build.sh deps`).
#
# The hosts: tests/multihost/mh_lib.sh's network namespaces pmh-xbenchN-h0.. on one bridge,
# 198.18.0.(10+k) on eth0, one rank per host (LOCAL_WORLD_SIZE=1), PSTATE_SOCKET_IFNAME=eth0.
# They are built for N = 2, then N = 4, and removed at exit (also on failure and Ctrl-C: mh_lib's
# trap). Per N and per repeat (REPEATS), in turn, so all sides see the same machine load:
#   - what the waits do (N = 2 only, run_waits): waits and sleeps per call of pstate, with and
#     without the network-sized spin (PSTATE_NETWORK_SPIN_US=0), from its counters and perf stat;
#   - the floor (N = 2 only): ucx_perftest -t tag_lat -s 8 (one-way latency, median = "typical")
#     and -t tag_bw -s 64M (MB/s) between h0 and h1 over UCX_TLS=tcp, UCX_NET_DEVICES=eth0;
#   - pstate: `pstate bench --group world` in every host (rank k in h_k, torchrun variables);
#   - gloo: bench/torch_gloo_bench.py (same timing rule; SGLang's broadcast_pyobj for objects);
#   - Open MPI: bench/mpi_bench.c under mpirun (pml ob1, btl self,tcp on eth0), the ranks started
#     in the namespaces by the rsh agent bench/across_hosts_rsh.sh (`ip netns exec` + own UTS);
#   the order of pstate / gloo / MPI rotates per repeat.
# The cases: all_reduce float32 8 B..64 MiB (x2), all_gather 8 B..16 MiB (x8), send_recv 8 B..16 MiB
# (x8, ping-pong, one way), broadcast_object 64 B..64 KiB (x4). About 10 minutes on a quiet 2-core
# machine with REPEATS=3. bench/across_hosts_report.py then writes
# bench/results/across_hosts/across_hosts.md (ratios to each peer and to the floor, the goals of
# issue 30), across_hosts.png (gnuplot), and replaces the "## Across hosts" section of
# docs/bench/across-hosts.md. Raw JSON, perftest output, logs and binaries stay in
# bench/results/across_hosts/raw/ (git-ignored: only the .md and .png are committed). Every command is
# bounded by `timeout` (CASE_TIMEOUT seconds); a failed side is reported as missing, not fatal.
# Environment: REPEATS, HOSTS ("2 4"), BUILD_DIR, CASE_TIMEOUT (300), GLOO_BUDGET_MS (300),
# RESULTS (bench/results/across_hosts), QUICK=1 (a few sizes, REPEATS=1: a smoke test).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
REPEATS=${REPEATS:-3}
HOSTS=${HOSTS:-"2 4"}
CASE_TIMEOUT=${CASE_TIMEOUT:-300}
export GLOO_BUDGET_MS=${GLOO_BUDGET_MS:-300}
QUICK=${QUICK:-0}
RESULTS=${RESULTS:-$ROOT/bench/results/across_hosts}
[ "$QUICK" = 1 ] && RESULTS=${RESULTS%/}-quick
RAW=$RESULTS/raw
PSTATE=$ROOT/$BUILD_DIR/pstate
MPI_BENCH=$RAW/bin/mpi_bench
PY=/usr/bin/python3

log() { echo "[$(date +%H:%M:%S)] across_hosts: $*" >&2; }

# The cases: NAME|OP|-b|-e|-f (all_reduce to 64 MiB at x2 for the goals' sizes).
if [ "$QUICK" = 1 ]; then
  REPEATS=1
  CASES=("all_reduce|all_reduce|8|64K|8" "broadcast_object|broadcast_object|64|1K|4" "send_recv|send_recv|8|4K|8"
    "all_gather|all_gather|8|4K|8")
else
  CASES=("all_reduce|all_reduce|8|64M|2" "all_gather|all_gather|8|16M|8" "send_recv|send_recv|8|16M|8"
    "broadcast_object|broadcast_object|64|64K|4")
fi

# ---- preconditions and build -----------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || { echo "bench/across_hosts.sh: run as root (it creates network namespaces)" >&2; exit 1; }
[ -x "$PSTATE" ] || { echo "bench/across_hosts.sh: $PSTATE is missing: run ./build.sh build first" >&2; exit 1; }
for tool in mpirun mpicc ucx_perftest unshare perf; do
  command -v "$tool" >/dev/null || { echo "bench/across_hosts.sh: $tool is missing: ./build.sh deps" >&2; exit 1; }
done
"$PY" -c 'import torch.distributed' 2>/dev/null ||
  { echo "bench/across_hosts.sh: $PY has no torch: apt-get install python3-torch (./build.sh deps)" >&2; exit 1; }
rm -rf "$RAW"
mkdir -p "$RAW/bin" "$RAW/logs"
mpicc -O2 -Wall -Wextra -I src/cli bench/mpi_bench.c -o "$MPI_BENCH"

# shellcheck source=../tests/multihost/mh_lib.sh
source "$ROOT/tests/multihost/mh_lib.sh"
MH_LOGS=$RAW/logs

{
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo '+dirty')"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "cpus=$(nproc)"
  echo "kernel=$(uname -r)"
  echo "ucx=$(ucx_info -v 2>/dev/null | sed -n 's/^# Version //p')"
  echo "ompi=$(mpirun --version 2>/dev/null | head -1)"
  echo "torch=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "repeats=$REPEATS"
  echo "quick=$QUICK"
  echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
} >"$RAW/machine.txt"

# ---- one side, one case ------------------------------------------------------------------------
# run_world NAME N -- COMMAND...: rank k of N in host k with the torchrun variables; waits for all.
run_world() {
  local name=$1 n=$2 r rc=0
  shift 3
  for ((r = 0; r < n; r++)); do
    # shellcheck disable=SC2046
    mh_start "$name-r$r" "$r" $(mh_rank_env "$r" "$n" 0 1) "$@"
  done
  for ((r = 0; r < n; r++)); do
    mh_wait "$name-r$r" "$CASE_TIMEOUT"
    [ "${MH_RC[$name-r$r]}" = 0 ] || rc=1
  done
  if [ "$rc" != 0 ]; then
    log "$name failed (logs in $MH_LOGS/$name-r*.log)"
    tail -n 5 "$MH_LOGS/$name-r0.log" >&2 || true
  fi
  return $rc
}

run_pstate() {  # N REP NAME OP B E F
  local n=$1 rep=$2 name=$3 op=$4 b=$5 e=$6 f=$7
  run_world "pstate-$name-h$n-$rep" "$n" -- -- "$PSTATE" bench --group world --op "$op" -b "$b" -e "$e" -f "$f" \
    --json "$RAW/h$n/$rep/pstate-$name.json" || true
}

run_gloo() {
  local n=$1 rep=$2 name=$3 op=$4 b=$5 e=$6 f=$7
  MH_PORT=$((29600 + rep))
  run_world "gloo-$name-h$n-$rep" "$n" -- GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 -- "$PY" \
    "$ROOT/bench/torch_gloo_bench.py" --op "$op" -b "$b" -e "$e" -f "$f" --json "$RAW/h$n/$rep/gloo-$name.json" || true
  MH_PORT=29500
}

run_mpi() {
  local n=$1 rep=$2 name=$3 op=$4 b=$5 e=$6 f=$7 hosts="" k
  for ((k = 0; k < n; k++)); do hosts+="${hosts:+,}$(mh_addr "$k"):1"; done
  # mpirun itself runs in host 0 (its ranks: one per host, host 0's started directly, the others
  # through the rsh agent); the out-of-band and MPI traffic both stay on eth0.
  mh_start "mpi-$name-h$n-$rep" 0 AH_TAG="$MH_TAG" -- unshare --uts sh -c 'hostname ah-h0; exec "$@"' sh \
    timeout "$CASE_TIMEOUT" mpirun --allow-run-as-root -np "$n" --host "$hosts" --bind-to none \
    --mca plm_rsh_agent "$ROOT/bench/across_hosts_rsh.sh" --mca pml ob1 --mca btl self,tcp \
    --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
    "$MPI_BENCH" --op "$op" -b "$b" -e "$e" -f "$f" --json "$RAW/h$n/$rep/mpi-$name.json"
  mh_wait "mpi-$name-h$n-$rep" "$CASE_TIMEOUT"
  if [ "${MH_RC[mpi-$name-h$n-$rep]}" != 0 ]; then
    log "Open MPI failed: $MH_LOGS/mpi-$name-h$n-$rep.log"
    tail -n 5 "$MH_LOGS/mpi-$name-h$n-$rep.log" >&2 || true
  fi
}

# What the waits do (2 hosts): 8 B all_reduce and 1 KiB broadcast_object, 1000 timed + 100 warm-up
# calls (each after a world barrier), with the spin of network waits sized to the wire (as pstate
# ships) and with PSTATE_NETWORK_SPIN_US=0 (network waits spin as same-host ones, 50 us: the budget
# before issue 30); rank 0's INFO line "ucx: waits: N (... ) K slept (S sleeps in poll)" at close
# gives waits and sleeps per call (counted, not timed), and perf stat its context switches.
run_waits() {  # REP
  local rep=$1 spin op b name
  for spin in default 0; do
    for op in all_reduce:8 broadcast_object:1K; do
      b=${op#*:}
      op=${op%%:*}
      name="waits-$op-spin$spin-$rep"
      # shellcheck disable=SC2046
      run_world "$name" 2 -- PSTATE_DEBUG=INFO $([ "$spin" = 0 ] && echo PSTATE_NETWORK_SPIN_US=0) -- \
        perf stat -e context-switches,task-clock -o "$RAW/h2/$rep/$name.perf" \
        "$PSTATE" bench --group world --op "$op" -b "$b" -e "$b" --iters 1000 --warmup 100 \
        --json "$RAW/h2/$rep/$name.json" || true
      grep -h "ucx: waits:" "$MH_LOGS/$name-r0.log" >"$RAW/h2/$rep/$name.waits" || true
    done
  done
}

# The floor: ucx_perftest server in host 1, client in host 0; the client's output is kept.
run_perftest() {  # REP TEST SIZE ITERS
  local rep=$1 test=$2 size=$3 iters=$4 out
  out=$RAW/h2/$rep/ucx-$test.txt
  mh_start "ucx-$test-$rep-server" 1 UCX_TLS=tcp UCX_NET_DEVICES=eth0 -- \
    timeout "$CASE_TIMEOUT" ucx_perftest -p 13337
  sleep 0.5
  mh_start "ucx-$test-$rep-client" 0 UCX_TLS=tcp UCX_NET_DEVICES=eth0 -- \
    timeout "$CASE_TIMEOUT" ucx_perftest "$(mh_addr 1)" -p 13337 -t "$test" -s "$size" -n "$iters"
  mh_wait "ucx-$test-$rep-client" "$CASE_TIMEOUT"
  mh_wait "ucx-$test-$rep-server" 20
  cp "$MH_LOGS/ucx-$test-$rep-client.log" "$out"
  [ "${MH_RC[ucx-$test-$rep-client]}" = 0 ] || log "ucx_perftest $test failed: $out"
}

# ---- the run ------------------------------------------------------------------------------------
for n in $HOSTS; do
  mh_setup "xbench$n" "$n"
  export PSTATE_SOCKET_IFNAME=eth0
  for ((rep = 1; rep <= REPEATS; rep++)); do
    mkdir -p "$RAW/h$n/$rep"
    echo "load_h${n}_rep${rep}=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW/machine.txt"
    log "$n hosts, repeat $rep of $REPEATS (load $(cut -d' ' -f1 /proc/loadavg))"
    if [ "$n" = 2 ]; then
      run_perftest "$rep" tag_lat 8 $([ "$QUICK" = 1 ] && echo 2000 || echo 20000)
      run_perftest "$rep" tag_bw $((64 << 20)) $([ "$QUICK" = 1 ] && echo 5 || echo 40)
      run_waits "$rep"
    fi
    for c in "${CASES[@]}"; do
      IFS='|' read -r name op b e f <<<"$c"
      # Rotate which side goes first, so none always runs right after the same neighbour.
      case $(((rep - 1) % 3)) in
        0) order="pstate gloo mpi" ;;
        1) order="gloo mpi pstate" ;;
        *) order="mpi pstate gloo" ;;
      esac
      for side in $order; do
        log "  $side $name ($b..$e x$f)"
        "run_$side" "$n" "$rep" "$name" "$op" "$b" "$e" "$f"
      done
    done
  done
  mh_cleanup
  trap - EXIT
done
echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW/machine.txt"

"$PY" "$ROOT/bench/across_hosts_report.py" "$RESULTS" "$([ "$QUICK" = 1 ] && echo "$RESULTS/across-hosts.md" || echo "$ROOT/docs/bench/across-hosts.md")"
log "done: $RESULTS/across_hosts.md"
