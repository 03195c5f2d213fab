"""Assembling Arrow arrays from v1 pages, one rule per Arrow type.

v1 has no structural layer: every field id (parents included) has a page per batch in the
page table.  Leaves use plain, binary or dictionary encoding; a struct has no data of its
own (its children share its rows, and it has no validity); a list's page holds ``rows + 1``
offsets (i32 for ``list``, i64 for ``large_list``) relative to its child's page in the same
batch (a null list reads as an empty one); a ``null`` field's page only records its length.

The offsets and positions arrays are what random access needs before it can read a value,
so with a :class:`SearchCache` each page's array is loaded whole once and kept there
(the search cache, as for v2 files); without one a read fetches only the entries of
the rows it reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..cache import SearchCache
from ..errors import CorruptFileError, UnsupportedError
from ..io import RandomAccessFile
from ..schema import LanceField
from . import binary, dictionary, plain
from . import rows as R
from .rows import Request


@dataclass
class PageSource:
    """What the assembly needs from a v1 file (or from its statistics section)."""

    file: RandomAccessFile
    page_table: np.ndarray  # (field rows, batches, 2)
    field_rows: dict[int, int]  # field id -> page table row
    dictionaries: dict[int, tuple[int, int]]
    cache_key: tuple  # prefix of this source's search-cache keys
    _dicts: dict[int, pa.Array] = field(default_factory=dict)

    def page(self, f: LanceField, batch: int) -> tuple[int, int]:
        row = self.field_rows.get(f.id)
        if row is None or not 0 <= row < self.page_table.shape[0]:
            raise CorruptFileError(f"field {f.name!r} (id {f.id}) has no row in the page table")
        if not 0 <= batch < self.page_table.shape[1]:
            raise CorruptFileError(f"batch {batch} is not in the page table")
        pos, length = self.page_table[row, batch]
        return int(pos), int(length)


def _storage(t: pa.DataType) -> pa.DataType:
    return plain.storage(t)


def read_field(
    src: PageSource, f: LanceField, reqs: list[Request], cache: SearchCache | None
) -> pa.Array:
    """Rows of field ``f``: ``reqs`` lists (batch, ranges); the result concatenates them."""
    t = f.arrow_type
    st = _storage(t)
    what = f"field {f.name!r}"
    n = sum(R.total(r) for _, r in reqs)
    if pa.types.is_null(st):
        for b, ranges in reqs:
            R.check_within(ranges, src.page(f, b)[1], what)
        return pa.nulls(n, t) if st is t else pa.ExtensionArray.from_storage(t, pa.nulls(n))
    if pa.types.is_dictionary(st):
        keys = _read_keys(src, f, st.index_type, reqs, what)
        return dictionary.build(t, keys, _dictionary_values(src, f, st.value_type, cache), what)
    if plain.fixed_layout(st) is not None:
        pages = [(*src.page(f, b), ranges) for b, ranges in reqs]
        return plain.read(src.file, t, pages, what)
    if binary.is_binary_like(st):
        entries = _offset_entries(src, f, np.dtype(np.int64), reqs, cache, what)
        return binary.read(src.file, t, f.nullable, _all_ranges(reqs), entries, what)
    if pa.types.is_struct(st) and f.logical_type == "struct":
        if not f.children:
            raise UnsupportedError(f"{what}: a struct without fields")
        kids = [read_field(src, c, reqs, cache) for c in f.children]
        arr = pa.Array.from_buffers(st, n, [None], children=kids)
        return arr if st is t else pa.ExtensionArray.from_storage(t, arr)
    if (pa.types.is_list(st) or pa.types.is_large_list(st)) and len(f.children) == 1:
        return _read_list(src, f, st, reqs, cache, what, n)
    raise UnsupportedError(f"{what}: type {t} cannot be stored in a v1 (legacy) file")


def _read_keys(
    src: PageSource, f: LanceField, index_type: pa.DataType, reqs: list[Request], what: str
) -> np.ndarray:
    dtype = np.dtype(index_type.to_pandas_dtype())
    pages = [(*src.page(f, b), ranges) for b, ranges in reqs]
    return plain.read_integers(src.file, dtype, pages, what)


def _all_ranges(reqs: list[Request]) -> np.ndarray:
    if not reqs:
        return np.zeros((0, 2), dtype=np.int64)
    return np.concatenate([r for _, r in reqs])


def _dictionary_values(
    src: PageSource, f: LanceField, value_type: pa.DataType, cache: SearchCache | None
) -> pa.Array:
    info = src.dictionaries.get(f.id)
    if info is None:
        raise CorruptFileError(f"dictionary field {f.name!r} has no dictionary in the schema")

    def load() -> pa.Array:
        return dictionary.load_values(src.file, value_type, *info, f"field {f.name!r}")

    if cache is not None:
        return cache.get_or_load((*src.cache_key, "dict", f.id), load)
    if f.id not in src._dicts:
        src._dicts[f.id] = load()
    return src._dicts[f.id]


def _offset_entries(
    src: PageSource,
    f: LanceField,
    dtype: np.dtype,
    reqs: list[Request],
    cache: SearchCache | None,
    what: str,
    extra: int = 1,
) -> np.ndarray:
    """The offsets entries ``s..e`` of every range of every request, concatenated.

    A binary page of ``L`` rows holds ``L + 1`` positions (``extra = 1``); a list page's
    length already counts its ``rows + 1`` offsets (``extra = 0``)."""
    if cache is None:
        wanted = []
        for b, ranges in reqs:
            pos, length = src.page(f, b)
            wanted.append((pos, length + extra, R.with_end_entry(ranges)))
        return plain.read_integers(src.file, dtype, wanted, what)
    out = []
    for b, ranges in reqs:
        entries = _whole_offsets(src, f, b, dtype, cache, what, extra)
        bounds = R.with_end_entry(ranges)
        R.check_within(bounds, len(entries), what)
        out.append(entries[R.to_indices(bounds)])
    return np.concatenate(out) if out else np.zeros(0, dtype)


def _whole_offsets(
    src: PageSource,
    f: LanceField,
    batch: int,
    dtype: np.dtype,
    cache: SearchCache,
    what: str,
    extra: int,
) -> np.ndarray:
    """A page's whole offsets (or positions) array, through the search cache."""

    def load() -> np.ndarray:
        pos, length = src.page(f, batch)
        whole = np.array([[0, length + extra]], dtype=np.int64)
        return plain.read_integers(src.file, dtype, [(pos, length + extra, whole)], what)

    return cache.get_or_load((*src.cache_key, "offsets", f.id, batch), load)


def warm_field(src: PageSource, f: LanceField, num_batches: int, cache: SearchCache) -> None:
    """Load what random access into ``f`` needs (offsets, positions, dictionaries)."""
    st = _storage(f.arrow_type)
    what = f"field {f.name!r}"
    if pa.types.is_dictionary(st):
        _dictionary_values(src, f, st.value_type, cache)
    elif binary.is_binary_like(st):
        for b in range(num_batches):
            _whole_offsets(src, f, b, np.dtype(np.int64), cache, what, 1)
    elif pa.types.is_list(st) or pa.types.is_large_list(st):
        dtype = np.dtype(np.int64 if pa.types.is_large_list(st) else np.int32)
        for b in range(num_batches):
            _whole_offsets(src, f, b, dtype, cache, what, 0)
    for c in f.children:
        warm_field(src, c, num_batches, cache)


def _read_list(
    src: PageSource,
    f: LanceField,
    st: pa.DataType,
    reqs: list[Request],
    cache: SearchCache | None,
    what: str,
    n: int,
) -> pa.Array:
    large = pa.types.is_large_list(st)
    dtype = np.dtype(np.int64 if large else np.int32)
    # the list page's length counts its rows + 1 offsets
    entries = _offset_entries(src, f, dtype, reqs, cache, what, extra=0)
    bounds, row_lengths = R.spans(entries, _all_ranges(reqs), what)
    counts = [len(r) for _, r in reqs]
    child_reqs: list[Request] = []
    parts = np.split(bounds, np.cumsum(counts)[:-1]) if reqs else []
    for (b, _), part in zip(reqs, parts, strict=True):
        kept = R.merge_adjacent(R.non_empty(part))
        if len(kept):
            child_reqs.append((b, kept))
    child = read_field(src, f.children[0], child_reqs, cache)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(row_lengths, out=offsets[1:])
    if offsets[-1] != len(child):
        raise CorruptFileError(f"{what}: {len(child)} items for offsets ending at {offsets[-1]}")
    if not large:
        if offsets[-1] > 2**31 - 1:
            raise UnsupportedError(f"{what}: more than 2**31 list items in one read")
        offsets = offsets.astype(np.int32)
    arr = pa.Array.from_buffers(st, n, [None, pa.py_buffer(offsets)], children=[child])
    t = f.arrow_type
    return arr if st is t else pa.ExtensionArray.from_storage(t, arr)
