"""The mini-block layout (2.1/2.2): small opaque chunks with a metadata word each.

Buffers (docs/format/structural.md): 0 = one metadata word per chunk (u16 in 2.1, u32 in 2.2),
1 = the chunks, 2 = dictionary (optional), 2|3 = repetition index (when the page has lists).

The per-page metadata (chunk positions, value counts, the repetition index and the decoded
dictionary) is what the search cache keeps: with it, random access reads exactly the chunks
that hold the wanted rows, one coalesced request per group of neighbouring chunks.  Chunk
headers have a fixed size per page, so all the chunks of a request are parsed together with
numpy fancy indexing rather than one at a time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..compression.blocks import ChunkRanges, place_ranges
from ..compression.compress import compress_levels
from ..compression.decompress import (
    decompress_block,
    decompress_levels_chunks,
    decompress_miniblock,
    deferred_miniblock,
)
from ..compression.dictionary import DictionaryItems
from ..errors import CorruptFileError, UnsupportedError
from ..pb import encodings_v2_1_pb2 as pb
from ..version import LanceFileVersion
from . import repdef
from .arrow import dictionary_items
from .leaf import LeafPiece, Rows, select_rows
from .page import EncodedPage


def _pad8(x: np.ndarray | int) -> np.ndarray | int:
    return (x + 7) & ~7


@dataclass
class MiniBlockMeta:
    """Search-cache entry for one mini-block page."""

    chunk_starts: np.ndarray  # byte offset of each chunk in buffer 1
    chunk_sizes: np.ndarray
    chunk_values: np.ndarray  # values per chunk
    # rows: started_through[c] = rows that start in chunks 0..c; completed[c] = rows that end
    started_through: np.ndarray
    completed: np.ndarray
    dictionary: pa.Array | None
    items: DictionaryItems | None = None  # the dictionary, ready to expand

    @property
    def nbytes(self) -> int:
        n = sum(a.nbytes for a in (self.chunk_starts, self.chunk_sizes, self.chunk_values))
        n += self.started_through.nbytes + self.completed.nbytes
        if self.dictionary is not None:
            n += self.dictionary.nbytes
        if self.items is not None:
            n += self.items.nbytes
        return n + 200


class MiniBlockPage:
    """Decoder for one mini-block page; stateless apart from its (cacheable) metadata."""

    def __init__(self, page, layout, version: LanceFileVersion, to_arrow_dictionary):
        self.page = page
        self.layout = layout
        self.large = version >= LanceFileVersion.V2_2
        if layout.has_large_chunk != self.large:
            raise UnsupportedError(
                "Lance v2.2 mini-block pages require the u32 chunk grammar"
                if self.large
                else "large mini-block chunks are not part of the Lance v2.1 grammar"
            )
        self.layers = list(layout.layers)
        self.max_rep = repdef.max_rep(self.layers)
        self.max_visible_def = repdef.max_visible_def(self.layers)
        self.has_rep = layout.HasField("rep_compression")
        self.has_def = layout.HasField("def_compression")
        self.num_buffers = int(layout.num_buffers)
        if self.num_buffers > 16:
            raise CorruptFileError(f"mini-block page claims {self.num_buffers} value buffers")
        self.has_dict = layout.HasField("dictionary")
        self.rep_index_depth = int(layout.repetition_index_depth)
        nbuf = 2 + self.has_dict + (self.rep_index_depth > 0)
        if len(page.buffers) < nbuf:
            raise CorruptFileError(f"mini-block page has {len(page.buffers)} buffers, needs {nbuf}")
        self._to_arrow_dictionary = to_arrow_dictionary

    # -- metadata ------------------------------------------------------------------------

    def metadata_ranges(self) -> list[tuple[int, int]]:
        bufs = [self.page.buffers[0]]
        if self.has_dict:
            bufs.append(self.page.buffers[2])
        if self.rep_index_depth:
            bufs.append(self.page.buffers[3 if self.has_dict else 2])
        return bufs

    def load_meta(self, raw: list[bytes]) -> MiniBlockMeta:
        words = np.frombuffer(raw[0], dtype="<u4" if self.large else "<u2").astype(np.int64)
        buf1_size = self.page.buffers[1][1]
        sizes = ((words >> 4) + 1) * 8
        logs = words & 0xF
        starts = np.cumsum(sizes) - sizes
        if len(words) and starts[-1] + sizes[-1] > buf1_size:
            raise CorruptFileError("mini-block chunk sizes run past the chunk buffer")
        num_items = int(self.layout.num_items)
        values = np.left_shift(1, logs)
        if len(words):
            values[-1] = num_items - int(values[:-1].sum())
            if values[-1] < 0:
                raise CorruptFileError("mini-block chunk value counts exceed num_items")
        elif num_items:
            raise CorruptFileError("mini-block page has items but no chunks")
        i = 1
        dictionary = None
        if self.has_dict:
            n_dict = int(self.layout.num_dictionary_items)
            block = decompress_block(
                self.layout.dictionary, np.frombuffer(raw[i], dtype=np.uint8), n_dict
            )
            dictionary = self._to_arrow_dictionary(block)
            i += 1
        if self.rep_index_depth:
            width = self.rep_index_depth + 1
            idx = np.frombuffer(raw[i], dtype="<u8")
            if len(idx) != width * len(words):
                raise CorruptFileError(
                    f"repetition index has {len(idx)} words for {len(words)} chunks"
                )
            idx = idx.reshape(len(words), width).astype(np.int64)
            completed = np.cumsum(idx[:, 0])
            started = completed + (idx[:, -1] > 0)
        elif self.max_rep:
            # no index: only whole-page reads are possible
            completed = np.zeros(len(words), dtype=np.int64)
            if len(words):
                completed[-1] = self.page.num_rows
            started = completed.copy()
        else:
            completed = np.cumsum(values)
            started = completed
        if len(words) and completed[-1] != self.page.num_rows:
            raise CorruptFileError(
                f"mini-block chunks hold {completed[-1]} rows, the page says {self.page.num_rows}"
            )
        items = None if dictionary is None else dictionary_items(dictionary)
        return MiniBlockMeta(starts, sizes, values, started, completed, dictionary, items)

    # -- data ----------------------------------------------------------------------------

    def chunk_groups(self, meta: MiniBlockMeta, rows: Rows | None) -> list[tuple[int, int]]:
        """Inclusive chunk ranges covering the rows (sorted, unique, page-relative)."""
        n = len(meta.chunk_sizes)
        if n == 0:
            return []
        if rows is None or (self.max_rep and self.rep_index_depth == 0):
            return [(0, n - 1)]
        if len(rows) > 1 and int(rows[-1]) - int(rows[0]) + 1 == len(rows):
            # a range: one group from the chunk of its first row to that of its last
            a = int(np.searchsorted(meta.started_through, rows[0], side="right"))
            b = int(np.searchsorted(meta.completed, rows[-1], side="right"))
            if b >= n:
                raise CorruptFileError("row is beyond the last mini-block chunk")
            return [(a, b)]
        rows = np.asarray(rows)  # a range here has at most one row
        first = np.searchsorted(meta.started_through, rows, side="right")
        last = np.searchsorted(meta.completed, rows, side="right")
        if (last >= n).any():
            raise CorruptFileError("row is beyond the last mini-block chunk")
        # merge ranges that touch or overlap (rows are sorted so first/last are monotone)
        new_group = np.ones(len(rows), dtype=bool)
        new_group[1:] = first[1:] > np.maximum.accumulate(last)[:-1] + 1
        gi = np.flatnonzero(new_group)
        g_first = first[gi]
        g_last = np.maximum.reduceat(last, gi)
        return list(zip(g_first.tolist(), g_last.tolist(), strict=True))

    def chunk_byte_range(self, meta: MiniBlockMeta, c0: int, c1: int) -> tuple[int, int]:
        pos = self.page.buffers[1][0] + int(meta.chunk_starts[c0])
        end = self.page.buffers[1][0] + int(meta.chunk_starts[c1] + meta.chunk_sizes[c1])
        return pos, end - pos

    def decode(
        self,
        meta: MiniBlockMeta,
        groups: list[tuple[int, int]],
        data: list[bytes],
        rows: Rows | None,
    ) -> LeafPiece:
        """Decode the chunk groups (``data[i]`` = bytes of group i) and keep ``rows``."""
        if not groups:
            return self._empty(meta)
        chunk_ids = np.concatenate([np.arange(a, b + 1) for a, b in groups])
        base = np.frombuffer(b"".join(data), dtype=np.uint8)
        # chunk starts inside the joined buffer
        group_len = np.array([len(d) for d in data], dtype=np.int64)
        group_base = np.cumsum(group_len) - group_len
        group_of_chunk = np.repeat(np.arange(len(groups)), [b - a + 1 for a, b in groups])
        first_chunk = np.array([a for a, _ in groups], dtype=np.int64)
        starts = (
            group_base[group_of_chunk]
            + meta.chunk_starts[chunk_ids]
            - meta.chunk_starts[first_chunk][group_of_chunk]
        )
        counts = meta.chunk_values[chunk_ids]
        sizes = meta.chunk_sizes[chunk_ids]
        rep, defs, levels_per_chunk, value_bufs = self._parse_chunks(base, starts, sizes, counts)
        enc, finish = self.layout.value_compression, None
        if rows is not None and not isinstance(rows, range) and self.max_rep == 0:
            # a take (levels = rows = values): decompress per-value codecs (FSST) only for
            # the rows kept (a row range wants nearly every value of its chunks: those
            # are decoded in one pass with the chunks)
            enc, finish = deferred_miniblock(enc)
        values = decompress_miniblock(enc, value_bufs, counts)
        if values.num_values != int(counts.sum()):
            raise CorruptFileError(
                f"decoded {values.num_values} values, the chunks say {int(counts.sum())}"
            )
        num_levels = int(levels_per_chunk.sum())
        # where each group starts in the level arrays, and its first row number
        chunk_level_start = np.cumsum(levels_per_chunk) - levels_per_chunk
        group_first_chunk_pos = np.cumsum([0] + [b - a + 1 for a, b in groups[:-1]])
        group_starts = chunk_level_start[group_first_chunk_pos]
        started = np.concatenate([[0], meta.started_through])
        group_first_row = started[first_chunk]
        rep, defs, num_levels, values, num_rows = select_rows(
            rep,
            defs,
            num_levels,
            values,
            max_rep=self.max_rep,
            max_visible_def=self.max_visible_def,
            group_starts=group_starts,
            group_first_row=group_first_row,
            wanted=rows,
        )
        if finish is not None:
            values = finish(values)
        return LeafPiece(rep, defs, num_levels, values, num_rows, meta.dictionary, meta.items)

    def _empty(self, meta: MiniBlockMeta) -> LeafPiece:
        from ..compression.blocks import FixedWidthBlock

        return LeafPiece(
            None,
            None,
            0,
            FixedWidthBlock(np.zeros(0, np.uint8), 8, 0),
            0,
            meta.dictionary,
            meta.items,
        )

    def _parse_chunks(
        self, base: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray
    ) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray, list[ChunkRanges]]:
        """Read every chunk header at once; header size is fixed for the page."""
        if len(base) < int(starts[-1] + sizes[-1]):
            raise CorruptFileError("mini-block chunk data is truncated")

        def field(off: int, width: int) -> np.ndarray:
            out = base[starts + off].astype(np.int64)
            for b in range(1, width):
                out |= base[starts + off + b].astype(np.int64) << (8 * b)
            return out

        num_levels = field(0, 2)
        off = 2
        rep_size = def_size = None
        if self.has_rep:
            rep_size = field(off, 2)
            off += 2
        if self.has_def:
            def_size = field(off, 2)
            off += 2
        w = 4 if self.large else 2
        buf_sizes = [field(off + j * w, w) for j in range(self.num_buffers)]
        pos = starts + _pad8(off + w * self.num_buffers)
        rep = defs = None
        levels_per_chunk = num_levels if (self.has_rep or self.has_def) else counts
        if self.has_rep:
            assert rep_size is not None  # read above when the page has rep levels
            rep_ranges = ChunkRanges(base, pos, rep_size)
            pos = _pad8(pos + rep_size)
        if self.has_def:
            assert def_size is not None  # read above when the page has def levels
            def_ranges = ChunkRanges(base, pos, def_size)
            pos = _pad8(pos + def_size)
        value_bufs = []
        for size in buf_sizes:
            value_bufs.append(ChunkRanges(base, pos, size))
            pos = _pad8(pos + size)
        if (pos > starts + sizes).any():
            raise CorruptFileError("mini-block chunk buffers overflow their chunk")
        if self.has_rep:
            rep = _levels(self.layout.rep_compression, rep_ranges, num_levels)
        if self.has_def:
            defs = _levels(self.layout.def_compression, def_ranges, num_levels)
        return rep, defs, levels_per_chunk, value_bufs


def _levels(enc, ranges: ChunkRanges, num_levels: np.ndarray) -> np.ndarray:
    """Decompress the rep or def buffer of every chunk into one u16 array."""
    levels = decompress_levels_chunks(enc, ranges, num_levels)
    if len(levels) != int(num_levels.sum()):
        raise CorruptFileError("level buffers do not match the chunks' level counts")
    return levels


# -- writer side -----------------------------------------------------------------------------

_HEADER_PAD = 0xFE


def _chunk_level_counts(
    defs: np.ndarray | None,
    num_levels: int,
    counts: np.ndarray,
    max_rep: int,
    max_visible_def: int,
) -> np.ndarray:
    """Levels per chunk: a chunk's levels end right after its last value's level (invisible
    levels, i.e. null or empty lists, go with the next value), the last chunk takes the rest."""
    if max_rep == 0 or defs is None:
        return counts.copy()
    visible = np.flatnonzero(defs <= max_visible_def)
    ends = visible[np.cumsum(counts) - 1] + 1
    ends[-1] = num_levels
    return np.diff(np.concatenate([[0], ends]))


def repetition_index(rep: np.ndarray, level_counts: np.ndarray, max_rep: int) -> np.ndarray:
    """Per chunk: rows that end in it and levels left over for the next chunk
    (docs/format/structural.md)."""
    n = len(rep)
    bounds = np.concatenate([[0], np.cumsum(level_counts)])
    a, b = bounds[:-1], bounds[1:]
    starts = np.append(np.flatnonzero(rep == max_rep), n)  # `n`: the end of the last row
    completed = np.searchsorted(starts, b, side="right") - np.searchsorted(starts, a, side="right")
    at_b = np.searchsorted(starts, b, side="left")
    ends_on_row = starts[np.minimum(at_b, len(starts) - 1)] == b
    last_start = starts[np.maximum(np.searchsorted(starts, b, side="left") - 1, 0)]
    leftover = np.where(ends_on_row, 0, b - np.maximum(last_start, a))
    out = np.empty((len(a), 2), dtype="<u8")
    out[:, 0] = completed
    out[:, 1] = leftover
    return out.reshape(-1)


def _assemble(headers: np.ndarray, parts: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Concatenate, per chunk, its header and its piece of every part, each padded to 8:
    the destinations are computed for all chunks at once, the bytes copied in one compiled
    loop per part."""
    nchunks, width = headers.shape
    head = _pad8(width)
    if nchunks == 1:  # a small page (one chunk): the same bytes, joined directly
        first = [int(np.asarray(sz).reshape(-1)[0]) for _, sz in parts]
        return _join_chunk(headers.tobytes(), parts, first)
    sizes = [np.asarray(sz, dtype=np.int64) for _, sz in parts]
    row_sizes = np.full(nchunks, head, dtype=np.int64)
    for sz in sizes:
        row_sizes += _pad8(sz)
    out = np.full(int(row_sizes.sum()), _HEADER_PAD, dtype=np.uint8)
    at = np.cumsum(row_sizes) - row_sizes
    place_ranges(
        np.ascontiguousarray(headers, dtype=np.uint8).reshape(-1),
        np.arange(nchunks, dtype=np.int64) * width,
        np.full(nchunks, width, dtype=np.int64),
        at,
        out,
    )
    at = at + head
    for (data, _), sz in zip(parts, sizes, strict=True):
        place_ranges(np.asarray(data, dtype=np.uint8).reshape(-1), np.cumsum(sz) - sz, sz, at, out)
        at = at + _pad8(sz)
    return out


def _chunks(
    level_counts: np.ndarray, level_parts: list, value_buffers: list, large: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The chunks buffer and each chunk's size: per chunk a header (u16 levels, u16 rep/def
    sizes, u16|u32 value buffer sizes), then its piece of every part, each padded to 8."""
    if len(level_counts) == 1:
        return _one_chunk(int(level_counts[0]), level_parts, value_buffers, large)
    return _many_chunks(level_counts, level_parts, value_buffers, large)


def _one_chunk(
    levels: int, level_parts: list, value_buffers: list, large: bool
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_chunks` of a small page (one chunk, most appends): the same bytes, made from
    Python ints (a dozen numpy calls on one-element arrays cost more than the data)."""
    sizes = [int(np.asarray(s).reshape(-1)[0]) for _, s in [*level_parts, *value_buffers]]
    out = _one_chunk_bytes(levels, level_parts, value_buffers, sizes, large)
    return out, np.array([len(out)], dtype=np.int64)


def _one_chunk_bytes(
    levels: int, level_parts: list, value_buffers: list, sizes: list[int], large: bool
) -> np.ndarray:
    """The one chunk of :func:`_one_chunk`, given every part's size (level parts first)."""
    fmt = f"<{1 + len(level_parts)}H{len(value_buffers)}{'I' if large else 'H'}"
    return _join_chunk(struct.pack(fmt, levels, *sizes), [*level_parts, *value_buffers], sizes)


def _join_chunk(header: bytes, parts: list, sizes: list[int]) -> np.ndarray:
    """One chunk: its header, then the first ``sizes[i]`` bytes of each part, each padded
    to 8 bytes."""
    pieces: list[bytes | memoryview] = [header, _PAD[: -len(header) & 7]]
    for (data, _), n in zip(parts, sizes, strict=True):
        pieces += [np.asarray(data, dtype=np.uint8).reshape(-1)[:n].data, _PAD[: -n & 7]]
    return np.frombuffer(bytearray().join(pieces), dtype=np.uint8)


def _many_chunks(
    level_counts: np.ndarray, level_parts: list, value_buffers: list, large: bool
) -> tuple[np.ndarray, np.ndarray]:
    nchunks = len(level_counts)
    size_word = 4 if large else 2
    header_len = 2 + 2 * len(level_parts) + size_word * len(value_buffers)
    parts = [*level_parts, *value_buffers]
    padded = [np.asarray(_pad8(np.asarray(s, dtype=np.int64))) for _, s in parts]
    chunk_sizes = _pad8(header_len) + (np.sum(padded, axis=0) if padded else 0)
    chunk_sizes = np.asarray(chunk_sizes, dtype=np.int64) * np.ones(nchunks, dtype=np.int64)
    hdr = np.zeros((nchunks, header_len), dtype=np.uint8)
    hdr[:, 0:2] = level_counts.astype("<u2").view(np.uint8).reshape(nchunks, 2)
    col = 2
    for _, sizes in level_parts:
        hdr[:, col : col + 2] = np.asarray(sizes).astype("<u2").view(np.uint8).reshape(-1, 2)
        col += 2
    for _, sizes in value_buffers:
        dt = "<u4" if large else "<u2"
        hdr[:, col : col + size_word] = (
            np.asarray(sizes).astype(dt).view(np.uint8).reshape(-1, size_word)
        )
        col += size_word
    return _assemble(hdr, parts), chunk_sizes


def _largest(sizes) -> int:
    """The largest of a part's chunk sizes (0 for none); one chunk without a numpy call."""
    if len(sizes) == 1:
        return int(sizes[0])
    return int(np.max(sizes)) if len(sizes) else 0


def _chunk_meta(chunk_sizes: np.ndarray, counts: np.ndarray, large: bool) -> np.ndarray:
    """Buffer 0: a word per chunk, ``(size / 8 - 1) << 4 | log2(values)`` (0 for the
    last chunk), u32 in 2.2 and u16 in 2.1."""
    if len(chunk_sizes) == 1:  # a small page: from a Python int
        return _one_chunk_meta(int(chunk_sizes[0]), large)
    limit, problem = _CHUNK_LIMITS[large]
    if (chunk_sizes // 8 - 1 >= limit).any():
        raise UnsupportedError(problem)
    logs = np.zeros(len(chunk_sizes), dtype=np.int64)
    c = counts[:-1]
    logs[:-1] = np.log2(c).astype(np.int64)
    if (np.left_shift(1, logs[:-1]) != c).any() or (logs[:-1] > 15).any():
        raise UnsupportedError("mini-block chunks must hold a power of two values")
    words = ((chunk_sizes // 8 - 1) << 4) | logs
    return words.astype("<u4" if large else "<u2").view(np.uint8)


def _one_chunk_meta(size: int, large: bool) -> np.ndarray:
    """:func:`_chunk_meta` of a page of one chunk of ``size`` bytes (its log2 is 0)."""
    limit, problem = _CHUNK_LIMITS[large]
    word = size // 8 - 1
    if word >= limit:
        raise UnsupportedError(problem)
    return np.frombuffer(bytearray(struct.pack("<I" if large else "<H", word << 4)), np.uint8)


_PAD = bytes([_HEADER_PAD]) * 7
# the largest metadata word (size / 8 - 1) a chunk may have, by large (2.2) or not (2.1)
_CHUNK_LIMITS = {
    True: (1 << 28, "a mini-block chunk is too large"),
    False: (1 << 12, "a 2.1 mini-block chunk would exceed 32 KiB"),
}


def _add_dictionary(layout: pb.MiniBlockLayout, buffers: list, dictionary) -> None:
    """A dictionary page's items: described in the layout, their bytes the third buffer."""
    if dictionary is not None:
        denc, dbytes, ditems = dictionary
        layout.dictionary.CopyFrom(denc)
        layout.num_dictionary_items = ditems
        buffers.append(np.asarray(dbytes, dtype=np.uint8))


def _one_chunk_page(
    values,
    layers: list[int],
    num_rows: int,
    version: LanceFileVersion,
    dictionary,
    defs: np.ndarray | None = None,
):
    """:func:`encode_page` of a page of one chunk without repetition (a small append's
    usual column), from Python ints: the same layout and bytes, without the per-chunk
    arrays.  ``defs``: the def levels, one per value (no lists: nothing is invisible)."""
    large = version >= LanceFileVersion.V2_2
    items = int(values.counts[0])
    sizes = [int(s[0]) for _, s in values.buffers]
    if not large and max(sizes) > 0xFFFF:
        raise UnsupportedError("a 2.1 mini-block buffer would exceed 65535 bytes")
    level_parts: list = []
    def_enc = None
    if defs is not None:
        if items > 0xFFFF:
            raise UnsupportedError("a mini-block chunk would hold more than 65535 levels")
        def_enc, data, level_sizes = compress_levels(defs, values.counts, version)
        level_size = int(level_sizes[0])
        if level_size > 0xFFFF:
            raise UnsupportedError("mini-block levels of a chunk would exceed 65535 bytes")
        level_parts = [(data, level_sizes)]
        sizes = [level_size, *sizes]
    levels = items if defs is not None else 0
    out = _one_chunk_bytes(levels, level_parts, values.buffers, sizes, large)
    buffers: list = [_one_chunk_meta(len(out), large), out]
    dict_key = None
    if dictionary is not None:  # the items: the third buffer, described in the layout
        denc, dbytes, ditems = dictionary
        buffers.append(np.asarray(dbytes, dtype=np.uint8))
        dict_key = (denc.SerializeToString(), ditems)
    # the layout depends on few things: shared by equal pages
    key = (
        values.encoding.SerializeToString(),
        tuple(layers),
        len(values.buffers),
        items,
        large,
        None if def_enc is None else def_enc.SerializeToString(),
        dict_key,
    )
    page_layout = _SHARED_LAYOUTS.get(key)
    if page_layout is None:
        if len(_SHARED_LAYOUTS) >= 1024:  # bounded: clear, refill with what is used
            _SHARED_LAYOUTS.clear()
        layout = pb.MiniBlockLayout(
            layers=repdef.pb_layers(layers),
            num_buffers=len(values.buffers),
            num_items=items,
            has_large_chunk=large,
            value_compression=values.encoding,
        )
        if def_enc is not None:
            layout.def_compression.CopyFrom(def_enc)
        if dictionary is not None:
            layout.dictionary.CopyFrom(dictionary[0])
            layout.num_dictionary_items = dictionary[2]
        page_layout = _SHARED_LAYOUTS[key] = pb.PageLayout(mini_block_layout=layout)
    return EncodedPage(page_layout, buffers, num_rows)


# Page layouts of one-chunk pages, by what they hold (a small append writes the same few
# for every file).  Shared: nothing modifies a written page's layout.
_SHARED_LAYOUTS: dict[tuple, pb.PageLayout] = {}


def encode_page(
    values,
    rep: np.ndarray | None,
    defs: np.ndarray | None,
    layers: list[int],
    num_rows: int,
    version: LanceFileVersion,
    dictionary=None,
):
    """Assemble a mini-block page from chunked values (``compress.Chunked``) and levels.

    ``dictionary`` is ``(encoding, bytes, num_items)`` when the values are indices.
    """

    if rep is None and len(values.counts) == 1:
        return _one_chunk_page(values, layers, num_rows, version, dictionary, defs)
    large = version >= LanceFileVersion.V2_2
    counts = np.asarray(values.counts, dtype=np.int64)
    nchunks = len(counts)
    max_rep_ = repdef.max_rep(layers)
    mvd = repdef.max_visible_def(layers)
    has_levels = rep is not None or defs is not None
    num_levels = len(rep) if rep is not None else (len(defs) if defs is not None else 0)
    layout = pb.MiniBlockLayout(
        layers=repdef.pb_layers(layers),
        num_buffers=len(values.buffers),
        num_items=int(counts.sum()),
        has_large_chunk=large,
        value_compression=values.encoding,
    )
    level_parts = []  # (bytes, sizes)
    level_counts = np.zeros(nchunks, dtype=np.int64)
    rep_index = None
    if has_levels:
        level_counts = _chunk_level_counts(defs, num_levels, counts, max_rep_, mvd)
        if (level_counts > 0xFFFF).any():
            raise UnsupportedError("a mini-block chunk would hold more than 65535 levels")
        if rep is not None:
            enc, data, sizes = compress_levels(rep, level_counts, version)
            layout.rep_compression.CopyFrom(enc)
            level_parts.append((data, sizes))
            rep_index = repetition_index(rep, level_counts, max_rep_)
            layout.repetition_index_depth = 1
        if defs is not None:
            enc, data, sizes = compress_levels(defs, level_counts, version)
            layout.def_compression.CopyFrom(enc)
            level_parts.append((data, sizes))
    for _, sizes in values.buffers:
        if not large and _largest(sizes) > 0xFFFF:
            raise UnsupportedError("a 2.1 mini-block buffer would exceed 65535 bytes")
    for _, sizes in level_parts:
        if _largest(sizes) > 0xFFFF:
            raise UnsupportedError("mini-block levels of a chunk would exceed 65535 bytes")
    out, chunk_sizes = _chunks(level_counts, level_parts, values.buffers, large)
    meta = _chunk_meta(chunk_sizes, counts, large)
    buffers: list = [meta, out]
    _add_dictionary(layout, buffers, dictionary)
    if rep_index is not None:
        buffers.append(rep_index.view(np.uint8))
    return EncodedPage(pb.PageLayout(mini_block_layout=layout), buffers, num_rows)
