"""From a query to a ``FlightInfo``: the projected schema, sizes and the endpoints.

One endpoint per fragment, or per page-aligned physical row range when a fragment holds more
than ``split_rows`` rows, so clients (and Spark) read endpoints in parallel and no page of the
heaviest projected column is decoded twice.  ``split_rows`` defaults to 1Mi rows: large enough
that an endpoint's fixed costs (a round trip, opening a stream, a page straddling the cut)
vanish next to its decode time, small enough that lineitem SF1 (6M rows) gives a 2-core
machine or a small Spark cluster several partitions per worker.

``limit``/``offset`` queries need the global row order.  Without a filter the live row counts
say exactly which physical rows the window covers, so they still get one endpoint per range
(``ordered``: concatenate them in endpoint order); with a filter they get a single ordered
endpoint that scans, filters and counts.  ``row_ids`` queries become ``take`` endpoints of at
most ``ROW_IDS_PER_ENDPOINT`` ids, in the order given.

Endpoints are spread round-robin over the server's locations (worker processes, advertised
servers), each listing its own location first and the others after as fallbacks; a
single-location server lists none, which tells clients "this same connection".

``total_records`` is exact when there is no filter (live rows, the limit window, or the number
of row ids), -1 otherwise.  ``total_bytes`` is the on-disk size of the projected columns' pages
(compressed bytes, deleted rows included): an estimate of the transfer, -1 with a filter or
row ids, where it would mislead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from lance_format import Dataset, Scanner
from lance_format import LanceFragment as Fragment
from lance_format.errors import InvalidArgumentError, SchemaError
from lance_format.schema import LanceField
from lance_format.vector import VectorScanner

from .errors import BadRequest
from .query import Query
from .tickets import Ticket

ROW_IDS_PER_ENDPOINT = 1 << 20


@dataclass
class Plan:
    schema: pa.Schema
    tickets: list[Ticket]
    total_records: int
    total_bytes: int
    ordered: bool


def checked_scanner(ds: Dataset, q: Query) -> Scanner | VectorScanner:
    """The scanner of the query's projection and filter; a bad column or filter is a
    BadRequest naming the key."""
    if q.nearest is None:
        try:
            ds.scanner(columns=q.columns)
        except (InvalidArgumentError, SchemaError) as exc:
            raise BadRequest(f"'columns': {exc.problem}") from None
    else:  # the columns may name _distance; the search checks them
        try:
            return ds.scanner(
                columns=q.columns,
                filter=q.filter,
                with_row_id=q.with_row_id,
                nearest=q.nearest,
                prefilter=q.prefilter,
            )
        except (InvalidArgumentError, SchemaError) as exc:
            raise BadRequest(f"'nearest': {exc.problem}") from None
    try:
        return ds.scanner(columns=q.columns, filter=q.filter, with_row_id=q.with_row_id)
    except (InvalidArgumentError, SchemaError) as exc:
        raise BadRequest(f"'filter': {exc.problem}") from None


def plan(ds: Dataset, name: str, q: Query) -> Plan:
    """Validate the query against the version (columns, filter) and cut it into tickets."""
    scanner = checked_scanner(ds, q)
    schema = scanner.schema
    base: dict[str, Any] = dict(
        dataset=name,
        version=ds.version,
        columns=q.columns,
        filter=q.filter,
        with_row_id=q.with_row_id,
        batch_size=q.batch_size,
    )
    if q.nearest is not None:
        # one endpoint: the top-k is global, so the server merges it across fragments
        ticket = Ticket(
            **base, limit=q.limit, offset=q.offset, nearest=q.nearest, prefilter=q.prefilter
        )
        return Plan(schema, [ticket], -1, -1, True)
    assert isinstance(scanner, Scanner)  # a nearest query returned above
    fragments = ds.get_fragments()
    if q.row_ids is not None:
        ids = q.row_ids
        tickets = [
            Ticket(**base, row_ids=ids[i : i + ROW_IDS_PER_ENDPOINT])
            for i in range(0, len(ids), ROW_IDS_PER_ENDPOINT)
        ]
        return Plan(schema, tickets, len(ids), -1, True)
    if q.filter is not None:
        if q.limit is not None or q.offset:
            ticket = Ticket(**base, limit=q.limit, offset=q.offset)
            return Plan(schema, [ticket], -1, -1, True)
        windows = [(f, 0, f.physical_rows) for f in fragments]
        return Plan(schema, _range_tickets(base, windows, scanner.fields, q), -1, -1, False)
    counts = [f.count_rows() for f in fragments]
    live = sum(counts)
    nbytes = projected_bytes(fragments, scanner.fields)
    if q.limit is None and not q.offset:
        windows = [(f, 0, f.physical_rows) for f in fragments]
        return Plan(schema, _range_tickets(base, windows, scanner.fields, q), live, nbytes, False)
    first = min(q.offset or 0, live)
    last = live if q.limit is None else min(live, first + q.limit)
    windows = list(live_window(fragments, counts, first, last))
    tickets = _range_tickets(base, windows, scanner.fields, q)
    share = (last - first) / live if live else 0.0
    return Plan(schema, tickets, last - first, int(nbytes * share) if nbytes >= 0 else -1, True)


def _range_tickets(
    base: dict, windows: Iterable[tuple[Fragment, int, int]], fields, q: Query
) -> list[Ticket]:
    tickets = []
    for frag, lo, hi in windows:
        for start, stop in split_fragment(frag, fields, q.split_rows, lo, hi):
            tickets.append(Ticket(**base, fragment=frag.fragment_id, start=start, stop=stop))
    return tickets


def live_window(
    fragments: Sequence[Fragment], counts: Sequence[int], first: int, last: int
) -> Iterable[tuple[Fragment, int, int]]:
    """The physical row ranges holding live rows ``first .. last-1`` of the version (in scan
    order): a ranged scan drops the deleted rows inside them, so it returns exactly those."""
    cum = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    for i, frag in enumerate(fragments):
        a, b = max(first, int(cum[i])), min(last, int(cum[i + 1]))
        if a >= b:
            continue
        a, b = a - int(cum[i]), b - int(cum[i])  # live rows a..b-1 of this fragment
        if not frag.pb.HasField("deletion_file"):
            yield frag, a, b
        else:
            offsets = frag.live_offsets
            yield frag, int(offsets[a]), int(offsets[b - 1]) + 1


def split_fragment(
    frag: Fragment,
    fields,
    split_rows: int,
    lo: int = 0,
    hi: int | None = None,
) -> list[tuple[int, int]]:
    """Physical row ranges tiling ``[lo, hi)`` of about ``split_rows`` rows each, cut where
    pages of the heaviest projected column start (greedy: a range closes at the first page
    start at or after ``split_rows`` rows)."""
    hi = frag.physical_rows if hi is None else hi
    if hi <= lo:
        return []
    if hi - lo <= split_rows:
        return [(lo, hi)]
    bounds = frag.page_boundaries(fields or None)
    out = []
    start = lo
    while start < hi:
        i = int(np.searchsorted(bounds, start + split_rows, side="left"))
        stop = min(int(bounds[i]) if i < len(bounds) else hi, hi)
        if hi - stop < split_rows // 4:  # no sliver at the end
            stop = hi
        out.append((start, stop))
        start = stop
    return out


def _field_ids(fields: Iterable[LanceField]) -> set[int]:
    out: set[int] = set()
    for f in fields:
        out.add(f.id)
        out |= _field_ids(f.children)
    return out


def projected_bytes(fragments: Sequence[Fragment], fields: Sequence[LanceField]) -> int:
    """Bytes of the projected columns' pages on disk (from file metadata, which the warm
    cache holds), or by the projected share of the fields when a file does not map fields
    to columns."""
    ids = _field_ids(fields)
    total = 0
    for frag in fragments:
        readers = frag.readers()
        for df, reader in zip(frag.pb.files, readers, strict=False):
            mapped = len(df.fields) and len(df.fields) == len(df.column_indices)
            try:
                columns = reader.metadata.columns
                if mapped:
                    wanted = {
                        c
                        for f, c in zip(df.fields, df.column_indices, strict=True)
                        if f in ids and 0 <= c < len(columns)
                    }
                    total += sum(columns[c].stored_bytes() for c in wanted)
                    continue
            except (AttributeError, TypeError):
                pass
            held = [f for f in df.fields if f in ids]
            share = len(held) / len(df.fields) if len(df.fields) else 1.0
            total += int(df.file_size_bytes * share)
    return total


def flight_info(
    descriptor: flight.FlightDescriptor, p: Plan, locations: list[str]
) -> flight.FlightInfo:
    endpoints = []
    for i, t in enumerate(p.tickets):
        if len(locations) > 1:
            k = i % len(locations)
            locs = locations[k:] + locations[:k]
        else:
            locs = []
        endpoints.append(flight.FlightEndpoint(t.encode(), locs))
    return flight.FlightInfo(
        p.schema, descriptor, endpoints, p.total_records, p.total_bytes, ordered=p.ordered
    )
