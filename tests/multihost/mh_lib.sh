# mh_lib.sh — test hosts made of network namespaces, for the scripts of tests/multihost/.
# Sourced, not run. Needs root and iproute2 (`ip netns`).
#
# mh_setup TAG N [IMPAIRED_HOST]  builds N hosts (2..4), each a namespace with a loopback and
#                                  an eth0 of 198.18.0.(10+k)/24, all on one bridge that lives in a
#                                  namespace of its own (the "switch"): nothing touches the root
#                                  namespace, so no packet of a test can leave the machine, and
#                                  198.18.0.0/15 is the range set aside for network tests.
#                                  IMPAIRED_HOST's cable is slow and lossy (mh_impair).
# Namespaces are named pmh-TAG-h0.., pmh-TAG-sw. mh_setup first removes what a killed earlier run
# of the same TAG left (idempotent), and installs a trap that kills what the test started and
# deletes the namespaces on any exit.
#
# mh_start NAME HOST [VAR=VALUE...] -- COMMAND...   runs COMMAND in HOST's namespace in the
#                                  background, output in $MH_LOGS/NAME.log; MH_PID[NAME] = its pid
# mh_rank_env RANK WORLD LOCAL_RANK LOCAL_WORLD    the torchrun variables as VAR=VALUE words
# mh_wait NAME SECONDS             waits for NAME; kills it after SECONDS; sets MH_RC[NAME]
# mh_wait_line NAME REGEX SECONDS  waits until NAME's log has a line matching REGEX
# mh_skip MESSAGE                  prints why and exits with 77 (ctest SKIP_RETURN_CODE)
#
# Scripts set MH_LOGS (a fresh folder) themselves; PSTATE_JOB_TOKEN is set here for the job.

MH_SKIP_CODE=77
MH_BASE=198.18.0
MH_PORT=29500
declare -A MH_PID MH_RC
MH_NS=()
MH_EMU_PIDS=()

mh_skip() {
  echo "SKIPPED: $*"
  exit "$MH_SKIP_CODE"
}

mh_log() { echo "[$(date +%H:%M:%S.%3N)] $*"; }

mh_require() {
  [ "$(id -u)" -eq 0 ] || mh_skip "multi-host tests need root to create network namespaces (run as root, as CI does)"
  command -v ip >/dev/null || mh_skip "iproute2 (ip) is not installed"
  local probe="pmh-probe-$$"
  ip netns add "$probe" 2>/dev/null || mh_skip "'ip netns add' does not work here (no network namespaces)"
  ip netns del "$probe"
}

mh_host_ns() { echo "pmh-$MH_TAG-h$1"; }
mh_switch_ns() { echo "pmh-$MH_TAG-sw"; }
mh_addr() { echo "$MH_BASE.$((10 + $1))"; }

# Kills what this test started (by pid), then every process still inside its namespaces (they
# can only be this test's), then deletes the namespaces.
mh_cleanup() {
  local name pid ns
  for name in "${!MH_PID[@]}"; do
    pid=${MH_PID[$name]}
    kill -KILL "$pid" 2>/dev/null || true
  done
  for pid in "${MH_EMU_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${MH_EMU_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  mh_delete_namespaces "$MH_TAG"
}

mh_delete_namespaces() {
  local tag=$1 ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^pmh-$tag-(h[0-9]+|sw)$" || true); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
}

# mh_setup TAG N [IMPAIRED_HOST]
mh_setup() {
  MH_TAG=$1
  local n=$2 impaired=${3:--1} k sw
  mh_require
  mh_delete_namespaces "$MH_TAG"  # leftovers of a run that was killed before its trap ran
  trap mh_cleanup EXIT
  trap 'exit 130' INT TERM
  sw=$(mh_switch_ns)
  ip netns add "$sw"
  MH_NS+=("$sw")
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for ((k = 0; k < n; k++)); do
    local ns
    ns=$(mh_host_ns "$k")
    ip netns add "$ns"
    MH_NS+=("$ns")
    ip -n "$ns" link set lo up
    if [ "$k" -eq "$impaired" ]; then
      mh_impaired_cable "$k"
    else
      ip link add eth0 netns "$ns" type veth peer name "p$k" netns "$sw"
    fi
    ip -n "$sw" link set "p$k" master br0
    ip -n "$sw" link set "p$k" up
    ip -n "$ns" addr add "$(mh_addr "$k")/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
  export PSTATE_JOB_TOKEN="mh-$MH_TAG-$$-$RANDOM$RANDOM"
  export PSTATE_SOCKET_IFNAME=eth0
  mh_log "hosts: $n namespaces ($(for ((k = 0; k < n; k++)); do printf '%s=%s ' "$(mh_host_ns "$k")" "$(mh_addr "$k")"; done)) on bridge br0 in $sw"
}

# The cable of host k: 50 ms +- 20 ms each way, 1% loss each way (MH_DELAY_MS, MH_JITTER_MS,
# MH_LOSS_PERCENT override). tc netem on a veth where the kernel has it, else TAP devices joined
# by linkemu (this project's CI kernel has no netem).
mh_impaired_cable() {
  local k=$1 ns sw delay=${MH_DELAY_MS:-50} jitter=${MH_JITTER_MS:-20} loss=${MH_LOSS_PERCENT:-1}
  ns=$(mh_host_ns "$k")
  sw=$(mh_switch_ns)
  ip link add eth0 netns "$ns" type veth peer name "p$k" netns "$sw"
  if [ "${MH_IMPAIR:-auto}" != tap ] &&
    ip netns exec "$ns" tc qdisc add dev eth0 root netem delay "${delay}ms" "${jitter}ms" loss "${loss}%" 2>/dev/null &&
    ip netns exec "$sw" tc qdisc add dev "p$k" root netem delay "${delay}ms" "${jitter}ms" loss "${loss}%" 2>/dev/null; then
    mh_log "impaired cable of host $k: tc netem delay ${delay}ms ${jitter}ms loss ${loss}% on both ends"
    return
  fi
  [ "${MH_IMPAIR:-auto}" != netem ] || { echo "tc netem is not available and MH_IMPAIR=netem" >&2; exit 1; }
  ip -n "$ns" link del eth0 2>/dev/null || true
  [ -c /dev/net/tun ] || mh_skip "neither tc netem nor /dev/net/tun is available to impair a link"
  ip -n "$ns" tuntap add dev eth0 mode tap
  ip -n "$sw" tuntap add dev "p$k" mode tap
  mkdir -p "$MH_LOGS"
  "$MH_LINKEMU" "$ns" eth0 "$sw" "p$k" "$delay" "$jitter" "$loss" "$k" >"$MH_LOGS/linkemu-h$k.log" 2>&1 &
  MH_EMU_PIDS+=($!)
  mh_log "impaired cable of host $k: tc netem is not available in this kernel; linkemu (user space) delay ${delay}ms +- ${jitter}ms loss ${loss}% each way"
}

# mh_rank_env RANK WORLD LOCAL_RANK LOCAL_WORLD
mh_rank_env() {
  echo "RANK=$1 WORLD_SIZE=$2 LOCAL_RANK=$3 LOCAL_WORLD_SIZE=$4 MASTER_ADDR=$(mh_addr 0) MASTER_PORT=$MH_PORT"
}

# mh_start NAME HOST [VAR=VALUE...] -- COMMAND...
mh_start() {
  local name=$1 host=$2
  shift 2
  local vars=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  mkdir -p "$MH_LOGS"
  ip netns exec "$(mh_host_ns "$host")" env "${vars[@]}" "$@" >"$MH_LOGS/$name.log" 2>&1 &
  MH_PID[$name]=$!
}

# mh_wait NAME SECONDS: MH_RC[NAME] = exit status (124 when it had to be killed).
mh_wait() {
  local name=$1 seconds=$2 pid=${MH_PID[$1]} waited=0
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((seconds * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    mh_log "$name still running after ${seconds}s: killed (a hang)"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    MH_RC[$name]=124
  else
    local rc=0
    wait "$pid" || rc=$?
    MH_RC[$name]=$rc
  fi
  unset "MH_PID[$name]"
}

# mh_wait_line NAME REGEX SECONDS: 0 when the line appeared, 1 when the time passed.
mh_wait_line() {
  local name=$1 regex=$2 seconds=$3 i
  for ((i = 0; i < seconds * 20; i++)); do
    grep -qE "$regex" "$MH_LOGS/$name.log" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# Prints a log with a header (for failures).
mh_show() {
  local f
  for f in "$@"; do
    echo "----- $f"
    tail -n "${MH_SHOW_LINES:-60}" "$f"
  done
}

# mh_init TAG: paths of the programs (from the environment ctest sets, else the default build
# folder) and a fresh log folder $MH_LOGS (kept after the run for reading).
mh_init() {
  local root build
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  build=${PSTATE_BUILD_DIR:-$root/build}
  MH_RANK=${MH_RANK:-$build/tests/mh_rank}
  MH_LINKEMU=${MH_LINKEMU:-$build/tests/mh_linkemu}
  PSTATE_CLI=${PSTATE_CLI:-$build/pstate}
  MH_CHECK_LOGS="$root/tests/multihost/mh_check_logs.py"
  MH_LOGS=${MH_LOG_DIR:-$build/multihost-logs}/$1
  rm -rf "$MH_LOGS"
  mkdir -p "$MH_LOGS"
  for p in "$MH_RANK" "$PSTATE_CLI"; do
    [ -x "$p" ] || { echo "missing $p: build the tests first (cmake --build build)" >&2; exit 1; }
  done
}

# mh_expect NAME CODE: fails the test (exit 1, showing NAME's log) unless MH_RC[NAME] == CODE.
mh_expect() {
  local name=$1 want=$2
  if [ "${MH_RC[$name]}" != "$want" ]; then
    mh_log "FAILED: $name exited with ${MH_RC[$name]}, expected $want"
    mh_show "$MH_LOGS/$name.log"
    exit 1
  fi
}

# Stops the link emulators (their statistics go to their logs) before the trap would.
mh_stop_emulators() {
  local pid
  for pid in "${MH_EMU_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${MH_EMU_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  MH_EMU_PIDS=()
}

# mh_start_world NAME HOSTS PER_HOST [VAR=VALUE...] -- COMMAND...: one process per rank, node-major,
# started directly with the torchrun variables (no launcher: a fault test must not have a launcher
# stop the ranks it expects to see fail by themselves). Ranks are named NAME-rR.
mh_start_world() {
  local name=$1 hosts=$2 per=$3 r
  shift 3
  local vars=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  for ((r = 0; r < hosts * per; r++)); do
    # shellcheck disable=SC2046
    mh_start "$name-r$r" $((r / per)) $(mh_rank_env "$r" $((hosts * per)) $((r % per)) "$per") "${vars[@]}" "$@"
  done
}
