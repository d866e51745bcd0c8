"""Arguments the Python binding takes, as a new user meets them, on a one-rank world (file store):

- enumerations (group kinds, reduce ops, dtypes, devices) by member, name in any case, or number;
  anything else (a member of another enum, a bool, a float, an unknown name or number) is
  InvalidArgumentError naming what was given and what is accepted, before any C call;
- parallel sizes: a size not given, None or 0 is its default (pstate.h), as in C, `pstate layout`,
  Go and Rust: tp = world / pp;
- the library's messages in Python's words (ps.abort(), device="cpu", pstate.init(world_size=...)).
"""
import numpy as np
import pytest

import pstate
from pstate import DType, GroupKind, ReduceOp


@pytest.fixture
def one_rank(tmp_path):
    with pstate.init(world_size=1, rank=0, init_method=f"file://{tmp_path}/store", timeout_ms=10000) as ps:
        yield ps


# ---- group kinds ------------------------------------------------------------------------------

def test_group_accepts_the_kind_by_member_name_and_number(one_rank):
    ps = one_rank
    ps.initialize_model_parallel()
    for kind in (GroupKind.TP, "tp", "TP", " Tp ", 1):
        assert ps.group(kind).kind == GroupKind.TP
    assert ps.group("world").kind == GroupKind.WORLD
    assert ps.group("attn_tp").kind == GroupKind.ATTN_TP


@pytest.mark.parametrize("bad", ["tensor", "", 99, -1, True, 1.0, None, pstate.ReduceOp.PROD])
def test_group_refuses_anything_else_naming_the_accepted_names(one_rank, bad):
    with pytest.raises(pstate.InvalidArgumentError, match=r'group kind .* is not a GroupKind.*"world", "tp"'):
        one_rank.group(bad)


def test_layout_queries_take_kind_names_and_refuse_other_enums():
    lay = pstate.Layout(4, tensor_parallel_size=2, pipeline_parallel_size=2)
    assert lay.groups("pp") == lay.groups(GroupKind.PP) == [[0, 2], [1, 3]]
    with pytest.raises(pstate.InvalidArgumentError, match="is not a GroupKind"):
        lay.groups(ReduceOp.PROD)


# ---- reduce ops -------------------------------------------------------------------------------

@pytest.mark.parametrize("op, expect", [(ReduceOp.SUM, 3.0), ("sum", 3.0), ("Max", 3.0), ("PROD", 3.0), (2, 3.0)])
def test_reduce_op_by_member_name_or_number(one_rank, op, expect):
    x = np.array([3.0], dtype=np.float32)
    one_rank.world.all_reduce(x, op)
    assert x[0] == expect


@pytest.mark.parametrize("bad", [GroupKind.TP, True, False, 2.0, "add", "", None, 7, -1, DType.FLOAT32])
def test_reduce_op_refuses_other_enums_bools_floats_and_unknown_names(one_rank, bad):
    """Before: GroupKind.TP and True did PROD, 2.0 did MAX, "sum" raised a bare ValueError."""
    x = np.ones(2, dtype=np.float32)
    with pytest.raises(pstate.InvalidArgumentError, match=r'op .* is not a ReduceOp.*"sum", "prod"'):
        one_rank.world.all_reduce(x, bad)
    with pytest.raises(pstate.InvalidArgumentError, match="is not a ReduceOp"):
        one_rank.world.reduce_scatter(x, bad)


def test_tp_all_reduce_takes_op_names(one_rank):
    one_rank.initialize_model_parallel()
    x = np.array([2.0, 5.0], dtype=np.float64)
    one_rank.tp_all_reduce(x, "min")
    assert x.tolist() == [2.0, 5.0]
    with pytest.raises(pstate.InvalidArgumentError, match="is not a ReduceOp"):
        one_rank.tp_all_reduce(x, GroupKind.TP)


# ---- dtypes and devices -----------------------------------------------------------------------

def test_dtype_by_member_name_or_number(one_rank):
    bf = np.zeros(4, dtype=np.uint16)
    for dt in (DType.BFLOAT16, "bfloat16", "BFloat16", 9):
        one_rank.world.all_reduce(bf, dtype=dt)
    with pytest.raises(pstate.InvalidArgumentError, match=r"buf: dtype .* is not a DType"):
        one_rank.world.all_reduce(bf, dtype=ReduceOp.MAX)
    with pytest.raises(pstate.InvalidArgumentError, match="is not a DType"):
        one_rank.world.all_reduce(bf, dtype=9.0)
    with pytest.raises(pstate.InvalidArgumentError, match="is not a DType"):
        one_rank.world.all_reduce(bf, dtype=True)


def test_tensor_dict_dtypes_take_names_and_refuse_others(one_rank):
    got = one_rank.world.broadcast_tensor_dict({"w": np.zeros(2, np.uint16)}, 0, dtypes={"w": "bfloat16"})
    assert list(got) == ["w"]
    with pytest.raises(pstate.InvalidArgumentError, match=r"dtypes\['w'\] .* is not a DType"):
        one_rank.world.broadcast_tensor_dict({"w": np.zeros(2, np.uint16)}, 0, dtypes={"w": GroupKind.TP})


@pytest.mark.parametrize("bad", ["gpu", True, 1.0, GroupKind.WORLD, 5])
def test_init_refuses_a_device_that_is_not_a_device(tmp_path, bad):
    with pytest.raises(pstate.InvalidArgumentError, match=r'device .* is not a Device.*"cpu", "cuda"'):
        pstate.init(world_size=1, rank=0, init_method=f"file://{tmp_path}/store", device=bad)


def test_init_takes_the_device_name_in_any_case(tmp_path):
    with pstate.init(world_size=1, rank=0, init_method=f"file://{tmp_path}/store", device="CPU") as ps:
        assert ps.world_size == 1


# ---- parallel sizes: 0 / not given = the default, as in every front end -------------------------

def test_layout_pipeline_size_alone_gives_tp_world_over_pp():
    """Before: "world_size 4 != tensor_parallel_size 1 x pipeline_parallel_size 2"."""
    lay = pstate.Layout(4, pipeline_parallel_size=2)
    assert lay.groups("tp") == [[0, 1], [2, 3]] and lay.groups("pp") == [[0, 2], [1, 3]]


def test_layout_zero_sizes_are_the_defaults():
    """Before: "tensor_parallel_size is 0; every parallel size must be >= 1"."""
    zeros = {name: 0 for name in pstate.CONFIG_FIELDS}
    explicit = pstate.Layout(8, tensor_parallel_size=4, pipeline_parallel_size=2)
    given = pstate.Layout(8, **dict(zeros, pipeline_parallel_size=2))
    for kind in GroupKind:
        if kind == GroupKind.CUSTOM:  # not a layout kind: custom groups come from ps.new_group()
            e = pytest.raises(pstate.InvalidArgumentError, given.groups, kind).value
            assert "new_group()" in e.detail, e.detail
            continue
        assert given.groups(kind) == explicit.groups(kind), kind
    assert pstate.Layout(8, **zeros).groups("tp") == [list(range(8))]
    assert pstate.Layout(8, expert_parallel_size=None).groups("tp") == [list(range(8))]


def test_layout_negative_or_underivable_sizes_name_the_rule():
    with pytest.raises(pstate.InvalidArgumentError, match=r"pipeline_parallel_size is -1; .*0 for its default"):
        pstate.Layout(4, pipeline_parallel_size=-1)
    with pytest.raises(pstate.InvalidArgumentError, match="world_size 6 is not divisible by pipeline_parallel_size 4"):
        pstate.Layout(6, pipeline_parallel_size=4)


def test_initialize_model_parallel_zero_and_omitted_sizes_are_the_defaults(one_rank):
    one_rank.initialize_model_parallel(pipeline_parallel_size=1)
    assert one_rank.tp.world_size == 1
    one_rank.destroy_model_parallel()
    one_rank.initialize_model_parallel(tensor_parallel_size=0, expert_parallel_size=0)
    assert one_rank.tp.world_size == 1 and one_rank.group("moe_ep").world_size == 1


# ---- the library's messages in Python's words ---------------------------------------------------

def test_launch_error_names_init_arguments_not_the_c_struct(tmp_path, monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID",
                "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(pstate.InvalidArgumentError) as err:
        pstate.init(init_method=f"file://{tmp_path}/store")
    assert "pstate.init(world_size=...)" in err.value.detail and "pstate.init(rank=...)" in err.value.detail
    assert "pstate_init_params_t" not in err.value.detail and "pstate_init:" not in err.value.detail


def test_cuda_context_without_a_gpu_says_device_cpu(tmp_path):
    try:
        ps = pstate.init(world_size=1, rank=0, init_method=f"file://{tmp_path}/store", device="cuda")
    except (pstate.UnsupportedError, pstate.InvalidArgumentError) as e:
        assert 'device="cpu"' in e.detail and "PSTATE_DEVICE_CPU" not in e.detail, e.detail
    else:
        ps.abort()
        pytest.skip("this host can make a CUDA context")


def test_lifecycle_messages_name_the_python_calls(one_rank):
    with pytest.raises(pstate.InvalidStateError) as err:
        one_rank.group("tp")
    assert "call ps.initialize_model_parallel() first" in err.value.detail, err.value.detail
    assert "pstate_" not in err.value.detail, err.value.detail


# ---- the flight recorder ----------------------------------------------------------------------

def test_trace_dump_writes_this_ranks_flight_recorder(one_rank, tmp_path):
    ps = one_rank
    world = ps.group("world")
    x = np.arange(4, dtype=np.float32)
    world.all_reduce(x)
    target = tmp_path / "dump.txt"
    ps.trace_dump(target)
    lines = target.read_text().splitlines()
    assert lines[0] == "pstate-trace 1" and lines[-1] == "end"
    assert "rank 0" in lines and "reason pstate_trace_dump" in lines
    assert any(l.startswith("group 0 world:0 1 0 0 ") for l in lines)
    assert any(" all_reduce 4 float32 sum " in l and l.startswith("e ") for l in lines)
    ps.trace_dump(tmp_path)  # a directory: rank0.pstate-trace in it
    assert (tmp_path / "rank0.pstate-trace").read_text().startswith("pstate-trace 1\n")
    with pytest.raises(pstate.InvalidArgumentError, match="no-such-dir"):
        ps.trace_dump("/proc/no-such-dir/x")
