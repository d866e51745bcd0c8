"""Group memory (pstate_mem_alloc, issue 29): device memory of a group's CUDA context that NCCL
registers as a symmetric window (SGLang's ``use_symmetric_memory`` / pynccl allocator), handed
out as a DLPack-capable buffer, so ``torch.from_dlpack(mem.view("float16", (n,)))`` wraps it
without a copy.

A DeviceMemory owns its allocation. ``free()`` (or leaving a ``with`` block) releases it: a piece
of the group's pool locally, a collective allocation collectively (every rank of the group frees
its allocation of the same call at the same point, as pstate_mem_free says). The garbage
collector frees pool pieces only: collecting a collective allocation at different moments on
different ranks would be a collective call that the ranks do not make together, so such memory
the collector leaves to the group's end (destroy_model_parallel, finalize, abort free it).

DLPack export: ``__dlpack__`` returns a capsule over the memory (device type kDLCUDA, the
context's device) that keeps this object alive until the consumer's tensor is gone."""
from __future__ import annotations

import ctypes
from typing import Any, Optional, Sequence, Tuple

from ._enums import DType, coerce
from ._errors import InvalidArgumentError, InvalidStateError

_KDLCUDA = 2
# pstate dtype -> DLPack (type code, bits): int 0, uint 1, float 2, bfloat 4
_DL_CODE = {DType.INT8: (0, 8), DType.UINT8: (1, 8), DType.INT32: (0, 32), DType.UINT32: (1, 32),
            DType.INT64: (0, 64), DType.UINT64: (1, 64), DType.FLOAT16: (2, 16), DType.FLOAT32: (2, 32),
            DType.FLOAT64: (2, 64), DType.BFLOAT16: (4, 16)}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
# The destructor gets the dying capsule's address: read it as a plain pointer (a py_object over an
# object being freed would take a reference to it).
_PyCapsule_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

# Exported tensors alive in a consumer: address of the DLManagedTensor -> (its ctypes parts, owner)
_live: dict = {}


@_DELETER
def _delete(managed: Any) -> None:
    _live.pop(ctypes.addressof(managed.contents), None)


@_CAPSULE_DESTRUCTOR
def _capsule_gone(capsule: int) -> None:
    # An unconsumed capsule ("dltensor", not renamed "used_dltensor") owns its tensor.
    if _PyCapsule_IsValid(capsule, b"dltensor"):
        _live.pop(_PyCapsule_GetPointer(capsule, b"dltensor"), None)


def export(address: int, dtype: DType, shape: Sequence[int], device: int, owner: Any) -> Any:
    """A 'dltensor' capsule over C-contiguous device memory at address, keeping owner alive."""
    code, bits = _DL_CODE[dtype]
    shape_array = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    managed = _DLManagedTensor()
    managed.dl_tensor.data = address
    managed.dl_tensor.device = _DLDevice(_KDLCUDA, device)
    managed.dl_tensor.ndim = len(shape)
    managed.dl_tensor.dtype = _DLDataType(code, bits, 1)
    managed.dl_tensor.shape = ctypes.cast(shape_array, ctypes.POINTER(ctypes.c_int64))
    managed.dl_tensor.strides = None
    managed.dl_tensor.byte_offset = 0
    managed.deleter = _delete
    _live[ctypes.addressof(managed)] = (managed, shape_array, owner)
    return _PyCapsule_New(ctypes.addressof(managed), b"dltensor", _capsule_gone)  # module-level: never freed


class DeviceTensor:
    """A typed view of group memory: a DLPack producer (``torch.from_dlpack(t)``)."""

    def __init__(self, memory: "DeviceMemory", dtype: DType, shape: Tuple[int, ...], offset: int) -> None:
        self.memory = memory
        self.dtype = dtype
        self.shape = shape
        self.ptr = memory.ptr + offset

    def __dlpack__(self, stream: Optional[int] = None, **_: Any) -> Any:
        self.memory._require_live("__dlpack__")
        return export(self.ptr, self.dtype, self.shape, self.memory.device, self)

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (_KDLCUDA, self.memory.device)


class DeviceMemory:
    """nbytes of group memory at ptr (an int: a CUDA device address of the group's context)."""

    def __init__(self, group: Any, ptr: int, nbytes: int, pooled: bool, device: int) -> None:
        self.group = group
        self.ptr = ptr
        self.nbytes = nbytes
        self.pooled = pooled
        self.device = device

    @property
    def freed(self) -> bool:
        return self.ptr == 0

    def _require_live(self, what: str) -> None:
        if self.ptr == 0:
            raise InvalidStateError(f"DeviceMemory.{what}: the memory was freed")

    def view(self, dtype: Any, shape: Optional[Sequence[int]] = None, offset: int = 0) -> DeviceTensor:
        """A typed view (default: all of it, 1-D) as a DLPack producer."""
        self._require_live("view")
        dt = coerce(DType, dtype, "dtype")
        if dt not in _DL_CODE:
            raise InvalidArgumentError(f"DeviceMemory.view: {dt.name} has no DLPack type here")
        itemsize = _DL_CODE[dt][1] // 8
        if shape is None:
            shape = ((self.nbytes - offset) // itemsize,)
        count = 1
        for extent in shape:
            count *= int(extent)
        if offset < 0 or offset % itemsize or offset + count * itemsize > self.nbytes:
            raise InvalidArgumentError(f"DeviceMemory.view: {count} x {itemsize} bytes at offset {offset} do not fit "
                                       f"{self.nbytes} bytes")
        return DeviceTensor(self, dt, tuple(int(e) for e in shape), offset)

    def __dlpack__(self, stream: Optional[int] = None, **_: Any) -> Any:
        return self.view(DType.UINT8).__dlpack__(stream)

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (_KDLCUDA, self.device)

    def free(self) -> None:
        """pstate_mem_free: local for a pool piece, collective otherwise. Idempotent."""
        if self.ptr == 0:
            return
        ptr, self.ptr = self.ptr, 0
        self.group._mem_free(ptr)

    def __enter__(self) -> "DeviceMemory":
        return self

    def __exit__(self, *_: Any) -> None:
        self.free()

    def __del__(self) -> None:
        if self.pooled and self.ptr != 0:  # local: safe whenever the collector runs
            try:
                self.free()
            except Exception:  # the group or its PState is gone: freed with them
                pass

    def __repr__(self) -> str:
        state = "freed" if self.ptr == 0 else f"0x{self.ptr:x}"
        return f"DeviceMemory({state}, {self.nbytes} bytes, {'pool' if self.pooled else 'collective'})"
