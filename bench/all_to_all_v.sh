#!/usr/bin/env bash
# bench/all_to_all_v.sh — pstate_all_to_all_v against Open MPI's MPI_Alltoallv on this host, at 2
# and 4 ranks, 1 KiB .. 4 MiB (x4), with bench/all_to_all_v_bench.c built twice (against the
# libpstate of BUILD_DIR, and by mpicc). Ranks are started the way a launcher would (RANK,
# WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT, PSTATE_JOB_TOKEN; env:// init) for pstate, by mpirun
# with Open MPI's shared-memory path (--mca pml ob1 --mca btl self,vader, as bench/run.sh) for
# MPI; neither side is bound to cores, 4 ranks oversubscribe a 2-core machine (MPI yields when
# idle, as bench/run.sh's oversubscribed cases). Prints both tables and the load average.
#
#   BUILD_DIR=build [RANKS="2 4"] bench/all_to_all_v.sh [extra bench args, e.g. --check]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-$BUILD_DIR/bench-a2av}
mkdir -p "$OUT"
cc -O2 -std=c11 -Wall -Wextra -I include -I src/cli bench/all_to_all_v_bench.c -o "$OUT/a2av_pstate" \
  -L "$BUILD_DIR" -lpstate -Wl,-rpath,"$PWD/$BUILD_DIR"
mpicc -O2 -std=c11 -Wall -Wextra -DBENCH_MPI -I src/cli bench/all_to_all_v_bench.c -o "$OUT/a2av_mpi"
MPIRUN=(mpirun --allow-run-as-root --bind-to none --mca pml ob1 --mca btl self,vader --oversubscribe
        --mca mpi_yield_when_idle 1)

run_pstate() {  # n, args...
  local n=$1 port pids=()
  shift
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for ((r = 0; r < n; ++r)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      PSTATE_JOB_TOKEN=a2av-bench-$port timeout 600 "$OUT/a2av_pstate" "$@" &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in ${RANKS:-2 4}; do
  run_pstate "$n" "$@"
  timeout 600 "${MPIRUN[@]}" -np "$n" "$OUT/a2av_mpi" "$@"
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
