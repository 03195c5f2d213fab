"""The mini-block layout (2.1/2.2): small opaque chunks with a metadata word each.

Buffers (digest §5.1): 0 = one metadata word per chunk (u16 in 2.1, u32 in 2.2),
1 = the chunks, 2 = dictionary (optional), 2|3 = repetition index (when the page has lists).

The per-page metadata (chunk positions, value counts, the repetition index and the decoded
dictionary) is what the search cache keeps: with it, random access reads exactly the chunks
that hold the wanted rows, one coalesced request per group of neighbouring chunks.  Chunk
headers have a fixed size per page, so all the chunks of a request are parsed together with
numpy fancy indexing rather than one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..compression.blocks import ChunkRanges
from ..compression.decompress import (
    decompress_block,
    decompress_levels_chunks,
    decompress_miniblock,
)
from ..errors import CorruptFileError, UnsupportedError
from . import repdef
from .leaf import LeafPiece, select_rows


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
    dictionary: object  # pa.Array | None

    @property
    def nbytes(self) -> int:
        n = sum(a.nbytes for a in (self.chunk_starts, self.chunk_sizes, self.chunk_values))
        n += self.started_through.nbytes + self.completed.nbytes
        if self.dictionary is not None:
            n += self.dictionary.nbytes
        return n + 200


class MiniBlockPage:
    """Decoder for one mini-block page; stateless apart from its (cacheable) metadata."""

    def __init__(self, page, layout, version: str, to_arrow_dictionary):
        self.page = page
        self.layout = layout
        self.large = version != "2.1"
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
        return MiniBlockMeta(starts, sizes, values, started, completed, dictionary)

    # -- data ----------------------------------------------------------------------------

    def chunk_groups(self, meta: MiniBlockMeta, rows: np.ndarray | None) -> list[tuple[int, int]]:
        """Inclusive chunk ranges covering the rows (sorted, unique, page-relative)."""
        n = len(meta.chunk_sizes)
        if n == 0:
            return []
        if rows is None or (self.max_rep and self.rep_index_depth == 0):
            return [(0, n - 1)]
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
        rows: np.ndarray | None,
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
        values = decompress_miniblock(self.layout.value_compression, value_bufs, counts)
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
        return LeafPiece(rep, defs, num_levels, values, num_rows, meta.dictionary)

    def _empty(self, meta: MiniBlockMeta) -> LeafPiece:
        from ..compression.blocks import FixedWidthBlock

        return LeafPiece(
            None, None, 0, FixedWidthBlock(np.zeros(0, np.uint8), 8, 0), 0, meta.dictionary
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
            rep_ranges = ChunkRanges(base, pos, rep_size)
            pos = _pad8(pos + rep_size)
        if self.has_def:
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
