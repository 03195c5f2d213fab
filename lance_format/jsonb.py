"""JSONB: the binary JSON that ``lance.json`` columns store (the ``jsonb`` crate's layout).

pylance stores ``arrow.json`` text as JSONB in ``large_binary`` and turns it back into
compact JSON text when a dataset is read, so both directions must match it value for value:

* A value is a container: a big-endian u32 header (type in the top 3 bits: array 0x80,
  object 0x40, scalar 0x20; element count below) followed by one big-endian u32 *JEntry*
  per element (type in bits 28-30, payload length below) and then the payloads in order.
  An object lists all its key entries, then all its value entries, then the key bytes and
  the value payloads; keys are sorted by their UTF-8 bytes and must be unique.
* A nested array or object is a payload whose JEntry has the container type.
* Numbers start with a tag byte: zero, NaN, +inf, -inf, a signed or unsigned integer in
  the fewest big-endian bytes (1, 2, 4 or 8), or a big-endian f64.

Text comes back compact (no spaces), strings escaped as serde_json does, floats in their
shortest round-trip digits, written out in full between 1e-5 and 1e16 and with an exponent
otherwise, and NaN or infinities as ``null``.
"""

from __future__ import annotations

import json
import math
import struct

import pyarrow as pa

from .errors import CorruptFileError, InvalidArgumentError

ARRAY = 0x80000000
OBJECT = 0x40000000
SCALAR = 0x20000000
HEADER_TYPE_MASK = 0xE0000000
HEADER_COUNT_MASK = 0x1FFFFFFF

NULL = 0x00000000
STRING = 0x10000000
NUMBER = 0x20000000
FALSE = 0x30000000
TRUE = 0x40000000
CONTAINER = 0x50000000
ENTRY_TYPE_MASK = 0x70000000
ENTRY_LENGTH_MASK = 0x0FFFFFFF

NUMBER_ZERO = 0x00
NUMBER_NAN = 0x10
NUMBER_INF = 0x20
NUMBER_NEG_INF = 0x30
NUMBER_INT = 0x40
NUMBER_UINT = 0x50
NUMBER_FLOAT = 0x60

_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)
_INT_WIDTHS = ((1, "b"), (2, "h"), (4, "i"), (8, "q"))
_UINT_WIDTHS = ((1, "B"), (2, "H"), (4, "I"), (8, "Q"))


# -- text -> JSONB ---------------------------------------------------------------------------


class _Int(int):
    """An integer literal as written (no fraction, no exponent): stored as an integer."""


def _parse_int(text: str) -> object:
    value = int(text)
    if _I64_MIN <= value <= _U64_MAX:
        return _Int(value)
    return float(text)  # out of the 64-bit range: a float, as the jsonb parser does


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate object attribute {key!r}")
            seen.add(key)
    return out


def encode(text: str) -> bytes:
    """The JSONB bytes of one JSON text; InvalidArgumentError when it is not JSON."""
    try:
        value = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=float,
            object_pairs_hook=_unique_keys,
            strict=False,  # raw control characters in strings are accepted, as by pylance
        )
    except (ValueError, RecursionError) as exc:
        raise InvalidArgumentError(f"not valid JSON ({exc}): {_preview(text)}") from None
    out = bytearray()
    kind, payload = _entry(value)
    if kind == CONTAINER:
        out += payload
    else:
        out += struct.pack(">II", SCALAR, kind | len(payload))
        out += payload
    return bytes(out)


def _preview(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _entry(value: object) -> tuple[int, bytes]:
    """(JEntry type, payload) of a parsed value; containers carry their own header."""
    if value is None:
        return NULL, b""
    if value is True:
        return TRUE, b""
    if value is False:
        return FALSE, b""
    if isinstance(value, str):
        return STRING, _utf8(value)
    if isinstance(value, _Int):
        return NUMBER, _integer(int(value))
    if isinstance(value, float):
        return NUMBER, _float(value)
    if isinstance(value, list):
        return CONTAINER, _container(ARRAY, [], [_entry(v) for v in value])
    if isinstance(value, dict):
        keys = sorted(((_utf8(k), v) for k, v in value.items()), key=lambda kv: kv[0])
        return CONTAINER, _container(OBJECT, [k for k, _ in keys], [_entry(v) for _, v in keys])
    raise InvalidArgumentError(f"cannot store {type(value).__name__} as JSON")  # unreachable


def _utf8(text: str) -> bytes:
    # a lone surrogate escape (``"\ud800"``) is kept as its escape text, as jsonb does
    return text.encode("utf-8", "backslashreplace")


def _integer(value: int) -> bytes:
    if value == 0:
        return bytes([NUMBER_ZERO])
    if value < 0:
        for width, code in _INT_WIDTHS:
            if value >= -(1 << (8 * width - 1)):
                return bytes([NUMBER_INT]) + struct.pack(">" + code, value)
    for width, code in _UINT_WIDTHS:
        if value < 1 << (8 * width):
            return bytes([NUMBER_UINT]) + struct.pack(">" + code, value)
    raise InvalidArgumentError(f"integer {value} does not fit 64 bits")  # _parse_int prevents


def _float(value: float) -> bytes:
    if math.isnan(value):
        return bytes([NUMBER_NAN])
    if math.isinf(value):
        return bytes([NUMBER_INF if value > 0 else NUMBER_NEG_INF])
    return bytes([NUMBER_FLOAT]) + struct.pack(">d", value)


def _container(kind: int, keys: list[bytes], values: list[tuple[int, bytes]]) -> bytes:
    count = len(values)
    if count > HEADER_COUNT_MASK:
        raise InvalidArgumentError(f"a JSON container of {count} elements is too large")
    payloads = keys + [p for _, p in values]
    body = b"".join(payloads)
    if len(body) > ENTRY_LENGTH_MASK:  # then one payload may not fit its entry's length
        too_big = max(len(p) for p in payloads)
        if too_big > ENTRY_LENGTH_MASK:
            raise InvalidArgumentError(f"a JSON value of {too_big} bytes is too large")
    entries = [STRING | len(k) for k in keys] + [t | len(p) for t, p in values]
    return struct.pack(f">I{len(entries)}I", kind | count, *entries) + body


# -- JSONB -> text ---------------------------------------------------------------------------


def decode(data: bytes) -> str:
    """Compact JSON text of one JSONB value, as pylance prints it."""
    out: list[str] = []
    try:
        end = _write_container(memoryview(data), 0, len(data), out)
    except (struct.error, UnicodeDecodeError, IndexError, RecursionError) as exc:
        raise CorruptFileError(f"invalid JSONB value: {exc}") from None
    if end != len(data):
        raise CorruptFileError(f"invalid JSONB value: {len(data) - end} trailing bytes")
    return "".join(out)


def _write_container(buf: memoryview, pos: int, end: int, out: list[str]) -> int:
    """Append the text of the container at ``pos``; returns where its payloads end."""
    if end - pos < 4:
        raise CorruptFileError("invalid JSONB value: truncated container header")
    (header,) = struct.unpack_from(">I", buf, pos)
    kind, count = header & HEADER_TYPE_MASK, header & HEADER_COUNT_MASK
    pos += 4
    if kind == SCALAR:
        count = 1
    elif kind == OBJECT:
        count *= 2
    elif kind != ARRAY:
        raise CorruptFileError(f"invalid JSONB value: unknown container type {kind:#x}")
    if count * 4 > end - pos:
        raise CorruptFileError(f"invalid JSONB value: {count} entries do not fit")
    entries = struct.unpack_from(f">{count}I", buf, pos)
    pos += 4 * count
    payloads = []
    for e in entries:
        length = e & ENTRY_LENGTH_MASK
        if length > end - pos:
            raise CorruptFileError("invalid JSONB value: a payload runs past the value")
        payloads.append((e & ENTRY_TYPE_MASK, pos, pos + length))
        pos += length
    if kind == SCALAR:
        _write_scalar(buf, *payloads[0], out)
    elif kind == ARRAY:
        out.append("[")
        for i, item in enumerate(payloads):
            if i:
                out.append(",")
            _write_scalar(buf, *item, out)
        out.append("]")
    else:
        half = count // 2
        out.append("{")
        for i in range(half):
            key_type, ks, ke = payloads[i]
            if key_type != STRING:
                raise CorruptFileError("invalid JSONB value: an object key is not a string")
            if i:
                out.append(",")
            out.append(_quote(bytes(buf[ks:ke]).decode("utf-8")))
            out.append(":")
            kind, start, end = payloads[half + i]
            _write_scalar(buf, kind, start, end, out)
        out.append("}")
    return pos


def _write_scalar(buf: memoryview, kind: int, start: int, end: int, out: list[str]) -> None:
    if kind == NULL:
        out.append("null")
    elif kind == TRUE:
        out.append("true")
    elif kind == FALSE:
        out.append("false")
    elif kind == STRING:
        out.append(_quote(bytes(buf[start:end]).decode("utf-8")))
    elif kind == NUMBER:
        out.append(_number_text(bytes(buf[start:end])))
    elif kind == CONTAINER:
        if _write_container(buf, start, end, out) != end:
            raise CorruptFileError("invalid JSONB value: a container's size is inconsistent")
    else:
        raise CorruptFileError(f"invalid JSONB value: unknown entry type {kind:#x}")


# Python's escaping is serde_json's: \" \\ \b \f \n \r \t, other controls as \u00xx
_quote = json.encoder.encode_basestring


def _number_text(payload: bytes) -> str:
    if not payload:
        raise CorruptFileError("invalid JSONB value: empty number")
    tag, body = payload[0], payload[1:]
    if tag == NUMBER_ZERO and not body:
        return "0"
    if tag in (NUMBER_NAN, NUMBER_INF, NUMBER_NEG_INF) and not body:
        return "null"
    if tag in (NUMBER_INT, NUMBER_UINT) and len(body) in (1, 2, 4, 8):
        return str(int.from_bytes(body, "big", signed=tag == NUMBER_INT))
    if tag == NUMBER_FLOAT and len(body) == 8:
        return format_float(struct.unpack(">d", body)[0])
    raise CorruptFileError(f"invalid JSONB value: number tag {tag:#x} with {len(body)} bytes")


def format_float(value: float) -> str:
    """A finite float as the jsonb crate prints it: shortest round-trip digits, positional
    for decimal exponents -5..15 (``.0`` added to whole numbers), else ``d.ddde±x``.

    That is Python's ``repr`` except that ``repr`` turns to an exponent one decade
    earlier (below 1e-4) and pads the exponent to two digits."""
    if not math.isfinite(value):
        return "null"
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    if not e:
        return text
    power = int(exponent)
    if power == -5:
        minus = "-" if mantissa.startswith("-") else ""
        return f"{minus}0.0000{mantissa.lstrip('-').replace('.', '')}"
    return f"{mantissa}e{'+' if power > 0 else '-'}{abs(power)}"


# -- arrays ----------------------------------------------------------------------------------


def encode_array(arr: pa.Array) -> pa.Array:
    """JSON text (``arrow.json``, string or large_string) as a ``large_binary`` of JSONB."""
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    values = arr.to_pylist()
    encoded = [None if v is None else encode(v) for v in values]
    return pa.array(encoded, pa.large_binary())


def decode_array(arr: pa.Array) -> pa.Array:
    """``large_binary`` JSONB values as ``arrow.json`` text (string storage), as pylance
    returns them."""
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    texts = [decode(v) if v is not None else None for v in arr.to_pylist()]
    return pa.ExtensionArray.from_storage(pa.json_(pa.string()), pa.array(texts, pa.string()))
