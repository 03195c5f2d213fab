"""The Flight SQL entry points the Flight server delegates to.

``LanceFlightServer`` routes a call here when :meth:`FlightSqlService.handles` says its
descriptor command or ticket is an Any-packed Flight SQL message, or when
:meth:`FlightSqlService.handles_action` claims an action.  Every entry point turns errors
into the Flight error kinds of :mod:`.errors`, so a bad statement never harms the server.

Metadata commands are answered statelessly: GetFlightInfo returns one endpoint whose ticket
is the command itself, and DoGet computes the answer.  Statement tickets are self-contained
(see :mod:`.statements`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator

import duckdb
import pyarrow as pa
import pyarrow.flight as flight
from google.protobuf.message import Message

from flight_server import requestlog
from flight_server.auth import require_write
from flight_server.context import ServiceContext
from flight_server.incoming import read_batches, stream_schema
from flight_server.ingest import PutOptions
from flight_server.ingest import ingest as server_ingest
from flight_server.permissions import readable
from flight_server.streams import batch_stream
from lance_format.errors import InvalidArgumentError, UnsupportedError

from . import flight_sql_pb2 as pb
from . import metadata, protocol
from .engine import Execution, ScanLog, SqlEngine
from .errors import to_flight
from .ingest import plan_ingest
from .limits import Governor, SqlLimits, Watch
from .naming import TableName
from .sqlinfo import SQL_INFO_SCHEMA, info_table
from .statements import Statements, read_params

__all__ = ["FlightSqlService"]

_METADATA = protocol.METADATA_COMMANDS
_NO_TRANSACTIONS = "transactions are not supported: every statement commits on its own"


class FlightSqlService:
    """Flight SQL over the datasets of ``context`` (the server's
    :class:`flight_server.context.ServiceContext`: its catalog's ``names``, ``open``, and
    ``path_of``/``exists`` for bulk ingest; its metrics, when on, count result rows).

    ``limits`` (:class:`.limits.SqlLimits`) bound the engine's DuckDB, shared by all
    statements (memory, threads), and each statement (work time, how many run at once).
    Writes (DELETE, ingest) call :func:`flight_server.auth.require_write`, a no-op when the
    server runs without auth."""

    def __init__(
        self,
        context: ServiceContext,
        *,
        limits: SqlLimits | None = None,
        result_batch_rows: int = 64 * 1024,
        scan_batch_rows: int | None = None,
        scan_log: ScanLog | None = None,
    ):
        catalog = context.catalog
        self.catalog = catalog
        self.metrics = context.metrics
        self.limits = limits or SqlLimits()
        self.governor = Governor(self.limits)
        self.engine = SqlEngine(
            catalog,
            threads=self.limits.duckdb_threads,
            memory_limit=self.limits.duckdb_memory_limit,
            result_batch_rows=result_batch_rows,
            scan_batch_rows=scan_batch_rows,
            log=scan_log,
        )
        self.statements = Statements(self.engine)
        self._running: dict[bytes, set[Watch]] = {}  # per ticket: its running streams
        self._lock = threading.Lock()

    def _fail(self, error: BaseException, context: flight.ServerCallContext) -> BaseException:
        return to_flight(error, root=self.catalog.root, context=context)

    def close(self) -> None:
        """Release the SQL engine (its DuckDB database); call when the server shuts down."""
        self.governor.close()
        self.engine.close()

    @property
    def scan_log(self) -> ScanLog:
        """The recent scans (dataset, columns and filters pushed, rows read), for tests."""
        return self.engine.log

    # -- routing -----------------------------------------------------------------------------

    @staticmethod
    def handles(cmd: bytes) -> bool:
        """Whether a descriptor command or ticket is an Any-packed Flight SQL message."""
        return protocol.is_flight_sql(cmd)

    @staticmethod
    def handles_action(action_type: str, body: bytes | None = None) -> bool:
        """Whether an action is Flight SQL's.  ``CancelFlightInfo`` (Flight's own action) is
        claimed unless its ``body`` is given and names no Flight SQL ticket: the server's
        plain streams are not cancellable this way."""
        if action_type == "CancelFlightInfo" and body is not None:
            try:
                req = pb.ActionCancelQueryRequest.FromString(bytes(body))
                info = flight.FlightInfo.deserialize(req.info)
            except Exception:
                return False
            return any(protocol.is_flight_sql(e.ticket.ticket) for e in info.endpoints)
        return action_type in protocol.ACTION_TYPES

    @staticmethod
    def is_ingest(cmd: bytes) -> bool:
        """Whether a DoPut command is a bulk ingest (its data streams to disk)."""
        try:
            return isinstance(protocol.unpack(cmd), pb.CommandStatementIngest)
        except InvalidArgumentError:
            return False

    @staticmethod
    def list_actions() -> list[tuple[str, str]]:
        return list(protocol.ACTION_TYPES.items())

    # -- GetFlightInfo / GetSchema -----------------------------------------------------------

    def get_flight_info(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor
    ) -> flight.FlightInfo:
        try:
            cmd = protocol.unpack(descriptor.command)
            if isinstance(cmd, _METADATA):
                schema = self._metadata_schema(cmd)
                ticket = flight.Ticket(descriptor.command)
                return flight.FlightInfo(
                    schema, descriptor, [flight.FlightEndpoint(ticket, [])], -1, -1
                )
            sql, params = self._query_of(cmd)
            with self.governor.statement(context) as watch:
                return self.statements.flight_info(
                    sql, params, descriptor, on_delete=lambda: require_write(context), watch=watch
                )
        except Exception as e:
            raise self._fail(e, context) from None

    def get_schema(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor
    ) -> flight.SchemaResult:
        try:
            cmd = protocol.unpack(descriptor.command)
            if isinstance(cmd, _METADATA):
                return flight.SchemaResult(self._metadata_schema(cmd))
            sql, params = self._query_of(cmd)
            with self.governor.statement(context) as watch:
                return flight.SchemaResult(self.statements.schema(sql, params, watch))
        except Exception as e:
            raise self._fail(e, context) from None

    def _query_of(self, cmd: Message) -> tuple[str, pa.Table | None]:
        if isinstance(cmd, pb.CommandStatementQuery):
            if cmd.HasField("transaction_id"):
                raise UnsupportedError(_NO_TRANSACTIONS)
            return cmd.query, None
        if isinstance(cmd, pb.CommandPreparedStatementQuery):
            h = self.statements.resolve_handle(cmd.prepared_statement_handle)
            return h.sql, h.params
        if isinstance(cmd, pb.CommandStatementSubstraitPlan):
            raise UnsupportedError("Substrait plans are not supported; send SQL")
        raise InvalidArgumentError(
            f"{cmd.DESCRIPTOR.name} is not a query: send it with "
            + (
                "DoPut"
                if "Update" in cmd.DESCRIPTOR.name or "Ingest" in cmd.DESCRIPTOR.name
                else "DoGet"
            )
        )

    @staticmethod
    def _metadata_schema(cmd: Message) -> pa.Schema:
        if isinstance(cmd, pb.CommandGetSqlInfo):
            return SQL_INFO_SCHEMA
        if isinstance(cmd, pb.CommandGetXdbcTypeInfo):
            return metadata.XDBC_TYPE_INFO_SCHEMA
        if isinstance(cmd, pb.CommandGetCatalogs):
            return metadata.CATALOGS_SCHEMA
        if isinstance(cmd, pb.CommandGetDbSchemas):
            return metadata.DB_SCHEMAS_SCHEMA
        if isinstance(cmd, pb.CommandGetTables):
            return (
                metadata.TABLES_WITH_SCHEMA_SCHEMA if cmd.include_schema else metadata.TABLES_SCHEMA
            )
        if isinstance(cmd, pb.CommandGetTableTypes):
            return metadata.TABLE_TYPES_SCHEMA
        if isinstance(cmd, pb.CommandGetPrimaryKeys):
            return metadata.PRIMARY_KEYS_SCHEMA
        return metadata.KEYS_SCHEMA

    def _metadata_table(self, cmd: Message) -> pa.Table:
        def opt(name: str) -> str | None:
            return getattr(cmd, name) if cmd.HasField(name) else None

        if isinstance(cmd, pb.CommandGetSqlInfo):
            return info_table(cmd.info)
        if isinstance(cmd, pb.CommandGetXdbcTypeInfo):
            return metadata.xdbc_type_info(cmd.data_type if cmd.HasField("data_type") else None)
        if isinstance(cmd, pb.CommandGetCatalogs):
            return metadata.catalogs()
        if isinstance(cmd, pb.CommandGetDbSchemas):
            return metadata.db_schemas(
                readable(self.catalog.names()), opt("catalog"), opt("db_schema_filter_pattern")
            )
        if isinstance(cmd, pb.CommandGetTables):
            return metadata.tables(
                readable(self.catalog.names()),
                opt("catalog"),
                opt("db_schema_filter_pattern"),
                opt("table_name_filter_pattern"),
                cmd.table_types,
                self._table_schema if cmd.include_schema else None,
            )
        if isinstance(cmd, pb.CommandGetTableTypes):
            return metadata.table_types()
        return metadata.empty_keys(primary=isinstance(cmd, pb.CommandGetPrimaryKeys))

    def _table_schema(self, name: TableName) -> pa.Schema:
        return self.catalog.open(name.dataset).schema

    # -- DoGet -------------------------------------------------------------------------------

    def do_get(
        self, context: flight.ServerCallContext, ticket: flight.Ticket
    ) -> flight.FlightDataStream:
        key = bytes(ticket.ticket)
        try:
            msg = protocol.unpack(ticket.ticket)
            if isinstance(msg, _METADATA):
                return flight.RecordBatchStream(self._metadata_table(msg))
            if not isinstance(msg, pb.TicketStatementQuery):
                raise InvalidArgumentError(f"{msg.DESCRIPTOR.name} is not a ticket")
            # registered before DuckDB starts: a blocking plan (an aggregate, a sort) runs
            # while the execution opens, and CancelFlightInfo must reach it there too
            watch = self._start(key, context)
            try:
                schema, batches, execution = self.statements.open_ticket(msg, watch)
            except BaseException:
                self._end(key, watch)
                raise
        except Exception as e:
            raise self._fail(e, context) from None
        stream = self._stream(context, key, batches, execution, watch)
        # a generator never started runs no ``finally``: when gRPC drops the stream before
        # its first batch (the client left), this releases the slot and the connection
        weakref.finalize(stream, self._finish, key, watch, execution)
        return batch_stream(schema, stream)

    def _start(self, key: bytes, context: flight.ServerCallContext) -> Watch:
        watch = self.governor.admit(context)
        with self._lock:
            self._running.setdefault(key, set()).add(watch)
        return watch

    def _end(self, key: bytes, watch: Watch) -> None:
        self.governor.release(watch)
        with self._lock:
            running = self._running.get(key)
            if running is not None:
                running.discard(watch)
                if not running:
                    del self._running[key]

    def _stream(
        self,
        context: flight.ServerCallContext,
        key: bytes,
        batches: Iterator[pa.RecordBatch],
        execution: Execution | None,
        watch: Watch,
    ) -> Iterator[pa.RecordBatch]:
        metrics = self.metrics
        try:
            for batch in batches:
                if context.is_cancelled():
                    watch.stop("cancelled")
                    return
                requestlog.accumulate(context, rows=batch.num_rows, bytes=batch.nbytes)
                if metrics is not None:
                    metrics.record_served(batch.num_rows, batch.nbytes)
                yield batch
        except Exception as e:
            # DuckDB reports an interrupt through the Arrow stream as a plain error
            if isinstance(e, duckdb.InterruptException) or watch.reason == "cancelled":
                raise flight.FlightCancelledError("the query was cancelled") from None
            raise self._fail(e, context) from None
        finally:
            self._finish(key, watch, execution)

    def _finish(self, key: bytes, watch: Watch, execution: Execution | None) -> None:
        """A DoGet's end, however it ends (idempotent)."""
        if execution is not None:
            execution.close()
        self._end(key, watch)

    # -- DoPut -------------------------------------------------------------------------------

    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        try:
            cmd = protocol.unpack(descriptor.command)
            if isinstance(cmd, pb.CommandPreparedStatementQuery):
                handle = self.statements.bind_parameters(
                    cmd.prepared_statement_handle, read_params(reader)
                )
                reply: Message = pb.DoPutPreparedStatementResult(prepared_statement_handle=handle)
            elif isinstance(cmd, pb.CommandStatementUpdate):
                if cmd.HasField("transaction_id"):
                    raise UnsupportedError(_NO_TRANSACTIONS)
                require_write(context)
                params = read_params(reader)
                with self.governor.statement(context) as watch:
                    count = self.statements.update(cmd.query, params, watch)
                reply = pb.DoPutUpdateResult(record_count=count)
            elif isinstance(cmd, pb.CommandPreparedStatementUpdate):
                require_write(context)
                h = self.statements.resolve_handle(cmd.prepared_statement_handle)
                params = read_params(reader)
                with self.governor.statement(context) as watch:
                    count = self.statements.update(
                        h.sql, h.params if params is None else params, watch
                    )
                reply = pb.DoPutUpdateResult(record_count=count)
            elif isinstance(cmd, pb.CommandStatementIngest):
                require_write(context)
                reply = pb.DoPutUpdateResult(record_count=self._ingest(context, cmd, reader))
            else:
                raise InvalidArgumentError(f"{cmd.DESCRIPTOR.name} cannot be sent with DoPut")
            writer.write(pa.py_buffer(reply.SerializeToString()))
        except Exception as e:
            raise self._fail(e, context) from None

    def _ingest(
        self,
        context: flight.ServerCallContext,
        cmd: pb.CommandStatementIngest,
        reader: flight.MetadataRecordBatchReader,
    ) -> int:
        """Through the server's do_put path: fragments written as the stream arrives, one
        conflict-checked commit at its end, nothing left behind on failure."""
        plan = plan_ingest(cmd, self.catalog.exists)
        opts = PutOptions(dataset=plan.dataset, mode=plan.mode)
        if "max_rows_per_file" in plan.options:
            opts.max_rows_per_file = int(plan.options["max_rows_per_file"])
        if "data_storage_version" in plan.options:
            opts.data_storage_version = str(plan.options["data_storage_version"])
        requestlog.annotate(context, dataset=plan.dataset, mode=plan.mode)
        metrics = self.metrics

        def on_rows(rows: int, nbytes: int) -> None:
            requestlog.accumulate(context, rows=rows, bytes=nbytes)
            if metrics is not None:
                metrics.record_written(rows, nbytes)

        what = "the ingest"
        schema = stream_schema(reader, what)
        if schema is None:
            raise InvalidArgumentError(
                "the ingest sent no data: a stream needs at least its schema"
            )
        batches = read_batches(reader, schema, what, context)
        result = server_ingest(self.catalog, opts, schema, batches, on_rows=on_rows)
        return int(result["rows_written"])

    # -- DoAction ----------------------------------------------------------------------------

    def do_action(
        self, context: flight.ServerCallContext, action: flight.Action
    ) -> Iterator[flight.Result]:
        try:
            return iter(self._action(action.type, action.body.to_pybytes() if action.body else b""))
        except Exception as e:
            raise self._fail(e, context) from None

    def _action(self, kind: str, body: bytes) -> list[flight.Result]:
        if kind == "CreatePreparedStatement":
            req = protocol.unpack(body)
            if not isinstance(req, pb.ActionCreatePreparedStatementRequest):
                raise InvalidArgumentError("CreatePreparedStatement needs its request message")
            if req.HasField("transaction_id"):
                raise UnsupportedError(_NO_TRANSACTIONS)
            result = self.statements.prepare(req.query)
            return [flight.Result(protocol.pack(result))]
        if kind == "ClosePreparedStatement":
            req = protocol.unpack(body)
            if not isinstance(req, pb.ActionClosePreparedStatementRequest):
                raise InvalidArgumentError("ClosePreparedStatement needs its request message")
            self.statements.close(req.prepared_statement_handle)
            return []
        if kind == "CancelQuery":
            req = protocol.unpack(body)
            if not isinstance(req, pb.ActionCancelQueryRequest):
                raise InvalidArgumentError("CancelQuery needs its request message")
            status = self.cancel(flight.FlightInfo.deserialize(req.info))
            return [flight.Result(protocol.pack(pb.ActionCancelQueryResult(result=status)))]
        if kind == "CancelFlightInfo":
            # Flight's CancelFlightInfoRequest/Result have the wire shape of CancelQuery's
            # messages (field 1: the FlightInfo bytes / the status), unwrapped.
            req = pb.ActionCancelQueryRequest.FromString(body)
            status = self.cancel(flight.FlightInfo.deserialize(req.info))
            return [flight.Result(pb.ActionCancelQueryResult(result=status).SerializeToString())]
        if kind in ("BeginTransaction", "EndTransaction", "BeginSavepoint", "EndSavepoint"):
            raise UnsupportedError(_NO_TRANSACTIONS)
        if kind == "CreatePreparedSubstraitPlan":
            raise UnsupportedError("Substrait plans are not supported; send SQL")
        raise InvalidArgumentError(f"unknown Flight SQL action {kind!r}")

    def cancel(self, info: flight.FlightInfo) -> pb.ActionCancelQueryResult.CancelResult:
        """Cancel the running streams of ``info``'s tickets in this process.

        CANCELLED when a stream was running and is now stopped; NOT_CANCELLABLE otherwise:
        results are produced only while a DoGet reads them, so a query with no running
        stream has either finished or not started (and a DELETE ran in GetFlightInfo)."""
        stopped = False
        for endpoint in info.endpoints:
            with self._lock:
                running = list(self._running.get(bytes(endpoint.ticket.ticket), ()))
            for watch in running:
                watch.stop("cancelled")
                stopped = True
        R = pb.ActionCancelQueryResult
        return R.CANCEL_RESULT_CANCELLED if stopped else R.CANCEL_RESULT_NOT_CANCELLABLE
