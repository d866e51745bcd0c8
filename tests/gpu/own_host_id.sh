#!/bin/sh
# tests/gpu/own_host_id.sh PROGRAM [ARGS...] — runs one rank of `pstate run -n W` as an NCCL host of
# its own on CUDA device 0, so that several ranks share ONE GPU (tests/gpu/ranks_per_gpu.sh).
#
# NCCL refuses two ranks on one device of one host ("Duplicate GPU detected"). It tells hosts
# apart by a hash of NCCL_HOSTID when that is set, so each rank gets its own (from RANK, which
# `pstate run` exports), and the transports that need a real second device or a real second host
# are turned off: ranks talk through NCCL's socket transport over loopback. Semantics, not speed:
# every collective still runs NCCL's kernels on the GPU, but the data goes through the host.
# GPU_CHECK_DEVICE tells the check programs which device to ask pstate_init for (every rank: 0).
# Nothing of this is pstate's: it is the launcher's and the test's environment.
set -eu
: "${RANK:?own_host_id.sh: RANK is not set (start it with pstate run -n W)}"
export NCCL_HOSTID="pstate-gpu-check-rank-$RANK"
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_IB_DISABLE=1 NCCL_MNNVL_ENABLE=0
export NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo
export GPU_CHECK_DEVICE=0
exec "$@"
