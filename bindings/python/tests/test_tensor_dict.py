"""Tensor dicts: numpy <-> the C API's dict description (no communication), the raw typemaps on
a one-rank world, then multi-rank scenarios of ranks.py (every rank rebuilds what its peers send
and compares, dtypes and shapes included)."""
from __future__ import annotations

import numpy as np
import pytest

import pstate
from pstate import DType, capi
from pstate._tensor_dict import PY_META, Refused, decode, encode


def test_numpy_dtypes_map_to_pstate_dtypes_and_shapes_are_kept():
    d = {"a": np.zeros((2, 3), np.float32), "s": np.int64(3), "z": np.zeros((0, 5), np.uint8),
         "h": np.zeros(1, np.float16), "u": np.zeros((1, 1, 1), np.uint64)}
    got = [(name, DType(dtype), shape) for name, dtype, shape, _ in encode(d, None, "t")]
    assert got == [("a", DType.FLOAT32, (2, 3)), ("s", DType.INT64, ()), ("z", DType.UINT8, (0, 5)),
                   ("h", DType.FLOAT16, (1,)), ("u", DType.UINT64, (1, 1, 1))]


def test_bfloat16_and_fp8_are_named_over_same_size_containers():
    d = {"b": np.zeros(2, np.uint16), "q": np.zeros(2, np.uint8), "r": np.zeros(2, np.int8)}
    dtypes = {"b": DType.BFLOAT16, "q": DType.FP8_E4M3, "r": DType.FP8_E5M2}
    assert [DType(e[1]) for e in encode(d, dtypes, "t")] == [DType.BFLOAT16, DType.FP8_E4M3, DType.FP8_E5M2]
    with pytest.raises(pstate.InvalidArgumentError, match="bfloat16"):
        encode({"b": np.zeros(2, np.float32)}, {"b": DType.BFLOAT16}, "t")


def test_non_contiguous_and_big_endian_arrays_travel_as_contiguous_native_copies():
    t = np.arange(6, dtype=np.int32).reshape(2, 3).T
    be = np.arange(3, dtype=">f8")
    (_, _, shape_t, arr_t), (_, dtype_be, _, arr_be) = encode({"t": t, "be": be}, None, "t")
    assert shape_t == (3, 2) and arr_t.flags.c_contiguous and np.array_equal(arr_t, t)
    assert DType(dtype_be) == DType.FLOAT64 and arr_be.dtype.isnative and np.array_equal(arr_be, be)


def test_contiguous_native_arrays_are_not_copied():
    a = np.arange(4, dtype=np.float32)
    assert encode({"a": a}, None, "t")[0][3] is a


@pytest.mark.parametrize("value", [np.zeros(2, bool), [1, 2], np.zeros(2, np.int16), np.zeros(2, np.complex64),
                                   "text", None, {"a": 1}, np.array([{"x": 1}], dtype=object)])
def test_values_pstate_has_no_dtype_for_travel_with_the_metadata_entry(value):
    """vLLM's and SGLang's dicts mix tensors with other values: those values, and arrays of dtypes
    pstate has none for, add the PY_META entry (first); an array of a pstate dtype stays a plain
    entry, so a dict of only those is what the C API sends."""
    entries = encode({"x": value, "y": np.zeros(1, np.float32)}, None, "op")
    assert entries[0][0] == PY_META and entries[0][1] == DType.UINT8, entries[0]
    assert ("y", int(DType.FLOAT32), (1,)) == entries[-1][:3]
    assert [e[0] for e in encode({"y": np.zeros(1, np.float32)}, None, "op")] == ["y"]


def test_a_mixed_dict_comes_back_with_its_values_dtypes_and_order():
    d = {"c": "test", "m": np.array([True, False]), "h": np.arange(6, dtype=np.int16).reshape(2, 3),
         "z": np.zeros((0, 2), np.complex64), "s": np.int16(-3), "n": None, "f": np.arange(3, dtype=np.float32),
         "o": np.array([{"x": 1}], dtype=object)}
    got = decode([(n, dt, sh, bytearray(np.asarray(a).tobytes()) or None, 0) for n, dt, sh, a in encode(d, None, "op")])
    assert list(got) == list(d) and got["c"] == "test" and got["n"] is None and got["o"][0] == {"x": 1}, got
    for key in ("m", "h", "z", "s", "f"):
        assert got[key].dtype == np.asarray(d[key]).dtype and np.array_equal(got[key], d[key]), (key, got[key])
    assert got.dtypes == {"f": DType.FLOAT32}, got.dtypes


def test_values_that_cannot_be_pickled_and_pstates_own_key_are_refused_naming_them():
    with pytest.raises(Refused, match="value 'fn' cannot be pickled") as info:
        encode({"fn": lambda: 1, "x": np.zeros(1)}, None, "op")
    assert info.value.key == "fn" and isinstance(info.value, pstate.InvalidArgumentError)
    with pytest.raises(Refused, match="pstate's own"):
        encode({PY_META: 1}, None, "op")


def test_dtypes_naming_a_missing_key_is_refused():
    with pytest.raises(Refused, match="not a key"):
        encode({"a": np.zeros(1)}, {"b": DType.BFLOAT16}, "op")


def test_received_empty_tensors_become_zero_size_arrays_with_their_dtype():
    got = decode([("e", int(DType.BFLOAT16), (0, 3), None, 0)])
    assert got["e"].shape == (0, 3) and got["e"].dtype == np.uint16 and got.dtypes["e"] == DType.BFLOAT16


def test_a_new_collector_holds_nothing():
    rd = capi.ReceivedDict()
    assert rd.take() == [] and rd.cuda_tensor() is None


@pytest.fixture
def one_rank(tmp_path):
    with pstate.init(world_size=1, rank=0, local_rank=0, init_method=f"file://{tmp_path}/store",
                     timeout_ms=10000) as ps:
        yield ps


def test_raw_typemap_refuses_a_buffer_of_the_wrong_size(one_rank):
    h = one_rank.world._h()
    with pytest.raises(pstate.InvalidArgumentError, match="holds 12 bytes"):
        capi.broadcast_tensor_dict(h, [("x", int(DType.FLOAT32), (2,), np.zeros(3, np.float32))], 0, None, None)
    with pytest.raises(pstate.InvalidArgumentError, match="data is None"):
        capi.broadcast_tensor_dict(h, [("x", int(DType.FLOAT32), (2,), None)], 0, None, None)
    with pytest.raises(pstate.InvalidArgumentError, match="NUL"):
        capi.broadcast_tensor_dict(h, [("x\0y", int(DType.UINT8), (), b"a")], 0, None, None)
    with pytest.raises(TypeError, match="ReceivedDict"):
        capi.recv_tensor_dict(h, 0, "not a collector", None)


def test_one_rank_broadcast_returns_the_dict_itself(one_rank):
    d = {"a": np.ones(3)}
    assert one_rank.world.broadcast_tensor_dict(d) is d


def test_every_dtype_shape_and_order_arrives_three_ranks(ranks):
    ranks(3, "tensor_dicts")


def test_refused_dicts_fail_every_rank_with_the_reason_two_ranks(ranks):
    ranks(2, "tensor_dict_errors")


def test_recv_tensor_dict_releases_the_gil_two_ranks(ranks, tmp_path):
    ranks(2, "tensor_dict_gil", extra_env={"PSTATE_TEST_TMP": str(tmp_path)})
