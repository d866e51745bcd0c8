"""vLLM's and SGLang's distributed tests, case by case, against pstate.parallel_state (CPU).

    pstate run -n 2 -- python3 engine_cases.py tp2       # TP 2
    pstate run -n 4 -- python3 engine_cases.py tp4       # TP 4
    pstate run -n 4 -- python3 engine_cases.py tp2pp2    # TP 2 x PP 2
    pstate run -n 4 -- python3 engine_cases.py tp4,tp2pp2   # both in one job (test_parallel_state.py)

Each function below mirrors one case of the engines' tests (its docstring names it) and keeps
its body: the same calls, arguments and assertions, written against pstate.parallel_state instead
of vllm.distributed / sglang.srt.distributed. What is adapted, and why:

- ``cuda`` -> ``cpu`` (devices, ``.cuda(rank)``, ``torch.cuda.synchronize()`` dropped: CPU calls
  return when complete);
- one job runs every case that the engines run at a configuration, in one set of processes
  started by ``pstate run`` (TP 4 and TP 2 x PP 2 share a job of 4 ranks) (the engines start processes per case with
  multiprocessing/Ray and a tcp:// port): the engines' per-case set-up
  (init_test_distributed_environment / worker_fn_wrapper) becomes init_distributed_environment()
  from the launcher's environment plus ensure_model_parallel_initialized, which is a no-op once
  the configuration's groups exist;
- torch.distributed calls on the engines' own process groups (``dist.all_reduce(x,
  group=device_group)``, ``torch.distributed.new_group``, ``torch.distributed.get_rank()``) are
  pstate's: ``device_group`` is a pstate.Group, whose all_reduce is in place;
  ``parallel_state.new_group`` is torch's new_group; the world rank is ``get_world_group().rank``;
- CUDA graphs: graph_capture() is entered as the engines enter it, the capture itself
  (torch.cuda.graph / replay) is CUDA's and runs eagerly here;
- sizes: the engines' 16 x 1024 x 1024 pynccl tensors and SGLang's 4 KiB..32 MiB x 10 loops are
  cut to keep the three jobs under a few seconds each (CI's limit), dtypes and shapes kept.

Cases of the engines' files that test their internals, not the API (vLLM's
_AsyncIntermediateTensors, its mocked torch.distributed.irecv, the b12x MLA kernels,
ncclGetUniqueId; SGLang's mocked init_model_parallel_group) are covered where pstate has the
behaviour: the irecv_tensor_dict case runs for real, the group construction cases run through
initialize_model_parallel here and through pstate.Layout at 8 ranks in test_parallel_state.py.
"""
from __future__ import annotations

import os
import random
import sys
import time

import numpy as np
import torch

from pstate.parallel_state import (
    PyNcclCommunicator,
    broadcast_tensor_dict,
    destroy_distributed_environment,
    destroy_model_parallel,
    ensure_model_parallel_initialized,
    get_attn_cp_group,
    get_moe_cp_group,
    get_moe_ep_group,
    get_pp_group,
    get_tensor_model_parallel_group,
    get_tp_group,
    get_world_group,
    graph_capture,
    init_distributed_environment,
    initialize_model_parallel,
    new_group,
    set_custom_all_reduce,
    set_quick_all_reduce,
    tensor_model_parallel_all_gather,
    tensor_model_parallel_all_reduce,
    tensor_model_parallel_gather,
    tensor_model_parallel_reduce_scatter,
)

CONFIGS = {"tp2": (2, 1), "tp4": (4, 1), "tp2pp2": (2, 2),
           # a CUDA context on the devsim stand-ins (torch without CUDA: the cases whose tensors stay
           # in host memory in a GPU run, tensor dicts and objects)
           "pp2@cuda": (1, 2)}
CASES = []  # (function, the configurations the engines run it at)


def case(*configs):
    def register(fn):
        CASES.append((fn, configs or ("tp2", "tp4", "tp2pp2")))
        return fn
    return register


def init_test_distributed_environment(tp_size: int, pp_size: int, rank: int, distributed_init_port=None) -> None:
    """vLLM's tests/utils.py helper: the world from the launcher's environment, then the groups."""
    init_distributed_environment()
    assert get_world_group().world_size == tp_size * pp_size and get_world_group().rank == rank
    ensure_model_parallel_initialized(tp_size, pp_size)


# ---- vLLM tests/distributed/test_comm_ops.py ----------------------------------------------------

@case()
def all_reduce_test_worker(tp_size, pp_size, rank, distributed_init_port=None):
    """vLLM test_comm_ops.py::all_reduce_test_worker (TP 2, TP 2 x PP 2)."""
    init_test_distributed_environment(tp_size, pp_size, rank, distributed_init_port)
    num_elements = 8
    all_tensors = [torch.arange(num_elements, dtype=torch.float32, device="cpu") * (r + 1) for r in range(tp_size)]
    expected = torch.sum(torch.stack(all_tensors, dim=0), dim=0)
    t = all_tensors[rank % tp_size]
    t = tensor_model_parallel_all_reduce(t)
    torch.testing.assert_close(t, expected)


@case()
def reduce_scatter_test_worker(tp_size, pp_size, rank, distributed_init_port=None):
    """vLLM test_comm_ops.py::reduce_scatter_test_worker."""
    init_test_distributed_environment(tp_size, pp_size, rank, distributed_init_port)
    num_elements = 8
    all_tensors = [torch.arange(num_elements, dtype=torch.float32, device="cpu") * (r + 1) for r in range(tp_size)]
    index = rank % tp_size
    partition_size = num_elements // tp_size
    all_reduce = torch.sum(torch.stack(all_tensors, dim=0), dim=0)
    expected = all_reduce[index * partition_size:(index + 1) * partition_size]
    t = all_tensors[index]
    t = tensor_model_parallel_reduce_scatter(t, 0)
    torch.testing.assert_close(t, expected)


@case()
def all_gather_test_worker(tp_size, pp_size, rank, distributed_init_port=None):
    """vLLM test_comm_ops.py::all_gather_test_worker (every dimension of a 2 x 3 x 4 tensor)."""
    init_test_distributed_environment(tp_size, pp_size, rank, distributed_init_port)
    num_dimensions = 3
    tensor_size = list(range(2, num_dimensions + 2))
    total_size = 1
    for s in tensor_size:
        total_size *= s
    for all_gather_dimension in range(num_dimensions):
        all_tensors = [torch.arange(total_size, dtype=torch.float32, device="cpu").reshape(tensor_size) * (r + 1)
                       for r in range(tp_size)]
        expected = torch.cat(all_tensors, dim=all_gather_dimension)
        t = all_tensors[rank % tp_size]
        t = tensor_model_parallel_all_gather(t, all_gather_dimension)
        torch.testing.assert_close(t, expected)


@case("tp2", "tp4", "tp2pp2", "pp2@cuda")
def broadcast_tensor_dict_test_worker(tp_size, pp_size, rank, distributed_init_port=None):
    """vLLM test_comm_ops.py::broadcast_tensor_dict_test_worker: tensors mixed with a str, a list,
    a dict and an empty tensor."""
    init_test_distributed_environment(tp_size, pp_size, rank, distributed_init_port)
    test_dict = {
        # device tensor
        "a": torch.arange(8, dtype=torch.float32, device="cpu"),
        # CPU tensor
        "b": torch.arange(16, dtype=torch.int8, device="cpu"),
        "c": "test",
        "d": [1, 2, 3],
        "e": {"a": 1, "b": 2},
        # empty tensor
        "f": torch.tensor([], dtype=torch.float32, device="cpu"),
    }
    if (rank % tp_size) == 0:
        broadcast_tensor_dict(test_dict, src=0)
    else:
        recv_dict = broadcast_tensor_dict(src=0)
        assert len(recv_dict) == len(test_dict)
        torch.testing.assert_close(recv_dict["a"], test_dict["a"])
        torch.testing.assert_close(recv_dict["b"], test_dict["b"])
        assert recv_dict["c"] == test_dict["c"]
        assert recv_dict["d"] == test_dict["d"]
        assert recv_dict["e"] == test_dict["e"]
        torch.testing.assert_close(recv_dict["f"], test_dict["f"])


@case("tp2", "tp4", "tp2pp2", "pp2@cuda")
def send_recv_tensor_dict_test_worker(tp_size, pp_size, rank, distributed_init_port=None):
    """vLLM test_comm_ops.py::send_recv_tensor_dict_test_worker (PP 2, TP 2 x PP 2; a no-op at PP 1)."""
    init_test_distributed_environment(tp_size, pp_size, rank, distributed_init_port)
    test_dict = {
        "a": torch.arange(8, dtype=torch.float32, device="cpu"),
        "b": torch.arange(16, dtype=torch.int8, device="cpu"),
        "c": "test",
        "d": [1, 2, 3],
        "e": {"a": 1, "b": 2},
        "f": torch.tensor([], dtype=torch.float32, device="cpu"),
    }
    if not get_pp_group().is_first_rank:
        recv_dict = get_pp_group().recv_tensor_dict()
    if not get_pp_group().is_last_rank:
        get_pp_group().send_tensor_dict(test_dict)
    if not get_pp_group().is_first_rank:
        assert len(recv_dict) == len(test_dict)
        torch.testing.assert_close(recv_dict["a"], test_dict["a"])
        torch.testing.assert_close(recv_dict["b"], test_dict["b"])
        assert recv_dict["c"] == test_dict["c"]
        assert recv_dict["d"] == test_dict["d"]
        assert recv_dict["e"] == test_dict["e"]
        torch.testing.assert_close(recv_dict["f"], test_dict["f"])


@case()
def send_recv_test_worker(tp_size, pp_size, rank, distributed_init_port=None):
    """vLLM test_comm_ops.py::send_recv_test_worker: GroupCoordinator.send(tensor) / recv(size, dtype)."""
    init_test_distributed_environment(tp_size, pp_size, rank, distributed_init_port)
    size = 64
    test_tensor = torch.arange(64, dtype=torch.float32, device="cpu")
    if not get_pp_group().is_first_rank:
        recv_tensor = get_pp_group().recv(size, dtype=torch.float32)
    if not get_pp_group().is_last_rank:
        get_pp_group().send(test_tensor)
    if not get_pp_group().is_first_rank:
        torch.testing.assert_close(test_tensor, recv_tensor)


@case("tp2pp2")
def irecv_tensor_dict_send_allgather_postprocess_binds_keys(tp_size, pp_size, rank, distributed_init_port=None):
    """vLLM test_comm_ops.py::test_irecv_tensor_dict_send_allgather_postprocess_binds_keys, for real
    instead of on a mocked torch.distributed.irecv: stage 0 sends two int32 tensors sliced over
    TP (all_gather_group), stage 1 takes them with irecv_tensor_dict, waits for the handles, runs
    the postprocess functions (the all-gathers) and finds each key whole and its own."""
    init_test_distributed_environment(tp_size, pp_size, rank, distributed_init_port)
    pp, tp = get_pp_group(), get_tp_group()
    sent = {"a": torch.arange(4, dtype=torch.int32), "b": torch.arange(4, dtype=torch.int32) + 10, "step": 7}
    if pp.is_first_rank:
        for handle in pp.isend_tensor_dict(sent, all_gather_group=tp):
            handle.wait()
    else:
        td, handles, postprocess = pp.irecv_tensor_dict(all_gather_group=tp)
        assert td is not None and len(handles) == 2 and len(postprocess) == 2
        for h in handles:
            h.wait()
        for fn in postprocess:
            fn()
        assert td["a"].shape == torch.Size([4]) and td["b"].shape == torch.Size([4]) and td["step"] == 7
        torch.testing.assert_close(td["a"], sent["a"])
        torch.testing.assert_close(td["b"], sent["b"])


# ---- vLLM tests/distributed/test_pynccl.py ------------------------------------------------------

def _comm():
    return PyNcclCommunicator(get_world_group().cpu_group, device=get_world_group().device)


@case("tp2")
def worker_fn(tp_size, pp_size, rank):
    """vLLM test_pynccl.py::test_pynccl (worker_fn, 2 ranks)."""
    pynccl_comm = _comm()
    tensor = torch.ones(16, 1024, dtype=torch.float32).to(pynccl_comm.device)
    tensor = pynccl_comm.all_reduce(tensor)
    assert torch.all(tensor == pynccl_comm.world_size).cpu().item()


@case("tp4", "tp2pp2")
def multiple_allreduce_worker_fn(tp_size, pp_size, rank):
    """vLLM test_pynccl.py::test_pynccl_multiple_allreduce (4 ranks, two groups of two)."""
    device = torch.device("cpu")
    groups = [new_group(ranks=[0, 1], backend="gloo"), new_group(ranks=[2, 3], backend="gloo")]
    group = groups[0] if get_world_group().rank in [0, 1] else groups[1]
    pynccl_comm = PyNcclCommunicator(group=group, device=device)
    tensor = torch.ones(16, 1024, dtype=torch.float32, device=device)
    # two groups can communicate independently
    if get_world_group().rank in [0, 1]:
        tensor = pynccl_comm.all_reduce(tensor)
        tensor = pynccl_comm.all_reduce(tensor)
        assert torch.all(tensor == 4).cpu().item()
    else:
        tensor = pynccl_comm.all_reduce(tensor)
        assert torch.all(tensor == 2).cpu().item()


@case("tp2pp2")
def multiple_allreduce_with_vllm_worker_fn(tp_size, pp_size, rank):
    """vLLM test_pynccl.py::test_pynccl_multiple_allreduce_with_vllm (4 ranks, TP 2 x PP 2)."""
    device = torch.device("cpu")
    ensure_model_parallel_initialized(2, 2)
    tensor = torch.ones(16, 1024, dtype=torch.float32, device=device)
    with graph_capture(device=device):
        # two tp groups can communicate independently
        if get_world_group().rank in [0, 1]:
            tensor = tensor_model_parallel_all_reduce(tensor)
            tensor = tensor_model_parallel_all_reduce(tensor)
            assert torch.all(tensor == 4).cpu().item()
        else:
            tensor = tensor_model_parallel_all_reduce(tensor)
            assert torch.all(tensor == 2).cpu().item()


@case()
def all_gather_worker_fn(tp_size, pp_size, rank):
    """vLLM test_pynccl.py::test_pynccl_all_gather (any world size)."""
    pynccl_comm = _comm()
    rank = pynccl_comm.rank
    world_size = pynccl_comm.world_size
    device = "cpu"
    num_elems = 1000
    tensor = torch.arange(num_elems, dtype=torch.float32, device=device) + rank * num_elems
    result = torch.zeros(num_elems * world_size, dtype=torch.float32, device=device)
    expected = torch.cat([torch.arange(num_elems, dtype=torch.float32) + r * num_elems
                          for r in range(world_size)]).to(device)
    pynccl_comm.all_gather(result, tensor)
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-8)


@case("tp2")
def cuda_communicator_all_gather_dim_worker_fn(tp_size, pp_size, rank):
    """vLLM test_pynccl.py::test_cuda_communicator_all_gather_dim_not_zero (2 ranks, TP 2)."""
    ensure_model_parallel_initialized(2, 1)
    tp_group = get_tp_group()
    comm = tp_group.device_communicator
    assert comm is not None
    rank = tp_group.rank_in_group
    world_size = tp_group.world_size
    device = tp_group.device
    shape = (2, 3, 4)
    num_elems = 1
    for size in shape:
        num_elems *= size
    for dim in (1, -1):
        tensor = torch.arange(num_elems, dtype=torch.float32, device=device).reshape(shape) + rank * num_elems
        expected = torch.cat([torch.arange(num_elems, dtype=torch.float32, device=device).reshape(shape) + r * num_elems
                              for r in range(world_size)], dim=dim)
        result = comm.all_gather(tensor, dim=dim)
        torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-8)


@case()
def all_gatherv_worker_fn(tp_size, pp_size, rank):
    """vLLM test_pynccl.py::test_pynccl_all_gatherv (uneven sizes)."""
    pynccl_comm = _comm()
    rank = pynccl_comm.rank
    world_size = pynccl_comm.world_size
    device = "cpu"
    assert world_size <= 8
    sizes = [81, 20, 57, 52, 81, 5, 49, 49][:world_size]
    num_elems = sizes[rank]
    tensor = torch.arange(num_elems, dtype=torch.float32, device=device) + rank * 100
    result = torch.zeros(sum(sizes), dtype=torch.float32, device=device)
    expected = torch.cat([torch.arange(sizes[r], dtype=torch.float32) + r * 100 for r in range(world_size)]).to(device)
    pynccl_comm.all_gatherv(result, tensor, sizes=sizes)
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-8)


@case()
def reduce_scatter_worker_fn(tp_size, pp_size, rank):
    """vLLM test_pynccl.py::test_pynccl_reduce_scatter."""
    pynccl_comm = _comm()
    rank = pynccl_comm.rank
    world_size = pynccl_comm.world_size
    device = "cpu"
    num_elems = 1000
    tensor = torch.arange(num_elems, dtype=torch.float32, device=device) + rank * num_elems
    assert num_elems % world_size == 0
    result = torch.zeros(num_elems // world_size, dtype=torch.float32, device=device)
    scattered_size = num_elems // world_size
    all_tensors = [torch.arange(num_elems, dtype=torch.float32) + r * num_elems for r in range(world_size)]
    expected = sum(tensor[rank * scattered_size:(rank + 1) * scattered_size] for tensor in all_tensors).to(device)
    pynccl_comm.reduce_scatter(result, tensor)
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-8)


@case()
def reduce_scatterv_worker_fn(tp_size, pp_size, rank):
    """vLLM test_pynccl.py::test_pynccl_reduce_scatterv (uneven sizes)."""
    pynccl_comm = _comm()
    rank = pynccl_comm.rank
    world_size = pynccl_comm.world_size
    device = "cpu"
    assert world_size <= 8
    sizes = [81, 20, 57, 52, 81, 5, 49, 49][:world_size]
    num_elems = sum(sizes)
    tensor = torch.arange(num_elems, dtype=torch.float32, device=device) + rank * 100
    result = torch.zeros(sizes[rank], dtype=torch.float32, device=device)
    all_tensors = [torch.arange(num_elems, dtype=torch.float32) + r * 100 for r in range(world_size)]
    sizes_cumsum = np.cumsum(sizes)
    start = 0 if rank == 0 else sizes_cumsum[rank - 1]
    end = sizes_cumsum[rank]
    expected = sum(tensor[start:end] for tensor in all_tensors).to(device)
    pynccl_comm.reduce_scatterv(result, tensor, sizes=sizes)
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-8)


@case("tp2")
def send_recv_worker_fn(tp_size, pp_size, rank):
    """vLLM test_pynccl.py::test_pynccl_send_recv (2 ranks)."""
    pynccl_comm = _comm()
    if pynccl_comm.rank == 0:
        tensor = torch.ones(16, 1024, dtype=torch.float32)
    else:
        tensor = torch.empty(16, 1024, dtype=torch.float32)
    if pynccl_comm.rank == 0:
        pynccl_comm.send(tensor, dst=(pynccl_comm.rank + 1) % pynccl_comm.world_size)
    else:
        pynccl_comm.recv(tensor, src=(pynccl_comm.rank - 1) % pynccl_comm.world_size)
    assert torch.all(tensor == 1).cpu().item()


@case("tp4", "tp2pp2")
def multiple_send_recv_worker_fn(tp_size, pp_size, rank):
    """vLLM test_pynccl.py::test_pynccl_multiple_send_recv (4 ranks, groups [0, 2] and [1, 3])."""
    device = torch.device("cpu")
    groups = [new_group(ranks=[0, 2], backend="gloo"), new_group(ranks=[1, 3], backend="gloo")]
    group = groups[0] if get_world_group().rank in [0, 2] else groups[1]
    pynccl_comm = PyNcclCommunicator(group=group, device=device)
    if get_world_group().rank == 0:
        tensor = torch.ones(16, 1024, dtype=torch.float32, device=device)
    elif get_world_group().rank == 1:
        tensor = 2 * torch.ones(16, 1024, dtype=torch.float32, device=device)
    else:
        tensor = torch.empty(16, 1024, dtype=torch.float32, device=device)
    if get_world_group().rank in [0, 1]:
        pynccl_comm.send(tensor, dst=(pynccl_comm.rank + 1) % pynccl_comm.world_size)
    else:
        pynccl_comm.recv(tensor, src=(pynccl_comm.rank - 1) % pynccl_comm.world_size)
    if get_world_group().rank in [0, 2]:
        assert torch.all(tensor == 1).cpu().item()
    else:
        assert torch.all(tensor == 2).cpu().item()


@case("tp4", "tp2pp2")
def broadcast_worker_fn(tp_size, pp_size, rank):
    """vLLM test_pynccl.py::test_pynccl_broadcast (4 ranks, every root)."""
    pynccl_comm = _comm()
    recv_tensors = [torch.empty(16, 1024, dtype=torch.float32, device=pynccl_comm.device)
                    for i in range(pynccl_comm.world_size)]
    recv_tensors[pynccl_comm.rank] = torch.ones(16, 1024, dtype=torch.float32,
                                                device=pynccl_comm.device) * pynccl_comm.rank
    for i in range(pynccl_comm.world_size):
        pynccl_comm.broadcast(recv_tensors[i], src=i)
        assert torch.all(recv_tensors[i] == i).cpu().item()


# ---- SGLang test/srt/test_custom_allreduce.py ---------------------------------------------------

TEST_SIZES = [4096, 32768]  # SGLang: 4096 .. 33554432 elements
TEST_LOOP = 2  # SGLang: 10


@case("tp2", "tp4")
def graph_allreduce(tp_size, pp_size, rank):
    """SGLang test_custom_allreduce.py::TestCustomAllReduce::graph_allreduce (TP = world): two
    all-reduces inside graph_capture() against the device group's own all_reduce, float16 and
    bfloat16."""
    world_size = tp_size
    set_custom_all_reduce(True)
    set_quick_all_reduce(True)
    group = get_tensor_model_parallel_group().device_group
    data = torch.zeros(1)
    group.all_reduce(data)  # the engine's warm-up
    del data
    for sz in TEST_SIZES:
        for dtype in [torch.float16, torch.bfloat16]:
            for _ in range(TEST_LOOP):
                with graph_capture() as graph_capture_context:
                    assert graph_capture_context.stream is None  # nothing to capture on the CPU
                    # use integers so result matches NCCL exactly
                    inp1 = torch.randint(1, 16, (sz,), dtype=dtype, device="cpu")
                    inp2 = torch.randint(1, 16, (sz,), dtype=dtype, device="cpu")
                    out1 = tensor_model_parallel_all_reduce(inp1)
                    # the input buffer is immediately modified to test synchronization
                    group.all_reduce(inp1)
                    out2 = tensor_model_parallel_all_reduce(inp2)
                    group.all_reduce(inp2)
                for inp, out in [[inp1, out1], [inp2, out2]]:
                    torch.testing.assert_close(out, inp, rtol=1e-2, atol=1.0)
    assert world_size == get_tp_group().world_size


@case("tp2", "tp4")
def eager_allreduce(tp_size, pp_size, rank):
    """SGLang test_custom_allreduce.py::TestCustomAllReduce::eager_allreduce (TP = world)."""
    set_custom_all_reduce(False)
    set_quick_all_reduce(True)
    group = get_tensor_model_parallel_group().device_group
    for sz in TEST_SIZES:
        for dtype in [torch.float16, torch.bfloat16]:
            for _ in range(TEST_LOOP):
                inp1 = torch.randint(1, 16, (sz,), dtype=dtype, device="cpu")
                out1 = tensor_model_parallel_all_reduce(inp1)
                group.all_reduce(inp1)
                torch.testing.assert_close(out1, inp1, rtol=1e-2, atol=1.0)


# ---- SGLang test/srt/test_parallel_state.py -----------------------------------------------------

@case("tp4")
def parallel_group_construction_attn_cp2(tp_size, pp_size, rank):
    """SGLang test_parallel_state.py::test_parallel_group_construction_tp8_attn_cp2, at 4 ranks and
    for real (SGLang mocks its backend at 8; pstate.Layout checks 8 in test_parallel_state.py):
    TP = the world, attention CP groups of ranks world/2 apart."""
    destroy_model_parallel()
    initialize_model_parallel(tensor_model_parallel_size=4, pipeline_model_parallel_size=1,
                              attention_context_model_parallel_size=2)
    assert get_tp_group().ranks == [0, 1, 2, 3], get_tp_group().ranks
    expected_attn_cp = [[0, 2], [1, 3]]
    assert get_attn_cp_group().ranks == expected_attn_cp[rank % 2], get_attn_cp_group().ranks
    destroy_model_parallel()
    initialize_model_parallel(tensor_model_parallel_size=4, pipeline_model_parallel_size=1,
                              expert_model_parallel_size=2, moe_context_model_parallel_size=2)
    expected_moe_ep = [[0, 1], [2, 3]]
    assert get_moe_ep_group().ranks == expected_moe_ep[rank // 2], get_moe_ep_group().ranks
    assert get_moe_cp_group().ranks == expected_attn_cp[rank % 2], get_moe_cp_group().ranks
    destroy_model_parallel()
    ensure_model_parallel_initialized(tp_size, pp_size)


# ---- what the engines send that pstate refused before (issue 46) ------------------------------

@case("tp2", "tp4", "tp2pp2", "pp2@cuda")
def mixed_dict_every_torch_dtype(tp_size, pp_size, rank):
    """Not an engine case: every dtype torch has on the CPU (bool and int16 included) with
    strings, ints, None, nested containers, through broadcast_tensor_dict on the TP group and,
    sync and async, send/recv_tensor_dict on the PP group; bfloat16 comes back as bfloat16."""
    d = {str(t).replace("torch.", ""): torch.arange(6).reshape(2, 3).to(t)
         for t in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                   torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)}
    d.update({"s": "text", "i": 3, "none": None, "nested": {"k": [1, (2, 3)]}, "scalar": torch.tensor(1.5),
              "empty": torch.zeros(0, 4, dtype=torch.bfloat16)})

    def check(got):
        assert list(got) == list(d), list(got)
        for key, want in d.items():
            if isinstance(want, torch.Tensor):
                assert isinstance(got[key], torch.Tensor) and got[key].dtype == want.dtype, (key, got[key])
                assert got[key].shape == want.shape and torch.equal(got[key], want), (key, got[key])
            else:
                assert got[key] == want, (key, got[key])

    tp, pp, world = get_tp_group(), get_pp_group(), get_world_group()
    for group in (tp, world):
        got = group.broadcast_tensor_dict(d if group.rank_in_group == 0 else None, src=0)
        if group.rank_in_group:
            check(got)
    if pp.world_size > 1:
        works = pp.send_tensor_dict(d, async_send=True)  # a ring: every stage sends, then receives
        check(pp.recv_tensor_dict())
        for work in works:
            work.wait()


@case()
def both_engines_spellings(tp_size, pp_size, rank):
    """Not an engine case: the calls where vLLM and SGLang differ, and those the cases above leave
    out, on the TP group against torch: gather along -1, reduce_scatter along -1 of a 2-d tensor,
    SGLang's all_gatherv(input_, sizes) and reduce_scatterv(input_, output=, sizes=), vLLM's
    reduce_scatterv(input_, dim, sizes), SGLang's reduce_scatter(output, input_list),
    all_gather_into_tensor and reduce_scatter_tensor, bool and int16 tensors moved, an async send
    of an int16 tensor, objects."""
    tp = get_tp_group()
    r, n = tp.rank_in_group, tp.world_size
    base = torch.arange(12.0).reshape(3, 4)
    x = base * (r + 1)
    got = tensor_model_parallel_gather(x, 1, -1)
    assert got is None if r != 1 else torch.equal(got, torch.cat([base * (q + 1) for q in range(n)], -1)), got
    wide = torch.arange(6.0 * n).reshape(3, 2 * n) * (r + 1)
    want = sum(torch.arange(6.0 * n).reshape(3, 2 * n) * (q + 1) for q in range(n)).chunk(n, -1)[r]
    assert torch.equal(tp.reduce_scatter(wide, -1), want)
    sizes = [q + 1 for q in range(n)]
    mine = torch.full((sizes[r], 3), float(r), dtype=torch.bfloat16)
    got = tp.all_gatherv(mine, sizes)
    assert got.dtype == torch.bfloat16 and torch.equal(got, torch.cat([torch.full((s, 3), float(q)) for q, s in
                                                                       enumerate(sizes)]).to(torch.bfloat16)), got
    out = torch.zeros(sizes[r], 3)
    assert tp.reduce_scatterv(torch.ones(sum(sizes), 3), output=out, sizes=sizes) is out
    assert torch.equal(out, torch.full((sizes[r], 3), float(n)))
    assert torch.equal(tp.reduce_scatterv(torch.ones(sum(sizes), 3), 0, sizes), torch.full((sizes[r], 3), float(n)))
    out = torch.zeros(2)
    assert tp.reduce_scatter(out, [torch.full((2,), float(q + r)) for q in range(n)]) is out
    assert torch.equal(out, torch.full((2,), float(n * r + n * (n - 1) // 2)))
    assert torch.equal(tp.reduce_scatter_tensor(torch.zeros(2), torch.ones(2 * n)), torch.full((2,), float(n)))
    flat = tp.all_gather_into_tensor(torch.zeros(2 * n), torch.full((2,), float(r)))
    assert torch.equal(flat, torch.arange(n, dtype=torch.float32).repeat_interleave(2))
    mask = torch.tensor([True, r % 2 == 0])
    assert tp.all_gather(mask, 0).tolist() == sum(([True, q % 2 == 0] for q in range(n)), [])
    h = torch.arange(4, dtype=torch.int16).reshape(2, 2) + r
    assert torch.equal(tp.all_gather(h, -1), torch.cat([torch.arange(4, dtype=torch.int16).reshape(2, 2) + q
                                                        for q in range(n)], -1))
    if r == 0:
        tp.send(torch.arange(5, dtype=torch.int16), 1, async_send=True).wait()
    elif r == 1:
        got = tp.recv(torch.Size([5]), torch.int16, 0)
        assert got.dtype == torch.int16 and got.tolist() == list(range(5)), got
    objs = [None, None]
    tp.broadcast_object_list(objs if r else ["a", 2], src=0)
    assert objs == ["a", 2] or r == 0, objs
    assert tp.all_gather_object(r) == list(range(n))


@case("tp2pp2")
def dict_refusal_reaches_the_receiver(tp_size, pp_size, rank):
    """Not an engine case: a dict holding a value pickle refuses raises its pickling error on the
    sender and ObjectRefusedError on the receiver (the engines' receiver waits), and the next dict
    goes through, sync and async alike."""
    import pstate

    pp = get_pp_group()
    if pp.is_first_rank:
        for async_send in (False, True):
            try:
                pp.send_tensor_dict({"x": torch.ones(2), "fn": lambda: 0}, async_send=async_send)
            except Exception as e:  # noqa: BLE001 - what pickle raises for a lambda
                assert "lambda" in str(e) or "pickle" in str(e), e
            else:
                raise AssertionError("a lambda in a dict was sent")
        pp.send_tensor_dict({"x": torch.ones(2)})
    else:
        for _ in range(2):
            try:
                pp.recv_tensor_dict()
            except pstate.ObjectRefusedError as e:
                assert e.rank == 0 and "lambda" in e.reason, e
            else:
                raise AssertionError("the refused dict was received")
        assert torch.equal(pp.recv_tensor_dict()["x"], torch.ones(2))


@case("pp2@cuda")
def cpu_tensors_in_a_cuda_context(tp_size, pp_size, rank):
    """Not an engine case: in a CUDA context (a GPU run) tensor collectives take CUDA tensors; a
    CPU tensor is refused before any C call on every rank alike, saying where CPU data goes."""
    try:
        get_world_group().all_reduce(torch.ones(4))
    except Exception as e:  # noqa: BLE001
        assert type(e).__name__ == "UnsupportedError" and "a CPU tensor in a CUDA context" in str(e), e
    else:
        raise AssertionError("a CPU tensor all_reduce in a CUDA context was not refused")
    got = get_world_group().broadcast_object({"step": 1} if rank == 0 else None, src=0)
    assert got == {"step": 1}, got
    get_world_group().barrier()


def main() -> None:
    """Runs the cases of each configuration named (comma-separated; those of one world size share
    the job: the model-parallel groups are remade between them)."""
    configs = sys.argv[1].split(",")
    init_distributed_environment(device="cuda" if any(c.endswith("@cuda") for c in configs) else None)
    rank = get_world_group().rank
    random.seed(42)
    torch.manual_seed(42 + rank)
    for config in configs:
        tp_size, pp_size = CONFIGS[config]
        destroy_model_parallel()
        initialize_model_parallel(tp_size, pp_size)
        ran = []
        for fn, configs in CASES:
            if config not in configs:
                continue
            started = time.monotonic()
            fn(tp_size, pp_size, rank)
            ran.append(f"{fn.__name__} {1000 * (time.monotonic() - started):.0f} ms")
        get_world_group().barrier()
        if rank == 0:
            print(f"{config}: {len(ran)} cases passed: " + ", ".join(ran), flush=True)
    destroy_model_parallel()
    destroy_distributed_environment()


if __name__ == "__main__":
    os.environ.setdefault("PSTATE_TIMEOUT_MS", "60000")
    main()
