"""torch tensors, read directly: the fast path for torch CPU tensors, and torch results for
torch callers.

Why not DLPack for torch: a DLPack export builds a capsule, a ctypes view and a numpy array per
argument (about 11 us, ten times a numpy array's memoryview). A torch tensor already says what C
needs: ``data_ptr()`` (the address, byte offset included), ``dtype``, ``shape`` and
``is_contiguous()``. The torch dtype -> (pstate dtype, container format) table is built once, keyed
by torch's dtype objects, the first time a tensor is seen. torch itself is never imported here: a
tensor can only exist once its caller imported torch, so ``sys.modules["torch"]`` is the test.
Other ``__dlpack__`` producers keep the DLPack path (_dlpack).

What torch refuses or would raise on (a tensor that requires grad and is written, a meta or CUDA
tensor, a bool tensor, an element type pstate has none for) is refused here, before any C call,
as InvalidArgumentError with what to do instead.

Results: a torch caller gets torch back. ``zeros`` makes a zeroed result tensor for an
operation that allocates one (all_gather without out=, ...), and ``from_array`` turns a received
numpy array (a tensor dict's value) into a tensor over the same memory, bfloat16 and fp8 included
(through an int16/uint8 view: torch 1.13 converts no uint16 array).
"""
from __future__ import annotations

import sys
from typing import Any, Dict, Optional, Tuple

from ._enums import DType
from ._errors import InvalidArgumentError

#: torch dtype -> (pstate dtype or None, struct format of a same-size container or None). Built on
#: the first tensor; None until then.
_TABLE: Optional[Dict[Any, Tuple[Optional[DType], Optional[str]]]] = None
#: pstate dtype -> torch dtype of a result (a container where torch has no such type).
_RESULT: Dict[DType, Any] = {}
TENSOR: Any = None  # torch.Tensor, once torch is imported


def tensor_type() -> Any:
    """torch.Tensor when torch is imported (by the caller), else None."""
    global TENSOR
    if TENSOR is None:
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "Tensor"):
            return None
        TENSOR = torch.Tensor
        _build(torch)
    return TENSOR


def is_tensor(obj: Any) -> bool:
    t = TENSOR if TENSOR is not None else tensor_type()
    return t is not None and isinstance(obj, t)


def _build(torch: Any) -> None:
    global _TABLE
    table: Dict[Any, Tuple[Optional[DType], Optional[str]]] = {
        torch.int8: (DType.INT8, "b"), torch.uint8: (DType.UINT8, "B"), torch.int16: (None, "h"),
        torch.int32: (DType.INT32, "i"), torch.int64: (DType.INT64, "q"), torch.float16: (DType.FLOAT16, "e"),
        torch.float32: (DType.FLOAT32, "f"), torch.float64: (DType.FLOAT64, "d"),
        torch.bfloat16: (DType.BFLOAT16, None),
    }
    result = {DType.INT8: torch.int8, DType.UINT8: torch.uint8, DType.INT32: torch.int32, DType.INT64: torch.int64,
              DType.FLOAT16: torch.float16, DType.FLOAT32: torch.float32, DType.FLOAT64: torch.float64,
              DType.BFLOAT16: torch.bfloat16, DType.FP8_E4M3: torch.uint8, DType.FP8_E5M2: torch.uint8}
    # types a newer torch has (unsigned wider than 8 bits: 2.3; fp8: 2.1)
    for attr, dtype, fmt in (("uint16", None, "H"), ("uint32", DType.UINT32, "I"), ("uint64", DType.UINT64, "Q"),
                             ("float8_e4m3fn", DType.FP8_E4M3, None), ("float8_e5m2", DType.FP8_E5M2, None)):
        t = getattr(torch, attr, None)
        if t is not None:
            table[t] = (dtype, fmt)
            if dtype is not None:
                result[dtype] = t
    _RESULT.update(result)
    _TABLE = table


# what a container format may stand for when dtype= names it (as _buffers._CONTAINERS)
_CONTAINERS = {DType.BFLOAT16: "hHe", DType.FLOAT16: "hH", DType.FP8_E4M3: "bB", DType.FP8_E5M2: "bB"}


def check(t: Any, name: str, writable: bool, dtype: Optional[DType]) -> Tuple[DType, Optional[str]]:
    """The pstate dtype of tensor t (dtype when given and t's type can carry it) and its container
    format; InvalidArgumentError for a tensor C cannot read or write."""
    if not t.is_cpu:  # (t.device costs five times t.is_cpu)
        device = t.device
        if device.type == "meta":
            raise InvalidArgumentError(f"{name}: a meta tensor has no data (create it on the CPU)")
        raise InvalidArgumentError(
            f"{name}: a torch tensor on {device}, not the CPU: the Python binding takes host tensors; pass a "
            "device tensor's address as an int with dtype= and count= (t.data_ptr(), t.numel()) to a CUDA context")
    if writable and t.requires_grad:
        raise InvalidArgumentError(
            f"{name}: the tensor requires grad and would be written behind autograd's back; pass t.detach() "
            "or call inside torch.no_grad() with a tensor that does not require grad")
    if not t.is_contiguous():
        raise InvalidArgumentError(f"{name}: the tensor is not contiguous (torch: .contiguous())")
    if _TABLE is None:
        tensor_type()
    entry = _TABLE.get(t.dtype)  # type: ignore[union-attr]
    if entry is None:
        hint = "; send t.to(torch.uint8)" if t.dtype == sys.modules["torch"].bool else ""
        raise InvalidArgumentError(f"{name}: torch dtype {t.dtype} has no pstate dtype{hint}")
    found, fmt = entry
    if dtype is None or dtype == found:
        if found is None:
            raise InvalidArgumentError(f"{name}: torch dtype {t.dtype} has no pstate dtype; pass dtype= for "
                                       "bfloat16/fp8 containers")
        return found, fmt
    if fmt is None or fmt not in _CONTAINERS.get(dtype, "") or dtype.itemsize != t.element_size():
        raise InvalidArgumentError(f"{name}: dtype={dtype.name.lower()} does not match the tensor's dtype {t.dtype}")
    return dtype, fmt


def as_numpy(t: Any, name: str) -> Tuple[Any, Optional[DType]]:
    """A numpy array over tensor t's memory to send (no copy unless t is not contiguous; t
    detached: sending only reads), and the pstate dtype when numpy has none (bfloat16 and fp8
    travel in int16/uint8 containers); InvalidArgumentError for what cannot be sent."""
    torch = sys.modules["torch"]
    if not t.is_cpu:
        where = "a meta tensor has no data" if t.device.type == "meta" else f"a tensor on {t.device}, not the CPU"
        raise InvalidArgumentError(f"{name}: {where}: the Python binding sends host tensors (t.cpu())")
    if _TABLE is None:
        tensor_type()
    entry = _TABLE.get(t.dtype)  # type: ignore[union-attr]
    if entry is None:
        hint = "; send t.to(torch.uint8)" if t.dtype == torch.bool else ""
        raise InvalidArgumentError(f"{name}: torch dtype {t.dtype} has no pstate dtype{hint}")
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    found, fmt = entry
    if fmt is None:  # bfloat16, fp8: numpy has no such type
        return t.view(torch.int16 if t.element_size() == 2 else torch.uint8).numpy(), found
    return t.numpy(), None


def result_dtype_of(torch_dtype: Any) -> Optional[DType]:
    """The pstate dtype of a torch dtype (torch.bfloat16 -> BFLOAT16), None where pstate has none
    (torch.bool, torch.int16 carry none of their own)."""
    if _TABLE is None:
        tensor_type()
    entry = (_TABLE or {}).get(torch_dtype)
    return entry[0] if entry is not None else None


def _same_size_int(torch: Any, size: int) -> Any:
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(size)


def raw_bytes(t: Any, name: str) -> Tuple[Any, str, Tuple[int, ...]]:
    """A tensor of a dtype pstate has none for (bool, int16, complex, ...), as the flat uint8 numpy
    array of its bytes (no copy when it is contiguous), its torch dtype's name and its shape: a
    tensor dict carries it as bytes and the receiver views them as that dtype again."""
    import numpy as np

    torch = sys.modules["torch"]
    if not t.is_cpu:
        where = "a meta tensor has no data" if t.device.type == "meta" else f"a tensor on {t.device}, not the CPU"
        raise InvalidArgumentError(f"{name}: {where}: the Python binding sends host tensors (t.cpu())")
    if t.is_quantized or t.layout != torch.strided:
        raise InvalidArgumentError(f"{name}: torch cannot give this tensor's memory ({t.layout}, {t.dtype}); "
                                   "send t.dequantize() / t.to_dense()")
    shape = tuple(t.shape)
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    try:
        arr = t.numpy()
    except TypeError:  # a type numpy lacks (complex32): its bits through a same-size integer
        container = _same_size_int(torch, t.element_size())
        if container is None:
            raise InvalidArgumentError(f"{name}: torch dtype {t.dtype} cannot be read as bytes") from None
        arr = t.view(container).numpy()
    return arr.reshape(-1).view(np.uint8), str(t.dtype).replace("torch.", ""), shape


def from_raw_bytes(data: Any, dtype_name: str, shape: Tuple[int, ...], name: str) -> Any:
    """What raw_bytes sent, as a torch tensor of its dtype over the received bytes (no copy)."""
    torch = sys.modules.get("torch")
    if torch is None:
        import torch  # noqa: F811 - the sender sent torch tensors
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        from ._errors import UnsupportedError

        raise UnsupportedError(f"received tensor '{name}' is a torch.{dtype_name} tensor, which this torch "
                               f"({torch.__version__}) does not have")
    if data is None or len(data) == 0:
        return torch.empty(shape, dtype=dtype)
    flat = torch.from_numpy(data)
    size = torch.empty((), dtype=dtype).element_size()
    container = _same_size_int(torch, size)
    if dtype.is_complex and container is not None and dtype != torch.complex64:
        flat = flat.view(container)  # complex32: torch views bytes as it only through an integer
    return flat.view(dtype).reshape(shape)


def from_numpy_any(array: Any) -> Any:
    """torch.from_numpy(array) (no copy), or the array itself where torch has no such type."""
    torch = sys.modules.get("torch")
    if torch is None:
        import torch  # noqa: F811 - the caller asked for torch results
    try:
        return torch.from_numpy(array)
    except TypeError:
        return array


def zeros(source: Any, shape: Tuple[int, ...]) -> Any:
    """A zeroed CPU tensor of shape with source's torch dtype (a container keeps its meaning:
    int16 carrying bfloat16 stays int16, as the caller's dtype= says)."""
    return sys.modules["torch"].zeros(shape, dtype=source.dtype)


def result_dtype(dtype: DType) -> Any:
    """The torch dtype a received tensor of pstate dtype arrives as (None: torch has none)."""
    tensor_type()
    return _RESULT.get(dtype)


def from_array(array: Any, dtype: DType) -> Any:
    """A torch tensor over a numpy array's memory (no copy) carrying pstate dtype dtype; the array
    itself where torch has no such type (uint32/uint64 on torch < 2.3)."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: F811 - the caller asked for torch results
        except ImportError:
            raise InvalidArgumentError("tensors='torch' needs torch (Debian: python3-torch)") from None
    target = result_dtype(dtype)
    if target is None:
        return array
    if target in (torch.bfloat16,):
        return torch.from_numpy(array.view("int16")).view(torch.bfloat16)
    if dtype in (DType.FP8_E4M3, DType.FP8_E5M2) and target is not torch.uint8:
        return torch.from_numpy(array.view("uint8")).view(target)
    return torch.from_numpy(array)
