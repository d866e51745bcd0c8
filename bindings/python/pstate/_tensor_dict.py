"""Tensor dicts on numpy and torch: from a dict of arrays or tensors to the C API's (name,
dtype, shape, data) list, and from what the C collector received back to a dict of numpy arrays
or torch tensors.

Sending: every value is a numpy array (or numpy scalar) or a torch CPU tensor; it travels
C-contiguous and in native byte order (copied first only when it is not) with its shape, 0-d and
0-size ones included. Its pstate dtype comes from the numpy or torch dtype (int8/uint8/int32/
uint32/int64/uint64/float16/float32/float64, and for torch bfloat16 and, where torch has them,
float8_e4m3fn/float8_e5m2). numpy has no bfloat16 or fp8: in numpy those travel in same-size
containers named with ``dtypes={key: DType.BFLOAT16}`` (a uint16/int16/float16 array) or
``DType.FP8_E4M3`` / ``DType.FP8_E5M2`` (a uint8/int8 array). Other dtypes (bool, int16 without
a dtypes entry, complex, object, ...) are refused: pstate has no such element type. A torch
tensor is sent detached (sending only reads it).

Receiving: the C allocation callback (bindings/pstate.i) mallocs each tensor while the GIL is
released; here every block becomes the buffer of a numpy array, without a copy, freed with the
array, and with ``tensors="torch"`` a torch tensor over that array (torch.bfloat16 for bfloat16;
fp8 as torch's fp8 types where torch has them, else uint8; uint32/uint64 stay numpy arrays where
torch has no such type). The result is a TensorDict: a plain dict plus ``.dtypes`` (key -> pstate
DType), so that a bfloat16 tensor that arrives in a uint16 numpy array keeps its meaning, and the
dict can be sent on unchanged (send_tensor_dict / broadcast_tensor_dict read ``.dtypes``).
"""
from __future__ import annotations

import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _torch
from ._buffers import resolve
from ._enums import DType, coerce
from ._errors import InvalidArgumentError, UnsupportedError

#: The numpy dtype each pstate dtype arrives as (containers for bfloat16 and fp8).
NUMPY_DTYPE_NAMES: Dict[DType, str] = {
    DType.INT8: "int8", DType.UINT8: "uint8", DType.INT32: "int32", DType.UINT32: "uint32",
    DType.INT64: "int64", DType.UINT64: "uint64", DType.FLOAT16: "float16", DType.FLOAT32: "float32",
    DType.FLOAT64: "float64", DType.BFLOAT16: "uint16", DType.FP8_E4M3: "uint8", DType.FP8_E5M2: "uint8",
}

Entry = Tuple[str, int, Tuple[int, ...], Any]


class TensorDict(Dict[str, Any]):
    """A received tensor dict: ``{key: numpy.ndarray}`` (``{key: torch.Tensor}`` with
    tensors="torch") in the sender's order, plus ``dtypes`` (``{key: pstate.DType}``) giving each
    tensor's pstate element type (in numpy bfloat16 arrives as a uint16 array, fp8 as uint8). Keys
    added later without a ``dtypes`` entry are sent with the dtype of their array or tensor."""

    def __init__(self, *args: Any, dtypes: Optional[Mapping[str, DType]] = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.dtypes: Dict[str, DType] = dict(dtypes or {})


def numpy() -> Any:
    try:
        import numpy as np
    except ImportError:
        raise InvalidArgumentError("tensor dicts need numpy (Debian: python3-numpy)") from None
    return np


def tensors_kind(tensors: Any, where: str) -> str:
    """The tensors= argument of the receiving calls: "numpy" or "torch"."""
    if tensors not in ("numpy", "torch"):
        raise InvalidArgumentError(f"{where}: tensors must be \"numpy\" or \"torch\", got {tensors!r}")
    return str(tensors)


class Refused(InvalidArgumentError):
    """A dict the binding cannot send: key names the tensor, reason says why (both go into the
    refusal the peers get); the detail adds where."""

    def __init__(self, key: str, reason: str, where: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.key = key
        self.reason = reason


def _array(np: Any, key: str, value: Any, where: str) -> Tuple[Any, Optional[DType]]:
    """value as a C-contiguous, native-endian ndarray (no copy when it already is one), and the
    pstate dtype it carries when its numpy dtype does not say (a torch bfloat16/fp8 tensor)."""
    if _torch.is_tensor(value):
        try:
            return _torch.as_numpy(value, f"tensor '{key}'")
        except InvalidArgumentError as e:
            raise Refused(key, e.detail, where) from None
        except (RuntimeError, TypeError, ValueError) as e:  # what torch raises (a sparse tensor has no numpy())
            raise Refused(key, f"tensor '{key}': torch cannot give its memory ({value.layout}): {e}", where) from None
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise Refused(key, f"tensor '{key}' is a {type(value).__name__}, not a numpy array or torch tensor "
                           "(send other values with broadcast_object / send_object)", where)
    if value.dtype.kind == "b":
        raise Refused(key, f"tensor '{key}' is a bool array: pstate has no bool dtype; "
                           "send value.view(np.uint8)", where)
    if not value.dtype.isnative:
        value = value.astype(value.dtype.newbyteorder("="))
    if not value.flags.c_contiguous:
        value = value.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into 1-d)
    return value, None


def encode(tensor_dict: Optional[Mapping[str, Any]], dtypes: Optional[Mapping[str, Any]], where: str) -> List[Entry]:
    """The (name, dtype, shape, array) list of the C typemap for a dict; raises Refused (an
    InvalidArgumentError) naming the first tensor it cannot send."""
    np = numpy()
    if not isinstance(tensor_dict, Mapping):
        raise Refused("?", f"expected a dict of numpy arrays or torch tensors, got {type(tensor_dict).__name__}", where)
    chosen: Dict[str, Any] = dict(getattr(tensor_dict, "dtypes", None) or {})
    chosen.update(dtypes or {})
    for key in dtypes or {}:
        if key not in tensor_dict:
            raise Refused(str(key), f"dtypes names '{key}', which is not a key of the dict", where)
    entries: List[Entry] = []
    for key, value in tensor_dict.items():
        if not isinstance(key, str):
            raise Refused(repr(key), f"key {key!r} is not a str", where)
        arr, carried = _array(np, key, value, where)
        dtype = chosen.get(key, carried)
        try:
            if dtype is not None:
                dtype = coerce(DType, dtype, f"dtypes['{key}']")
            buf = resolve(arr, f"tensor '{key}'", writable=False, dtype=dtype)
        except InvalidArgumentError as e:
            hint = " (name bfloat16/fp8 containers with dtypes={key: DType.BFLOAT16, ...})" if dtype is None else ""
            raise Refused(key, e.detail + hint, where) from None
        entries.append((key, int(buf.dtype), tuple(arr.shape), arr))
    return entries


def refusal(refused: Refused) -> List[Entry]:
    """A one-tensor dict the library refuses on every rank (dtype -1), named so that the peers'
    error says what this rank's binding refused: the ranks stay in step instead of waiting. The
    name starts with "refused by the sender's Python binding: ", which every binding's error
    text reduces to the reason alone on the receivers (pstate._errors.pythonic, Go's and Rust's
    counterparts)."""
    return [(f"refused by the sender's Python binding: {refused.reason}", -1, (), None)]


def decode(items: List[Tuple[str, int, Tuple[int, ...], Any, int]], tensors: str = "numpy") -> TensorDict:
    """What ReceivedDict.take() returned, as a TensorDict of numpy arrays, or of torch tensors when
    tensors is "torch" (bfloat16 as torch.bfloat16; a type torch lacks stays numpy), no copies."""
    np = sys.modules.get("numpy") or numpy()
    out = TensorDict()
    for name, dtype, shape, owner, _device in items:
        try:
            kind = DType(dtype)
        except ValueError:
            raise UnsupportedError(f"received tensor '{name}' has dtype {dtype}, which this binding does not know "
                                   "(a newer library?)") from None
        np_dtype = np.dtype(NUMPY_DTYPE_NAMES[kind])
        if owner is None:  # 0 bytes: nothing was allocated
            arr = np.zeros(shape, dtype=np_dtype)
        else:
            arr = np.frombuffer(owner, dtype=np_dtype).reshape(shape)
        out[name] = _torch.from_array(arr, kind) if tensors == "torch" else arr
        out.dtypes[name] = kind
    return out
