"""k-nearest-neighbour search, with pylance's ``to_table(nearest=...)`` semantics.

Exact search streams the vector column in chunks of a bounded size (deleted rows and, with
``prefilter=True``, rows failing the filter never reach it); each chunk is ranked against
every query with one BLAS product and folded into a running top-k per query.  Only the
winners' other columns are then read, by row address.  With ``prefilter=False`` the filter
runs on those k rows, so fewer than k may come back, as in pylance.

With an IVF_FLAT, IVF_PQ (8- or 4-bit codes) or IVF_SQ index (l2, cosine, dot) on the
column, of the query's metric, and ``use_index`` left on, the probed partitions are searched instead
(``nprobes`` of them, or pylance's adaptive budget when it is not given), the fragments the
index does not cover exactly, and the two merged.  Other indexes (several segments, HNSW)
fall back to exact search.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from ..errors import InvalidArgumentError
from ..table.filters import compile_filter
from ..table.scanner import ROW_ADDRESS, ROW_ID, ScanOptions, evaluate_filter
from .ivf import IvfIndex, index_metric, live_addresses, usable_index, vector_indices
from .metrics import FLOAT_METRICS, exact_distances, scan_scores, scores, squared_norms, tolerance
from .query import NearestQuery, parse_nearest
from .topk import RunningTopK

DISTANCE = "_distance"
QUERY_INDEX = "query_index"
CHUNK_BYTES = 32 << 20  # vector bytes ranked per BLAS call
SCORE_CELLS = 1 << 24  # bound on the (queries x rows) score matrix of one chunk


class VectorScanner:
    """A planned nearest-neighbour scan; the same running API as the table ``Scanner``."""

    def __init__(
        self,
        ds,
        options: ScanOptions,
        nearest: dict,
        prefilter: bool = False,
        fast_search: bool = False,
    ):
        if not isinstance(prefilter, bool):
            raise InvalidArgumentError(f"prefilter must be True or False, got {prefilter!r}")
        if not isinstance(fast_search, bool):
            raise InvalidArgumentError(f"fast_search must be True or False, got {fast_search!r}")
        self.fast_search = fast_search
        if options.ranges or options.fragments is not None:
            raise InvalidArgumentError("a nearest search covers the whole dataset version")
        self.ds = ds
        self.options = options
        self.prefilter = prefilter
        self.query: NearestQuery = parse_nearest(nearest, ds.schema)
        if not self.query.metric_given and self.query.use_index:
            # as pylance: without a metric, the search takes its index's
            metas = vector_indices(ds, self.query.column)
            metric = index_metric(ds.uri, metas[0]) if len(metas) == 1 else None
            if metric in FLOAT_METRICS and self.query.metric in FLOAT_METRICS:
                self.query.metric = metric
        columns = options.columns
        if columns is not None and (
            isinstance(columns, str) or not all(isinstance(c, str) for c in columns)
        ):
            raise InvalidArgumentError("columns must be a list of column names")
        if columns is not None and self.query.batched:  # a client may echo the schema
            columns = [c for c in columns if c != QUERY_INDEX]
        real = [c for c in columns if c != DISTANCE] if columns is not None else None
        # validates the projection and the filter before any data is read
        self._base = ds.scanner(
            columns=real,
            with_row_id=options.with_row_id,
            with_row_address=options.with_row_address,
        )
        self._names = [f.name for f in self._base.fields]
        self._filter_columns = self._check_filter(options.filter, prefilter)
        if columns is not None and DISTANCE in columns:
            self._names.insert(list(columns).index(DISTANCE), DISTANCE)
        else:
            self._names.append(DISTANCE)

    def _check_filter(self, flt, prefilter: bool) -> list[str]:
        """The dataset columns the filter reads; a post-filter may also name _distance."""
        if flt is None:
            return []
        schema = self.ds.schema
        for meta, kind in ((ROW_ID, pa.uint64()), (ROW_ADDRESS, pa.uint64())):
            if meta not in schema.names:
                schema = schema.append(pa.field(meta, kind))
        if not prefilter:
            schema = schema.append(pa.field(DISTANCE, pa.float32()))
        compiled = compile_filter(flt, schema)
        assert compiled is not None  # flt is a filter
        names = set(compiled.top_level_columns)
        return [n for n in self.ds.schema.names if n in names]

    # -- output schema --------------------------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        by_name = {f.name: f for f in self._base.schema}
        fields = [
            pa.field(DISTANCE, pa.float32()) if n == DISTANCE else by_name[n] for n in self._names
        ]
        if self.options.with_row_id:
            fields.append(pa.field(ROW_ID, pa.uint64()))
        if self.options.with_row_address:
            fields.append(pa.field(ROW_ADDRESS, pa.uint64()))
        if self.query.batched:
            fields.insert(0, pa.field(QUERY_INDEX, pa.int32(), nullable=False))
        return pa.schema(fields)

    # -- running --------------------------------------------------------------------------

    def to_table(self) -> pa.Table:
        table = self._search()
        offset = self.options.offset or 0
        limit = self.options.limit
        if offset or limit is not None:
            table = table.slice(offset, limit)
        return table

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        yield from self.to_table().to_batches(max_chunksize=self.options.batch_size)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def count_rows(self) -> int:
        return self.to_table().num_rows

    def _chunk_rows(self) -> int:
        q = self.query
        width = q.dim * q.queries.dtype.itemsize
        return max(1024, min(CHUNK_BYTES // width, SCORE_CELLS // len(q.queries)))

    def _search(self) -> pa.Table:
        q = self.query
        ranking = q.queries if q.metric == "hamming" else q.queries.astype(np.float32)
        q_norms = (
            np.linalg.norm(q.queries.astype(np.float64), axis=1)
            if q.metric != "hamming"
            else np.zeros(len(q.queries))
        )
        tops = [RunningTopK(q.k, q.metric, v) for v in q.queries]
        fragments = self.ds.get_fragments()
        index = usable_index(self.ds, q.column, q.metric) if q.use_index else None
        fixed: list = [None] * len(tops)
        if index is None and self.fast_search:
            fragments = []  # no index covers anything
        if index is not None:
            if index.fragments is not None and not self.fast_search:
                fragments = [f for f in fragments if f.fragment_id not in index.fragments]
            else:  # fast_search, as pylance: only what the index covers is searched
                fragments = []
            # PQ distances are not comparable with the exact ones of unindexed rows: pylance
            # then re-ranks the PQ top-k exactly (a refine factor of 1)
            refine = q.refine_factor or (1 if fragments else None)
            fixed = self._search_index(index, tops, refine)
        if not fragments:
            return self._materialise(_merge(tops, fixed, q.k))
        # rows no index covers: searched exactly and merged
        for column, keep, row_ids, addresses in self._chunks(fragments):
            vectors, valid = _vectors(column, q.dim, keep)
            if not len(vectors):
                continue
            row_ids, addresses = row_ids[valid], addresses[valid]
            if q.metric == "hamming":
                x, x_norm2 = vectors, None
                chunk_scores = scores(q.metric, x, None, ranking, q_norms)
            else:
                x = vectors.astype(np.float32, copy=False)
                chunk_scores, x_norm2 = scan_scores(q.metric, x, ranking, q_norms)
            for i, top in enumerate(tops):
                tol = tolerance(q.metric, x, x_norm2, float(q_norms[i]))
                top.add(chunk_scores[i], row_ids, addresses, vectors, tol)
        return self._materialise(_merge(tops, fixed, q.k))

    def _chunks(self, fragments) -> Iterator[tuple]:
        """(vector column, live mask or None, row ids, row addresses) of bounded chunks.
        Without a pre-filter the vector column is read straight from each fragment (no
        table is assembled around it); with one, the table scanner filters first."""
        q = self.query
        rows = self._chunk_rows()
        stable = self.ds.stable_row_ids
        if not (self.prefilter and self.options.filter is not None):
            field = next(f for f in self.ds.lance_schema.fields if f.name == q.column)
            for frag in fragments:
                for start in range(0, frag.physical_rows, rows):
                    stop = min(start + rows, frag.physical_rows)
                    column = frag.read([field], (start, stop)).column(0)
                    offsets = np.arange(start, stop, dtype=np.int64)
                    addresses = frag.row_addresses(offsets)
                    ids = frag.row_ids[offsets] if stable else addresses
                    keep = frag.live_mask(start, stop)
                    at = 0
                    for chunk in column.chunks:  # each decoded piece as is: no copy
                        end = at + len(chunk)
                        yield (
                            chunk,
                            None if keep is None else keep[at:end],
                            ids[at:end],
                            addresses[at:end],
                        )
                        at = end
            return
        inner = self.ds.scanner(
            columns=[q.column],
            filter=self.options.filter,
            # row ids are the addresses unless the dataset has stable ones: read them once
            with_row_id=stable,
            with_row_address=True,
            batch_size=rows,
            fragments=fragments,
        )
        for batch in inner.to_batches():
            addresses = batch.column(ROW_ADDRESS).to_numpy()
            ids = batch.column(ROW_ID).to_numpy() if stable else addresses
            yield batch.column(0), None, ids, addresses

    def _search_index(self, index: IvfIndex, tops: list[RunningTopK], refine: int | None) -> list:
        """Candidates from the ``nprobes`` nearest partitions of an IVF index: live rows only,
        and with a pre-filter only the rows that pass it.  IVF_FLAT rows join the running
        top-k; IVF_PQ rows are ranked by their PQ distance (re-ranked exactly over
        ``k * refine`` of them when asked) and returned per query, to be merged."""
        q = self.query
        allowed = None
        if self.prefilter and self.options.filter is not None:
            scan = self.ds.scanner(columns=[], filter=self.options.filter, with_row_address=True)
            allowed = np.concatenate(
                [np.zeros(0, np.uint64)]
                + [b.column(ROW_ADDRESS).to_numpy() for b in scan.to_batches()]
            )
            allowed.sort()
        fixed = []
        for top, query in zip(tops, q.queries, strict=True):
            ids, addresses, data = self._probe(index, query, allowed)
            if index.quantized:
                fixed.append(self._rank_codes(top, ids, addresses, data, refine))
                continue
            fixed.append(None)
            if not len(ids):
                continue
            x = data.astype(np.float32, copy=False)
            x_norm2 = squared_norms(x)
            q32 = query.astype(np.float32)[None, :]
            q_norm = float(np.linalg.norm(query.astype(np.float64)))
            s = scores(q.metric, x, x_norm2, q32, np.array([q_norm], np.float32))[0]
            top.add(s, ids, addresses, data, tolerance(q.metric, x, x_norm2, q_norm))
        return fixed

    def _probe(self, index: IvfIndex, query: np.ndarray, allowed) -> tuple:
        """(row ids, row addresses, stored vectors or PQ distances) of the live, allowed rows
        of the probed partitions.  Without an explicit ``nprobes``, pylance's initial budget,
        then further partitions, nearest first, while fewer than k rows qualify (filters,
        deletions)."""
        q = self.query
        order, _ = index.centroid_order(query)
        budget = q.nprobes or index.default_nprobes(query, q.k, q.refine_factor)
        ids, addrs, data = [], [], []
        found = 0
        start = 0
        while start < len(order):
            stop = max(min(budget, len(order)), 1) if start == 0 else start + 1
            parts = [index.partition(p) for p in order[start:stop].tolist()]
            rows = _concat([part.row_ids for part in parts], np.uint64)
            if index.quantized:
                stored = _concat(
                    [
                        index.code_distances(query, p, part)
                        for p, part in zip(order[start:stop].tolist(), parts, strict=True)
                    ],
                    np.float32,
                )
            else:  # parts is never empty: stop > start
                stored = np.concatenate([part.data for part in parts])
            addresses, keep = self._addresses(rows)
            keep &= live_addresses(self.ds, addresses)
            if allowed is not None:
                pos = np.minimum(np.searchsorted(allowed, addresses), max(len(allowed) - 1, 0))
                keep &= allowed[pos] == addresses if len(allowed) else False
            if not keep.all():
                rows, addresses, stored = rows[keep], addresses[keep], stored[keep]
            ids.append(rows)
            addrs.append(addresses)
            data.append(stored)
            found += len(rows)
            start = stop
            if q.nprobes is not None or found >= q.k:
                break
        if not ids:
            empty = np.zeros(0, np.uint64)
            return empty, empty, np.zeros((0, q.dim), np.float32)
        if len(ids) == 1:
            return ids[0], addrs[0], data[0]
        return np.concatenate(ids), np.concatenate(addrs), np.concatenate(data)

    def _addresses(self, row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Row addresses of an index's row ids (the same unless the dataset has stable row
        ids) and which of them this version still has."""
        if not self.ds.stable_row_ids:
            return row_ids, np.ones(len(row_ids), dtype=bool)
        keys, addrs = self.ds.row_id_map
        pos = np.minimum(np.searchsorted(keys, row_ids), max(len(keys) - 1, 0))
        found = (keys[pos] == row_ids) if len(keys) else np.zeros(len(row_ids), dtype=bool)
        return np.where(found, addrs[pos] if len(keys) else row_ids, row_ids), found

    def _rank_codes(self, top: RunningTopK, ids, addresses, dist, refine: int | None):
        """The k best by PQ or SQ distance, or with ``refine`` the k * refine best re-ranked
        by their exact distance (they join the running top-k with their vectors)."""
        q = self.query
        order = smallest(dist, ids, q.k * (refine or 1))
        if not refine:
            return dist[order], ids[order], addresses[order]
        ids, addresses = ids[order], addresses[order]
        column = self.ds.take_addresses(addresses, columns=[q.column]).column(0)
        vectors, valid = _vectors(column, q.dim)
        exact = exact_distances(q.metric, vectors, top.query)
        top.add(exact, ids[valid], addresses[valid], vectors, 0.0)
        return None

    def _materialise(self, results) -> pa.Table:
        """The winners' rows: projected columns, ``_distance`` and the row id/address, with
        the filter applied here when it was not applied before the search."""
        postfilter = self.options.filter is not None and not self.prefilter
        wanted = [n for n in self._names if n != DISTANCE]
        if postfilter:
            wanted += [n for n in self._filter_columns if n not in wanted]
        parts = []
        for i, (dist, row_ids, addresses) in enumerate(results):
            table = self._take(addresses, wanted)
            table = table.append_column(DISTANCE, pa.array(dist, pa.float32()))
            table = table.append_column(ROW_ID, pa.array(row_ids, pa.uint64()))
            table = table.append_column(ROW_ADDRESS, pa.array(addresses, pa.uint64()))
            if postfilter:
                compiled = compile_filter(self.options.filter, table.schema)
                assert compiled is not None  # postfilter implies a filter
                table = table.filter(pa.array(evaluate_filter(table, compiled.expression)))
            table = table.append_column(
                QUERY_INDEX, pa.array(np.full(table.num_rows, i, np.int32), pa.int32())
            )
            parts.append(table)
        schema = self.schema
        return pa.concat_tables(parts).select(schema.names).cast(schema)

    def _take(self, addresses: np.ndarray, names: list[str]) -> pa.Table:
        """The dataset columns ``names`` of one query's winners, in their order: read per
        fragment straight from its files (they are live rows of this version, each once)."""
        by_name = {f.name: f for f in self.ds.lance_schema.fields}
        fields = [by_name[n] for n in names]
        frags = {f.fragment_id: f for f in self.ds.get_fragments()}
        frag_ids = (addresses >> np.uint64(32)).astype(np.int64)
        offsets = (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)
        parts, positions = [], []
        for fid in sorted(set(frag_ids.tolist())):
            where = np.flatnonzero(frag_ids == fid)
            where = where[np.argsort(offsets[where], kind="stable")]
            parts.append(frags[fid].read(fields, offsets[where]))
            positions.append(where)
        if not parts:
            return self._base.schema.empty_table().select(names)
        table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        order = np.concatenate(positions)
        if (order == np.arange(len(order))).all():
            return table
        back = np.empty(len(order), dtype=np.int64)
        back[order] = np.arange(len(order))
        return table.take(pa.array(back))


def _merge(tops: list[RunningTopK], fixed: list, k: int) -> list:
    """Per query, the running top-k merged with the index's own ranked rows (PQ distances),
    the k best by (distance, row id)."""
    out = []
    for top, extra in zip(tops, fixed, strict=True):
        dist, ids, addresses = top.result()
        if extra is not None:
            dist = np.concatenate([dist, extra[0]])
            ids = np.concatenate([ids, extra[1]])
            addresses = np.concatenate([addresses, extra[2]])
            order = np.lexsort((ids, dist))[:k]
            dist, ids, addresses = dist[order], ids[order], addresses[order]
        out.append((dist, ids, addresses))
    return out


def smallest(dist: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``n`` smallest distances, ordered by (distance, row id): a partial
    selection first, so only the few near the cut are sorted."""
    if len(dist) > n and not np.isnan(dist).any():
        kth = np.partition(dist, n - 1)[n - 1]
        cand = np.flatnonzero(dist <= kth)
    else:  # NaN distances rank last
        cand = np.arange(len(dist))
    return cand[np.lexsort((ids[cand], dist[cand]))][:n]


def _concat(parts: list[np.ndarray], dtype) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _vectors(
    column: pa.Array | pa.ChunkedArray, dim: int, keep: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The non-null vectors of a fixed_size_list column (of the rows ``keep`` allows) as an
    (n, dim) array, and the mask of the rows they come from (rows with a null vector are
    never results, as in pylance)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n = len(column)
    values = column.values.slice(column.offset * dim, n * dim)
    flat = values.to_numpy(zero_copy_only=False)
    if values.null_count and flat.dtype.kind != "f":
        flat = flat.astype(np.float32)
    matrix = flat.reshape(n, dim)
    valid = np.ones(n, dtype=bool) if keep is None else keep
    if column.null_count:
        valid = valid & np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if keep is None and not column.null_count:
        return matrix, valid
    return matrix[valid], valid
