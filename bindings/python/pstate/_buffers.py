"""Buffers: from Python objects to (pointer object, element count, dtype) for the C calls.

A host buffer is any object with the buffer protocol (numpy arrays, bytearray, memoryview,
array.array, bytes for inputs). Its element type comes from the buffer's struct format
('f' -> FLOAT32, 'q'/'l' of 8 bytes -> INT64, 'e' -> FLOAT16, ...); types the format cannot
express (bfloat16, fp8) are named with dtype= over a buffer of the same item size ('H' for
bfloat16, 'B' for fp8). The memory must be C-contiguous and, for outputs, writable; sizes are
checked against what the operation will read and write before C is called, so a wrong buffer is
an InvalidArgumentError, never a memory error.

A device buffer (CUDA contexts) is an int address; dtype= and count= are then required.
"""
from __future__ import annotations

import array
import sys
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from . import _dlpack
from ._enums import DType, coerce
from ._errors import InvalidArgumentError

#: Anything with the buffer protocol, or an int device address.
BufferLike = Any

_SIGNED = {1: DType.INT8, 4: DType.INT32, 8: DType.INT64}
_UNSIGNED = {1: DType.UINT8, 4: DType.UINT32, 8: DType.UINT64}
_FLOATS = {"e": DType.FLOAT16, "f": DType.FLOAT32, "d": DType.FLOAT64}
# dtypes that no struct format spells, accepted over a same-size container format
_CONTAINERS = {DType.BFLOAT16: "hHe", DType.FLOAT16: "hH", DType.FP8_E4M3: "bBc", DType.FP8_E5M2: "bBc"}


@dataclass(frozen=True)
class Buffer:
    """One resolved buffer argument."""

    obj: Any  # what the C call receives: the exporter, an int address, or None
    count: int  # elements available
    dtype: DType
    fmt: Optional[str]  # single-character native struct format (host buffers)
    shape: Tuple[int, ...]  # the exporter's shape (host buffers), () for scalars/addresses
    is_device: bool = False

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize


def _native_format(fmt: str, name: str) -> str:
    if fmt and fmt[0] in "@=":
        fmt = fmt[1:]
    elif fmt and fmt[0] == "<":
        if sys.byteorder != "little":
            raise InvalidArgumentError(f"{name}: little-endian buffer on a big-endian host")
        fmt = fmt[1:]
    elif fmt and fmt[0] in ">!":
        if sys.byteorder != "big":
            raise InvalidArgumentError(f"{name}: big-endian buffer (format {fmt!r}); use native byte order")
        fmt = fmt[1:]
    if len(fmt) != 1:
        raise InvalidArgumentError(f"{name}: buffer format {fmt!r} is not a single numeric element type")
    return fmt


def dtype_of_format(fmt: str, itemsize: int) -> Optional[DType]:
    """The pstate dtype a native struct format character stands for, or None."""
    if fmt in "bhilqn":
        return _SIGNED.get(itemsize)
    if fmt in "BHILQNc":
        return _UNSIGNED.get(itemsize) if fmt != "c" else DType.UINT8
    return _FLOATS.get(fmt)


def resolve(obj: BufferLike, name: str, *, writable: bool, dtype: Optional[DType] = None,
            count: Optional[int] = None) -> Buffer:
    """Checks one buffer argument and finds its dtype and element count."""
    if isinstance(obj, bool):
        raise InvalidArgumentError(f"{name}: expected a buffer or an int device address, got bool")
    if isinstance(obj, int):
        if dtype is None or count is None:
            raise InvalidArgumentError(f"{name}: a device address (int) needs dtype= and count=")
        if count < 0:
            raise InvalidArgumentError(f"{name}: count must be >= 0, got {count}")
        return Buffer(obj, count, coerce(DType, dtype, f"{name}: dtype"), None, (), is_device=True)
    try:
        view = memoryview(obj)
    except TypeError:
        if _dlpack.is_dlpack(obj):  # a torch tensor, ...: a numpy array over its memory
            array, dl_dtype = _dlpack.as_array(obj, name)
            return resolve(array, name, writable=writable, dtype=dtype or dl_dtype, count=count)
        raise InvalidArgumentError(
            f"{name}: {type(obj).__name__} has no buffer protocol (use a numpy array, bytearray or memoryview)"
        ) from None
    with view:
        if not view.c_contiguous:
            raise InvalidArgumentError(f"{name}: the buffer is not C-contiguous (numpy: np.ascontiguousarray)")
        if writable and view.readonly:
            raise InvalidArgumentError(f"{name}: the buffer is read-only but receives results")
        fmt = _native_format(view.format, name)
        found = dtype_of_format(fmt, view.itemsize)
        if dtype is None:
            if found is None:
                raise InvalidArgumentError(
                    f"{name}: buffer format {view.format!r} ({view.itemsize} bytes) has no pstate dtype; "
                    "pass dtype= for bfloat16/fp8 containers"
                )
            chosen = found
        else:
            chosen = coerce(DType, dtype, f"{name}: dtype")
            if chosen != found and fmt not in _CONTAINERS.get(chosen, ""):
                raise InvalidArgumentError(
                    f"{name}: dtype={chosen.name.lower()} does not match the buffer's format {view.format!r}"
                    + (f" ({found.name.lower()})" if found is not None else "")
                )
            if chosen.itemsize != view.itemsize:
                raise InvalidArgumentError(
                    f"{name}: dtype={chosen.name.lower()} is {chosen.itemsize} bytes, the buffer's items are {view.itemsize}"
                )
        available = view.nbytes // view.itemsize
        if count is not None:
            if count < 0 or count > available:
                raise InvalidArgumentError(f"{name}: count={count} but the buffer holds {available} elements")
            available = count
        return Buffer(obj, available, chosen, fmt, tuple(view.shape))


def require(buf: Buffer, name: str, count: int) -> None:
    """Raises unless buf holds at least count elements."""
    if buf.count < count:
        raise InvalidArgumentError(f"{name}: holds {buf.count} elements, the operation needs {count}")


def same_dtype(a: Buffer, b: Buffer, names: str) -> None:
    if a.dtype != b.dtype:
        raise InvalidArgumentError(f"{names}: dtypes differ ({a.dtype.name.lower()} vs {b.dtype.name.lower()})")


def new_like(template: Buffer, source: Any, count: int, leading: Optional[int] = None) -> Any:
    """A new zeroed host buffer of count elements of template's type, of the kind source is: a
    numpy array for a numpy array (shape (leading, *rest) when leading is given and source has a
    shape), a bytearray for a bytearray or bytes (one byte per element: their format is 'B'), an
    array.array of the same typecode for an array.array, and a 1-d memoryview of the same format
    over a new bytearray for anything else (a memoryview, another buffer exporter)."""
    if template.is_device:
        raise InvalidArgumentError("device buffers need an explicit out= buffer")
    np = sys.modules.get("numpy")
    if np is not None and not isinstance(source, np.ndarray) and _dlpack.is_dlpack(source) and template.fmt:
        # a DLPack input (a torch tensor) without the buffer protocol: a numpy result
        shape_: Tuple[int, ...] = (count,)
        if leading is not None and len(template.shape) >= 1:
            shape_ = (leading,) + tuple(template.shape[1:])
        return np.zeros(shape_, dtype=np.dtype(template.fmt))
    if np is not None and isinstance(source, np.ndarray):
        shape: Tuple[int, ...] = (count,)
        if leading is not None and source.ndim >= 1:
            shape = (leading,) + tuple(source.shape[1:])
        return np.zeros(shape, dtype=source.dtype)
    nbytes = count * template.dtype.itemsize
    if isinstance(source, (bytearray, bytes)):
        return bytearray(nbytes)
    if isinstance(source, array.array):
        return array.array(source.typecode, bytes(nbytes))
    return memoryview(bytearray(nbytes)).cast(template.fmt or "B")
