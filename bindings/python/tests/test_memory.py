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


def test_finalize_inside_graph_capture_keeps_the_context_on_devsim(ranks):
    ranks(1, "finalize_in_capture", extra_env=_devsim_env())


def test_dlpack_export_keeps_its_owner_until_the_consumer_or_the_capsule_lets_go():
    """The capsule protocol without a device: an unconsumed capsule releases its export when it is
    collected; a consumer renames it "used_dltensor" and calls the tensor's deleter."""
    import ctypes
    import gc

    from pstate import DType, _memory

    class Owner:
        pass

    capsule = _memory.export(0x1000, DType.BFLOAT16, (2, 3), 5, Owner())
    assert len(_memory._live) == 1
    address = _memory._PyCapsule_GetPointer(id(capsule), b"dltensor")
    managed = _memory._DLManagedTensor.from_address(address)
    t = managed.dl_tensor
    assert (t.data, t.device.device_type, t.device.device_id, t.ndim) == (0x1000, 2, 5, 2)
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (4, 16, 1) and [t.shape[0], t.shape[1]] == [2, 3]
    del capsule, t, managed
    gc.collect()
    assert not _memory._live  # unconsumed: released with the capsule
    capsule = _memory.export(0x2000, DType.INT32, (4,), 0, Owner())
    set_name = ctypes.pythonapi.PyCapsule_SetName
    set_name.argtypes, set_name.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_int
    address = _memory._PyCapsule_GetPointer(id(capsule), b"dltensor")
    assert set_name(capsule, b"used_dltensor") == 0  # what a consumer does
    del capsule
    gc.collect()
    assert len(_memory._live) == 1  # the consumer's tensor holds it now
    managed = _memory._DLManagedTensor.from_address(address)
    managed.deleter(ctypes.pointer(managed))  # the consumer's tensor is gone
    assert not _memory._live
