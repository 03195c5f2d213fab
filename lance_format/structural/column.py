"""Reading the leaf columns of a 2.1/2.2 file and rebuilding nested Arrow arrays.

In 2.1+ only leaf fields own a column (docs/format/container.md); every column carries the rep/def
levels of all the layers above its leaf.  A column is read page by page (pages hold whole rows),
each page is unraveled into layers, the layers of consecutive pages are concatenated, and the
nested array is rebuilt from the schema, taking each struct's or list's layer from the first
leaf below it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from ..cache import PageCache
from ..compression.blocks import Block, FixedWidthBlock, StructBlock
from ..container.metadata import ColumnInfo, PageInfo
from ..errors import CorruptFileError, LanceError, UnsupportedError
from ..io import RandomAccessFile
from ..schema import LEGACY_BLOB_DESCRIPTOR
from ..version import LanceFileVersion
from .arrow import (
    block_to_arrow,
    dictionary_array,
    flat_array,
    flat_kind,
    take_dictionary,
    validity_buffer,
)
from .cached import result_nbytes, select_cached
from .constant import ConstantPage
from .fullzip import FullZipPage
from .leaf import LeafPiece, Rows, row_array
from .miniblock import MiniBlockPage
from .point import FullZipPoint, PointPlan, point_plan
from .repdef import LIST_LAYERS, Layer, Unraveled, layer_levels, unravel


def owns_column(field) -> bool:
    """In 2.1+, which schema fields have a column of their own (docs/format/container.md)."""
    return (
        not field.children
        or field.is_packed_struct()
        or field.is_blob()
        or field.logical_type.startswith("fixed_size_list")
    )


def leaf_fields(fields) -> list:
    """Column-owning fields in depth-first order: their position is their column index."""
    out = []

    def walk(f) -> None:
        if owns_column(f):
            out.append(f)
        else:
            for c in f.children:
                walk(c)

    for f in fields:
        walk(f)
    return out


@dataclass
class LeafResult:
    layers: list[Layer]  # outermost first, concatenated over pages
    chunks: list[pa.Array]  # leaf values for the innermost slots, validity applied, per page
    num_rows: int

    @property
    def nbytes(self) -> int:
        return result_nbytes(self)

    @property
    def array(self) -> pa.Array:
        if len(self.chunks) == 1:
            return self.chunks[0]
        return pa.concat_arrays(self.chunks)


class _DecodeErrors:
    """Names decode errors with the file and column; bad bytes surface as numpy or Arrow
    errors, which are corruption.  A class rather than a generator context manager: it
    wraps every leaf of every point lookup."""

    def __init__(self, reader: LeafColumnReader):
        self.reader = reader

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> None:
        if exc is not None:
            self.translate(exc)

    def translate(self, exc: BaseException) -> None:
        """Raise ``exc`` named with the file and column (as corruption when numpy or Arrow
        raised it); return when it is none of those (the caller re-raises it).  Point
        lookups call it from ``except`` rather than entering a ``with`` per leaf."""
        path, column = self.reader.file.path, self.reader.field.name
        if isinstance(exc, LanceError):
            raise exc.with_context(path=path, column=column) from None
        if isinstance(exc, (ValueError, IndexError, TypeError, OverflowError, pa.ArrowException)):
            raise CorruptFileError(f"cannot decode: {exc}", path=path, column=column) from exc


class LeafColumnReader:
    """One leaf column: page decoders, cached page metadata, row selection."""

    def __init__(
        self,
        file: RandomAccessFile,
        column: ColumnInfo,
        column_index: int,
        field,
        version: LanceFileVersion,
        cache,
        cache_key: tuple,
        page_cache: PageCache | None = None,
        page_key: tuple | None = None,
    ):
        self.file = file
        self.column = column
        self.column_index = column_index
        self.field = field
        self.arrow_type = field.arrow_type
        self._flat_kind = flat_kind(self.arrow_type)  # how point lookups build the array
        # page index -> (its layers, whether they are one flat layer, the highest def level
        # of a valid row), for point lookups
        self._page_layers: dict[int, tuple[list[int], bool, int]] = {}
        self.version = version
        self.cache = cache
        self.cache_key = cache_key
        # decoded whole pages (a PageCache), keyed by page_key + (page index,)
        self.page_cache = page_cache if page_cache is not None and page_cache.enabled else None
        self.page_key = page_key
        # blob pages give their (position, size) descriptors rather than the bytes
        self.blob_descriptors = False
        self.page_starts = column.page_starts()
        self._decoders: dict[int, object] = {}
        self._points: dict[
            int, PointPlan | FullZipPoint | None
        ] = {}  # point plans, without a search cache
        self._errors = _DecodeErrors(self)
        # decode cost, for scheduling the slowest leaves first on the thread pool: a guess
        # from the stored bytes per row until a read has been timed
        rows = max(1, int(self.page_starts[-1]))
        self.seconds_per_row = column.stored_bytes() / rows * 1e-9

    # -- per page ------------------------------------------------------------------------

    def decoder(self, page: PageInfo):
        dec = self._decoders.get(page.index)
        if dec is None:
            dec = self._make_decoder(page, page.encoding)
            self._decoders[page.index] = dec
        return dec

    def _make_decoder(self, page: PageInfo, layout):
        kind = layout.WhichOneof("layout")
        if kind == "mini_block_layout":
            return MiniBlockPage(
                page, layout.mini_block_layout, self.version, self._dictionary_to_arrow
            )
        if kind == "full_zip_layout":
            return FullZipPage(page, layout.full_zip_layout)
        if kind == "constant_layout":
            cl = layout.constant_layout
            if self.version < LanceFileVersion.V2_2 and (
                cl.HasField("inline_value") or len(page.buffers) in (1, 3)
            ):
                raise UnsupportedError("Lance v2.1 only accepts the all-null form of constant page")
            return ConstantPage(page, cl, self.arrow_type)
        if kind == "blob_layout":
            return BlobPage(page, layout.blob_layout, self)
        raise UnsupportedError(f"unknown page layout {kind!r}")

    def _dictionary_to_arrow(self, block: Block) -> pa.Array:
        t = self.arrow_type
        if pa.types.is_dictionary(t):
            t = t.value_type
        return block_to_arrow(block, t, None)

    def meta(self, page: PageInfo):
        dec = self.decoder(page)

        def load():
            ranges = dec.metadata_ranges()
            raw = self.file.read_ranges(ranges) if ranges else []
            return dec.load_meta(raw)

        if self.cache is None:
            return load()
        return self.cache.get_or_load(self.cache_key + (page.index,), load)

    def decode_page(self, page: PageInfo, rows: Rows | None) -> LeafPiece:
        """Decode the wanted (sorted, unique, page-relative) rows; None = the whole page."""
        dec = self.decoder(page)
        meta = self.meta(page)
        if isinstance(dec, MiniBlockPage) and dec.max_rep == 0:
            piece = read_miniblock(self.file, dec, meta, rows)  # a range stays a range
            piece.layers = dec.layers
            return piece
        wanted = None if rows is None else row_array(rows)
        if isinstance(dec, MiniBlockPage):
            piece = read_miniblock(self.file, dec, meta, wanted)
        elif isinstance(dec, FullZipPage):
            groups = dec.row_groups(wanted)
            data = self.file.read_ranges([dec.byte_range(meta, a, b) for a, b in groups])
            piece = dec.decode(meta, groups, data)
        else:  # constant and blob pages read what they need themselves
            piece = dec.decode(meta, wanted)
        piece.layers = dec.layers
        return piece

    # -- rows ----------------------------------------------------------------------------

    def read(
        self, rows: np.ndarray | None = None, start: int = 0, stop: int | None = None
    ) -> LeafResult:
        """Rows of the column: either sorted unique ``rows`` or the range [start, stop)."""
        pieces = []
        started = time.perf_counter()
        with self._errors:
            for page, page_rows in self._pages_for(rows, start, stop):
                if self.page_cache is not None:
                    pieces.append(self._cached_page(page, page_rows, rows is not None))
                else:
                    pieces.append(self._to_layers(self.decode_page(page, page_rows)))
        if not pieces:
            raise CorruptFileError(
                f"no pages hold the requested rows of column {self.column_index}"
            )
        end = int(self.page_starts[-1]) if stop is None else stop
        n = len(rows) if rows is not None else end - start
        if n >= 1024:
            self.seconds_per_row = (time.perf_counter() - started) / n
        return concat_results(pieces)

    # -- point lookups -------------------------------------------------------------------

    def point(self, page: PageInfo) -> PointPlan | FullZipPoint | None:
        """The page's point-lookup plan (None: the page needs the general path), made
        once and kept beside the page's metadata."""
        if self.cache is None:
            if page.index not in self._points:
                self._points[page.index] = self._make_point(page)
            return self._points[page.index]
        return self.cache.get_or_load(
            self.cache_key + (page.index, "point"), lambda: self._make_point(page)
        )

    def page_cached(self, row: int, stop: int | None = None) -> bool:
        """Whether the decoded-page cache holds the page of ``row`` (with ``stop``: every
        page of the rows [row, stop))."""
        if self.page_cache is None or self.page_key is None:
            return False
        ps = self.page_starts
        first = int(ps.searchsorted(row, side="right")) - 1
        last = first if stop is None else int(ps.searchsorted(stop - 1, side="right")) - 1
        if not 0 <= first <= last < len(self.column.pages):
            return False
        pages = self.column.pages
        return all(
            self.page_cache.holds(self.page_key + (pages[i].index,)) for i in range(first, last + 1)
        )

    def _make_point(self, page: PageInfo) -> PointPlan | FullZipPoint | None:
        meta = self.meta(page)
        if pa.types.is_dictionary(self.arrow_type) and getattr(meta, "items", None) is not None:
            # keys stay keys: the rows come back with the page's own dictionary (as a scan
            # gives them), rather than expanded and encoded again
            meta = replace(meta, items=None)
        return point_plan(self.decoder(page), meta)

    def take_plan(self, rows: np.ndarray) -> TakePlan:
        """Plan a take of sorted unique ``rows`` without reading: per page, the chunks
        holding the rows and their byte ranges, so that a file reader fetches the chunks
        of all its columns in one request set.  Pages in the decoded-page cache are cut
        from it; pages without a point plan (constant, full-zip, lists...) are decoded by
        the general path, which reads for itself."""
        try:
            steps: list[tuple] = []
            ranges: list[tuple[int, int]] = []
            ps = self.page_starts
            i = int(ps.searchsorted(rows[0], side="right")) - 1 if rows.size else -1
            if 0 <= i < ps.size - 1 and rows[-1] < ps[i + 1]:  # one page (every point lookup)
                pages = [(self.column.pages[i], rows - int(ps[i]))]
            else:
                pages = list(self._pages_for(rows, 0, None))
            for page, page_rows in pages:
                if self.page_cache is not None:
                    assert self.page_key is not None
                    whole = self.page_cache.get(self.page_key + (page.index,))
                    if whole is not None:
                        steps.append((_CACHED, whole, page_rows))
                        continue
                plan = self.point(page)
                if plan is None:
                    steps.append((_PAGE, page, page_rows))
                    continue
                page_ranges, where = plan.plan(page_rows)
                steps.append((_POINT, plan, where, page, len(page_ranges)))
                ranges += page_ranges
            one = steps[0] if len(steps) == 1 and steps[0][0] == _POINT else None
            return TakePlan(steps, ranges, None if one is None else (one[1], one[2], one[3]))
        except Exception as exc:
            self._errors.translate(exc)
            raise

    def take_finish(self, plan: TakePlan, data: list[bytes]) -> LeafResult:
        """Decode a planned take from the bytes of its ranges, in order."""
        if plan.point is not None:  # a point lookup in one page
            point, where, page = plan.point
            try:
                piece = point.decode(where, data)
                known = self._page_layers.get(page.index)
                if known is None:
                    layers = self.decoder(page).layers
                    flat = len(layers) == 1 and layers[0] not in LIST_LAYERS
                    # def levels up to this are valid rows (as unravel reads them)
                    inner = layer_levels(layers)[0][0].inner if flat else 0
                    known = self._page_layers[page.index] = (layers, flat, inner)
                piece.layers = known[0]
                defs = piece.defs
                if (
                    known[1]
                    and (defs is None or not (defs > known[2]).any())
                    and piece.rep is None
                    and piece.dictionary is None
                    and piece.num_levels == piece.num_rows
                ):
                    # a flat column without nulls in these rows: its values are the array
                    arr = flat_array(self._flat_kind, self.arrow_type, piece.values)
                    if arr is not None:
                        return LeafResult([Layer(False, None)], [arr], piece.num_rows)
                return self._to_layers(piece)
            except Exception as exc:
                self._errors.translate(exc)
                raise
        pieces = []
        at = 0
        with self._errors:
            for step in plan.steps:
                if step[0] == _CACHED:
                    pieces.append(select_cached(step[1], step[2]))
                elif step[0] == _PAGE:
                    pieces.append(self._to_layers(self.decode_page(step[1], step[2])))
                else:
                    _, point, where, page, count = step
                    piece = point.decode(where, data[at : at + count])
                    at += count
                    piece.layers = self.decoder(page).layers
                    pieces.append(self._to_layers(piece))
            if not pieces:
                raise CorruptFileError(
                    f"no pages hold the requested rows of column {self.column_index}"
                )
            return concat_results(pieces)

    def _cached_page(self, page: PageInfo, rows: Rows | None, take: bool) -> LeafResult:
        """A page through the decoded-page cache.  Range reads of an admitted page decode
        (and keep) the whole page even when they want part of it: the rest is usually read
        next (a scan's next step, the neighbouring Flight endpoint).  Takes use a cached
        page but never decode one whole, which would cost far more than the chunks holding
        their rows; blob pages are never kept (their bytes live outside the page)."""
        cache: PageCache | None = self.page_cache
        assert cache is not None and self.page_key is not None
        key = self.page_key + (page.index,)
        whole = cache.get(key)
        if whole is None:
            # a read counts towards admission where it starts the page, so a scan reading
            # a page in several steps counts once
            keep = rows is None or (len(rows) > 0 and rows[0] == 0)
            keep = keep and not take and not isinstance(self.decoder(page), BlobPage)
            if not keep or not cache.admits(key):
                return self._to_layers(self.decode_page(page, rows))
            whole = self._to_layers(self.decode_page(page, None))
            cache.put(key, whole)
        return whole if rows is None else select_cached(whole, rows)

    def _pages_for(self, rows, start, stop):
        ps = self.page_starts
        pages = self.column.pages
        if rows is None:
            stop = int(ps[-1]) if stop is None else stop
            first = int(np.searchsorted(ps, start, side="right")) - 1
            for i in range(max(first, 0), len(pages)):
                p0 = int(ps[i])
                if p0 >= stop:
                    break
                a, b = max(start, p0) - p0, min(stop, int(ps[i + 1])) - p0
                if b <= a:
                    continue
                full = a == 0 and b == pages[i].num_rows
                yield pages[i], None if full else range(a, b)
            return
        page_of = np.searchsorted(ps, rows, side="right") - 1
        if not len(rows):
            return
        if page_of[0] == page_of[-1]:  # one page (every point lookup)
            i = int(page_of[0])
            yield pages[i], rows - int(ps[i])
            return
        cuts = (np.flatnonzero(np.diff(page_of)) + 1).tolist()
        for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True):
            i = int(page_of[a])
            yield pages[i], rows[a:b] - int(ps[i])

    def _to_layers(self, piece: LeafPiece) -> LeafResult:
        assert piece.layers is not None  # every decoder records its page's layers
        if piece.rep is None and piece.defs is None and piece.num_levels == piece.num_rows:
            # no lists and no nulls (most columns): every layer is all valid, one slot a row
            un = Unraveled(
                [Layer(False, None) for _ in piece.layers], piece.num_rows, piece.num_rows
            )
            if not LIST_LAYERS.isdisjoint(piece.layers):
                un = unravel(piece.rep, piece.defs, piece.layers, piece.num_levels)
        else:
            un = unravel(piece.rep, piece.defs, piece.layers, piece.num_levels)
        if un.num_rows != piece.num_rows:
            raise CorruptFileError(f"levels describe {un.num_rows} rows, expected {piece.num_rows}")
        leaf_valid = un.layers[-1].validity
        values = piece.values
        if isinstance(values, pa.Array):
            arr = values
        elif piece.dictionary is not None:
            indices = _indices(values)
            if pa.types.is_dictionary(self.arrow_type):
                arr = dictionary_array(piece.dictionary, indices, leaf_valid, self.arrow_type)
            else:
                arr = take_dictionary(piece.dictionary, piece.items, indices, leaf_valid)
        else:
            arr = block_to_arrow(values, self.arrow_type, leaf_valid)
        if len(arr) != un.num_leaf_slots:
            raise CorruptFileError(f"{len(arr)} values for {un.num_leaf_slots} slots in the levels")
        return LeafResult(un.layers, [arr], un.num_rows)


# steps of a planned take: a page cut from the decoded-page cache, (_CACHED, page, rows);
# a page decoded by the general path, (_PAGE, page, rows); a point lookup,
# (_POINT, plan, where the rows are, page, number of byte ranges)
_CACHED, _PAGE, _POINT = 0, 1, 2


@dataclass
class TakePlan:
    """A leaf's planned take: its steps, one a page, and the byte ranges its point
    lookups read."""

    steps: list[tuple]
    ranges: list[tuple[int, int]]
    point: tuple | None = None  # (plan, where, page) of a point lookup in one page


def read_miniblock(
    file: RandomAccessFile, dec: MiniBlockPage, meta, rows: Rows | None
) -> LeafPiece:
    """Read the chunk groups holding ``rows`` (one coalesced request each) and decode them."""
    groups = dec.chunk_groups(meta, rows)
    data = file.read_ranges([dec.chunk_byte_range(meta, a, b) for a, b in groups])
    return dec.decode(meta, groups, data, rows)


def _indices(block: Block) -> np.ndarray:
    if not isinstance(block, FixedWidthBlock) or block.bits_per_value not in (8, 16, 32, 64):
        raise CorruptFileError("dictionary indices must be 8, 16, 32 or 64-bit integers")
    # in their stored width: Arrow's take accepts any unsigned index type, so no widening copy
    return block.data.view(f"<u{block.bits_per_value // 8}")[: block.num_values]


def concat_results(pieces: list[LeafResult]) -> LeafResult:
    """Join the per-page results of one leaf: validity concatenated, offsets shifted."""
    if len(pieces) == 1:
        return pieces[0]
    layers: list[Layer] = []
    n_slots = [p.num_rows for p in pieces]  # slots at the current depth, per piece
    for d in range(len(pieces[0].layers)):
        ls = [p.layers[d] for p in pieces]
        valid = None
        if any(layer.validity is not None for layer in ls):
            valid = np.concatenate(
                [
                    layer.validity if layer.validity is not None else np.ones(n, dtype=bool)
                    for layer, n in zip(ls, n_slots, strict=True)
                ]
            )
        if ls[0].is_list:
            offs = [layer.list_offsets() for layer in ls]
            shifts = np.cumsum([0] + [int(o[-1]) for o in offs[:-1]])
            offsets = np.concatenate(
                [offs[0][:1]] + [o[1:] + s for o, s in zip(offs, shifts, strict=True)]
            )
            layers.append(Layer(True, valid, offsets))
            n_slots = [int(o[-1]) for o in offs]
        else:
            layers.append(Layer(False, valid))
    chunks = [c for p in pieces for c in p.chunks]
    return LeafResult(layers, chunks, sum(p.num_rows for p in pieces))


class BlobPage:
    """2.1 blob layout: a mini-block page of (position, size) pairs; bytes live elsewhere in
    the file as external buffers (docs/format/structural.md)."""

    def __init__(self, page: PageInfo, layout, reader: LeafColumnReader):
        self.page = page
        self.layout = layout
        self.reader = reader
        inner = layout.inner_layout
        if inner.WhichOneof("layout") != "mini_block_layout":
            raise UnsupportedError("blob pages with a non mini-block inner layout")
        self.inner = MiniBlockPage(page, inner.mini_block_layout, reader.version, None)
        self.layers = list(layout.layers)

    def metadata_ranges(self):
        return self.inner.metadata_ranges()

    def load_meta(self, raw):
        return self.inner.load_meta(raw)

    def decode(self, meta, rows) -> LeafPiece:
        piece = read_miniblock(self.reader.file, self.inner, meta, rows)
        desc = piece.values
        if not isinstance(desc, StructBlock) or len(desc.children) != 2:
            raise CorruptFileError("blob descriptors must be (position, size) pairs")
        pos_b, size_b = desc.children
        if not isinstance(pos_b, FixedWidthBlock) or not isinstance(size_b, FixedWidthBlock):
            raise CorruptFileError("blob descriptors must be (position, size) pairs")
        pos = pos_b.data.view("<u8")[: desc.num_values].astype(np.int64)
        size = size_b.data.view("<u8")[: desc.num_values].astype(np.int64)
        null = (size == 0) & (pos != 0)
        defs = np.where(null, pos >> 16, 0).astype(np.uint16)
        if self.reader.blob_descriptors:
            child_mask = null if null.any() else None
            desc_arr = pa.StructArray.from_arrays(
                [
                    pa.array(np.where(null, 0, pos).astype(np.uint64), mask=child_mask),
                    pa.array(np.where(null, 0, size).astype(np.uint64), mask=child_mask),
                ],
                fields=list(LEGACY_BLOB_DESCRIPTOR),
                mask=None if child_mask is None else pa.array(child_mask),
            )
            return LeafPiece(
                None, defs if null.any() else None, len(defs), desc_arr, piece.num_rows
            )
        file_size = self.reader.file.size
        if (((pos + size) > file_size) & ~null).any():
            raise CorruptFileError("blob position is outside the file")
        want = np.flatnonzero(size > 0)
        blobs = self.reader.file.read_ranges(
            list(zip(pos[want].tolist(), size[want].tolist(), strict=True))
        )
        from ..compression.blocks import VariableWidthBlock

        offsets = np.zeros(len(size) + 1, dtype=np.int64)
        np.cumsum(np.where(null, 0, size), out=offsets[1:])
        data_arr = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        values = VariableWidthBlock(offsets, data_arr, 64)
        return LeafPiece(None, defs if null.any() else None, len(defs), values, piece.num_rows)


def build_array(field, results: dict[int, LeafResult], depth: int = 0) -> pa.Array:
    """Rebuild a (possibly projected) field's nested array from its leaves' results."""
    if owns_column(field):
        return results[field.id].array
    layer = _first_leaf(field, results).layers[depth]
    children = [build_array(c, results, depth + 1) for c in field.children]
    t = field.arrow_type
    if pa.types.is_struct(t):
        fields = [
            pa.field(c.name, arr.type, c.nullable, c.to_arrow().metadata)
            for c, arr in zip(field.children, children, strict=True)
        ]
        mask = None if layer.validity is None else pa.array(~layer.validity)
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    if not layer.is_list:
        raise CorruptFileError(f"field {field.name!r} expects a list layer")
    offsets = layer.list_offsets()
    child = children[0]
    if pa.types.is_map(t):
        entries = child
        keys = entries.field(0)
        items = entries.field(1)
        mt = pa.map_(
            pa.field(t.key_field.name, keys.type, False, t.key_field.metadata),
            pa.field(t.item_field.name, items.type, t.item_field.nullable, t.item_field.metadata),
            keys_sorted=t.keys_sorted,
        )
        return pa.Array.from_buffers(
            mt,
            len(offsets) - 1,
            [validity_buffer(layer.validity), pa.py_buffer(offsets.astype(np.int32))],
            children=[entries],
        )
    large = pa.types.is_large_list(t)
    item = field.children[0]
    vf = pa.field(item.name, child.type, item.nullable, item.to_arrow().metadata)
    lt = pa.large_list(vf) if large else pa.list_(vf)
    return pa.Array.from_buffers(
        lt,
        len(offsets) - 1,
        [
            validity_buffer(layer.validity),
            pa.py_buffer(offsets.astype(np.int64 if large else np.int32)),
        ],
        children=[child],
    )


def _first_leaf(field, results: dict[int, LeafResult]) -> LeafResult:
    for f in field.walk():
        if owns_column(f) and f.id in results:
            return results[f.id]
    raise CorruptFileError(f"field {field.name!r} has no leaf column")
