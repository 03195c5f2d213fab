"""``LanceFlightServer``: every Lance dataset under a root, served over Arrow Flight.

The handlers are thin: descriptors are parsed in :mod:`.query`, planned into tickets in
:mod:`.planning` (:mod:`.tickets` makes them self-contained), streamed from the datasets
layer's scanner, written through :mod:`.ingest`, administered through :mod:`.actions`.  Every
handler maps errors through :mod:`.errors`; auth, request logs and metrics are middleware
(:mod:`.auth`, :mod:`.requestlog`, :mod:`.metrics`).  Flight SQL commands (protobuf ``Any``
messages) go to the Flight SQL service when one is attached.  Handlers outside this module
(actions, Flight SQL, REST) get a :class:`.context.ServiceContext`, never the server.

Every handler first checks that the server is ready (the port takes calls as soon as pyarrow
starts it, before the Flight SQL service exists: until then every call is UNAVAILABLE), then
the message sizes (:mod:`.limits`), and runs under the caller's dataset grant
(:mod:`.permissions`).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from lance_format import ROW_ID, PageCache, Scanner, SearchCache, close_iterator, prefetch
from lance_format.errors import CommitConflictError, LanceError

from . import auth as auth_mod
from . import permissions, requestlog, tls, wire
from .actions import ACTIONS
from .catalog import Catalog
from .context import ServiceContext
from .errors import (
    BadRequest,
    NotFound,
    ResourceExhausted,
    Unavailable,
    Unimplemented,
    flight_errors,
    guarded,
)
from .incoming import read_batches, stream_schema
from .ingest import PutOptions, ingest
from .limits import BoundedReader, Limits
from .memory import Reclaimer, ReclaimOnRefusal
from .merge_put import merge_options
from .planning import checked_scanner, flight_info, plan
from .query import Query, parse_descriptor, parse_json
from .readahead import ReadAhead
from .streams import (
    Range,
    batch_stream,
    has_dictionary,
    large_message_bytes,
    message_sized,
    range_stream,
    range_tables,
)
from .tickets import Ticket

if TYPE_CHECKING:
    from .metrics import ServerMetrics
    from .sql.limits import SqlLimits
    from .sql.service import FlightSqlService

log = logging.getLogger("lance_flight")
DEFAULT_CACHE_BYTES = 256 << 20
DEFAULT_PAGE_CACHE_BYTES = 256 << 20


def _entry(fn):
    """Handler prologue: refuse calls until the server is ready, run under the caller's grant."""

    @functools.wraps(fn)
    def handler(self: LanceFlightServer, context: flight.ServerCallContext, *args: Any) -> Any:
        if not self._ready.is_set():
            raise Unavailable("the server is starting; retry in a moment")
        grants = None
        if self.authenticator is not None:
            grants = auth_mod.current_grants(context)
        try:
            if grants is None:
                return fn(self, context, *args)
            identity = auth_mod.current_user(context)
            assert identity is not None  # grants come from the authenticated call
            with permissions.scope(identity.user, grants):
                return fn(self, context, *args)
        except ResourceExhausted:
            self.reclaimer.request()  # the refused message may have been large
            raise

    return handler


class LanceFlightServer(flight.FlightServerBase):
    """Serve the datasets under ``root``.

    ``locations``: where endpoints may be read (this process first, then sibling worker
    processes and advertised servers); default: this server alone.  ``authenticator``
    (:class:`.auth.Authenticator`) turns authentication on for every call; ``tls_cert`` and
    ``tls_key`` turn on TLS; ``metrics`` is a :class:`.metrics.ServerMetrics` to update.
    ``sql`` answers Flight SQL, bounded by ``sql_limits`` (:class:`.sql.limits.SqlLimits`:
    statement timeout, memory limit, threads, concurrent statements; default: its defaults).
    ``middleware`` adds factories to the server's own (request log, metrics, auth); ``limits``
    bounds the size of client messages (:class:`.limits.Limits`); ``large_messages=False``
    sends pyarrow clients no large message (see :mod:`.streams`); further keyword arguments
    (``auth_handler``, ``tls_certificates``, ``verify_client``, ...) go to ``FlightServerBase``
    unchanged.
    """

    def __init__(
        self,
        root: str,
        location: str = "grpc://127.0.0.1:8815",
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        page_cache_bytes: int = DEFAULT_PAGE_CACHE_BYTES,
        locations: list[str] | None = None,
        warm: bool = True,
        authenticator: auth_mod.Authenticator | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        metrics: ServerMetrics | None = None,
        sql: bool = False,
        sql_limits: SqlLimits | None = None,
        middleware: dict[str, flight.ServerMiddlewareFactory] | None = None,
        limits: Limits | None = None,
        storage_options: dict[str, str] | None = None,
        large_messages: bool = True,
        **kwargs: Any,
    ):
        # pyarrow serves from inside super().__init__: everything a call touches exists first
        self._ready = threading.Event()
        self.sql: FlightSqlService | None = None
        self.context = ServiceContext(
            Catalog(
                root,
                SearchCache(cache_bytes, pages=PageCache(page_cache_bytes)),
                storage_options,
            ),
            limits=limits or Limits(),
            metrics=metrics,
        )
        self.authenticator = authenticator
        self.large_messages = large_messages  # see streams.LARGE_MESSAGE_BYTES
        self._deadline: float | None = None  # set by begin_shutdown
        observers: dict[str, flight.ServerMiddlewareFactory] = {
            requestlog.REQUEST_LOG_KEY: requestlog.RequestLogMiddlewareFactory(),
            **(middleware or {}),
        }
        if metrics is not None:
            metrics.watch_cache(self.cache.stats)
            metrics.watch_page_cache(self.cache.page_stats)
            observers["metrics"] = metrics.middleware()
        self.reclaimer = Reclaimer()
        self.readahead = ReadAhead(self._start_ahead)
        self.context.read_ahead_stats = self.readahead.stats
        observers["reclaim"] = ReclaimOnRefusal(self.reclaimer)
        if authenticator is not None:
            options = auth_mod.auth_server_options(authenticator, observers)
        else:
            options = {"middleware": observers}
        if tls_cert or tls_key:
            if tls_cert is None or tls_key is None:
                raise tls.TLSConfigError("TLS needs both a certificate and a key file")
            options |= tls.tls_server_options(tls_cert, tls_key)
        options |= kwargs
        super().__init__(location, **options)
        scheme = location.split("://", 1)[0]
        host = location.split("://", 1)[1].rsplit(":", 1)[0]
        self.location = f"{scheme}://{host}:{self.port}"
        self.context.locations = list(locations) if locations else [self.location]
        self.sql_limits = sql_limits
        self._start_services(sql)
        self._ready.set()
        if warm:
            started = time.perf_counter()
            warmed = self.catalog.warm()
            log.info(
                "warmed search cache: %s in %.2fs, %s",
                warmed,
                time.perf_counter() - started,
                self.cache.stats(),
            )

    # -- the shared state, as handlers see it ---------------------------------------------

    @property
    def catalog(self) -> Catalog:
        return self.context.catalog

    @property
    def cache(self) -> SearchCache:
        return self.context.cache

    @property
    def limits(self) -> Limits:
        return self.context.limits

    @property
    def metrics(self) -> ServerMetrics | None:
        return self.context.metrics

    @property
    def locations(self) -> list[str]:
        return self.context.locations

    # -- helpers ---------------------------------------------------------------------------

    def _start_services(self, sql: bool) -> None:
        """Make the services that share the port (Flight SQL); calls wait for this."""
        if sql:
            self.sql = _sql_service(self.context, self.sql_limits)

    def shutdown(self) -> None:
        super().shutdown()
        self.reclaimer.close()
        self.readahead.close()
        if self.sql is not None:
            self.sql.close()  # the engine's DuckDB, now that no call can use it

    def begin_shutdown(self, grace_seconds: float) -> None:
        """Let running calls go on for ``grace_seconds``; after that, streams still running
        end with UNAVAILABLE (their tickets stay valid at any location serving the root) and
        puts still receiving abort, removing their files.  Call before ``shutdown()``."""
        self._deadline = time.monotonic() + max(0.0, grace_seconds)

    def _check_running(self) -> None:
        if self._deadline is not None and time.monotonic() >= self._deadline:
            raise Unavailable("the server is shutting down; retry the call (at another location)")

    def _require_write(self, context: flight.ServerCallContext) -> None:
        if self.authenticator is not None:
            auth_mod.require_write(context)

    def _sql_for(self, command: bytes) -> FlightSqlService | None:
        """The Flight SQL service when ``command`` (a descriptor command or a ticket) is
        its, else None."""
        return self.sql if self.sql is not None and self.sql.handles(command) else None

    def _plan(self, q: Query):
        ds = self.catalog.open(q.dataset, q.version)
        return plan(ds, q.dataset, q)

    # -- discovery -------------------------------------------------------------------------

    @flight_errors
    @_entry
    def list_flights(self, context, criteria) -> Iterator[flight.FlightInfo]:
        """Every dataset (whose name starts with ``criteria``, when given) at its latest
        version, with the FlightInfo of the whole dataset."""
        self.limits.check_message(len(criteria or b""), "the criteria")
        prefix = criteria.decode("utf-8", "replace") if criteria else ""
        requestlog.annotate(context)
        infos = []
        for name in permissions.readable(self.catalog.names()):
            if not name.startswith(prefix):
                continue
            descriptor = flight.FlightDescriptor.for_path(name)
            try:
                infos.append(
                    flight_info(descriptor, self._plan(Query(dataset=name)), self.locations)
                )
            except LanceError as exc:  # one broken dataset must not hide the others
                log.warning("list_flights: skipping dataset %r: %s", name, exc)
        return iter(infos)

    @flight_errors
    @_entry
    def get_flight_info(self, context, descriptor) -> flight.FlightInfo:
        self.limits.check_descriptor(descriptor)
        sql = None
        if descriptor.descriptor_type == flight.DescriptorType.CMD:
            sql = self._sql_for(descriptor.command)
        if sql is not None:
            return sql.get_flight_info(context, descriptor)
        q = parse_descriptor(descriptor)
        requestlog.annotate(context, dataset=q.dataset)
        p = self._plan(q)
        if len(self.locations) == 1:  # every endpoint is read here: see readahead
            self.readahead.note_plan([t.encode().ticket for t in p.tickets])
        return flight_info(descriptor, p, self.locations)

    @flight_errors
    @_entry
    def get_schema(self, context, descriptor) -> flight.SchemaResult:
        self.limits.check_descriptor(descriptor)
        sql = None
        if descriptor.descriptor_type == flight.DescriptorType.CMD:
            sql = self._sql_for(descriptor.command)
        if sql is not None:
            return sql.get_schema(context, descriptor)
        q = parse_descriptor(descriptor)
        requestlog.annotate(context, dataset=q.dataset)
        ds = self.catalog.open(q.dataset, q.version)
        return flight.SchemaResult(checked_scanner(ds, q).schema)

    # -- reading ---------------------------------------------------------------------------

    @flight_errors
    @_entry
    def do_get(self, context, ticket) -> flight.FlightDataStream:
        raw = ticket.ticket
        self.limits.check_message(len(raw), "the ticket")
        sql = self._sql_for(raw)
        if sql is not None:
            return sql.do_get(context, ticket)
        t = Ticket.decode(raw)
        requestlog.annotate(context, dataset=t.dataset, version=t.version)
        ds = self.catalog.open(t.dataset, t.version)  # the caller's read permission, too
        large = (
            large_message_bytes(requestlog.header(context, "user-agent"))
            if self.large_messages
            else 0
        )
        key = self._whole_key(ds, t, large)
        if key is not None:
            kept = self.cache.pages.get_derived(key) if self.cache.pages is not None else None
            if kept is not None:  # a hot ticket, answered before (see _whole)
                return self._send_whole(context, kept)
        parked = self.readahead.begin(raw)
        try:
            if parked is not None:  # decoded ahead for this very ticket (see readahead)
                schema, tables = parked
            else:
                schema, scanner, items, ranged = self._source(ds, t)
                if not ranged:
                    sized = ((b, b.nbytes) for b in message_sized(prefetch(items)))
                    stream = self._stream(context, sized, raw)
                    return batch_stream(schema, guarded(stream, self, context))
                if key is not None and scanner.slices_cached():
                    whole = self._whole(key, schema, items, t, large)
                    self.readahead.end(raw)
                    return self._send_whole(context, whole)
                tables = prefetch(self._ranges(raw, schema, items, t, large))
        except BaseException:
            self.readahead.end(raw)
            raise
        # whole ranges, cut into messages and grouped on the decoding thread: Flight sends
        # each range's messages without coming back to Python
        return range_stream(schema, guarded(self._stream(context, tables, raw), self, context))

    def _whole_key(self, ds, t: Ticket, large: int) -> tuple | None:
        """The page-cache key of ticket ``t``'s whole answer, for a plain range scan (None
        otherwise): the dataset's location, its version and the commit that made it (a
        dataset removed and made again restarts at version 1), what the ticket reads, and
        whether the answer holds a large message (``large``: see streams)."""
        pages = self.cache.pages
        if pages is None or not pages.enabled or t.row_ids is not None or t.nearest is not None:
            return None
        m = ds.manifest
        return ("flight-ticket", ds.uri, ds.version, m.transaction_file, m.timestamp_ns,
                t.encode().ticket, large > 0)  # fmt: skip

    def _whole(self, key: tuple, schema: pa.Schema, items, t: Ticket, large: int) -> Range:
        """Ticket ``t``'s whole answer, made at once from cached pages (``items``: its
        scan's ranges, all slices of them) and kept in the page cache beside the pages it
        shares memory with: the next read of the ticket is sent by Flight from it alone,
        with no Python between messages, as from a table in memory."""
        started = time.perf_counter()
        try:
            ranges = list(range_tables(schema, items, t.batch_size, large_bytes=large))
        finally:
            close_iterator(items)  # on an error too: its steps stop
        table = pa.concat_tables([r.table for r in ranges]) if ranges else schema.empty_table()
        whole = Range(table, sum(r.nbytes for r in ranges))
        assert self.cache.pages is not None  # a key is only made with a page cache
        self.cache.pages.put_derived(key, whole, table)
        if self.metrics is not None:
            self.metrics.record_decode(time.perf_counter() - started)
        return whole

    def _send_whole(self, context, whole: Range) -> flight.FlightDataStream:
        """Send a whole answer: Flight cuts it at its chunks (the messages) by itself."""
        if self.metrics is not None:
            self.metrics.record_served(whole.table.num_rows, whole.nbytes)
        requestlog.accumulate(context, rows=whole.table.num_rows, bytes=whole.nbytes)
        return flight.RecordBatchStream(whole.table)

    def _source(self, ds, t: Ticket) -> tuple[pa.Schema, Any, Iterator[Any], bool]:
        """What ticket ``t`` reads: its schema, its scanner, its items (decoded ranges, or
        batches), and whether they may travel as ranges (not with dictionary columns: see
        streams)."""
        if t.row_ids is not None:
            schema = ds.scanner(columns=t.columns, with_row_id=t.with_row_id).schema
            return schema, None, _take_batches(ds, t), False
        fragments = ranges = None
        if t.fragment is not None:
            frag = ds.get_fragment(t.fragment)
            if frag is None:
                raise NotFound(f"version {t.version} has no fragment {t.fragment}")
            fragments = [frag]
            if t.start is not None and t.stop is not None:  # they go together
                ranges = {t.fragment: (t.start, t.stop)}
        scanner = ds.scanner(
            columns=t.columns,
            filter=t.filter,
            limit=t.limit,
            offset=t.offset,
            with_row_id=t.with_row_id,
            batch_size=t.batch_size,
            fragments=fragments,
            ranges=ranges,
            **_nearest_args(t),
        )
        schema = scanner.schema
        if isinstance(scanner, Scanner) and not has_dictionary(schema):
            # whole decoded ranges, pages unjoined
            return schema, scanner, scanner.to_ranges(), True
        return schema, scanner, scanner.to_batches(), False

    def _ranges(
        self, raw: bytes, schema: pa.Schema, items, t: Ticket, large: int
    ) -> Iterator[Range]:
        """The ranges of ticket ``raw`` (``large``: its large message, see streams); once
        the last is decoded, the next endpoint of its plan starts decoding ahead (on this
        producer thread's way out)."""
        yield from range_tables(schema, items, t.batch_size, large_bytes=large)
        self.readahead.after(raw)

    def _start_ahead(self, raw: bytes) -> tuple[pa.Schema, Iterator[Range]]:
        """Start producing the ranges of ticket ``raw`` now, for a DoGet to claim; a ticket
        that is not a plain range scan starts nothing (ValueError)."""
        t = Ticket.decode(raw)
        ds = self.catalog.open(t.dataset, t.version)
        schema, _, items, ranged = self._source(ds, t)
        if not ranged:
            close_iterator(items)
            raise ValueError("not a range scan")
        # no large message: the plan's first stream sent one to this client (see streams)
        return schema, prefetch(self._ranges(raw, schema, items, t, 0), started=True)

    def _stream(self, context, sized: Iterator[tuple[Any, int]], ticket: bytes) -> Iterator[Any]:
        """Lazily hand batches (or ranges: tables), each with its Arrow size, to gRPC:
        pulled one at a time, so a slow client slows decoding down, a cancelled one stops
        it, and memory holds a range or two whatever the dataset's size.  Ends the
        read-ahead's record of ``ticket``'s call."""
        try:
            while True:
                self._check_running()
                started = time.perf_counter()
                item = next(sized, None)
                if item is None:
                    return
                batch, nbytes = item
                if self.metrics is not None:
                    self.metrics.record_decode(time.perf_counter() - started)
                    self.metrics.record_served(batch.num_rows, nbytes)
                requestlog.accumulate(context, rows=batch.num_rows, bytes=nbytes)
                if context.is_cancelled():
                    return
                yield batch
        finally:
            self.readahead.end(ticket)
            close_iterator(sized)

    # -- writing ---------------------------------------------------------------------------

    @flight_errors
    @_entry
    def do_put(self, context, descriptor, reader, writer) -> None:
        self.limits.check_descriptor(descriptor)
        sql = None
        if descriptor.descriptor_type == flight.DescriptorType.CMD:
            sql = self._sql_for(descriptor.command)
        if sql is not None:
            # parameters are held whole; an ingest streams to disk like a put
            whole = not sql.is_ingest(descriptor.command)
            reader = BoundedReader(reader, self.limits, whole=whole)
            sql.do_put(context, descriptor, reader, writer)
            return
        reader = BoundedReader(reader, self.limits)
        self._require_write(context)
        if descriptor.descriptor_type == flight.DescriptorType.PATH:
            q = parse_descriptor(descriptor)
            opts = PutOptions(dataset=q.dataset, mode="append")
        else:
            opts = _put_options(parse_json(descriptor.command, "the put command"))
        requestlog.annotate(context, dataset=opts.dataset, mode=opts.mode)
        what = "the put"
        schema = stream_schema(reader, what)
        if schema is None:
            raise BadRequest("the put sent no data: a stream needs at least its schema")

        def on_rows(rows: int, nbytes: int) -> None:
            requestlog.accumulate(context, rows=rows, bytes=nbytes)
            if self.metrics is not None:
                self.metrics.record_written(rows, nbytes)

        try:
            batches = read_batches(reader, schema, what, context, self._check_running)
            result = ingest(self.catalog, opts, schema, batches, on_rows=on_rows)
        except CommitConflictError:
            if self.metrics is not None:
                self.metrics.record_commit_conflict()
            raise
        writer.write(pa.py_buffer(json.dumps(result).encode()))

    @flight_errors
    def do_exchange(self, context, descriptor, reader, writer) -> None:
        raise Unimplemented("DoExchange is not supported: read with DoGet, write with DoPut")

    # -- actions ---------------------------------------------------------------------------

    @flight_errors
    @_entry
    def list_actions(self, context) -> list[tuple[str, str]]:
        out = [(name, a.description) for name, a in ACTIONS.items()]
        if self.sql is not None:
            out += self.sql.list_actions()
        return out

    @flight_errors
    @_entry
    def do_action(self, context, action) -> Iterator[flight.Result]:
        kind = action.type
        self.limits.check_message(action.body.size if action.body else 0, "the action body")
        if self.sql is not None and self.sql.handles_action(kind):
            return self.sql.do_action(context, action)
        entry = ACTIONS.get(kind)
        if entry is None:
            # UNIMPLEMENTED, as Arrow's own servers answer an action they lack: clients
            # ignore it for optional ones (the ADBC driver's CloseSession on close)
            if kind in SESSION_ACTIONS:
                requestlog.expect_failure(context)
            raise Unimplemented(f"unknown action {kind!r}; list_actions names them")
        raw = parse_json(action.body.to_pybytes() if action.body else b"", "the action body")
        if entry.mutates:
            self._require_write(context)
            if isinstance(raw.get("dataset"), str):
                permissions.check_write(raw["dataset"])
        if "dataset" in raw:
            requestlog.annotate(context, dataset=str(raw["dataset"])[:200])
        body = wire.parse(entry.body, raw, "the action body")
        if self.metrics is not None:
            self.metrics.record_action(kind)
        result = entry.fn(self.context, body)
        return iter([flight.Result(pa.py_buffer(json.dumps(result, default=str).encode()))])


# Flight's optional server-session actions: this server keeps no sessions (every call
# carries its own credentials), so a client's probe for them is answered UNIMPLEMENTED
SESSION_ACTIONS = frozenset({"SetSessionOptions", "GetSessionOptions", "CloseSession"})


def _put_options(raw: dict) -> PutOptions:
    """A put command (:class:`.wire.PutCommand`) as the writer's options."""
    cmd = wire.parse(wire.PutCommand, raw, "the put command")
    if cmd.mode == "merge":
        return PutOptions(dataset=cmd.dataset, mode="merge", merge=merge_options(cmd))
    return PutOptions(
        dataset=cmd.dataset,
        mode=cmd.mode,
        data_storage_version=cmd.data_storage_version,
        max_rows_per_file=cmd.max_rows_per_file or PutOptions.max_rows_per_file,
        idempotency_key=cmd.idempotency_key,
        stage=cmd.stage,
        job=cmd.job,
    )


def _nearest_args(t: Ticket) -> dict:
    """The search arguments of a nearest-neighbour ticket, none for a plain scan."""
    return {} if t.nearest is None else {"nearest": t.nearest, "prefilter": t.prefilter}


def _take_batches(ds, t: Ticket) -> Iterator[pa.RecordBatch]:
    """Rows by row id, ``batch_size`` ids at a time (bounded memory), in the order asked."""
    ids = np.asarray(t.row_ids, dtype=np.uint64)
    for i in range(0, len(ids), t.batch_size):
        chunk = ids[i : i + t.batch_size]
        table = ds.take_rows(chunk, columns=t.columns, skip_deleted=False)  # one row per id
        if t.with_row_id:
            table = table.append_column(ROW_ID, pa.array(chunk, pa.uint64()))
        yield from table.combine_chunks().to_batches()


def _sql_service(context: ServiceContext, limits: SqlLimits | None) -> FlightSqlService | None:
    """The Flight SQL service over the same catalog, when its dependencies (DuckDB) are
    present."""
    try:
        from .sql.service import FlightSqlService
    except ImportError:
        return None
    return FlightSqlService(context, limits=limits)


__all__ = ["LanceFlightServer", "BadRequest"]
