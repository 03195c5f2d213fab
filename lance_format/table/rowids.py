"""Stable row ids: the ``RowIdSequence`` of a fragment (docs/format/table.md).

Without stable row ids a row's id is its address ``fragment_id << 32 | physical_offset``.
With them (feature flag 2) every fragment carries the u64 ids of its physical rows, in row
order, as a protobuf ``RowIdSequence`` of segments, each one of:

* ``range``: ``[start, end)``;
* ``range_with_holes``: ``[start, end)`` minus a sorted list of holes;
* ``range_with_bitmap``: the values of ``[start, end)`` whose bit is set (LSB-first bytes);
* ``sorted_array`` / ``array``: explicit values as an ``EncodedU64Array`` (u16 or u32
  offsets from a base when the value spread allows, else raw u64, all little-endian).

Deleted rows keep their ids in the sequence; the deletion file hides them.  The sequence is
stored inline (``DataFragment.inline_row_ids``; pylance 14 always does this) or in a byte
range of an external file (``external_row_ids``, path relative to the dataset root).

Encoding follows pylance so our bytes match its bytes where the same segments are chosen:
a segment of sorted ids becomes a range when it has no gaps, else whichever of
holes (24 + 4 bytes per hole), bitmap (24 + one bit per slot) or sorted array (24 + 2 bytes
per id) pylance estimates smallest, ties in that order; unsorted ids become an array; a
range directly continuing a previous range is merged into it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from google.protobuf.message import DecodeError

from .. import storage
from ..errors import CorruptFileError, InvalidArgumentError, LanceError
from ..pb import rowids_pb2, table_pb2

U64_MAX = (1 << 64) - 1
# A fragment addresses its rows with u32 offsets, so no sequence can be longer; used to
# refuse corrupt lengths before allocating.
MAX_SEQUENCE_LEN = 1 << 32

_EMPTY = np.zeros(0, dtype=np.uint64)


# -- decoding -------------------------------------------------------------------------------


def decode_row_ids(data: bytes, *, max_len: int = MAX_SEQUENCE_LEN) -> np.ndarray:
    """The uint64 row ids of a serialized ``RowIdSequence``, in row order."""
    parts = decode_row_id_segments(data, max_len=max_len)
    if not parts:
        return _EMPTY.copy()
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def decode_row_id_segments(data: bytes, *, max_len: int = MAX_SEQUENCE_LEN) -> list[np.ndarray]:
    """The ids of each segment of a serialized ``RowIdSequence`` (segment boundaries kept,
    which compaction-like rewrites need to reproduce pylance's bytes)."""
    seq = rowids_pb2.RowIdSequence()
    try:
        seq.ParseFromString(bytes(data))
    except DecodeError as exc:
        raise CorruptFileError(f"row id sequence is not a valid protobuf: {exc}") from exc
    budget = max_len
    out = []
    for i, seg in enumerate(seq.segments):
        try:
            values = decode_segment(seg, max_len=budget)
        except LanceError as exc:
            raise CorruptFileError(f"row id segment {i}: {exc.problem}") from None
        budget -= len(values)
        out.append(values)
    return out


def decode_segment(seg: rowids_pb2.U64Segment, *, max_len: int = MAX_SEQUENCE_LEN) -> np.ndarray:
    """The uint64 values of one ``U64Segment`` (also used by row version sequences)."""
    kind = seg.WhichOneof("segment")
    if kind == "range":
        start, end = _checked_range(seg.range.start, seg.range.end, max_len)
        return np.arange(start, end, dtype=np.uint64)
    if kind == "range_with_holes":
        rh = seg.range_with_holes
        start, end = _checked_range(rh.start, rh.end, max_len + _encoded_len(rh.holes))
        if not rh.HasField("holes"):
            raise CorruptFileError("range with holes has no holes array")
        holes = decode_encoded_array(rh.holes, max_len=end - start)
        if len(holes) and (holes.min() < start or holes.max() >= end):
            raise CorruptFileError("hole outside its range")
        keep = np.ones(end - start, dtype=bool)
        keep[(holes - np.uint64(start)).astype(np.int64)] = False
        if end - start - np.count_nonzero(~keep) > max_len:
            raise CorruptFileError(f"segment longer than {max_len} ids")
        return np.flatnonzero(keep).astype(np.uint64) + np.uint64(start)
    if kind == "range_with_bitmap":
        rb = seg.range_with_bitmap
        n_bits = 8 * len(rb.bitmap)
        start, end = _checked_range(rb.start, rb.end, n_bits)
        if end - start > n_bits:  # pragma: no cover - _checked_range caps at n_bits
            raise CorruptFileError("bitmap shorter than its range")
        bits = np.unpackbits(np.frombuffer(rb.bitmap, dtype=np.uint8), bitorder="little")
        present = np.flatnonzero(bits[: end - start])
        if len(present) > max_len:
            raise CorruptFileError(f"segment longer than {max_len} ids")
        return present.astype(np.uint64) + np.uint64(start)
    if kind in ("sorted_array", "array"):
        values = decode_encoded_array(getattr(seg, kind), max_len=max_len)
        if kind == "sorted_array" and len(values) > 1 and (np.diff(values) == 0).any():
            raise CorruptFileError("sorted array has duplicate ids")
        return values
    raise CorruptFileError("row id segment has no kind set")


def decode_encoded_array(arr: rowids_pb2.EncodedU64Array, *, max_len: int) -> np.ndarray:
    """The values of an ``EncodedU64Array`` (base + little-endian u16/u32 offsets, or u64)."""
    kind = arr.WhichOneof("array")
    if kind == "u64_array":
        raw, width, base = arr.u64_array.values, 8, 0
    elif kind == "u32_array":
        raw, width, base = arr.u32_array.offsets, 4, arr.u32_array.base
    elif kind == "u16_array":
        raw, width, base = arr.u16_array.offsets, 2, arr.u16_array.base
    else:
        raise CorruptFileError("encoded u64 array has no kind set")
    if len(raw) % width:
        raise CorruptFileError(f"{kind} of {len(raw)} bytes is not a whole number of values")
    if len(raw) // width > max_len:
        raise CorruptFileError(f"array longer than {max_len} values")
    values = np.frombuffer(raw, dtype=f"<u{width}").astype(np.uint64)
    if base:
        if len(values) and int(values.max()) > U64_MAX - base:
            raise CorruptFileError("array value overflows u64")
        values += np.uint64(base)
    return values


def _encoded_len(arr: rowids_pb2.EncodedU64Array) -> int:
    kind = arr.WhichOneof("array")
    if kind == "u64_array":
        return len(arr.u64_array.values) // 8
    if kind == "u32_array":
        return len(arr.u32_array.offsets) // 4
    if kind == "u16_array":
        return len(arr.u16_array.offsets) // 2
    return 0


def _checked_range(start: int, end: int, max_len: int) -> tuple[int, int]:
    if end < start:
        raise CorruptFileError(f"range end {end} before start {start}")
    if end - start > max_len:
        raise CorruptFileError(f"range of {end - start} ids exceeds the limit {max_len}")
    return start, end


# -- encoding -------------------------------------------------------------------------------


def encode_row_ids(row_ids: np.ndarray) -> bytes:
    """Serialize ids as one segment chosen like pylance (``RowIdSequence::from(&[u64])``):
    a contiguous run becomes a range, a sorted set with gaps holes/bitmap/sorted array,
    an unsorted set an array.  Empty input gives an empty sequence."""
    return encode_row_id_segments([row_ids])


def encode_row_id_segments(pieces: Iterable[np.ndarray]) -> bytes:
    """Serialize ids given as pieces, one segment per non-empty piece (each chosen as in
    :func:`encode_row_ids`), merging a range into the previous one when they touch, as
    pylance's ``RowIdSequence::extend`` does."""
    seq = rowids_pb2.RowIdSequence()
    for piece in pieces:
        values = _as_ids(piece)
        if not len(values):
            continue
        seg = encode_segment(values)
        if seq.segments and seg.WhichOneof("segment") == "range":
            last = seq.segments[-1]
            if last.WhichOneof("segment") == "range" and last.range.end == seg.range.start:
                last.range.end = seg.range.end
                continue
        seq.segments.append(seg)
    return seq.SerializeToString()


def encode_segment(values: np.ndarray) -> rowids_pb2.U64Segment:
    """One ``U64Segment`` for unique ids ``values``, with pylance's choice of kind."""
    values = _as_ids(values)
    seg = rowids_pb2.U64Segment()
    n = len(values)
    if n == 0:
        seg.range.SetInParent()  # pylance's empty segment is range 0..0
        return seg
    if n > 1 and (values[1:] < values[:-1]).any():
        if len(np.unique(values)) != n:
            raise InvalidArgumentError("row ids of a fragment must be unique")
        _fill_encoded_array(seg.array, values)
        return seg
    if n > 1 and (values[1:] == values[:-1]).any():
        raise InvalidArgumentError("row ids of a fragment must be unique")
    lo, hi = int(values[0]), int(values[-1])
    if hi == U64_MAX:
        raise InvalidArgumentError("row id 2**64-1 cannot be stored (ranges are half-open)")
    slots = hi - lo + 1
    n_holes = slots - n
    if n_holes == 0:
        seg.range.start, seg.range.end = lo, hi + 1
        return seg
    # pylance's size estimates; on a tie the earlier kind wins.
    sizes = (24 + 4 * n_holes, 24 + -(-slots // 8), 24 + 2 * n)
    best = sizes.index(min(sizes))
    if best == 2:
        _fill_encoded_array(seg.sorted_array, values)
        return seg
    # Holes or bitmap are only chosen when slots <= 16 * n, so this mask is bounded.
    present = np.zeros(slots, dtype=bool)
    present[(values - np.uint64(lo)).astype(np.int64)] = True
    if best == 0:
        rh = seg.range_with_holes
        rh.start, rh.end = lo, hi + 1
        holes = np.flatnonzero(~present).astype(np.uint64) + np.uint64(lo)
        _fill_encoded_array(rh.holes, holes)
    else:
        rb = seg.range_with_bitmap
        rb.start, rb.end = lo, hi + 1
        rb.bitmap = np.packbits(present, bitorder="little").tobytes()
    return seg


def _fill_encoded_array(msg: rowids_pb2.EncodedU64Array, values: np.ndarray) -> None:
    """pylance's ``EncodedU64Array::from``: offsets from the minimum in the narrowest of
    u16/u32 that holds the spread, else raw u64; an empty array is an empty u64 array."""
    if not len(values):
        msg.u64_array.SetInParent()
        return
    lo = int(values.min())
    spread = int(values.max()) - lo
    if spread <= 0xFFFF:
        msg.u16_array.base = lo
        msg.u16_array.offsets = (values - np.uint64(lo)).astype("<u2").tobytes()
    elif spread <= 0xFFFFFFFF:
        msg.u32_array.base = lo
        msg.u32_array.offsets = (values - np.uint64(lo)).astype("<u4").tobytes()
    else:
        msg.u64_array.values = values.astype("<u8").tobytes()


def _as_ids(values: np.ndarray) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise InvalidArgumentError("row ids must be a 1-d array")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidArgumentError(f"row ids must be integers, got {arr.dtype}")
    if arr.size and arr.dtype.kind == "i" and arr.min() < 0:
        raise InvalidArgumentError("row ids must not be negative")
    return arr.astype(np.uint64, copy=False)


# -- rewrites -------------------------------------------------------------------------------


def rechunk_row_ids(sources: Sequence[np.ndarray], chunk_sizes: Sequence[int]) -> list[bytes]:
    """Row-id sequences of fragments rewritten from ``sources`` (compaction).

    ``sources`` holds, per source fragment in order, the ids of its surviving rows; the new
    fragments take ``chunk_sizes`` rows each, in the same order.  As pylance 14 does, every
    source contributes one segment per new fragment it lands in (its old segment structure
    is not kept), and touching ranges merge.
    """
    arrays = [_as_ids(s) for s in sources]
    total = sum(len(a) for a in arrays)
    sizes = [int(c) for c in chunk_sizes]
    if any(c < 0 for c in sizes) or sum(sizes) != total:
        raise InvalidArgumentError(
            f"chunk sizes add up to {sum(sizes)} but the sources hold {total} row ids"
        )
    out = []
    src, pos = 0, 0  # the next unused id is arrays[src][pos]
    for size in sizes:
        pieces = []
        need = size
        while need:
            available = len(arrays[src]) - pos
            if not available:
                src, pos = src + 1, 0
                continue
            take = min(need, available)
            pieces.append(arrays[src][pos : pos + take])
            pos += take
            need -= take
        out.append(encode_row_id_segments(pieces))
    return out


# -- where a fragment keeps its sequence ----------------------------------------------------


def fragment_row_ids(root: str, fragment: table_pb2.DataFragment) -> np.ndarray | None:
    """The fragment's row ids by physical offset, or None when it has no sequence (the
    dataset does not use stable row ids)."""
    where = fragment.WhichOneof("row_id_sequence")
    limit = fragment.physical_rows or MAX_SEQUENCE_LEN
    if where is None:
        return None
    if where == "inline_row_ids":
        return decode_row_ids(fragment.inline_row_ids, max_len=limit)
    ext = fragment.external_row_ids
    path = storage.join(root, ext.path)
    f = storage.open_file(path)
    try:
        data = f.read_at(ext.offset, ext.size)
    finally:
        f.close()
    try:
        return decode_row_ids(data, max_len=limit)
    except LanceError as exc:
        raise exc.with_context(path=path) from None
