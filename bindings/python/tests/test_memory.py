"""Group memory (pstate_mem_*, issue 29): the CPU context's refusal here, and the allocator with
its DLPack buffers on 2 ranks on the devsim stand-ins (CUDA and NCCL on host memory, built in the
build tree's tests/devsim) where they were built; without them that part is skipped, saying so."""
from __future__ import annotations

import os

import pytest

import pstate


@pytest.fixture
def one_rank(tmp_path):
    with pstate.init(world_size=1, rank=0, init_method=f"file://{tmp_path}/store", timeout_ms=10000) as ps:
        yield ps


def test_group_memory_needs_a_cuda_context(one_rank):
    w = one_rank.world
    with pytest.raises(pstate.UnsupportedError, match="CUDA context"):
        w.mem_alloc(4096)
    with pytest.raises(pstate.UnsupportedError, match="CUDA context"):
        w.mem_stats()
    with pytest.raises(pstate.InvalidArgumentError, match="bytes is 0"):
        w.mem_alloc(0)
    one_rank.set_graph_registration(True)  # a flag of the context: accepted, used at capture end


def _devsim_env() -> dict:
    devsim = os.path.join(os.environ.get("PSTATE_BUILD_DIR", ""), "tests", "devsim")
    cudart = os.path.join(devsim, "libpstate_devsim_cudart.so")
    nccl = os.path.join(devsim, "libpstate_devsim_nccl.so")
    if not (os.path.exists(cudart) and os.path.exists(nccl)):
        pytest.skip(f"the devsim stand-ins are not built in {devsim} (a build without the CUDA/NCCL headers)")
    return {"PSTATE_CUDA_RUNTIME_LIBRARY": cudart, "PSTATE_NCCL_LIBRARY": nccl}


@pytest.mark.parametrize("n", [1, 2])
def test_allocator_symmetric_exact_pool_local_on_devsim(ranks, n):
    ranks(n, "group_memory", extra_env=_devsim_env())
