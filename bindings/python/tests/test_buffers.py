"""Buffer resolution: dtype from the buffer format, contiguity, writability and size checks happen
before any C call (no communication needed)."""
from __future__ import annotations

import array

import numpy as np
import pytest

import pstate
from pstate._buffers import new_like, resolve


@pytest.mark.parametrize("np_dtype,expected", [
    (np.int8, pstate.DType.INT8), (np.uint8, pstate.DType.UINT8), (np.int32, pstate.DType.INT32),
    (np.uint32, pstate.DType.UINT32), (np.int64, pstate.DType.INT64), (np.uint64, pstate.DType.UINT64),
    (np.float16, pstate.DType.FLOAT16), (np.float32, pstate.DType.FLOAT32), (np.float64, pstate.DType.FLOAT64),
])
def test_numpy_dtype_is_taken_from_the_buffer_format(np_dtype, expected):
    b = resolve(np.zeros(6, dtype=np_dtype), "buf", writable=True)
    assert (b.dtype, b.count) == (expected, 6)


def test_bytearray_is_uint8_and_array_double_is_float64():
    assert resolve(bytearray(5), "b", writable=True).dtype == pstate.DType.UINT8
    assert resolve(array.array("d", [1.0, 2.0]), "b", writable=False).dtype == pstate.DType.FLOAT64


def test_multidimensional_contiguous_array_counts_every_element():
    assert resolve(np.zeros((3, 4), dtype=np.float32), "b", writable=True).count == 12


def test_non_contiguous_view_is_rejected():
    with pytest.raises(pstate.InvalidArgumentError, match="C-contiguous"):
        resolve(np.zeros((4, 4), dtype=np.float32)[:, 1], "send", writable=False)


def test_read_only_output_is_rejected():
    with pytest.raises(pstate.InvalidArgumentError, match="read-only"):
        resolve(b"abcd", "out", writable=True)


def test_int16_has_no_pstate_dtype_unless_named_as_a_container():
    with pytest.raises(pstate.InvalidArgumentError, match="no pstate dtype"):
        resolve(np.zeros(2, dtype=np.int16), "x", writable=False)
    assert resolve(np.zeros(2, dtype=np.uint16), "x", writable=False, dtype=pstate.DType.BFLOAT16).dtype \
        == pstate.DType.BFLOAT16


def test_explicit_dtype_that_contradicts_the_format_is_rejected():
    with pytest.raises(pstate.InvalidArgumentError, match="does not match"):
        resolve(np.zeros(2, dtype=np.float32), "x", writable=False, dtype=pstate.DType.INT32)


def test_count_larger_than_the_buffer_is_rejected():
    with pytest.raises(pstate.InvalidArgumentError, match="holds 4"):
        resolve(np.zeros(4, dtype=np.float32), "x", writable=False, count=5)


def test_device_address_needs_dtype_and_count():
    with pytest.raises(pstate.InvalidArgumentError, match="dtype= and count="):
        resolve(0x7F0000001000, "x", writable=False)
    b = resolve(0x7F0000001000, "x", writable=False, dtype=pstate.DType.FLOAT32, count=8)
    assert b.is_device and b.nbytes == 32


def test_non_buffer_object_is_an_invalid_argument_and_a_type_error():
    with pytest.raises(TypeError):
        resolve([1, 2, 3], "x", writable=False)


def test_outputs_are_allocated_like_numpy_inputs():
    src = np.arange(6, dtype=np.int64).reshape(3, 2)
    out = new_like(resolve(src, "s", writable=False), src, 12, leading=6)
    assert out.shape == (6, 2) and out.dtype == np.int64



@pytest.mark.parametrize("source, kind, nbytes", [
    (bytearray(3), bytearray, 6),
    (b"abc", bytearray, 6),
    (array.array("f", [1.0, 2.0, 3.0]), array.array, 24),
    (memoryview(array.array("q", [1, 2, 3])), memoryview, 48),
])
def test_outputs_are_allocated_as_the_kind_of_buffer_given(source, kind, nbytes):
    """all_gather of a bytearray returns a bytearray (not a memoryview), of an array.array an
    array.array of its typecode; other exporters get a memoryview of their format."""
    out = new_like(resolve(source, "s", writable=False), source, 2 * len(memoryview(source)))
    assert type(out) is kind and memoryview(out).nbytes == nbytes
    assert memoryview(out).format == memoryview(source).format


class _DLPackOnly:
    """__dlpack__ / __dlpack_device__ over a numpy array, no buffer protocol (as a torch tensor)."""

    def __init__(self, array, device=(1, 0)):
        self.array, self.device = array, device

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.device


def test_dlpack_object_is_a_writable_view_of_its_memory():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = resolve(_DLPackOnly(a), "buf", writable=True)
    assert (b.dtype, b.count, b.shape) == (pstate.DType.INT32, 6, (2, 3))
    b.obj[1, 2] = 99  # the array over the producer's memory, not a copy
    assert a[1, 2] == 99
    assert isinstance(new_like(b, _DLPackOnly(a), 4), np.ndarray)


def test_dlpack_device_tensor_non_contiguous_and_unknown_types_are_refused():
    e = pytest.raises(pstate.InvalidArgumentError, resolve, _DLPackOnly(np.zeros(2), device=(2, 0)), "buf", writable=True)
    assert "not the CPU" in e.value.detail and "data_ptr()" in e.value.detail
    e = pytest.raises(pstate.InvalidArgumentError, resolve, _DLPackOnly(np.zeros((3, 3))[:, 0]), "buf", writable=True)
    assert "not C-contiguous" in e.value.detail
    e = pytest.raises(pstate.InvalidArgumentError, resolve, _DLPackOnly(np.zeros(2, np.complex64)), "buf", writable=True)
    assert "no pstate dtype" in e.value.detail
