"""Scanning a dataset version: projection, filter, limit/offset and row ids, in batches.

A scan walks the fragments in order and each fragment in steps of about READ_BYTES stored
bytes, so memory stays bounded by a few steps whatever the dataset size; without offset or
limit two steps decode at once.  With a filter, the filter's columns are read first (in
steps sized by their own bytes); the other columns are then read only for the matching rows
(a ``take`` of those offsets) when few rows match, or for the whole range when many do.
Deleted rows are dropped before anything else sees them.  ``to_table`` keeps the decoded
steps as they are (no copy); ``to_batches`` cuts them into ``batch_size`` slices.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from ..errors import InvalidArgumentError, SchemaError
from ..schema import LanceField, LanceSchema, is_legacy_blob
from .blobs import to_binary
from .filters import compile_filter
from .fragment import Fragment, is_blob_v2, scan_field
from .projection import Projection
from .row_versions import VERSION_COLUMNS

DEFAULT_BATCH_SIZE = 8192
READ_BYTES = 16 << 20  # stored bytes decoded per step (see Scanner._step)
# to_table keeps every row anyway, so its steps may be this many times larger: fewer steps
# cut fewer pages, and a page decoded in parts costs more than one decoded whole
TABLE_STEP_FACTOR = 16
READ_ROWS = 1 << 20  # at most this many physical rows per step
DEFAULT_READ_ROWS = 128 * 1024  # rows per step when the files cannot tell their sizes
ROW_ID = "_rowid"
ROW_ADDRESS = "_rowaddr"
ROW_OFFSET = "_rowoffset"  # the row's position among the dataset's live rows (take's index)
SYSTEM_COLUMNS = (ROW_ID, ROW_ADDRESS, ROW_OFFSET, *VERSION_COLUMNS)
# below this share of matching rows, the other columns are taken row by row
TAKE_SELECTIVITY = 0.25
PIPELINE = 2  # steps of a scan decoding at once (see Scanner._pipelined)
# A stream's first step is 1/2**RAMP of a full one, and each next one twice the last: the
# first rows leave (to a Flight client) after a fraction of a full step's decode, and the
# steps decoded meanwhile overlap sending them, where two full first steps decoding at
# once kept the client waiting for about 100 MB of decoding per endpoint
RAMP = 3


@dataclass(frozen=True)
class ColumnOrdering:
    """One sort key of ``order_by`` (pylance's): a column name or nested path, ascending
    or not, nulls first or last."""

    column_name: str
    ascending: bool = True
    nulls_first: bool = False


@dataclass
class ScanOptions:
    # column names, or (as pylance) output names mapped to SQL expressions
    columns: list[str] | Mapping[str, str] | None = None
    filter: str | pc.Expression | None = None
    limit: int | None = None
    offset: int | None = None
    with_row_id: bool = False
    with_row_address: bool = False
    batch_size: int = DEFAULT_BATCH_SIZE
    fragments: Sequence[Fragment] | None = None
    # physical row range [start, stop) to scan in some fragments (by fragment id): how a
    # Flight endpoint or a Spark partition reads its share of a large fragment
    ranges: dict[int, tuple[int, int]] | None = None
    # sort keys (ColumnOrdering, or a column name for ascending): the scan collects every
    # matching row, sorts, then applies offset and limit
    order_by: Sequence[ColumnOrdering | str] | None = None
    # blob v2 columns as their bytes (pylance's blob_handling="all_binary"), not descriptors
    blob_binary: bool = False


class Scanner:
    """A planned scan; :meth:`to_batches` runs it lazily, :meth:`to_table` collects it."""

    def __init__(
        self,
        schema: LanceSchema,
        fragments: Sequence[Fragment],
        options: ScanOptions,
        stable_row_ids: bool = False,
    ):
        self.options = options
        self.lance_schema = schema
        self.stable_row_ids = stable_row_ids
        self.fragments = list(options.fragments if options.fragments is not None else fragments)
        if options.batch_size is None or options.batch_size <= 0:
            raise InvalidArgumentError("batch_size must be a positive integer")
        for fid, (lo, hi) in (options.ranges or {}).items():
            frag = next((f for f in self.fragments if f.fragment_id == fid), None)
            if frag is None or not 0 <= lo <= hi <= frag.physical_rows:
                raise InvalidArgumentError(
                    f"row range [{lo}, {hi}) is not inside a fragment {fid} of this scan"
                )
        for name, value in (("limit", options.limit), ("offset", options.offset)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise InvalidArgumentError(  # pylance's wording
                    f"{name.capitalize()} must be non-negative (an integer), got {value!r}"
                )
        arrow_schema = schema.to_dataset_arrow()
        # filters and projections may name the row id and address (``_rowid IN (...)``)
        # as pylance allows
        for meta in SYSTEM_COLUMNS:
            if meta not in arrow_schema.names:
                arrow_schema = arrow_schema.append(pa.field(meta, pa.uint64()))
        self._all_fragments = list(fragments)
        self.orderings = _orderings(options.order_by)
        self.projection: Projection | None = None
        self.projection_meta: list[str] = []
        columns = _as_expressions(options.columns, schema)
        self._hidden: list[str] = []  # sort keys read only to sort by
        if self.orderings:
            columns = _with_sort_keys(columns, schema, self.orderings)
            self._hidden = [f"{_SORT_KEY}{i}" for i in range(len(self.orderings))]
        if isinstance(columns, Mapping):
            self.projection = Projection(columns, arrow_schema)
            self.fields = self._fields_named(self.projection.columns)
            self.projection_meta = self._meta_named(self.projection.columns)
        else:
            self.fields = self._projection(columns)
        self._blob_binary = [
            f for f in self.fields if options.blob_binary and (is_blob_v2(f) or is_legacy_blob(f))
        ]
        compiled = compile_filter(options.filter, arrow_schema)
        self.filter = None if compiled is None else compiled.expression
        self.terms = [] if compiled is None else list(compiled.terms)  # for page statistics
        self.filter_fields: list[LanceField] = []
        self.filter_meta: list[str] = []
        if compiled is not None:
            names = compiled.top_level_columns
            self.filter_fields = self._fields_named(names)
            self.filter_meta = self._meta_named(names)

    def _fields_named(self, names) -> list[LanceField]:
        wanted = set(names)
        return [f for f in self.lance_schema.fields if f.name in wanted]

    def _meta_named(self, names) -> list[str]:
        """``_rowid`` / ``_rowaddr`` among ``names``, unless the dataset has such columns."""
        real = {f.name for f in self.lance_schema.fields}
        return [m for m in SYSTEM_COLUMNS if m in names and m not in real]

    def _projection(self, columns: list[str] | None) -> list[LanceField]:
        if columns is None:
            return list(self.lance_schema.fields)
        if isinstance(columns, str):
            raise InvalidArgumentError(
                "columns must be a list of column names or a dict of SQL expressions"
            )
        by_name = {f.name: f for f in self.lance_schema.fields}
        out = []
        for c in columns:
            if c not in by_name:
                raise SchemaError(f"no column {c!r} in the dataset (has {list(by_name)})")
            out.append(by_name[c])
        return out

    # -- output schema --------------------------------------------------------------------

    @functools.cached_property
    def schema(self) -> pa.Schema:
        """The output schema (sort keys read only to sort by are not in it)."""
        schema = self._read_schema
        if self._hidden:
            schema = pa.schema([f for f in schema if f.name not in self._hidden])
        return schema

    @functools.cached_property
    def _read_schema(self) -> pa.Schema:
        if self.projection is not None:
            fields = list(self.projection.schema)
        else:
            fields = [
                pa.field(f.name, pa.large_binary(), f.nullable)
                if f in self._blob_binary
                else scan_field(f)
                for f in self.fields
            ]
        names = {f.name for f in fields}
        for meta in self._extra_meta():
            if meta not in names:  # asked for twice (columns and with_row_id): given once
                fields.append(pa.field(meta, pa.uint64()))
        return pa.schema(fields)

    def _extra_meta(self) -> list[str]:
        return [
            m
            for m, wanted in (
                (ROW_ID, self.options.with_row_id),
                (ROW_ADDRESS, self.options.with_row_address),
            )
            if wanted
        ]

    # -- running --------------------------------------------------------------------------

    def to_table(self) -> pa.Table:
        if self.orderings:
            return pa.Table.from_batches(list(self._sorted_batches()), schema=self.schema)
        # the decoded steps as they are: no cut into batches, no copy
        parts = list(self._tables(count_only=False, budget=READ_BYTES * TABLE_STEP_FACTOR))
        if not parts:
            return self.schema.empty_table()
        if not parts[0].num_columns:  # no column asked for (Arrow's concat drops the rows)
            return _no_columns(sum(p.num_rows for p in parts))
        return pa.concat_tables(parts)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    @property
    def projected_schema(self) -> pa.Schema:
        """pylance's name for :attr:`schema`."""
        return self.schema

    @property
    def dataset_schema(self) -> pa.Schema:
        return self.lance_schema.to_dataset_arrow()

    def head(self, num_rows: int) -> pa.Table:
        """The first ``num_rows`` rows of the scan."""
        out, got = [], 0
        for batch in self.to_batches():
            if got >= num_rows:
                break
            out.append(batch.slice(0, num_rows - got))
            got += out[-1].num_rows
        return pa.Table.from_batches(out, schema=self.schema)

    def to_pandas(self, **kwargs):
        return self.to_table().to_pandas(**kwargs)

    def count_rows(self) -> int:
        if (
            self.filter is None
            and self.options.limit is None
            and not self.options.offset
            and not self.options.ranges
        ):
            return sum(f.count_rows() for f in self.fragments)
        return sum(t.num_rows for t in self._tables(count_only=True))

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        if self.orderings:
            yield from self._sorted_batches()
        else:
            for table in self._tables(count_only=False, ramp=True):
                yield from _batches_of(table, self.options.batch_size)

    def to_ranges(self) -> Iterator[pa.Table]:
        """The scan as whole decoded ranges: one table per step, its columns chunked as the
        pages decoded (no copy joining them), for a consumer that cuts its own batches
        (``Table.to_batches`` cuts at chunk boundaries, zero-copy): a Flight stream."""
        if self.orderings:
            yield from (pa.Table.from_batches([b]) for b in self._sorted_batches())
        else:
            yield from self._tables(count_only=False, ramp=True)

    def slices_cached(self) -> bool:
        """Whether every row of this scan is a slice of a page the decoded-page cache holds:
        no filter, deletion, sort, computed or system column, and every page of the
        projected columns over the scan's rows cached.  Such a scan's whole result costs
        slicing and (nearly) no new memory, so a server may make and keep it whole."""
        if (
            self.filter is not None
            or self.orderings
            or self.projection is not None
            or self._blob_binary
            or self._extra_meta()
            or not self.fields
        ):
            return False
        ranges = self.options.ranges or {}
        for frag in self.fragments:
            if frag.deletion_file() is not None:
                return False
            lo, hi = ranges.get(frag.fragment_id, (0, frag.physical_rows))
            if hi > lo and not frag.pages_cached(self.fields, lo, hi):
                return False
        return True

    def _sorted_batches(self) -> Iterator[pa.RecordBatch]:
        """Every matching row, sorted by the keys, then offset and limit (a sort needs all
        rows before the first one out, as pylance's does)."""
        parts = list(
            self._tables(count_only=False, windowed=False, budget=READ_BYTES * TABLE_STEP_FACTOR)
        )
        table = pa.concat_tables(parts) if parts else self._read_schema.empty_table()
        keys = []
        for name, order in zip(self._hidden, self.orderings, strict=True):
            values = table.column(name)
            flag = pc.is_valid(values) if order.nulls_first else pc.is_null(values)
            table = table.append_column(f"{name}_null", flag)
            keys.append((f"{name}_null", "ascending"))
            keys.append((name, "ascending" if order.ascending else "descending"))
        indices = pc.sort_indices(table, sort_keys=keys)
        start = self.options.offset or 0
        stop = None if self.options.limit is None else start + self.options.limit
        indices = indices[start:stop]
        out = table.select(self.schema.names).take(indices)
        yield from out.combine_chunks().to_batches(max_chunksize=self.options.batch_size)

    def _tables(
        self,
        count_only: bool,
        windowed: bool = True,
        budget: int | None = None,
        ramp: bool = False,
    ) -> Iterator[pa.Table]:
        """The scan's rows, one table per decoded step (columns chunked as decoded); a step
        decodes about ``budget`` stored bytes (READ_BYTES by default), the first ones less
        with ``ramp`` (a stream)."""
        budget = READ_BYTES if budget is None else budget
        skip = (self.options.offset or 0) if windowed else 0
        remaining = self.options.limit if windowed else None
        if remaining == 0:
            return
        if not skip and remaining is None and not count_only:
            yield from self._pipelined(budget, ramp)
            return
        for frag, start, stop, part in self._units(budget, remaining, skip, ramp):
            offsets, known = self._matching(frag, start, stop)
            if not len(offsets):
                continue
            if skip:
                if skip >= len(offsets):
                    skip -= len(offsets)
                    continue
                offsets = offsets[skip:]
                known = known.slice(skip) if known is not None else None
                skip = 0
            if remaining is not None:
                offsets = offsets[:remaining]
                known = known.slice(0, remaining) if known is not None else None
                remaining -= len(offsets)
            if count_only:
                yield pa.table({"n": pa.nulls(len(offsets))})
            else:
                yield from self._parts(frag, offsets, known, start, stop, part)
            if remaining == 0:
                return

    def _units(
        self, budget: int, remaining: int | None = None, skip: int = 0, ramp: bool = False
    ) -> Iterator[tuple[Fragment, int, int, int]]:
        """The steps of the scan: (fragment, start, stop, rows per materialised part).
        A filtered scan reads its filter's columns in steps sized by their bytes, and the
        projected columns of the matching rows in parts sized by theirs.  With a limit,
        steps shrink to what the limit (as it stands when the fragment starts) needs.
        With ``ramp`` (a stream), the scan's first steps are smaller (see :data:`RAMP`)."""
        ranges = self.options.ranges or {}
        fields = self.fields + [f for f in self.filter_fields if f not in self.fields]
        shrink = RAMP if ramp else 0
        for frag in self.fragments:
            part = self._step(frag, fields, budget)
            step = part if self.filter is None else self._step(frag, self.filter_fields, budget)
            if remaining is not None:
                step = min(step, max(self.options.batch_size, remaining + skip))
            lo, hi = ranges.get(frag.fragment_id, (0, frag.physical_rows))
            for start, stop in self._steps(frag, lo, hi, step, self.terms):
                if stop - start < step:  # a scan within one step: nothing to ramp
                    shrink = 0
                if shrink and frag.pages_cached(fields, start):
                    shrink = 0  # a hot scan: its first rows are slices of cached pages
                while shrink and start < stop:  # the stream's first steps: 1/8, 1/4, 1/2
                    cut = min(stop, start + max(self.options.batch_size, step >> shrink))
                    yield frag, start, cut, part
                    start, shrink = cut, shrink - 1
                if start < stop:
                    yield frag, start, stop, part

    def _parts(
        self,
        frag: Fragment,
        offsets: np.ndarray,
        known: pa.Table | None,
        start: int,
        stop: int,
        part: int,
    ) -> Iterator[pa.Table]:
        """The projected columns of physical ``offsets`` (of [start, stop)), in tables of
        at most ``part`` rows."""
        if not len(offsets):
            return
        if len(offsets) <= part:
            yield self._materialise(frag, offsets, start, stop, known)
            return
        for a in range(0, len(offsets), part):
            rows = offsets[a : a + part]
            have = known.slice(a, part) if known is not None else None
            yield self._materialise(frag, rows, int(rows[0]), int(rows[-1]) + 1, have)

    def _run_unit(self, frag: Fragment, start: int, stop: int, part: int) -> list[pa.Table]:
        offsets, known = self._matching(frag, start, stop)
        return list(self._parts(frag, offsets, known, start, stop, part))

    def _pipelined(self, budget: int, ramp: bool = False) -> Iterator[pa.Table]:
        """The steps of a scan without offset or limit, PIPELINE steps decoding at once
        (each on a thread of its own, its columns on the shared decode pool): the pool
        starts on the next step's columns while the last ones of this step finish, rather
        than idling at every step's end, and a consumer's work on this step's rows
        overlaps the next steps' decoding."""
        units = self._units(budget, ramp=ramp)
        first = next(units, None)
        second = next(units, None) if first is not None else None
        if first is None or second is None:  # one step (or none): nothing to overlap
            if first is not None:
                yield from self._run_unit(*first)
            return
        with ThreadPoolExecutor(PIPELINE, thread_name_prefix="lance-scan") as steps:
            pending = deque([steps.submit(self._run_unit, *first)])
            pending.append(steps.submit(self._run_unit, *second))
            try:
                for unit in units:  # planned here: fragments open their files on this thread
                    done = pending.popleft().result()
                    pending.append(steps.submit(self._run_unit, *unit))
                    yield from done
                while pending:
                    yield from pending.popleft().result()
            finally:  # a consumer that stops early: no new step starts
                for fut in pending:
                    fut.cancel()

    def _step(self, frag: Fragment, fields: list[LanceField], budget: int) -> int:
        """Rows of ``fields`` decoded per step: about ``budget`` stored bytes (one pass
        over many pages is far cheaper than many small ranges, and threads share a big
        range well; memory stays bounded whatever the row width), a whole number of
        batches, at least one batch and at most READ_ROWS."""
        batch = self.options.batch_size
        per_row = frag.stored_bytes_per_row(fields) if fields else None
        if not per_row:
            return max(batch, DEFAULT_READ_ROWS)
        rows = min(READ_ROWS, int(budget / per_row))
        return max(batch, rows // batch * batch)

    @staticmethod
    def _steps(frag: Fragment, lo: int, hi: int, step: int, terms) -> Iterator[tuple[int, int]]:
        """The [start, stop) ranges to decode: [lo, hi) in steps, minus the pages whose
        statistics rule the filter out (legacy files keep them)."""
        spans = [(lo, hi)]
        if terms:
            kept = frag.may_match(terms)
            if kept is not None:
                spans = [(max(a, lo), min(b, hi)) for a, b in kept.tolist() if a < hi and b > lo]
        for a, b in spans:
            for start in range(a, b, step):
                yield start, min(start + step, b)

    def _matching(
        self, frag: Fragment, start: int, stop: int
    ) -> tuple[np.ndarray, pa.Table | None]:
        """Physical offsets in [start, stop) that are live and pass the filter, with the
        projected columns the filter already decoded, for those rows (None: no filter).
        Late materialisation: the other columns are then read for the matching rows only,
        and the filter's columns are never decoded twice."""
        offsets = np.arange(start, stop, dtype=np.int64)
        live = frag.live_mask(start, stop)
        if live is not None:
            offsets = offsets[live]
        if self.filter is None or not len(offsets):
            return offsets, None
        rows = (start, stop) if live is None else offsets
        metas = {m: pa.array(self.meta_column(frag, m, offsets)) for m in self.filter_meta}
        if self.filter_fields or not metas:
            table = frag.read(self.filter_fields, rows)
            for name, values in metas.items():
                table = table.append_column(name, values)
        else:  # only row ids or addresses: nothing to read from the data files
            table = pa.table(metas)
        if not table.num_columns:  # a filter that reads no column ("true"): one per row
            table = pa.table({"_": pa.nulls(len(offsets))})
        hit = _evaluate(table, self.filter)
        wanted = {f.name for f in self.fields} & {f.name for f in self.filter_fields}
        known = None
        if wanted and hit.any():
            known = table.select([f.name for f in self.filter_fields if f.name in wanted])
            known = known.filter(pa.array(hit))
        return offsets[hit], known

    def _materialise(
        self,
        frag: Fragment,
        offsets: np.ndarray,
        start: int,
        stop: int,
        known: pa.Table | None = None,
    ) -> pa.Table:
        n = len(offsets)
        fields = self.fields
        if known is not None:  # columns the filter decoded: only read the others
            fields = [f for f in self.fields if f.name not in known.column_names]
        if not fields:
            table = pa.table({})
        elif n == stop - start:
            table = frag.read(fields, (start, stop))
        elif n < TAKE_SELECTIVITY * (stop - start):
            table = frag.read(fields, offsets)
        else:
            table = frag.read(fields, (start, stop))
            table = table.take(pa.array(offsets - start))
        if known is not None:
            have = {name: table.column(name) for name in table.column_names}
            have.update({name: known.column(name) for name in known.column_names})
            table = pa.Table.from_arrays(
                [have[f.name] for f in self.fields],
                schema=pa.schema(
                    [
                        known.schema.field(f.name)
                        if f.name in known.column_names
                        else table.schema.field(f.name)
                        for f in self.fields
                    ]
                ),
            )
        for f in self._blob_binary:
            i = table.schema.get_field_index(f.name)
            table = table.set_column(
                i,
                pa.field(f.name, pa.large_binary(), f.nullable),
                to_binary(frag, f, table.column(i)),
            )
        if self.projection is not None:
            for meta in self.projection_meta:
                values = pa.array(self.meta_column(frag, meta, offsets))
                if table.num_columns:
                    table = table.append_column(meta, values)
                else:  # nothing read from the files: the table has no rows to add to
                    table = pa.table({meta: values})
            table = self.projection.apply(table)
        arrays = list(table.columns)
        names = list(table.column_names)
        for meta in self._extra_meta():
            if meta not in names:
                arrays.append(pa.array(self.meta_column(frag, meta, offsets)))
                names.append(meta)
        if not arrays:  # no column asked for: still one (empty) row per match, as pylance
            return _no_columns(n)
        return pa.Table.from_arrays(arrays, schema=self._read_schema)

    def meta_column(self, frag: Fragment, name: str, offsets: np.ndarray) -> np.ndarray:
        """``_rowid`` (stable ids when the dataset has them, else addresses), ``_rowaddr``
        (fragment id << 32 | offset), ``_rowoffset`` (position among the dataset's live
        rows) or a row version column of the given physical offsets."""
        if name == ROW_OFFSET:
            before = np.searchsorted(frag.deleted_offsets, offsets)
            return (self._live_before(frag) + offsets - before).astype(np.uint64)
        if name in VERSION_COLUMNS:
            return frag.row_versions(name)[offsets]
        if name == ROW_ID and frag.row_ids is not None:
            return frag.row_ids[offsets]
        return frag.row_addresses(offsets)

    def _live_before(self, frag: Fragment) -> int:
        """Live rows of the dataset's fragments before ``frag`` (the base of its offsets)."""
        if not hasattr(self, "_bases"):
            counts = np.cumsum([0] + [f.count_rows() for f in self._all_fragments])
            self._bases = {
                f.fragment_id: int(c) for f, c in zip(self._all_fragments, counts[:-1], strict=True)
            }
        return self._bases[frag.fragment_id]


def _batches_of(table: pa.Table, size: int) -> Iterator[pa.RecordBatch]:
    """``table`` in batches of ``size`` rows (the last may be shorter): zero-copy slices,
    except that a batch straddling a decoded page of some column is joined into one."""
    if not table.num_columns:  # Arrow does not clamp a column-less slice to the table
        for start in range(0, table.num_rows, size):
            yield _no_columns(min(size, table.num_rows - start)).to_batches()[0]
        return
    if all(c.num_chunks <= 1 for c in table.columns):
        # every column one decoded page part (most steps): Arrow cuts it into exact slices
        # in one call, rather than a slice and a combine per batch
        yield from table.to_batches(max_chunksize=size)
        return
    for start in range(0, table.num_rows, size):
        yield from table.slice(start, size).combine_chunks().to_batches()


def _no_columns(rows: int) -> pa.Table:
    """A table of ``rows`` rows and no columns (a scan of ``columns=[]``, as pylance's)."""
    return pa.table({"_": pa.nulls(rows)}).select([])


def _evaluate(table: pa.Table, expr: pc.Expression) -> np.ndarray:
    """Boolean mask of the rows where ``expr`` is true (null counts as false, as in SQL)."""
    result = pads.dataset(table).to_table(columns={"m": expr}).column("m")
    mask = pc.fill_null(result, False)
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


# the filter evaluation other layers (vector search's post-filter) reuse
evaluate_filter = _evaluate


_SORT_KEY = "__lance_sort_key_"


def _quote_path(path: list[str]) -> str:
    return ".".join("`" + p.replace("`", "``") + "`" for p in path)


def _as_expressions(columns, schema: LanceSchema):
    """A list projection naming system columns or nested paths (``"s.x"``) as the dict
    projection computing them, each output named as asked; plain lists stay lists."""
    if columns is None or isinstance(columns, (Mapping, str)):
        return columns
    columns = list(columns)
    top = {f.name for f in schema.fields}
    if all(c in top for c in columns):
        return columns
    out = {}
    for c in columns:
        if not isinstance(c, str):
            raise InvalidArgumentError(f"column names must be strings, got {c!r}")
        if c in top or c in SYSTEM_COLUMNS:
            out[c] = _quote_path([c])
        elif "." in c and c.split(".")[0] in top:
            out[c] = _quote_path(c.split("."))
        else:
            raise SchemaError(f"no column {c!r} in the dataset (has {sorted(top)})")
    return out


def _orderings(order_by) -> list[ColumnOrdering]:
    if order_by is None:
        return []
    if isinstance(order_by, (str, ColumnOrdering)):
        order_by = [order_by]
    out = []
    for o in order_by:
        if isinstance(o, str):
            o = ColumnOrdering(o)
        elif not isinstance(o, ColumnOrdering):
            raise TypeError(f"orderings must be a list of ColumnOrdering. Got {type(o)} instead.")
        out.append(o)
    return out


def _with_sort_keys(columns, schema: LanceSchema, orderings) -> dict[str, str]:
    """The projection plus one hidden output per sort key."""
    if columns is None:
        columns = [f.name for f in schema.fields]
    if not isinstance(columns, Mapping):
        columns = {c: _quote_path([c]) for c in columns}
    top = {f.name for f in schema.fields}
    out = dict(columns)
    for i, o in enumerate(orderings):
        name = o.column_name
        if name in top or name in SYSTEM_COLUMNS:
            path = [name]
        elif "." in name and name.split(".")[0] in top:
            path = name.split(".")
        else:
            raise SchemaError(f"cannot order by {name!r}: no such column")
        out[f"{_SORT_KEY}{i}"] = _quote_path(path)
    return out
