"""Layout, enums and errors without any communication: pstate.Layout against an independent
computation of SGLang's TP x PP formulas, the IntEnums against the compiled C constants, and
status -> exception mapping."""
from __future__ import annotations

import builtins

import pytest

import pstate
from pstate import capi


def sglang_tp_pp(world: int, tp: int, pp: int):
    """SGLang: TP groups are tp consecutive ranks; PP groups take ranks tp apart."""
    tp_groups = [list(range(i * tp, (i + 1) * tp)) for i in range(world // tp)]
    pp_groups = [list(range(i, world, tp)) for i in range(tp)]
    return tp_groups, pp_groups


@pytest.mark.parametrize("world,tp,pp", [(8, 4, 2), (8, 2, 4), (4, 2, 2), (6, 3, 2), (1, 1, 1)])
def test_layout_tp_pp_groups_match_sglang(world, tp, pp):
    expect_tp, expect_pp = sglang_tp_pp(world, tp, pp)
    with pstate.Layout(world, tensor_parallel_size=tp, pipeline_parallel_size=pp) as lay:
        assert lay.groups(pstate.GroupKind.TP) == expect_tp
        assert lay.groups(pstate.GroupKind.PP) == expect_pp
        assert lay.groups(pstate.GroupKind.WORLD) == [list(range(world))]
        for r in range(world):
            assert r in lay.group_ranks(pstate.GroupKind.TP, lay.group_of(pstate.GroupKind.TP, r))


def test_layout_moe_ep_of_sglang_docstring():
    # DESIGN.md worked layout: world 8, tp 8, ep 4 -> moe_ep [0,2,4,6] [1,3,5,7], moe_tp pairs
    lay = pstate.Layout(8, tensor_parallel_size=8, expert_parallel_size=4)
    assert lay.groups(pstate.GroupKind.MOE_EP) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert lay.groups(pstate.GroupKind.MOE_TP) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_layout_rejects_world_not_tp_times_pp_with_library_text():
    with pytest.raises(pstate.InvalidArgumentError) as err:
        pstate.Layout(6, tensor_parallel_size=4)
    assert err.value.status == pstate.Status.INVALID_ARGUMENT
    assert "tp x pp" in err.value.detail
    assert isinstance(err.value, ValueError)


def vllm_groups(world, tp, pp=1, dp=1, pcp=1, dcp=1, moe=False):
    """vLLM's initialize_model_parallel: arange(world).reshape(-1, dp, pp, pcp, tp), each kind's
    axes moved last, then the rows (numpy's swapaxes is torch's transpose)."""
    import numpy as np
    grid = np.arange(world).reshape(-1, dp, pp, pcp, tp)
    g = {"WORLD": [list(range(world))], "TP": grid.reshape(-1, tp).tolist(),
         "PCP": grid.swapaxes(3, 4).reshape(-1, pcp).tolist(), "PP": grid.swapaxes(2, 4).reshape(-1, pp).tolist(),
         "DP": grid.swapaxes(1, 4).reshape(-1, dp).tolist()}
    if dcp > 1:
        g["DCP"] = grid.reshape(-1, dcp).tolist()
    if moe:
        g["EP"] = g["EPLB"] = grid.swapaxes(1, 2).reshape(-1, dp * pcp * tp).tolist()
    return g


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def test_layout_vllm_engine_matches_vllms_formula_up_to_world_16():
    pytest.importorskip("numpy")
    checked = 0
    for world in range(1, 17):
        for tp in divisors(world):
            for pp in divisors(world // tp):
                for dp in divisors(world // tp // pp):
                    for pcp in divisors(world // tp // pp // dp):
                        for dcp in divisors(tp):
                            for moe in (False, True):
                                want = vllm_groups(world, tp, pp, dp, pcp, dcp, moe)
                                with pstate.Layout(world, engine="vllm", tensor_parallel_size=tp,
                                                   pipeline_parallel_size=pp, data_parallel_size=dp,
                                                   prefill_context_parallel_size=pcp,
                                                   decode_context_parallel_size=dcp, moe_model=moe) as lay:
                                    for kind in pstate.GroupKind:
                                        if kind == pstate.GroupKind.CUSTOM:
                                            continue
                                        assert lay.groups(kind) == want.get(kind.name, []), (world, tp, pp, dp, pcp,
                                                                                             dcp, moe, kind)
                                checked += 1
    assert checked == 1062


def test_layout_engine_accepts_the_enum_its_name_and_number():
    for engine in (pstate.Engine.VLLM, "vllm", "VLLM", 1):
        lay = pstate.Layout(4, engine=engine, data_parallel_size=2)
        assert lay.groups(pstate.GroupKind.DP) == [[0, 2], [1, 3]]
    assert pstate.Layout(4, engine="sglang").group_count(pstate.GroupKind.DP) == 0
    with pytest.raises(pstate.InvalidArgumentError, match="engine"):
        pstate.Layout(4, engine="trtllm")


def test_layout_vllm_refusals_carry_the_library_text():
    with pytest.raises(pstate.InvalidArgumentError) as err:
        pstate.Layout(12, engine="vllm", tensor_parallel_size=2, pipeline_parallel_size=2, data_parallel_size=2)
    assert "world_size 12 is not divisible by data_parallel_size 2" in err.value.detail
    with pytest.raises(pstate.InvalidArgumentError, match="a size of vLLM's layout"):
        pstate.Layout(4, data_parallel_size=2)  # SGLang's layout has no dp


def test_layout_unknown_size_keyword_is_invalid_argument():
    with pytest.raises(pstate.InvalidArgumentError, match="unknown parallel size"):
        pstate.Layout(4, tensor_paralel_size=4)


def test_layout_closed_then_used_raises():
    lay = pstate.Layout(2)
    lay.close()
    with pytest.raises(pstate.InvalidArgumentError):
        lay.groups(pstate.GroupKind.TP)


@pytest.mark.parametrize("enum_cls,prefix", [
    (pstate.DType, "PSTATE_"), (pstate.ReduceOp, "PSTATE_"), (pstate.Device, "PSTATE_DEVICE_"),
    (pstate.GroupKind, "PSTATE_GROUP_"), (pstate.Status, "PSTATE_ERR_"), (pstate.Engine, "PSTATE_ENGINE_"),
])
def test_enum_values_equal_the_c_constants(enum_cls, prefix):
    for member in enum_cls:
        name = "PSTATE_OK" if member.name == "OK" else prefix + member.name
        assert getattr(capi, name) == member.value, name


def test_dtype_itemsize_equals_library_dtype_size():
    for dt in pstate.DType:
        assert dt.itemsize == capi.dtype_size(int(dt))


def test_every_failure_status_maps_to_its_own_error_subclass():
    classes = {pstate.error_class(s) for s in pstate.Status if s != pstate.Status.OK}
    assert len(classes) == len(pstate.Status) - 1
    for s in pstate.Status:
        if s != pstate.Status.OK:
            cls = pstate.error_class(s)
            assert issubclass(cls, pstate.Error) and cls.status == s


def test_timeout_error_is_also_the_builtin_timeout_error():
    assert issubclass(pstate.TimeoutError, builtins.TimeoutError)
    assert issubclass(pstate.PeerLostError, ConnectionError)
    err = pstate.TimeoutError("waited 5 s for rank 1")
    assert str(err) == "PSTATE_ERR_TIMEOUT: waited 5 s for rank 1"


def test_library_version_equals_header_version():
    assert pstate.library_version() == capi.PSTATE_VERSION
    assert pstate.__version__ == "%d.%d.%d" % (capi.PSTATE_VERSION_MAJOR, capi.PSTATE_VERSION_MINOR,
                                               capi.PSTATE_VERSION_PATCH)
