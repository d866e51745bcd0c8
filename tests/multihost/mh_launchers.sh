#!/usr/bin/env bash
# mh_launchers.sh — multi-host starts the way mpirun and srun start ranks: only their own
# variables (no RANK/WORLD_SIZE), MASTER_ADDR/MASTER_PORT exported by the job, 2 test hosts x 2.
#
# Run 1, Open MPI's OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE, with the interface given as
# the init parameter socket_ifname (PSTATE_SOCKET_IFNAME unset). Run 2, Slurm's SLURM_PROCID /
# SLURM_NTASKS / SLURM_LOCALID with PSTATE_SOCKET_IFNAME. Both run the checked lifecycle; the
# logs must name the launcher each rank recognized and the interface and address it used.
# Needs root and ip netns (else skipped, 77).
set -euo pipefail
source "$(dirname "$0")/mh_lib.sh"
mh_init launchers
mh_setup la 2
export PSTATE_DEBUG=INFO
master="MASTER_ADDR=$(mh_addr 0)"

for r in 0 1 2 3; do
  mh_start "ompi-r$r" $((r / 2)) OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=$((r % 2)) \
    OMPI_COMM_WORLD_LOCAL_SIZE=2 "$master" MASTER_PORT=29500 PSTATE_SOCKET_IFNAME= MH_SOCKET_IFNAME_PARAM=eth0 \
    MH_EXPECT_LOCAL_TP=1 MH_ROUNDS=1 -- "$MH_RANK" lifecycle
done
for r in 0 1 2 3; do mh_wait "ompi-r$r" 120; done
for r in 0 1 2 3; do mh_expect "ompi-r$r" 0; done
for r in 0 1 2 3; do
  grep -q "rank $r of 4 (local $((r % 2)) of 2, from mpirun)" "$MH_LOGS/ompi-r$r.log" || { mh_log "FAILED: rank $r did not read mpirun's variables"; exit 1; }
done
python3 "$MH_CHECK_LOGS" --per-host 2 --ifname eth0 --group tp=shm --group pp=ucx "$MH_LOGS"/ompi-r*.log

for r in 0 1 2 3; do
  mh_start "slurm-r$r" $((r / 2)) SLURM_PROCID=$r SLURM_NTASKS=4 SLURM_LOCALID=$((r % 2)) "$master" MASTER_PORT=29501 \
    MH_EXPECT_LOCAL_TP=1 MH_ROUNDS=1 -- "$MH_RANK" lifecycle
done
for r in 0 1 2 3; do mh_wait "slurm-r$r" 120; done
for r in 0 1 2 3; do mh_expect "slurm-r$r" 0; done
for r in 0 1 2 3; do
  grep -q "rank $r of 4 (local rank $((r % 2)), from srun)" "$MH_LOGS/slurm-r$r.log" || { mh_log "FAILED: rank $r did not read srun's variables"; exit 1; }
done
python3 "$MH_CHECK_LOGS" --per-host 2 --ifname eth0 --group tp=shm --group pp=ucx "$MH_LOGS"/slurm-r*.log
mh_log "PASSED: mpirun-style and srun-style starts across hosts"
