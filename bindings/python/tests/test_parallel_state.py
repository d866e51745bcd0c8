"""pstate.parallel_state, vLLM's and SGLang's module on pstate (python3-torch, CPU):

- engine_cases.py runs the cases of vLLM's tests/distributed/test_comm_ops.py and test_pynccl.py
  and SGLang's test_custom_allreduce.py and test_parallel_state.py, written as the engines write
  them, at TP 2, TP 4 and TP 2 x PP 2: one `pstate run` job of 2 ranks and one of 4 (TP 4, then
  TP 2 x PP 2), every case of a configuration in its processes (each names the engine case it
  mirrors);
- SGLang's group-construction cases at 8 ranks through pstate.Layout (SGLang mocks its backend to
  read the groups; pstate computes them without communication);
- on one rank: both engines' spellings where they differ, the argument errors, the module's state.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pstate
from pstate import GroupKind

torch = pytest.importorskip("torch", reason="python3-torch (./build.sh deps installs it)")

from conftest import launcher  # noqa: E402

ps_mod = pytest.importorskip("pstate.parallel_state")
CASES = Path(__file__).resolve().parent / "engine_cases.py"


@pytest.mark.parametrize("n, configs", [(2, "tp2"), (4, "tp4,tp2pp2")])
def test_engine_cases(n, configs):
    env = dict(os.environ)
    env.setdefault("PSTATE_TIMEOUT_MS", "60000")
    done = subprocess.run([launcher(), "run", "-n", str(n), "--grace-ms", "3000", "--", sys.executable, str(CASES), configs],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240, check=False)
    assert done.returncode == 0, f"pstate run -n {n} engine_cases.py {configs} exited {done.returncode}:\n{done.stdout}"
    for config in configs.split(","):
        assert f"] {config}: " in done.stdout, done.stdout


def test_engine_cases_in_a_cuda_context_on_devsim():
    """The cases whose tensors stay in host memory in a GPU run (tensor dicts, objects), in a CUDA
    context on the devsim stand-ins (torch here has no CUDA: CUDA tensors need a GPU host)."""
    build = os.environ.get("PSTATE_BUILD_DIR", "")
    devsim = Path(build) / "tests" / "devsim"
    cudart, nccl = devsim / "libpstate_devsim_cudart.so", devsim / "libpstate_devsim_nccl.so"
    if not (cudart.exists() and nccl.exists()):
        pytest.skip(f"the devsim stand-ins are not built in {devsim} (a build without the CUDA/NCCL headers)")
    env = dict(os.environ, PSTATE_CUDA_RUNTIME_LIBRARY=str(cudart), PSTATE_NCCL_LIBRARY=str(nccl))
    env.setdefault("PSTATE_TIMEOUT_MS", "60000")
    done = subprocess.run([launcher(), "run", "-n", "2", "--grace-ms", "3000", "--", sys.executable, str(CASES), "pp2@cuda"],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240, check=False)
    assert done.returncode == 0 and "] pp2@cuda: 4 cases passed" in done.stdout, done.stdout


def test_sglang_group_construction_at_eight_ranks_through_layout():
    """SGLang test_parallel_state.py::test_parallel_group_construction_tp8_attn_cp2 and
    ::test_parallel_group_construction_tp8_moe_ep4_cp2 (moe_context_model_parallel_size is
    pstate's moe_data_parallel_size: the same groups)."""
    lay = pstate.Layout(8, tensor_parallel_size=8, pipeline_parallel_size=1, attention_context_parallel_size=2)
    assert lay.groups(GroupKind.TP) == [[0, 1, 2, 3, 4, 5, 6, 7]]
    assert lay.groups(GroupKind.ATTN_CP) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    lay = pstate.Layout(8, tensor_parallel_size=8, expert_parallel_size=4, pipeline_parallel_size=1,
                        moe_data_parallel_size=2)
    assert lay.groups(GroupKind.TP) == [[0, 1, 2, 3, 4, 5, 6, 7]]
    assert lay.groups(GroupKind.MOE_EP) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert lay.groups(GroupKind.MOE_DP) == [[0, 4], [1, 5], [2, 6], [3, 7]]


@pytest.fixture
def one_rank(tmp_path):
    ps_mod.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                        distributed_init_method=f"file://{tmp_path}/store", timeout=10)
    try:
        yield ps_mod
    finally:
        ps_mod.destroy_model_parallel()
        ps_mod.destroy_distributed_environment()


def test_the_module_needs_init_and_groups_first():
    with pytest.raises(pstate.InvalidStateError, match="init_distributed_environment"):
        ps_mod.get_world_group()
    assert not ps_mod.model_parallel_is_initialized()
    assert ps_mod.broadcast_tensor_dict({"a": 1}) == {"a": 1}  # vLLM: not initialized -> the dict itself


def test_one_rank_lifecycle_groups_and_bypasses(one_rank):
    w = one_rank.get_world_group()
    assert (w.rank, w.world_size, w.rank_in_group, w.ranks, w.is_first_rank, w.is_last_rank) == (0, 1, 0, [0], True, True)
    assert w.next_rank == w.prev_rank == 0 and w.device == torch.device("cpu") and w.cpu_group is w.device_group
    with pytest.raises(AssertionError, match="initialize_model_parallel"):
        one_rank.get_tp_group()
    one_rank.ensure_model_parallel_initialized(1, 1)
    one_rank.ensure_model_parallel_initialized(1, 1)  # initialized: only checked
    with pytest.raises(AssertionError, match="unexpected size"):
        one_rank.ensure_model_parallel_initialized(2, 1)
    tp = one_rank.get_tp_group()
    assert tp is one_rank.get_tensor_model_parallel_group() and one_rank.get_tensor_model_parallel_world_size() == 1
    x = torch.arange(6.0).reshape(2, 3)
    # a group of one returns its input, as both engines do
    assert tp.all_reduce(x) is x and tp.all_gather(x) is x and tp.reduce_scatter(x) is x and tp.gather(x) is x
    assert tp.broadcast_tensor_dict({"a": x}) == {"a": x} and tp.recv_tensor_dict() is None
    with pytest.raises(pstate.UnsupportedError, match="vLLM's data-parallel group"):
        one_rank.get_dp_group()
    with pytest.raises(pstate.UnsupportedError, match="DCP|decode|configured"):
        one_rank.get_dcp_group()
    one_rank.destroy_model_parallel()
    assert not one_rank.model_parallel_is_initialized()
    one_rank.initialize_model_parallel(tensor_model_parallel_size=1, expert_model_parallel_size=1, backend="gloo",
                                       duplicate_tp_group=False, torch_compile=None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tensor_parallel'"):
        one_rank.destroy_model_parallel() or one_rank.initialize_model_parallel(tensor_parallel=1)
    with pytest.raises(pstate.UnsupportedError, match="prefill_context"):
        one_rank.initialize_model_parallel(1, 1, 2)


def test_both_engines_spellings_on_one_rank(one_rank):
    """Where vLLM and SGLang differ the argument's type decides: reduce_scatter(input_, dim) vs
    (output, input_list), reduce_scatterv(input_, dim, sizes) vs (input_, output, sizes),
    all_gatherv(input_, dim, sizes) vs (input_, sizes); torch dtypes and ReduceOps are taken."""
    w = one_rank.get_world_group()
    x = torch.arange(6.0).reshape(2, 3)
    out = torch.zeros(2, 3)
    assert w.reduce_scatter(out, [x]) is out and torch.equal(out, x)  # SGLang
    out = torch.zeros(2, 3)
    assert w.reduce_scatterv(x, out, [2]) is out and torch.equal(out, x)  # SGLang, positional output
    assert torch.equal(w.reduce_scatterv(x, 0, sizes=[2]), x)  # vLLM (a group of one: the input)
    assert w.all_gatherv(x, [2]) is x  # SGLang: sizes second (a group of one: the input itself)
    got = w.all_gatherv([x, x], 0, [2])  # vLLM: a list of tensors, each gathered
    assert len(got) == 2 and all(g is x for g in got)
    out = [torch.zeros(2, 3)]
    assert w.all_gather(x, 0, out) is out and torch.equal(out[0], x)  # SGLang's output_tensor_list
    comm = ps_mod.PyNcclCommunicator(w.cpu_group, device=w.device)
    y = comm.all_reduce(torch.ones(4, dtype=torch.bfloat16), op=torch.distributed.ReduceOp.MAX)
    assert y.dtype == torch.bfloat16 and torch.equal(y, torch.ones(4, dtype=torch.bfloat16))
    assert w.group.all_reduce(torch.ones(2), torch.distributed.ReduceOp.PRODUCT) is not None
    with pytest.raises(pstate.InvalidArgumentError, match="torch.int16 has no pstate dtype"):
        comm.all_reduce(torch.ones(2, dtype=torch.int16))
    assert w.broadcast(torch.ones(2, dtype=torch.int16)).dtype == torch.int16  # a move takes any dtype
    with pytest.raises(pstate.InvalidArgumentError, match=r"invalid dim \(2\) for input tensor with shape \(2, 3\)"):
        w.all_gather(x, 2, [torch.zeros(2, 3)])
