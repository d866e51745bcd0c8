"""Buffers: from Python objects to (pointer object, element count, dtype) for the C calls.

A host buffer is any object with the buffer protocol (numpy arrays, bytearray, memoryview,
array.array, bytes for inputs). Its element type comes from the buffer's struct format
('f' -> FLOAT32, 'q'/'l' of 8 bytes -> INT64, 'e' -> FLOAT16, ...); types the format cannot
express (bfloat16, fp8) are named with dtype= over a buffer of the same item size ('H' for
bfloat16, 'B' for fp8). The memory must be C-contiguous and, for outputs, writable; sizes are
checked against what the operation will read and write before C is called, so a wrong buffer is
an InvalidArgumentError, never a memory error.

A torch CPU tensor is read directly (_torch: its address, dtype and shape, no DLPack export);
other ``__dlpack__`` producers go through _dlpack.

A device buffer (CUDA contexts) is an int address; dtype= and count= are then required.
"""
from __future__ import annotations

import array
import sys
from typing import Any, NamedTuple, Optional, Tuple

from . import _dlpack, _torch
from ._enums import DType, coerce
from ._errors import InvalidArgumentError

#: Anything with the buffer protocol, or an int device address.
BufferLike = Any

_SIGNED = {1: DType.INT8, 4: DType.INT32, 8: DType.INT64}
_UNSIGNED = {1: DType.UINT8, 4: DType.UINT32, 8: DType.UINT64}
_FLOATS = {"e": DType.FLOAT16, "f": DType.FLOAT32, "d": DType.FLOAT64}
# dtypes that no struct format spells, accepted over a same-size container format
_CONTAINERS = {DType.BFLOAT16: "hHe", DType.FLOAT16: "hH", DType.FP8_E4M3: "bBc", DType.FP8_E5M2: "bBc"}


class Buffer(NamedTuple):
    """One resolved buffer argument (a NamedTuple: immutable, and built in a third of a frozen
    dataclass's time, which is most of a call's Python cost)."""

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
            count: Optional[int] = None, implied_by: Optional[str] = None) -> Buffer:
    """Checks one buffer argument and finds its dtype and element count. implied_by names the
    argument dtype was taken from when the caller passed no dtype= (out takes send's), so that
    a disagreement reads as one between the two arguments."""
    tensor = _torch.TENSOR or _torch.tensor_type()
    if tensor is not None and isinstance(obj, tensor):
        return _resolve_tensor(obj, name, writable, dtype, count, implied_by)
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
        if _dlpack.is_dlpack(obj):  # a jax/cupy/... array: a numpy array over its memory
            try:
                array, dl_dtype = _dlpack.as_array(obj, name)
            except (RuntimeError, ValueError, TypeError, BufferError) as e:  # the producer refused to export
                raise InvalidArgumentError(f"{name}: {type(obj).__name__}.__dlpack__() refused: {e}") from None
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
            said = f"dtype={chosen.name.lower()}" if implied_by is None else f"{implied_by}'s dtype {chosen.name.lower()}"
            if chosen != found and fmt not in _CONTAINERS.get(chosen, ""):
                raise InvalidArgumentError(
                    f"{name}: {said} does not match the buffer's format {view.format!r}"
                    + (f" ({found.name.lower()})" if found is not None else "")
                )
            if chosen.itemsize != view.itemsize:
                raise InvalidArgumentError(
                    f"{name}: {said} is {chosen.itemsize} bytes, the buffer's items are {view.itemsize}"
                )
        available = view.nbytes // view.itemsize
        if count is not None:
            if count < 0 or count > available:
                raise InvalidArgumentError(f"{name}: count={count} but the buffer holds {available} elements")
            available = count
        return Buffer(obj, available, chosen, fmt, tuple(view.shape))


def _resolve_tensor(t: Any, name: str, writable: bool, dtype: Optional[DType], count: Optional[int],
                    implied_by: Optional[str]) -> Buffer:
    """resolve() for a torch tensor: its address as the C argument (the caller keeps the tensor
    alive for the call, and a Request keeps it with the address)."""
    if dtype is not None and not isinstance(dtype, DType):
        dtype = coerce(DType, dtype, f"{name}: dtype")
    try:
        chosen, fmt = _torch.check(t, name, writable, dtype)
        address = t.data_ptr()
    except InvalidArgumentError as e:
        if implied_by is None or dtype is None:
            raise
        raise InvalidArgumentError(e.detail.replace(f"dtype={dtype.name.lower()}",
                                                    f"{implied_by}'s dtype {dtype.name.lower()}")) from None
    except (RuntimeError, TypeError, ValueError) as e:  # what torch raises (a sparse tensor has no data_ptr)
        raise InvalidArgumentError(f"{name}: torch cannot give this tensor's memory ({t.layout}): {e}") from None
    available = t.numel()
    if count is not None:
        if count < 0 or count > available:
            raise InvalidArgumentError(f"{name}: count={count} but the tensor holds {available} elements")
        available = count
    return Buffer(address, available, chosen, fmt, tuple(t.shape))


def require(buf: Buffer, name: str, count: int) -> None:
    """Raises unless buf holds at least count elements."""
    if buf.count < count:
        raise InvalidArgumentError(f"{name}: holds {buf.count} elements, the operation needs {count}")


def same_dtype(a: Buffer, b: Buffer, names: str) -> None:
    if a.dtype != b.dtype:
        raise InvalidArgumentError(f"{names}: dtypes differ ({a.dtype.name.lower()} vs {b.dtype.name.lower()})")


def new_like(template: Buffer, source: Any, count: int, leading: Optional[int] = None,
             shape: Optional[Tuple[int, ...]] = None) -> Any:
    """A new zeroed host buffer of count elements of template's type, of the kind source is: a
    torch tensor of source's torch dtype for a torch tensor, a numpy array for a numpy array or
    another DLPack producer (shaped: `shape` when given, else (leading, *rest) when leading is
    given and source has a shape, else (count,)), a bytearray for a bytearray or bytes (one byte
    per element: their format is 'B'), an array.array of the same typecode for an array.array,
    and a 1-d memoryview of the same format over a new bytearray for anything else (a
    memoryview, another buffer exporter)."""
    if template.is_device:
        raise InvalidArgumentError("device buffers need an explicit out= buffer")
    dims: Tuple[int, ...] = (count,)
    if shape is not None:
        dims = shape
    elif leading is not None and len(template.shape) >= 1:
        dims = (leading,) + tuple(template.shape[1:])
    if _torch.is_tensor(source):  # a torch caller gets a torch tensor
        return _torch.zeros(source, dims)
    np = sys.modules.get("numpy")
    if np is not None and not isinstance(source, np.ndarray) and _dlpack.is_dlpack(source) and template.fmt:
        # another DLPack producer without the buffer protocol: a numpy result
        return np.zeros(dims, dtype=np.dtype(template.fmt))
    if np is not None and isinstance(source, np.ndarray):
        return np.zeros(dims if source.ndim >= 1 or shape is not None else (count,), dtype=source.dtype)
    nbytes = count * template.dtype.itemsize
    if isinstance(source, (bytearray, bytes)):
        return bytearray(nbytes)
    if isinstance(source, array.array):
        return array.array(source.typecode, bytes(nbytes))
    return memoryview(bytearray(nbytes)).cast(template.fmt or "B")
