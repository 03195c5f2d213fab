"""``LanceFileWriter``: write Arrow data as a Lance 2.0, 2.1 or 2.2 data file.

Named and shaped like pylance's ``lance.file.LanceFileWriter``.  Writing is streaming: each
top-level column buffers incoming arrays until about ``max_page_bytes`` of Arrow data has
arrived, then that slice is raveled into leaf columns (rep/def levels), encoded page by page
and written out at once, so memory stays bounded by roughly one page per column.

Pages are written to a temporary file beside the target, which is renamed into place by
:meth:`close`; a failure (bad batch, error while encoding, an exception in a ``with`` block)
removes it, so a half-written file never appears at the final path.

Version 2.0 has a column per field (parents too) and encodes pages differently: that is
:mod:`.v2_0.encoder`; the buffering, page cutting and container are the same.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import storage
from .compression import compress as cz
from .compression import dictionary as dictionary_encoding
from .compression import page_facts
from .compression.blocks import (
    Block,
    FixedSizeListBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
    take_block,
)
from .container.describe import describe
from .container.footer import encode_tail
from .container.metadata import encode_column, page_entry
from .errors import InvalidArgumentError, LanceError, LanceIOError, SchemaError, UnsupportedError
from .extensions import to_stored_array
from .jit import readonly
from .pb import encodings_v2_1_pb2 as pb
from .pb import file_pb2
from .schema import (
    LanceField,
    LanceSchema,
    arrow_schema_key,
    blob_v2_file_schema,
    cached_per_type,
)
from .structural import constant, fullzip, miniblock, repdef
from .structural.arrow import arrow_to_block, plain_width
from .structural.blob import BlobV2Writer
from .structural.column import leaf_fields
from .structural.page import EncodedPage
from .v2_0 import encoder as v20
from .v2_0 import page_meta as v20_meta
from .v2_0.decoder import v20_column_fields
from .validation import check_batch
from .version import DEFAULT_VERSION, LanceFileVersion, writable
from .workers import pool

DEFAULT_PAGE_BYTES = 8 * 1024 * 1024
# pages with repetition stay under the u16 level count of a chunk header (pylance does too)
MAX_LEVELS_PER_PAGE = 65535
MAX_INFLIGHT = 2 * (os.cpu_count() or 2)  # column encodings waiting to be written
# smaller encodings run on the thread feeding the writer: they are mostly Python that holds
# the GIL, so a pool thread would only add a hand-over (slow on a busy machine)
POOL_MIN_BYTES = 1 << 20
# values this wide or wider are full-zipped (docs/format/structural.md)
FULLZIP_MIN_VALUE_BYTES = 256
CONSTANT_SAMPLE = 64  # valid values looked at before gathering them all for a constant check
_PAD = b"\x48" * 64  # pylance's padding byte between buffers
# pages up to this size are kept and written joined once this much is kept (or another
# write comes): a small file's pages take one write, a large file still streams to disk
_JOIN_PAGE_BYTES = _STAGED_BYTES = 64 * 1024


@dataclass
class WriteResult:
    """What :meth:`LanceFileWriter.close` returns."""

    path: str
    num_rows: int
    num_bytes: int
    version: LanceFileVersion
    # leaf path -> each page's layout message (read only: equal small pages share one)
    layouts: dict[str, list] = field(default_factory=dict, repr=False)
    sidecars: list[str] = field(default_factory=list)  # blob v2 sidecar files written

    @functools.cached_property
    def encodings(self) -> dict[str, list[str]]:
        """Leaf path -> a description of each page's encoding (made when first asked for:
        most writers never look)."""
        return {leaf: [describe(x) for x in pages] for leaf, pages in self.layouts.items()}


@dataclass
class _Leaf:
    """One leaf column: its schema field, its options and the pages written so far."""

    field: LanceField
    path: str
    options: cz.ColumnOptions
    metadata: dict[str, str]  # the field's Arrow metadata (dictionary settings read it)
    pages: list = dataclasses.field(default_factory=list)
    rows: int = 0
    layouts: list = dataclasses.field(default_factory=list)  # each page's layout
    fsst: cz.FsstReuse | None = None  # the FSST table of the column's latest encoding job
    fixed: bool = False  # fixed-width values: never FSST, so no table to carry


class LanceFileWriter:
    """Write a Lance data file (2.0, 2.1 or 2.2) from Arrow record batches.

    ``schema`` may be omitted: the first batch's schema is used.  Options: ``version``
    ("2.0", "2.1", "2.2" (default), "stable" or a :class:`LanceFileVersion`),
    ``max_page_bytes`` (Arrow bytes buffered per column before a page is cut).  Field metadata
    (``lance-encoding:*``) steers encodings. ``blob_v2`` (2.2 only) writes blob columns as blob v2
    descriptors with sidecar files, as ``lance.write_dataset`` does, instead of the file writer's
    2.1-style blob layout. ``lance_schema`` gives the field ids to store (a dataset writes its own
    ids into every data file); by default ids are numbered from 0 in schema order.
    ``fresh_name``: ``path`` is a new unique name that nothing reads before a dataset's
    manifest names it (a dataset's data file), so it is written in place on a local disk,
    without a temporary file and its rename; otherwise the file appears whole on close.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: pa.Schema | None = None,
        *,
        version: str | LanceFileVersion = DEFAULT_VERSION,
        max_page_bytes: int = DEFAULT_PAGE_BYTES,
        blob_v2: bool = False,
        lance_schema: LanceSchema | None = None,
        storage_options: dict[str, str] | None = None,
        fresh_name: bool = False,
        **options,
    ):
        if options:
            raise InvalidArgumentError(
                f"unknown LanceFileWriter option(s): {', '.join(sorted(options))}"
            )
        self.version = writable(version)
        if not isinstance(max_page_bytes, int) or max_page_bytes <= 0:
            raise InvalidArgumentError("max_page_bytes must be a positive integer")
        self.path = storage.register(path, storage_options)
        self.max_page_bytes = max_page_bytes
        if blob_v2 and self.version < LanceFileVersion.V2_2:
            raise UnsupportedError("blob v2 needs Lance file version 2.2")
        self._blobs = BlobV2Writer(self.path) if blob_v2 else None
        self._given_lance_schema = lance_schema  # field ids to store (a dataset's own ids)
        # visible only on close (temporary file + rename locally, an upload on S3), unless
        # the path is a fresh name only a dataset's manifest will name (a data file)
        self._out = storage.create_new(self.path) if fresh_name else storage.create(self.path)
        self._v22 = self.version >= LanceFileVersion.V2_2
        self._pos = 0
        self._staged: list = []  # small pages' pieces not yet written (see _write_page)
        self._staged_bytes = 0
        self._rows = 0
        self._closed = False
        self._schema: pa.Schema | None = None
        self._lance_schema: LanceSchema | None = None
        self._leaves: list[list[_Leaf]] = []  # per top-level field
        self._json: list[LanceField | None] = []  # top-level fields holding JSON columns
        self._views: list[bool] = []  # top-level fields holding string or binary views
        self._pending: list[list[pa.Array]] = []
        self._pending_bytes: list[int] = []
        self._global_buffers: list[bytes] = []  # after the file descriptor (buffer 0)
        self._inflight: collections.deque[_Job] = collections.deque()
        if schema is not None:
            self._init_schema(schema)

    # -- schema ---------------------------------------------------------------------------

    def _init_schema(self, schema: pa.Schema) -> None:
        """Check the schema once, before any data: a refusal removes the partial file."""
        try:
            self._set_schema(schema)
        except (ValueError, TypeError, KeyError) as e:
            self.abort()
            if isinstance(e, LanceError):
                raise
            raise SchemaError(f"cannot write schema: {e}") from e
        except BaseException:
            self.abort()
            raise

    def _set_schema(self, schema: pa.Schema) -> None:
        if not isinstance(schema, pa.Schema):
            raise InvalidArgumentError(f"schema must be a pyarrow.Schema, got {type(schema)}")
        lance_schema = self._given_lance_schema or LanceSchema.from_arrow(schema)
        self._schema = schema
        self._lance_schema = lance_schema
        self._file_schema = lance_schema
        # non-nullable in the target (a dataset's schema) even where the data's schema is not
        self._required = [not f.nullable for f in lance_schema.fields]
        if self._blobs is not None:
            # a dataset's schema (given) has the manifest's ids already
            keep = self._given_lance_schema is not None
            self._file_schema = blob_v2_file_schema(lance_schema, keep_ids=keep)
        for plan in _column_plans(lance_schema, schema, self.version, self._blobs is not None):
            leaves = [
                _Leaf(lf, path, opts, md, fixed=fixed) for lf, path, opts, md, fixed in plan.leaves
            ]
            if self._blobs is not None:
                for leaf in leaves:
                    if leaf.options.blob:
                        self._blobs.add_column(leaf.path, leaf.field.arrow_type, leaf.metadata)
            self._leaves.append(leaves)
            self._json.append(plan.top if plan.json else None)
            self._views.append(plan.views)
            self._pending.append([])
            self._pending_bytes.append(0)

    @property
    def schema(self) -> pa.Schema | None:
        return self._schema

    @property
    def bytes_written(self) -> int:
        """Bytes of pages written so far (data still buffered for a page not included)."""
        return self._pos

    # -- writing --------------------------------------------------------------------------

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append a record batch (or a table); pages are written as they fill."""
        self._write_batch(batch, arrays_checked=False)

    def _write_batch(self, batch: pa.RecordBatch | pa.Table, *, arrays_checked: bool) -> None:
        """:meth:`write_batch`; ``arrays_checked`` says the caller has already run Arrow's full
        validation on this very data (a dataset write checks each batch before casting it),
        so only the null checks run here: one full validation per write, not two."""
        self._check_open()
        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self._write_batch(b, arrays_checked=arrays_checked)
            return
        if not isinstance(batch, pa.RecordBatch):
            raise InvalidArgumentError(f"expected a pyarrow RecordBatch, got {type(batch)}")
        if self._schema is None:
            self._init_schema(batch.schema)
        if not batch.schema.equals(self._schema, check_metadata=False):
            raise SchemaError(_schema_diff(self._schema, batch.schema))
        if batch.num_rows == 0:
            return
        # refused before anything is buffered
        check_batch(batch, self._required, arrays=not arrays_checked)
        try:
            full = []
            for i, col in enumerate(batch.columns):  # (one call for all the columns)
                json_field = self._json[i]
                if json_field is not None:  # JSON text is stored as JSONB
                    col = to_stored_array(col, json_field)
                self._pending[i].append(col)
                self._pending_bytes[i] += _arrow_bytes(col)
                if self._pending_bytes[i] >= self.max_page_bytes:
                    full.append(i)
            self._flush(full)
            self._rows += batch.num_rows
        except BaseException:
            self.abort()
            raise

    def write_table(self, table: pa.Table) -> None:
        self.write_batch(table)

    def _flush(self, columns: list[int], *, wait: bool = False) -> None:
        """Hand the buffered data of ``columns`` to the shared pool for encoding.

        Encoding runs in the background while more batches arrive (that is what lets a
        single writer use more than one core); finished pages are written in submission
        order.  At most :data:`MAX_INFLIGHT` encodings wait at a time, which bounds memory.
        ``wait`` writes everything still in flight (used by :meth:`close`).  The oldest job
        is needed first: when no pool thread has started it, this thread encodes it; while
        a pool thread does, this thread encodes the next jobs nobody has started (as one
        more worker, in submission order, so every job still has its predecessors done or
        running).
        """
        for i in columns:
            arrays = self._pending[i]
            if not arrays:
                continue
            nbytes = self._pending_bytes[i]
            self._pending[i] = []
            self._pending_bytes[i] = 0
            reuse: list[cz.FsstReuse | None] = []
            # FSST needs a page of FSST_MIN_PAGE_BYTES of strings: a job smaller than that
            # (a small append's every column) has no table to use or pass on
            # (string views may repeat their bytes: their Arrow size does not bound a page's)
            fsst = nbytes >= cz.FSST_MIN_PAGE_BYTES or self._views[i]
            for leaf in self._leaves[i]:  # each job's tables chained to the previous job's
                if fsst and not leaf.fixed:
                    leaf.fsst = cz.FsstReuse(leaf.fsst)
                reuse.append(leaf.fsst if fsst else None)
            if nbytes < POOL_MIN_BYTES and not self._inflight:
                # small, and nothing queued before it: encoded and written here and now
                try:
                    pages = self._encode_field(i, arrays, nbytes, reuse)
                finally:
                    for r in reuse:
                        if r is not None:
                            r.close()
                self._write_pages(pages)
                continue
            work = functools.partial(self._encode_field, i, arrays, nbytes, reuse)
            if nbytes < POOL_MIN_BYTES:  # small, behind pooled jobs: encoded now, kept in order
                job = _Job(work, reuse, _Ready())
                job.run()
            else:
                job = _Job(work, reuse, Future())
                pool().submit(job.run)
            self._inflight.append(job)
        while self._inflight and (
            wait or self._inflight[0].future.done() or len(self._inflight) > MAX_INFLIGHT
        ):
            job = self._inflight.popleft()
            job.run()  # a job no pool thread has started yet is encoded here, not awaited
            for later in self._inflight:  # while a pool thread finishes it, take the next
                if job.future.done():
                    break
                later.run()
            self._write_pages(job.future.result())

    def _write_pages(self, pages: list) -> None:
        for leaf, page in pages:
            if isinstance(page, v20.PendingBlobPage):
                page = page.place(self._write_external)
            if isinstance(page, repdef.Raveled):  # blobs: bytes go in while writing
                if self._blobs is not None:
                    page = self._blobs.encode_page(leaf.path, page, self._write_external)
                else:
                    page = self._encode_blob(page)
            self._write_page(leaf, page)

    def _encode_field(
        self, i: int, arrays: list[pa.Array], nbytes: int, reuse: list[cz.FsstReuse | None]
    ) -> list[tuple[_Leaf, EncodedPage]]:
        """Encode the buffered arrays of top-level column ``i`` (joined here, on the pool,
        not on the thread that feeds the writer); ``nbytes``: their measured size."""
        assert self._schema is not None  # set before any batch is encoded
        top = self._schema.field(i)
        arr = pa.concat_arrays(arrays) if len(arrays) > 1 else arrays[0]
        out: list = []
        # one array was measured as it is; a join may size its validity differently
        total = nbytes if len(arrays) == 1 else None
        if total is not None and total <= self.max_page_bytes:  # one page (small writes)
            self._encode_field_pages(i, arr, top, out, reuse)
            return out
        for piece in _split_rows(arr, self.max_page_bytes, total):
            self._encode_field_pages(i, piece, top, out, reuse)
        return out

    def _encode_field_pages(
        self, i: int, arr: pa.Array, top: pa.Field, out: list, reuse: list[cz.FsstReuse | None]
    ) -> None:
        if self.version == LanceFileVersion.V2_0:
            leaves = self._leaves[i]
            try:
                pages = v20.encode_field(leaves[0].field, arr, [c.options for c in leaves])
            except LanceError as e:
                raise type(e)(f"column {top.name!r}: {e}") from e
            out.extend((leaves[c], page) for c, page in pages)
            return
        raveled = repdef.ravel(_storage_deep(arr), top.metadata)
        leaves = self._leaves[i]
        if len(raveled) != len(leaves):
            raise SchemaError(
                f"field {top.name!r}: {len(raveled)} leaf columns in the data, "
                f"{len(leaves)} in the schema"
            )
        lists = len(raveled) != 1 or raveled[0].rep is not None  # (a flat column: no levels)
        too_many = lists and any(
            r.rep is not None and r.num_levels > MAX_LEVELS_PER_PAGE for r in raveled
        )
        if too_many and len(arr) > 1:
            half = len(arr) // 2
            self._encode_field_pages(i, arr.slice(0, half), top, out, reuse)
            self._encode_field_pages(i, arr.slice(half), top, out, reuse)
            return
        for leaf, rav, tables in zip(leaves, raveled, reuse, strict=True):
            if leaf.options.blob:
                out.append((leaf, rav))
                continue
            try:
                out.append((leaf, self._encode_leaf(leaf, rav, tables)))
            except LanceError as e:
                raise type(e)(f"column {leaf.path!r}: {e}") from e

    # -- one page of one leaf -------------------------------------------------------------

    def _encode_leaf(
        self, leaf: _Leaf, rav: repdef.Raveled, fsst_reuse: cz.FsstReuse | None = None
    ) -> EncodedPage:
        opts = leaf.options
        values = rav.values
        facts = _type_facts(values.type)
        if facts.shaped:
            _check_encodable(leaf, rav)
        n_valid = len(values) - values.null_count
        if n_valid == 0 or facts.empty_struct:
            return constant.encode_page(rav.layers, rav.rep, rav.defs, rav.num_rows, self.version)
        arrow_dict = facts.dictionary
        # an Arrow dictionary column keeps its own dictionary (see _arrow_dictionary): no
        # need to expand its values
        own = _arrow_dictionary(values) if arrow_dict else None
        block = arrow_to_block(values) if own is None else own[1]
        if own is None and opts.structural_encoding != "fullzip":
            if type(block) is FixedWidthBlock:
                words = cz.unsigned_view(block)  # None unless 8/16/32/64-bit values
                if words is not None:
                    return self._encode_native(leaf, rav, block, words, facts.integer)
                if block.bits_per_value == 128:  # decimals, UUIDs: two 64-bit lanes
                    lanes = np.asarray(block.data[: block.num_values * 16]).view("<u8")
                    return self._encode_native(leaf, rav, block, lanes, facts.integer, 2)
            elif type(block) is VariableWidthBlock:
                return self._encode_variable(leaf, rav, block, facts.integer, fsst_reuse)
        if self._v22 and _constant_candidate(block, rav, arrow_dict):
            mask = repdef.valid_mask(values)
            if mask is not None:
                valid = np.flatnonzero(mask)
                # a sample of the valid values rules most pages out before the full gather
                # (on a small page the sample is every valid value: it decides alone)
                step = max(1, len(valid) // CONSTANT_SAMPLE)
                const = constant.constant_value(take_block(block, valid[::step]), self.version)
                if const is not None and step > 1:
                    const = constant.constant_value(take_block(block, valid), self.version)
            else:
                const = constant.constant_value(block, self.version)
            if const is not None:
                inline, scalar = const
                return constant.encode_page(
                    rav.layers, rav.rep, rav.defs, rav.num_rows, self.version, inline, scalar
                )
        integer = facts.integer
        # fixed-width values narrower than full-zip's threshold never use it (most columns)
        narrow = facts.narrow and opts.structural_encoding is None
        if not arrow_dict and not narrow and _use_fullzip(block, opts):
            enc, per_value = cz.compress_per_value(block, opts, fsst_reuse=fsst_reuse)
            return fullzip.encode_page(enc, per_value, rav.rep, rav.defs, rav.layers, rav.num_rows)
        dictionary = None
        encoded = None
        key_bits = 32
        if arrow_dict:
            # an Arrow dictionary column always keeps a page dictionary, with indices in the
            # width of its key type (pylance checks the width against the schema)
            encoded = own if own is not None else dictionary_encoding.encode(block)
            key_bits = values.type.index_type.bit_width
            # the column's own keys fit their type (Arrow's rule), however many items the
            # dictionary has; re-encoded values need as many keys as distinct values
            if own is None and encoded[1].num_values > 1 << (key_bits - 1):
                raise UnsupportedError(
                    f"{encoded[1].num_values} distinct values do not fit the "
                    f"{values.type.index_type} dictionary keys"
                )
        # (pages that may get a dictionary of their own, strings and 64/128-bit values,
        # took the one-pass scan above or went full-zip)
        if encoded is not None:
            indices, items = encoded
            scheme, level = dictionary_encoding.dict_values_compression(leaf.metadata, self.version)
            denc, dbytes = cz.compress_block(items, scheme, level, integer=integer)
            dictionary = (denc, dbytes, items.num_values)
            idx = np.asarray(indices).astype(f"<u{key_bits // 8}", copy=False)
            block = FixedWidthBlock(idx.view(np.uint8), key_bits, len(idx))
            integer = True
        chunked = cz.compress_miniblock(block, opts, integer=integer, fsst_reuse=fsst_reuse)
        return miniblock.encode_page(
            chunked, rav.rep, rav.defs, rav.layers, rav.num_rows, self.version, dictionary
        )

    def _encode_native(
        self,
        leaf: _Leaf,
        rav: repdef.Raveled,
        block: FixedWidthBlock,
        words: np.ndarray,
        integer: bool,
        lanes: int = 1,
    ) -> EncodedPage:
        """A page of 8- to 64-bit values (most columns), or of 128-bit ones as two ``lanes``
        each: the constant check, the dictionary encode and the statistics of the
        Flat/InlineBitpacking/RLE choice in one compiled pass (:func:`page_facts.scan`),
        then the same choices and bytes as the general path of :meth:`_encode_leaf`."""
        # 2.2 constant pages with a value: flat columns only (see _constant_candidate),
        # whose def levels are one per value, non-zero for a null
        check_constant = self._v22 and len(rav.layers) == 1
        budget, problem = _dictionary_budget(block, leaf, self.version)
        const, count, indices, first, width_sum, runs = page_facts.scan(
            readonly(words),
            rav.defs,
            check_constant,
            budget,
            lanes,
            np.asarray(block.data[: words.nbytes]) if lanes > 1 else None,
        )
        if const >= 0:
            w = block.bits_per_value // 8
            inline = np.asarray(block.data[const * w : (const + 1) * w]).tobytes()
            return constant.encode_page(
                rav.layers, rav.rep, rav.defs, rav.num_rows, self.version, inline, None
            )
        if problem is not None:  # a bad dictionary option: refused once it would be used
            raise problem
        dictionary = None
        stats = None
        if count >= 0:
            first_lanes = words.reshape(-1, lanes)[first]
            items = FixedWidthBlock(
                first_lanes.view(np.uint8).reshape(-1), block.bits_per_value, count
            )
            scheme, level = dictionary_encoding.dict_values_compression(leaf.metadata, self.version)
            denc, dbytes = cz.compress_block(items, scheme, level, integer=integer)
            dictionary = (denc, dbytes, count)
            block = FixedWidthBlock(indices.view(np.uint8), 32, len(indices))
            stats, integer = (indices, width_sum, runs), True
        elif lanes == 1:
            stats = (words, width_sum, runs)
        chunked = cz.compress_miniblock(block, leaf.options, integer=integer, stats=stats)
        return miniblock.encode_page(
            chunked, rav.rep, rav.defs, rav.layers, rav.num_rows, self.version, dictionary
        )

    def _encode_variable(
        self,
        leaf: _Leaf,
        rav: repdef.Raveled,
        block: VariableWidthBlock,
        integer: bool,
        fsst_reuse: cz.FsstReuse | None,
    ) -> EncodedPage:
        """:meth:`_encode_native` of strings and binary values: the constant check, the
        full-zip check (the longest value) and the dictionary encode with its items and its
        indices' statistics in one compiled pass (:func:`page_facts.scan_variable`)."""
        opts = leaf.options
        check_constant = self._v22 and len(rav.layers) == 1
        # an explicit mini-block layout never turns full-zip (see _use_fullzip)
        fullzip_min = FULLZIP_MIN_VALUE_BYTES if opts.structural_encoding is None else 0
        budget, problem = _dictionary_budget(block, leaf, self.version)
        const, longest, count, indices, item_offsets, item_data, width_sum, runs = (
            page_facts.scan_variable(block, rav.defs, check_constant, fullzip_min, budget)
        )
        if const >= 0:
            start, stop = int(block.offsets[const]), int(block.offsets[const + 1])
            odt = "<i4" if block.bits_per_offset == 32 else "<i8"
            scalar = constant.scalar_buffer(
                [np.array([0, stop - start], dtype=odt).tobytes(), block.data[start:stop].tobytes()]
            )
            return constant.encode_page(
                rav.layers, rav.rep, rav.defs, rav.num_rows, self.version, None, scalar
            )
        if fullzip_min and longest >= fullzip_min:
            enc, per_value = cz.compress_per_value(block, opts, fsst_reuse=fsst_reuse)
            return fullzip.encode_page(enc, per_value, rav.rep, rav.defs, rav.layers, rav.num_rows)
        if problem is not None:  # a bad dictionary option: refused once it would be used
            raise problem
        if count < 0:
            chunked = cz.compress_miniblock(block, opts, integer=integer, fsst_reuse=fsst_reuse)
            dictionary = None
        else:
            items = VariableWidthBlock(item_offsets, item_data, block.bits_per_offset)
            scheme, level = dictionary_encoding.dict_values_compression(leaf.metadata, self.version)
            denc, dbytes = cz.compress_block(items, scheme, level, integer=integer)
            dictionary = (denc, dbytes, count)
            chunked = cz.compress_miniblock(
                FixedWidthBlock(indices.view(np.uint8), 32, len(indices)),
                opts,
                integer=True,
                stats=(indices, width_sum, runs),
            )
        return miniblock.encode_page(
            chunked, rav.rep, rav.defs, rav.layers, rav.num_rows, self.version, dictionary
        )

    def _encode_blob(self, rav: repdef.Raveled) -> EncodedPage:
        """2.1 blob layout: the bytes go into the file as they are, the page stores a
        (position, size) pair per row; a null row is (def << 16 | rep, 0)
        (docs/format/structural.md)."""
        if rav.rep is not None:
            raise UnsupportedError("blob columns inside lists cannot be written")
        values = rav.values
        block = arrow_to_block(values)
        if not isinstance(block, VariableWidthBlock):
            raise SchemaError("a blob column must be binary or large_binary")
        self._align()
        base = self._pos
        data = np.asarray(block.data)
        self._write(data)
        offsets = np.asarray(block.offsets, dtype=np.int64)
        size = np.diff(offsets).astype(np.uint64)
        position = (offsets[:-1] + base).astype(np.uint64)
        position[size == 0] = 0
        if rav.defs is not None:
            null = rav.defs > 0
            position[null] = rav.defs[null].astype(np.uint64) << np.uint64(16)
            size[null] = 0
        pos_block = FixedWidthBlock(position.view(np.uint8), 64, len(position))
        size_block = FixedWidthBlock(size.view(np.uint8), 64, len(size))
        chunked = cz.compress_miniblock(
            StructBlock([pos_block, size_block], len(size)), cz.ColumnOptions()
        )
        inner = miniblock.encode_page(
            chunked, None, None, [repdef.ALL_VALID_ITEM], rav.num_rows, self.version
        )
        layout = pb.PageLayout(
            blob_layout=pb.BlobLayout(
                inner_layout=inner.layout, layers=repdef.pb_layers(rav.layers)
            )
        )
        return EncodedPage(layout, inner.buffers, rav.num_rows)

    # -- bytes ----------------------------------------------------------------------------

    def _write(self, data) -> None:
        if self._staged:
            self._write_staged()
        mv = np.ascontiguousarray(data).data if isinstance(data, np.ndarray) else data
        try:
            self._out.write(mv)
        except OSError as e:
            raise LanceIOError(f"writing {self.path}: {e}") from e
        self._pos += len(data) if not isinstance(data, np.ndarray) else data.nbytes

    def _write_staged(self) -> None:
        """Write the small pages' pieces kept since the last write, joined (``_pos``
        already counts them)."""
        data = b"".join(self._staged)
        self._staged = []
        self._staged_bytes = 0
        try:
            self._out.write(data)
        except OSError as e:
            raise LanceIOError(f"writing {self.path}: {e}") from e

    def _write_external(self, data: np.ndarray) -> int:
        """Write bytes as an external buffer; returns their (aligned) absolute position."""
        self._align()
        base = self._pos
        self._write(data)
        return base

    def _align(self) -> None:
        pad = -self._pos % 64
        if pad:
            self._write(_PAD[:pad])

    def _write_page(self, leaf: _Leaf, page: EncodedPage) -> None:
        offsets: list[int] = []
        sizes: list[int] = []
        if page.nbytes <= _JOIN_PAGE_BYTES:
            # a small page's pieces are kept and written with the next ones (copying them
            # into one write is cheaper than a write each; a small file has one in all)
            pos = self._pos
            staged = self._staged
            for buf in page.buffers:
                pad = -pos % 64
                if pad:
                    staged.append(_PAD[:pad])
                    pos += pad
                staged.append(
                    np.ascontiguousarray(buf).data if isinstance(buf, np.ndarray) else buf
                )
                offsets.append(pos)
                sizes.append(len(buf))
                pos += len(buf)
            self._staged_bytes += pos - self._pos
            self._pos = pos
            if self._staged_bytes >= _STAGED_BYTES:
                self._write_staged()
        else:
            for buf in page.buffers:
                self._align()
                offsets.append(self._pos)
                sizes.append(len(buf))
                self._write(buf)
        if self.version == LanceFileVersion.V2_0:
            locs = list(zip(offsets, sizes, strict=True))
            leaf.pages.append(v20_meta.page_entry(page.layout, locs, page.num_rows))
        else:
            leaf.pages.append(page_entry(page.layout, offsets, sizes, page.num_rows, leaf.rows))
        leaf.rows += page.num_rows
        leaf.layouts.append(page.layout)

    # -- finishing ------------------------------------------------------------------------

    def add_schema_metadata(self, key: str, value: str) -> None:
        """Add a key/value to the schema metadata written on close (pylance's file writer
        API; needs the schema, given or from a first batch)."""
        self._check_open()
        if self._schema is None:
            raise InvalidArgumentError("add_schema_metadata needs the schema: write a batch first")
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgumentError("schema metadata keys and values must be strings")
        md = {**self._file_schema.metadata, key: value.encode()}
        self._file_schema = LanceSchema(self._file_schema.fields, md)

    def add_global_buffer(self, data: bytes) -> int:
        """Keep ``data`` as a global buffer written on close; returns its position (index
        files name their protobuf metadata by position in the schema metadata)."""
        self._check_open()
        self._global_buffers.append(bytes(data))
        return len(self._global_buffers)

    def close(self) -> WriteResult:
        """Flush the remaining pages, write the metadata and footer, rename into place."""
        self._check_open()
        try:
            if self._schema is None:
                raise SchemaError(
                    "Schema is unknown and file cannot be created: no schema was given "
                    "and no batch was written"
                )
            self._flush(list(range(len(self._pending))), wait=True)
            self._align()
            descriptor = file_pb2.FileDescriptor(
                schema=_proto_schema(self._file_schema), length=self._rows
            )
            columns = [self._column_metadata(leaf) for leaves in self._leaves for leaf in leaves]
            buffers = [descriptor.SerializeToString(), *self._global_buffers]
            tail = encode_tail(self._pos, buffers, columns, self.version)
            self._write(tail)
            sidecars = self._blobs.commit() if self._blobs is not None else []
            self._out.commit()  # last: the file appears with its sidecars
        except BaseException:
            self.abort()
            raise
        self._closed = True
        return WriteResult(
            self.path,
            self._rows,
            self._pos,
            self.version,
            {leaf.path: leaf.layouts for leaves in self._leaves for leaf in leaves},
            sidecars,
        )

    def _column_metadata(self, leaf: _Leaf) -> bytes:
        if self.version == LanceFileVersion.V2_0:
            return v20_meta.encode_column(leaf.field, leaf.pages)
        return encode_column(leaf.pages)

    def abort(self) -> None:
        """Stop writing and remove the partial file (nothing appears at ``path``)."""
        if self._closed:
            return
        self._closed = True
        for job in getattr(self, "_inflight", ()):
            job.cancel()  # a running encoding finishes, but nothing is written any more
        try:
            self._out.abort()
        finally:
            if self._blobs is not None:
                self._blobs.abort()

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgumentError(f"the writer for {self.path} is already closed")

    def __enter__(self) -> LanceFileWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.close()

    def __del__(self) -> None:  # an abandoned writer leaves no partial file
        try:
            if not self._closed:
                self.abort()
        except Exception:
            pass


# -- helpers ---------------------------------------------------------------------------------


def _field_metadata(schema: pa.Schema, top: LanceField, leaf: LanceField) -> dict:
    """The Arrow metadata of a leaf field (looked up by path in the Arrow schema)."""
    f = schema.field(top.name)
    if leaf is top:
        return dict(f.metadata or {})
    path = _leaf_path(top, leaf).split(".")[1:]
    t = f.type
    md: dict = {}
    for name in path:
        sub = None
        if pa.types.is_struct(t):
            sub = t.field(name) if t.get_field_index(name) >= 0 else None
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            sub = t.value_field
        elif pa.types.is_map(t):
            sub = t.key_field if name == t.key_field.name else t.item_field
            if name == "entries" or name not in (t.key_field.name, t.item_field.name):
                sub = pa.field("entries", pa.struct([t.key_field, t.item_field]))
        if sub is None:
            return {}
        md = dict(sub.metadata or {})
        t = sub.type
    return md


def _str_dict(md: dict) -> dict[str, str]:
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in md.items()
    }


def _leaf_path(top: LanceField, leaf: LanceField) -> str:
    if leaf is top:
        return top.name
    path: list[str] = []

    def walk(f: LanceField, trail: list[str]) -> bool:
        if f is leaf:
            path.extend(trail)
            return True
        return any(walk(c, [*trail, c.name]) for c in f.children)

    walk(top, [top.name])
    return ".".join(path)


def _has_variable_child(f: LanceField) -> bool:
    t = f.arrow_type
    return pa.types.is_struct(t) and not all(_fixed_width(c.type) for c in t)


def _fixed_width(t: pa.DataType) -> bool:
    try:
        return t.byte_width > 0
    except ValueError:
        return False


def _holds_views(t: pa.DataType) -> bool:
    """Whether ``t`` or a type inside it is a string or binary view."""
    if isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return True
    if pa.types.is_dictionary(t):
        return _holds_views(t.value_type)
    return any(_holds_views(t.field(i).type) for i in range(t.num_fields))


def _is_integer(t: pa.DataType) -> bool:
    t = t.storage_type if isinstance(t, pa.BaseExtensionType) else t
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (
        pa.types.is_integer(t)
        or pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_duration(t)
    )


class _Ready:
    """The result of a job the writer's own thread runs at once (too small for the pool),
    with the part of :class:`Future`'s interface the writer uses.  A Future builds a lock
    and a condition, which cost as much as encoding one column of a small append."""

    __slots__ = ("_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any) -> None:
        self._value, self._done = value, True

    def set_exception(self, error: BaseException) -> None:
        self._error, self._done = error, True

    def cancel(self) -> bool:
        self._done = True
        return True

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


class _Job:
    """One column's encoding, run by whichever comes first: a pool thread, or the thread
    feeding the writer when it needs the result (it would only wait otherwise, and on a
    busy machine a pool thread may be slow to get a core).  The FSST tables the job
    chained are released as it ends, whoever ran it, or when it is cancelled."""

    def __init__(
        self, work: functools.partial, reuse: list[cz.FsstReuse | None], future: Future | _Ready
    ):
        self._work = work
        self._reuse = [r for r in reuse if r is not None]
        self._lock = threading.Lock()
        self._claimed = False
        self.future = future

    def _claim(self) -> bool:
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def run(self) -> None:
        if not self._claim():
            return
        try:
            self.future.set_result(self._work())
        except BaseException as exc:
            self.future.set_exception(exc)
        finally:
            for r in self._reuse:
                r.close()

    def cancel(self) -> None:
        """Never run it (a running job finishes; its result is not used)."""
        if self._claim():
            self.future.cancel()
            for r in self._reuse:
                r.close()


def _unstorable(t: pa.DataType, version: LanceFileVersion) -> str | None:
    """Why a type cannot be written in ``version`` (checked once, before any data)."""
    if isinstance(t, pa.BaseExtensionType):
        return _unstorable(t.storage_type, version)
    if pa.types.is_map(t) and version < LanceFileVersion.V2_2:
        return "the map type is not part of Lance 2.1; write version 2.2"
    if pa.types.is_dictionary(t):
        v = t.value_type
        if pa.types.is_nested(v):
            return f"dictionaries of {v} cannot be stored"
        return None
    if pa.types.is_map(t):
        return _unstorable(t.key_type, version) or _unstorable(t.item_type, version)
    if pa.types.is_struct(t):
        for f in t:
            problem = _unstorable(f.type, version)
            if problem is not None:
                return problem
        return None
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _unstorable(t.value_type, version)
    return None


@dataclass(frozen=True)
class _TypeFacts:
    """What :meth:`LanceFileWriter._encode_leaf` asks of a leaf's Arrow type, answered once
    per type (a small append asks for every column of every file)."""

    shaped: bool  # a struct or fixed-size list: :func:`_check_encodable` has work to do
    empty_struct: bool
    dictionary: bool
    integer: bool
    narrow: bool  # plain fixed-width values below full-zip's threshold


@cached_per_type
def _type_facts(t: pa.DataType) -> _TypeFacts:
    return _TypeFacts(
        shaped=pa.types.is_struct(t) or pa.types.is_fixed_size_list(t),
        empty_struct=_is_empty_struct(t),
        dictionary=pa.types.is_dictionary(t),
        integer=_is_integer(t),
        narrow=0 < plain_width(t) < FULLZIP_MIN_VALUE_BYTES,
    )


def _proto_schema(schema: LanceSchema) -> file_pb2.Schema:
    """The file descriptor's schema, built once per (shared, unchanging) Lance schema: a
    dataset's every data file stores it.  The descriptor's constructor copies it."""
    return schema.memo("proto_schema", LanceSchema.to_proto_schema)


@dataclass(frozen=True)
class _ColumnPlan:
    """What a writer sets up for one top-level column, the same for every file written
    with one schema: its leaves as ``(field, path, options, metadata, fixed)``."""

    top: LanceField
    leaves: list[tuple[LanceField, str, cz.ColumnOptions, dict[str, str], bool]]
    json: bool  # the column holds JSON (stored as JSONB)
    views: bool  # the column holds string or binary views


def _column_plans(
    lance_schema: LanceSchema, schema: pa.Schema, version: LanceFileVersion, blobs: bool
) -> list[_ColumnPlan]:
    """The columns' setup, checked; kept on the (shared, unchanging) Lance schema, since a
    dataset's every write uses its one schema and a small append opens a file each time."""
    cache: dict = lance_schema.memo("writer_plans", lambda s: {})
    key = (arrow_schema_key(schema), version, blobs)
    if key[0] is not None and (plans := cache.get(key)) is not None:
        return plans
    plans = []
    for top, arrow_field in zip(lance_schema.fields, schema, strict=True):
        leaves = []
        columns = (
            v20_column_fields([top]) if version == LanceFileVersion.V2_0 else leaf_fields([top])
        )
        for lf in columns:
            md = _field_metadata(schema, top, lf)
            opts = cz.ColumnOptions.from_metadata(md)
            if opts.packed and version == LanceFileVersion.V2_1 and _has_variable_child(lf):
                raise UnsupportedError(
                    f"field {lf.name!r}: packed structs with variable-width children need Lance 2.2"
                )
            t = arrow_field.type if lf is top else lf.arrow_type
            fixed = pa.types.is_boolean(t) or (
                not pa.types.is_dictionary(t) and _fixed_width(t)  # (a dictionary: its keys')
            )
            leaves.append((lf, _leaf_path(top, lf), opts, _str_dict(md), fixed))
        if version == LanceFileVersion.V2_0:
            problem = v20.unstorable(top, arrow_field.type)
        else:
            problem = _unstorable(arrow_field.type, version)
        if problem is not None:
            raise UnsupportedError(f"field {arrow_field.name!r}: {problem}")
        plans.append(_ColumnPlan(top, leaves, top.has_json(), _holds_views(arrow_field.type)))
    if key[0] is not None and len(cache) < 8:  # a schema meets few Arrow schemas: a bound
        cache[key] = plans
    return plans


def _check_encodable(leaf: _Leaf, rav: repdef.Raveled) -> None:
    """Shapes Lance cannot store (pylance 14 refuses them too): a clear error, not bad data."""
    values = rav.values
    t = values.type
    if _is_empty_struct(t) and (rav.rep is not None or rav.defs is not None):
        raise UnsupportedError("empty structs with nulls or inside lists cannot be stored")
    if pa.types.is_fixed_size_list(t):
        item = t.value_type
        while pa.types.is_fixed_size_list(item):
            item = item.value_type
        if not _fixed_width(item) and not pa.types.is_boolean(item):
            raise UnsupportedError(f"fixed-size lists of {item} items cannot be stored")
    if leaf.options.packed and pa.types.is_struct(t):
        valid = values.is_valid()
        for i in range(t.num_fields):
            child = values.field(i)
            if child.null_count and pc.any(pc.and_(valid, child.is_null())).as_py():
                raise UnsupportedError(
                    f"packed struct child {t.field(i).name!r} has nulls; packed structs "
                    "store no child validity"
                )


def _arrow_dictionary(values: pa.Array) -> tuple[np.ndarray, Block] | None:
    """An Arrow dictionary column's page dictionary, as pylance keeps it: the column's own
    dictionary (the categories in their order, unused ones too) and its keys, keys under
    nulls stored as 0 (nullness is in the levels).  A page's arrays were concatenated
    first, which unifies differing dictionaries into one without repeats.  None for a
    dictionary holding nulls itself (a valid key naming a null item): its values are
    expanded and re-encoded, so the nulls reach the levels."""
    dictionary = values.dictionary
    if dictionary.null_count:
        return None
    keys = values.indices
    if keys.null_count:
        keys = keys.fill_null(0)
    return keys.to_numpy(zero_copy_only=False), arrow_to_block(dictionary)


def _dictionary_budget(
    block: FixedWidthBlock | VariableWidthBlock, leaf: _Leaf, version: LanceFileVersion
) -> tuple[dictionary_encoding.DictBudget | None, LanceError | None]:
    """The page's dictionary budget, or the error its field's options give: raised only
    if the page reaches the dictionary stage (a constant or full-zip page never used
    them before the one-pass scan either)."""
    try:
        return dictionary_encoding.dictionary_budget(
            block, block.num_values, leaf.metadata, version
        ), None
    except LanceError as e:
        return None, e


def _constant_candidate(block, rav: repdef.Raveled, arrow_dict: bool) -> bool:
    """2.2 constant pages with a value: flat columns only (pylance 14 misreads a constant
    value under nested layers with def levels) and never for Arrow dictionaries."""
    return not arrow_dict and not isinstance(block, StructBlock) and len(rav.layers) == 1


def _is_empty_struct(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) and t.num_fields == 0


def _use_fullzip(block, opts: cz.ColumnOptions) -> bool:
    # (strings decide by their longest value in page_facts.scan_variable)
    if opts.structural_encoding is not None:
        return opts.structural_encoding == "fullzip"
    if isinstance(block, StructBlock):
        return any(isinstance(c, VariableWidthBlock) for c in block.children)
    bits = _row_bits(block)
    return bits >= FULLZIP_MIN_VALUE_BYTES * 8


def _row_bits(block) -> int:
    if isinstance(block, FixedWidthBlock):
        return block.bits_per_value
    if isinstance(block, FixedSizeListBlock):
        return block.dimension * _row_bits(block.child)
    raise UnsupportedError(f"cannot size values of {type(block).__name__}")


def _arrow_bytes(arr: pa.Array) -> int:
    try:
        return arr.nbytes
    except Exception:  # pragma: no cover - nbytes is defined for every array type
        return len(arr) * 8


def _storage_deep(arr: pa.Array) -> pa.Array:
    """Extension types unwrapped at the top level (leaves are converted by
    :func:`arrow_to_block`; Arrow dictionaries stay, to keep their key width)."""
    if isinstance(arr.type, pa.BaseExtensionType):
        return arr.storage
    return arr


def _split_rows(arr: pa.Array, max_bytes: int, total: int | None = None) -> list[pa.Array]:
    """Cut a buffered column into row slices of about ``max_bytes`` of Arrow data
    (``total``: its size, when already measured)."""
    n = len(arr)
    total = _arrow_bytes(arr) if total is None else total
    if total <= max_bytes or n <= 1:
        return [arr]
    pieces = -(-total // max_bytes)
    step = -(-n // pieces)
    return [arr.slice(s, min(step, n - s)) for s in range(0, n, step)]


def _schema_diff(expected: pa.Schema, got: pa.Schema) -> str:
    if expected.names != got.names:
        return f"batch columns {got.names} do not match the writer's schema {expected.names}"
    for a, b in zip(expected, got, strict=True):
        if not a.equals(b):
            return f"column {a.name!r}: the writer expects {a.type}, the batch has {b.type}"
    return "the batch's schema differs from the writer's schema"
