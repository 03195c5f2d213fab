"""Statements: ad-hoc and prepared queries, parameter binding, DELETE, and their handles.

Handles are self-contained, so any server process that sees the same root can redeem them and
closing a prepared statement frees nothing: a handle is ``LFSQ`` + a format byte + the length
of a JSON header + the header + the bound parameters as an Arrow IPC stream.  The header holds
the SQL, and for a ticket the dataset versions the statement was planned against
(``pins``, one per table reference), or the literal result of a DELETE that already ran.

* A **prepared statement** handle carries the SQL, a random id and, after a DoPut on
  ``CommandPreparedStatementQuery``, the bound parameters (the reply,
  ``DoPutPreparedStatementResult``, carries that new handle).  It pins no version: running it
  again later sees the data as it is then, as a prepared statement should.  (Clients that
  ignore the new handle are served from an in-process memory of the last binding per id; see
  :class:`Statements`.)
* A **ticket** (``TicketStatementQuery`` from GetFlightInfo) carries the SQL, the parameters
  and the pinned versions, so DoGet reads exactly the versions GetFlightInfo planned, whatever
  was committed in between.
* **DELETE** runs when it is executed (GetFlightInfo for the query path the ADBC dbapi uses,
  DoPut for the update commands): the rows matching the WHERE clause (evaluated by DuckDB,
  once over all parameter rows) are deleted from the dataset version the statement read, in
  one conflict-checked commit.  Through GetFlightInfo the result is one row ``count``
  carried in the ticket itself and ``total_records`` is the number of rows deleted (the ADBC
  dbapi's ``rowcount``).
"""

from __future__ import annotations

import collections
import copy
import json
import secrets
import struct
import threading
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

from flight_server.errors import BadRequest
from flight_server.incoming import decode_stream, read_table
from flight_server.ingest import aligned
from flight_server.permissions import check_write
from flight_server.query import load_json
from lance_format import ROW_ADDRESS
from lance_format.dataset import update_rows
from lance_format.errors import InvalidArgumentError

from . import flight_sql_pb2 as pb
from . import merge, protocol
from .engine import WRITES, Binding, Execution, SqlEngine, Statement, parse_statement
from .errors import SqlError
from .limits import Watch

__all__ = [
    "DELETE_RESULT_SCHEMA",
    "Handle",
    "Statements",
]

_MAGIC = b"LFSQ"
_FORMAT = 1
_HEAD = struct.Struct("<4sBI")
DELETE_RESULT_SCHEMA = pa.schema([pa.field("count", pa.int64(), nullable=False)])


class Handle:
    """The contents of a prepared-statement handle or a ticket."""

    def __init__(
        self,
        sql: str,
        params: pa.Table | None = None,
        pins: list[tuple[str, int]] | None = None,
        count: int | None = None,
        ident: str | None = None,
    ):
        self.sql = sql
        self.params = params
        self.pins = pins
        self.count = count
        self.ident = ident

    def encode(self) -> bytes:
        header: dict[str, object] = {"sql": self.sql}
        if self.ident is not None:
            header["id"] = self.ident
        if self.pins is not None:
            header["pins"] = [[name, version] for name, version in self.pins]
        if self.count is not None:
            header["count"] = self.count
        head = json.dumps(header, separators=(",", ":")).encode()
        body = b""
        if self.params is not None:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, self.params.schema) as writer:
                writer.write_table(self.params)
            body = sink.getvalue().to_pybytes()
        return _HEAD.pack(_MAGIC, _FORMAT, len(head)) + head + body

    @classmethod
    def decode(cls, data: bytes) -> Handle:
        data = bytes(data)
        bad = InvalidArgumentError("not a statement handle of this server (corrupt or foreign)")
        if len(data) < _HEAD.size:
            raise bad
        magic, fmt, size = _HEAD.unpack_from(data)
        if magic != _MAGIC or fmt != _FORMAT or size > len(data) - _HEAD.size:
            raise bad
        try:
            header = load_json(data[_HEAD.size : _HEAD.size + size], "the handle")
            sql = header["sql"]
            pins = header.get("pins")
            if pins is not None:
                pins = [(str(n), int(v)) for n, v in pins]
            count = header.get("count")
            ident = header.get("id")
            body = data[_HEAD.size + size :]
        except (ValueError, KeyError, TypeError, BadRequest):
            raise bad from None
        params = decode_stream(body, "the handle's parameters") if body else None
        if not isinstance(sql, str) or (count is not None and not isinstance(count, int)):
            raise bad
        return cls(sql, params, pins, count, None if ident is None else str(ident))


def read_params(reader: flight.MetadataRecordBatchReader) -> pa.Table | None:
    """The parameter rows of a DoPut, validated, realigned (DoPut buffers may be unaligned,
    and DuckDB is native code) and with positional column names.  None when the client sent
    no parameters: no stream at all (ADBC's ``execute_update``) or one without columns."""
    table = read_table(reader, "the parameters")
    if table is None or table.num_columns == 0:
        return None
    batches = [aligned(b) for b in table.to_batches()]
    table = pa.Table.from_batches(batches, schema=table.schema)
    return table.rename_columns([str(i) for i in range(table.num_columns)])


class Statements:
    """Runs Flight SQL statements with a :class:`SqlEngine`.

    Clients written before DoPutPreparedStatementResult existed (flightsql-dbapi 0.2) bind
    parameters and then execute the *original* handle.  For them the last parameters bound to
    each prepared statement are also remembered in this process (bounded, dropped on
    ClosePreparedStatement) and used when a handle without parameters comes back; every
    prepared statement has its own id, so concurrent clients never see each other's."""

    def __init__(self, engine: SqlEngine, legacy_slots: int = 1024):
        self.engine = engine
        self._legacy: collections.OrderedDict[str, pa.Table] = collections.OrderedDict()
        self._legacy_slots = legacy_slots
        self._lock = threading.Lock()

    def resolve_handle(self, data: bytes) -> Handle:
        """Decode a prepared-statement handle, adding parameters bound by a legacy client."""
        h = Handle.decode(data)
        if h.params is None and h.ident is not None:
            with self._lock:
                h.params = self._legacy.get(h.ident)
        return h

    def close(self, data: bytes) -> None:
        h = Handle.decode(data)
        if h.ident is not None:
            with self._lock:
                self._legacy.pop(h.ident, None)

    # -- preparing ---------------------------------------------------------------------------

    def prepare(self, sql: str) -> pb.ActionCreatePreparedStatementResult:
        """Parse and check the statement now (unknown tables, bad syntax fail here), and hand
        back a handle with the result schema when it is known without parameters."""
        statement = parse_statement(sql)
        binding = self.engine.bind(statement)
        handle = Handle(sql, ident=secrets.token_hex(8))
        result = pb.ActionCreatePreparedStatementResult(prepared_statement_handle=handle.encode())
        if statement.kind == "query" and statement.param_count == 0:
            result.dataset_schema = self.engine.schema(binding).serialize().to_pybytes()
        elif statement.kind in WRITES:
            result.dataset_schema = DELETE_RESULT_SCHEMA.serialize().to_pybytes()
        if statement.param_count:
            fields = [pa.field(str(i), pa.null()) for i in range(statement.param_count)]
            result.parameter_schema = pa.schema(fields).serialize().to_pybytes()
        return result

    def bind_parameters(self, handle: bytes, params: pa.Table | None) -> bytes:
        """A new handle with ``params`` bound (checked against the statement)."""
        h = Handle.decode(handle)
        statement = parse_statement(h.sql)
        have = 0 if params is None else params.num_columns
        if have != statement.param_count:
            raise SqlError(
                f"the statement takes {statement.param_count} parameter(s), {have} were bound"
            )
        bound = params
        if h.ident is not None and bound is not None:
            with self._lock:
                self._legacy[h.ident] = bound
                self._legacy.move_to_end(h.ident)
                while len(self._legacy) > self._legacy_slots:
                    self._legacy.popitem(last=False)
        return Handle(h.sql, bound, ident=h.ident).encode()

    # -- queries -----------------------------------------------------------------------------

    def flight_info(
        self,
        sql: str,
        params: pa.Table | None,
        descriptor: flight.FlightDescriptor,
        on_delete=None,
        watch: Watch | None = None,
    ) -> flight.FlightInfo:
        """Plan a query (pinning the versions it reads) or run a DELETE (``on_delete`` is
        called first, e.g. to check the caller may write)."""
        statement = parse_statement(sql)
        binding = self.engine.bind(statement)
        if statement.kind in WRITES:
            if on_delete is not None:
                on_delete()
            count = self.write(binding, params, watch)
            ticket = Handle(sql, count=count)
            return self._info(DELETE_RESULT_SCHEMA, descriptor, ticket, total_records=count)
        schema = self.engine.schema(binding, params, watch)
        ticket = Handle(sql, params, pins=binding.pins)
        return self._info(schema, descriptor, ticket, total_records=-1)

    def schema(self, sql: str, params: pa.Table | None, watch: Watch | None = None) -> pa.Schema:
        statement = parse_statement(sql)
        if statement.kind in WRITES:
            return DELETE_RESULT_SCHEMA
        return self.engine.schema(self.engine.bind(statement), params, watch)

    @staticmethod
    def _info(
        schema: pa.Schema, descriptor: flight.FlightDescriptor, ticket: Handle, total_records: int
    ) -> flight.FlightInfo:
        body = protocol.pack(pb.TicketStatementQuery(statement_handle=ticket.encode()))
        endpoint = flight.FlightEndpoint(flight.Ticket(body), [])
        return flight.FlightInfo(schema, descriptor, [endpoint], total_records, -1)

    def open_ticket(
        self, ticket: pb.TicketStatementQuery, watch: Watch | None = None
    ) -> tuple[pa.Schema, Iterator, Execution | None]:
        """The stream a ticket names: (schema, batches, the execution to cancel, if any)."""
        h = Handle.decode(ticket.statement_handle)
        if h.count is not None:
            batch = pa.record_batch([pa.array([h.count], pa.int64())], schema=DELETE_RESULT_SCHEMA)
            return DELETE_RESULT_SCHEMA, iter([batch]), None
        statement = parse_statement(h.sql)
        if statement.kind != "query":
            raise InvalidArgumentError("this ticket does not name a query")
        binding = self.engine.bind(statement, pins=h.pins)
        execution = self.engine.execute(binding, h.params, watch)
        return execution.schema, iter(execution), execution

    # -- updates -----------------------------------------------------------------------------

    def update(self, sql: str, params: pa.Table | None, watch: Watch | None = None) -> int:
        """Run an update (DELETE or UPDATE) for every parameter row; the rows changed."""
        statement = parse_statement(sql)
        if statement.kind not in WRITES:
            raise SqlError(
                "only DELETE, UPDATE and MERGE run as updates; send queries with "
                "CommandStatementQuery"
            )
        return self.write(self.engine.bind(statement), params, watch)

    def write(self, binding: Binding, params: pa.Table | None, watch: Watch | None = None) -> int:
        """Run a DELETE or an UPDATE; the number of rows it changed."""
        if binding.statement.kind == "delete":
            return self.delete(binding, params, watch)
        if binding.statement.kind == "merge":
            return self.merge(binding, params, watch)
        statement: Statement = binding.statement
        assert statement.target is not None  # a DELETE or UPDATE names its target
        if params is not None and params.num_columns == 0:
            params = None
        check_write(binding.datasets[statement.target][0])
        values = self.engine.target_rows(binding, params, watch)
        if not values.num_rows:
            return 0  # as a DELETE of nothing: no commit
        _, ds = binding.datasets[statement.target]
        # a private object: the update moves it in place, and ``ds`` may be a shared one
        _, count = update_rows(copy.copy(ds), values)
        return count

    def merge(self, binding: Binding, params: pa.Table | None, watch: Watch | None = None) -> int:
        """Run a MERGE INTO (see :mod:`.merge`): the rows it updated, deleted and inserted,
        changed in one conflict-checked commit."""
        statement: Statement = binding.statement
        if statement.param_count or (params is not None and params.num_columns):
            raise SqlError("MERGE takes no parameters")
        if statement.target is None:
            raise SqlError("MERGE must name a table of this server")
        check_write(binding.datasets[statement.target][0])
        _, ds = binding.datasets[statement.target]
        columns = ds.schema.names
        found = self.engine.select_for_write(
            binding, lambda tree, target: merge.merge_selects(tree, target, columns), watch
        )
        merge.check_ambiguous(found["ambiguous"])
        updates = found.get("update")
        if updates is None:
            updates = pa.table({ROW_ADDRESS: pa.array([], pa.uint64())})
        deleted = merge.deleted_addresses(found)
        inserted = found.get("insert")
        if (
            not updates.num_rows
            and not len(deleted)
            and (inserted is None or not inserted.num_rows)
        ):
            return 0  # nothing changes: no commit
        # a private object: the merge moves it in place, and ``ds`` may be a shared one
        _, count = update_rows(copy.copy(ds), updates, deleted, inserted)
        return count

    def delete(self, binding: Binding, params: pa.Table | None, watch: Watch | None = None) -> int:
        """Delete the rows the statement selects, in one conflict-checked commit."""
        statement: Statement = binding.statement
        assert statement.target is not None  # a DELETE or UPDATE names its target
        if params is not None and params.num_columns == 0:
            params = None
        check_write(binding.datasets[statement.target][0])
        addresses = self.engine.delete_addresses(binding, params, watch)
        if not len(addresses):
            return 0
        _, ds = binding.datasets[statement.target]
        # a private object: the delete moves it in place, and ``ds`` may be a shared one
        copy.copy(ds).delete(pc.field(ROW_ADDRESS).isin(pa.array(addresses, pa.uint64())))
        return int(len(addresses))
