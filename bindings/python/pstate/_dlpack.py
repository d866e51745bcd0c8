"""DLPack inputs: any object with ``__dlpack__`` and no buffer protocol (a JAX or TensorFlow CPU
array, ...) as a host buffer, without a copy. torch tensors do not come here: _torch reads them
directly, at a tenth of this path's cost.

numpy >= 1.22 can import DLPack (``np.from_dlpack``) but only read-only, and buffers here are
also written, so the capsule is read directly (ctypes over the DLPack ABI's DLManagedTensor): the
result is a writable numpy array over the producer's memory. The capsule is kept alive by the
array (through its base), so the producer's memory stays valid while the array exists; the
capsule's own destructor calls the producer's deleter then (the capsule is never renamed
"used_dltensor", which would make this module responsible for the deleter)."""
from __future__ import annotations

import ctypes
from typing import Any, Optional, Tuple

from ._enums import DType
from ._errors import InvalidArgumentError


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):  # the first member of DLManagedTensor
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_GET_POINTER = ctypes.pythonapi.PyCapsule_GetPointer
_GET_POINTER.restype = ctypes.c_void_p
_GET_POINTER.argtypes = [ctypes.py_object, ctypes.c_char_p]

_KDLCPU = 1
# (type code, bits) -> numpy dtype string; code 4 is bfloat (a uint16 container, DType.BFLOAT16)
_NUMPY = {(0, 8): "i1", (0, 16): "i2", (0, 32): "i4", (0, 64): "i8", (1, 8): "u1", (1, 16): "u2", (1, 32): "u4",
          (1, 64): "u8", (2, 16): "f2", (2, 32): "f4", (2, 64): "f8", (4, 16): "u2"}


def is_dlpack(obj: Any) -> bool:
    return hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")


def as_array(obj: Any, name: str) -> Tuple[Any, Optional[DType]]:
    """A writable numpy array over obj's memory (no copy) and the dtype to use when numpy has
    none (bfloat16), or InvalidArgumentError for a device tensor, a non-contiguous one, or an
    element type pstate has no dtype for."""
    import numpy as np

    device = obj.__dlpack_device__()
    if int(device[0]) != _KDLCPU:
        raise InvalidArgumentError(
            f"{name}: a DLPack tensor on device type {int(device[0])}, not the CPU; pass a device tensor's "
            "address as an int with dtype= and count= (e.g. t.data_ptr())")
    capsule = obj.__dlpack__()
    try:
        address = _GET_POINTER(capsule, b"dltensor")
    except ValueError:
        raise InvalidArgumentError(f"{name}: __dlpack__() did not return an unused 'dltensor' capsule") from None
    t = _DLTensor.from_address(address)
    key = (int(t.dtype.code), int(t.dtype.bits))
    if key not in _NUMPY or t.dtype.lanes != 1:
        raise InvalidArgumentError(f"{name}: DLPack element type code {key[0]} with {key[1]} bits "
                                   f"x {t.dtype.lanes} lanes has no pstate dtype")
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    itemsize = key[1] // 8
    if t.strides:
        expected = 1
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and int(t.strides[i]) != expected:
                raise InvalidArgumentError(f"{name}: the DLPack tensor is not C-contiguous (torch: .contiguous())")
            expected *= shape[i]
    count = 1
    for extent in shape:
        count *= extent
    nbytes = count * itemsize
    # a ctypes array over the memory that also holds the capsule (a subclass has a __dict__)
    holder_type = type("DLPackMemory", (ctypes.c_char * max(nbytes, 1),), {})
    holder = holder_type.from_address(t.data + t.byte_offset) if nbytes else holder_type()
    holder.capsule = capsule
    array = np.frombuffer(holder, dtype=np.dtype(_NUMPY[key]), count=count).reshape(shape)
    return array, (DType.BFLOAT16 if key[0] == 4 else None)
