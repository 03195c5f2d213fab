"""From a query to a ``FlightInfo``: the projected schema, sizes and the endpoints.

One endpoint per fragment, or per page-aligned physical row range when a fragment holds more
than ``split_rows`` rows, so clients (and Spark) read endpoints in parallel and no page of the
heaviest projected column is decoded twice.  Queries with ``limit``/``offset`` need the global
row order, so they get one ordered endpoint.  Endpoints are spread round-robin over the
server's locations (worker processes, advertised servers), each listing the others as
fallbacks; a single-location server lists none, which means "this same connection".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from lance_format.table.dataset import Dataset
from lance_format.table.fragment import Fragment

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


def plan(ds: Dataset, name: str, q: Query) -> Plan:
    """Validate the query against the version (columns, filter) and cut it into tickets."""
    scanner = ds.scanner(columns=q.columns, filter=q.filter, with_row_id=q.with_row_id)
    schema = scanner.schema
    base = dict(
        dataset=name,
        version=ds.version,
        columns=q.columns,
        filter=q.filter,
        with_row_id=q.with_row_id,
        batch_size=q.batch_size,
    )
    fragments = ds.get_fragments()
    nbytes = _estimate_bytes(ds, fragments, len(scanner.fields))
    if q.row_ids is not None:
        ids = q.row_ids
        tickets = [
            Ticket(**base, row_ids=ids[i : i + ROW_IDS_PER_ENDPOINT])
            for i in range(0, max(len(ids), 1), ROW_IDS_PER_ENDPOINT)
        ]
        return Plan(schema, tickets, -1, -1, True)
    live = None if q.filter is not None else sum(f.count_rows() for f in fragments)
    if q.limit is not None or q.offset:
        total = -1
        if live is not None:
            total = max(0, live - (q.offset or 0))
            total = total if q.limit is None else min(total, q.limit)
        ticket = Ticket(**base, limit=q.limit, offset=q.offset)
        return Plan(schema, [ticket], total, -1, True)
    tickets = []
    for frag in fragments:
        for start, stop in split_fragment(frag, scanner.fields, q.split_rows):
            tickets.append(Ticket(**base, fragment=frag.fragment_id, start=start, stop=stop))
    return Plan(schema, tickets, -1 if live is None else live, nbytes, False)


def split_fragment(frag: Fragment, fields, split_rows: int) -> list[tuple[int, int]]:
    """Physical row ranges of about ``split_rows`` rows, cut where pages start."""
    n = frag.physical_rows
    if n <= split_rows:
        return [(0, n)] if n else []
    bounds = frag.page_boundaries(fields or None)
    out = []
    start = 0
    # greedy: close a range at the first page boundary at or after start + split_rows
    while start < n:
        i = int(np.searchsorted(bounds, start + split_rows, side="left"))
        stop = int(bounds[i]) if i < len(bounds) else n
        out.append((start, stop))
        start = stop
    return out


def _estimate_bytes(ds: Dataset, fragments: list[Fragment], projected: int) -> int:
    """Bytes on disk of the projected columns, estimated by the share of top-level fields."""
    total = sum(f.file_size_bytes for frag in fragments for f in frag.pb.files)
    if not total:
        return -1
    fields = len(ds.lance_schema.fields) or 1
    return int(total * min(1.0, projected / fields))


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
