"""pylance's ``lance.arrow`` extension types: ``lance.bfloat16`` values.

A bfloat16 is the top half of a float32 (2 bytes, little-endian), stored in
``fixed_size_binary(2)`` under the extension name ``lance.bfloat16``; datasets and files
keep the name in the field metadata (see :mod:`lance_format.schema`), so these columns read
back as :class:`BFloat16Type`.  JSON columns need no class here: pylance 14 writes
``pyarrow.json_()`` (``arrow.json``) text and stores it as ``lance.json`` JSONB, which
:mod:`lance_format.extensions` converts both ways.

The type registers itself with pyarrow unless pylance has already registered its own
(a process may load both); either class reads the same bytes.
"""

from __future__ import annotations

import decimal
import functools
import struct
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - ``pa.compute`` for cast

from .schema import BFLOAT16_EXT_NAME


def _bits(values: np.ndarray) -> np.ndarray:
    """float32 values to bfloat16 bit patterns, rounding to nearest even (NaN stays NaN)."""
    f32 = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((f32.astype(np.uint64) + 0x7FFF + ((f32 >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (f32 & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((f32 >> 16) | 0x0040).astype(np.uint16), rounded)


def _shortest(value: np.float32) -> str:
    """The fewest significant digits that read back as ``value`` (a float32), ties
    rounded half up, written without an exponent: how pylance prints a bfloat16."""
    exact = decimal.Decimal(float(value))
    if exact == 0:
        return "-0" if np.signbit(value) else "0"
    for digits in range(1, 18):
        exp = exact.adjusted() - digits + 1
        candidate = exact.quantize(decimal.Decimal(1).scaleb(exp), rounding=decimal.ROUND_HALF_UP)
        if np.float32(float(candidate)) == value:
            text = format(candidate, "f")
            return text.rstrip("0").rstrip(".") if "." in text else text
    return format(exact, "f")


@functools.total_ordering
class BFloat16:
    """One bfloat16 value (what a :class:`BFloat16Array` element gives back)."""

    __slots__ = ("_bits",)

    def __init__(self, value: float):
        if isinstance(value, (str, bytes)) or not isinstance(value, (int, float, np.number)):
            raise TypeError(f"must be real number, not {type(value).__name__}")
        with np.errstate(over="ignore"):
            self._bits = int(_bits(np.array([value], dtype=np.float64).astype(np.float32))[0])

    @classmethod
    def from_bytes(cls, data: bytes) -> BFloat16:
        """From its 2 little-endian bytes."""
        if len(data) != 2:
            raise ValueError(f"a bfloat16 is 2 bytes, got {len(data)}")
        out = cls.__new__(cls)
        out._bits = struct.unpack("<H", bytes(data))[0]
        return out

    def as_float(self) -> float:
        return float(np.array([self._bits << 16], dtype=np.uint32).view(np.float32)[0])

    def __str__(self) -> str:
        value = np.float32(self.as_float())
        if not np.isfinite(value):
            return {True: "inf", False: "-inf"}[bool(value > 0)] if np.isinf(value) else "NaN"
        return _shortest(value)

    __repr__ = __str__

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, BFloat16):
            return self.as_float() == other.as_float()
        return NotImplemented

    def __lt__(self, other: BFloat16) -> bool:
        if not isinstance(other, BFloat16):
            return NotImplemented
        return self.as_float() < other.as_float()

    def __hash__(self) -> int:
        return hash(self.as_float())

    def __float__(self) -> float:
        return self.as_float()


class BFloat16Array(pa.ExtensionArray):
    """An Arrow array of bfloat16 values."""

    def __str__(self) -> str:
        # the values as pylance prints them (shortest decimal), not their two raw bytes
        items = ["None" if v is None else str(v) for v in self.to_pylist()]
        return "[\n" + ",\n".join(f"  {v}" for v in items) + "\n]" if items else "[]"

    def to_numpy(self, zero_copy_only: bool = False):
        """As an ``ml_dtypes.bfloat16`` array (no nulls allowed)."""
        if self.null_count > 0:
            raise ValueError("Cannot convert null values to numpy")
        from ml_dtypes import bfloat16

        return np.frombuffer(self.storage.buffers()[1], dtype=bfloat16)[
            self.offset : self.offset + len(self)
        ]

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> BFloat16Array:
        """From a 1-D ``ml_dtypes.bfloat16`` array."""
        from ml_dtypes import bfloat16

        if array.dtype != bfloat16:
            raise ValueError("Cannot convert non-bfloat16 values to BFloat16Array")
        if array.ndim != 1:
            raise ValueError("Cannot convert multi-dimensional array to BFloat16Array")
        data = pa.py_buffer(array.tobytes())
        return pa.Array.from_buffers(BFloat16Type(), len(array), [None, data])


class BFloat16Scalar(pa.ExtensionScalar):
    def as_py(self, **kwargs) -> BFloat16 | None:
        if self.value is None:
            return None
        return BFloat16.from_bytes(self.value.as_py())

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, BFloat16):
            return self.as_py() == other
        if isinstance(other, BFloat16Scalar):
            return self.as_py() == other.as_py()
        return False

    __hash__ = pa.ExtensionScalar.__hash__


class BFloat16Type(pa.ExtensionType):
    def __init__(self):
        pa.ExtensionType.__init__(self, pa.binary(2), BFLOAT16_EXT_NAME)

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized) -> BFloat16Type:
        return BFloat16Type()

    def __arrow_ext_class__(self):
        return BFloat16Array

    def __arrow_ext_scalar_class__(self):
        return BFloat16Scalar


def bfloat16_array(values: Iterable[float | None]) -> BFloat16Array:
    """An Arrow bfloat16 array from Python numbers (None for null), rounded as pylance
    rounds (through float32, to nearest even)."""
    values = list(values)
    for v in values:
        if v is not None and (
            isinstance(v, (str, bytes)) or not isinstance(v, (int, float, np.number))
        ):
            raise TypeError(f"argument 'values': must be real number, not {type(v).__name__}")
    valid = np.array([v is not None for v in values], dtype=bool)
    floats = np.array([0.0 if v is None else float(v) for v in values], dtype=np.float64)
    with np.errstate(over="ignore"):  # beyond float32's range is infinity, as in pylance
        data = _bits(floats.astype(np.float32)).astype("<u2").tobytes()
    storage = pa.Array.from_buffers(
        pa.binary(2),
        len(values),
        [None if valid.all() else pa.array(valid).buffers()[1], pa.py_buffer(data)],
    )
    return pa.ExtensionArray.from_storage(BFloat16Type(), storage)


def cast(arr: pa.Array, target: pa.DataType | str, *args: Any, **kwargs: Any) -> pa.Array:
    """pylance's ``lance.arrow.cast``: ``pyarrow.compute.cast`` that also converts between
    floats and bfloat16 (``"bfloat16"`` or :class:`BFloat16Type`), also as the values of
    fixed-size lists."""
    if isinstance(target, str) and target == "bfloat16":
        target = BFloat16Type()
    if pa.types.is_fixed_size_list(arr.type) and isinstance(target, pa.DataType):
        if pa.types.is_fixed_size_list(target) and (
            _is_bf16(target.value_type) or _is_bf16(arr.type.value_type)
        ):
            values = cast(arr.values, target.value_type)
            return pa.FixedSizeListArray.from_arrays(values, target.list_size, mask=arr.is_null())
    if isinstance(target, pa.DataType) and _is_bf16(target):
        if not pa.types.is_floating(arr.type):
            raise TypeError(f"cannot cast {arr.type} to bfloat16")
        return bfloat16_array(arr.to_pylist())
    if _is_bf16(arr.type):
        if not (isinstance(target, pa.DataType) and pa.types.is_floating(target)):
            raise TypeError(f"cannot cast bfloat16 to {target}")
        storage = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
        bits = np.frombuffer(storage.buffers()[1], dtype="<u2")[
            storage.offset : storage.offset + len(storage)
        ]
        floats = (bits.astype(np.uint32) << 16).view(np.float32)
        return pa.array(floats, mask=np.asarray(arr.is_null())).cast(target)
    return pa.compute.cast(arr, target, *args, **kwargs)


def _is_bf16(t: pa.DataType) -> bool:
    return isinstance(t, pa.BaseExtensionType) and t.extension_name == BFLOAT16_EXT_NAME


def _register() -> None:
    try:
        pa.register_extension_type(BFloat16Type())
    except pa.ArrowKeyError:
        pass  # pylance (or an earlier import) registered lance.bfloat16 already


_register()

__all__ = [
    "BFloat16",
    "BFloat16Array",
    "BFloat16Scalar",
    "BFloat16Type",
    "bfloat16_array",
    "cast",
]
