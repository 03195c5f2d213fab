"""The ``lance_flight`` PySpark data source: Spark reads and writes Lance datasets over Flight.

Reading (``spark.read.format("lance_flight").option("uri", ...).load("tpch/lineitem")``):
``load()`` pins the DataFrame to the dataset's latest version (or the ``version`` option)
and takes the schema of that version (``get_schema``).  At planning, the reader sends ONE
``get_flight_info`` query (columns, ``filter`` option, version, split size); every Flight
endpoint becomes one Spark partition carrying its self-contained ticket and its locations;
executors redeem the tickets with ``do_get`` (trying the locations in order) and yield Arrow
batches cast, one vectorised cast per column, to exactly the Arrow schema Spark expects.
So one query reads one version, and so do all queries on one loaded DataFrame (as with
Delta tables; load again to see newer commits).  With a user-given schema
(``spark.read.schema(...)``) ``schema()`` is not called: a read plan then reads the version
latest when it is made (Spark may reuse a DataFrame's read plan for later queries).

Spark's filters stay with Spark: the source pushes none.  Spark 4.3 keeps the read plan a
filter pushdown produces (the partitions, their tickets, and the reader that ``read()`` runs)
on the *loaded relation* (``PythonDataSourceV2.setReadInfo``), not on the scan being
planned, and reuses it for every later scan of that DataFrame that pushes no filter (a plain
``count()``, a ``write``) and for every other scan of it in the same query.  Nothing
specific to a plan reaches ``read()``, so a pushed filter would silently drop rows from
those plans; with no filter pushed, every read plan of a DataFrame is the same and each
query's filters run in Spark.  A server-side filter that is part of the DataFrame itself
(every use of it sees it) is the ``filter`` option.

Spark gives Python data sources no projection pushdown (``reader()`` always gets the full
schema), so narrow reads use ``.option("columns", "a,b")`` or a user schema
(``spark.read.schema("a long, b string")``): only those columns travel.

Writing (``df.write.format("lance_flight").mode("append"|"overwrite").save(name)``): the
driver reads the dataset's version and schema once and draws a staging *job* id (logged:
``lance_flight: writing ... as staging job <id>``); every task streams its batches through a
*staged* ``do_put`` of that job (fragments written, nothing committed; the server records
each file in the job's registry before creating it) and returns the staged fragments in its
commit message; the driver commits them all in ONE ``commit_staged`` transaction against the
version it read (an absent dataset is created by that commit, in either mode).

What is guaranteed: a job commits all its tasks' rows or nothing, and once the driver has
run ``commit`` or ``abort`` and the job's puts have ended, no file the job staged remains
outside the committed version, including the stages of tasks whose results Spark dropped
without the task seeing an error (its upstream failed in another worker, it was killed, or
it was a retried or speculative attempt): ``commit_staged`` with the job removes what it did
not commit, ``abort`` discards the whole job (``discard_staged`` with the job), and a put
still running when the job ends is refused at its next check (FAILED_PRECONDITION) and
removes its own files.  A task whose own input raises also discards its stage at once.

What is not: a driver that dies between the tasks and ``commit``/``abort`` (or whose
``abort`` cannot reach the server) ends nothing, so the job's staged files stay
(uncommitted, invisible to readers) with their registry under ``<dataset>/_staging/<job>/``
(a job directory without an ``ABORTED``/``COMMITTED`` marker).  Remove them with the
``discard_staged`` action, ``{"dataset": ..., "job": ...}``, the job id taken from the
driver's log line or from that directory's name, or let the ``cleanup`` action reclaim them
(unreferenced data files after its unverified age, or at once with ``delete_unverified``;
the registry once untouched for that age).  Files of a server process killed mid-put are
reclaimed the same way.

The classes here are pickled by Spark and run in Python workers on the driver and on the
executors, so this package must be importable there (installed, or shipped with
``--py-files``), with ``pyarrow``.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.flight as flight
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from .. import wire
from ..errors import error_kind
from ..wire import (
    CommitStagedBody,
    DiscardStagedBody,
    PutCommand,
    Query,
    Wire,
    loads_nearest,
)

__all__ = [
    "FlightPartition",
    "LanceFlightDataSource",
    "LanceFlightReader",
    "LanceFlightWriter",
    "SparkSchemaError",
    "StagedCommitMessage",
    "arrow_to_spark_schema",
    "conform_batch",
    "register",
]

log = logging.getLogger(__name__)

NAME = "lance_flight"
ROW_ID = "_rowid"
#: Reuse the connection the descriptor was sent on (Flight's spelling, in endpoint locations).
_REUSE = "arrow-flight-reuse-connection://?"
#: How the tasks stage their puts (the ``mode`` of the put command).
StageMode = Literal["create", "append", "overwrite"]


class SparkSchemaError(ValueError):
    """A column's Arrow type has no Spark equivalent (select other columns to read)."""


# -- options --------------------------------------------------------------------------------


def _bool(value: str | None, name: str) -> bool:
    if value is None:
        return False
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", ""):
        return False
    raise ValueError(f"option {name!r} must be true or false, got {value!r}")


def _positive_int(value: str | None, name: str) -> int | None:
    if value is None or str(value).strip() == "":
        return None
    try:
        out = int(str(value).strip())
    except ValueError:
        raise ValueError(f"option {name!r} must be an integer, got {value!r}") from None
    if out <= 0:
        raise ValueError(f"option {name!r} must be positive, got {value!r}")
    return out


def _version(value: str | None) -> int | str | None:
    """``"12"`` -> 12 (a version number); any other text is a tag name."""
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip()
    return int(text) if text.isdigit() else text


def _nearest(value: str | None) -> dict | None:
    """The ``nearest`` option: a JSON object (its shape checked here, the rest by the
    server)."""
    return loads_nearest(value) if value else None


def _dataset_name(options: Any) -> str:
    name = options.get("dataset") or options.get("path")
    if not name:
        raise ValueError(
            "lance_flight needs a dataset name: .load('name'), .save('name') or "
            ".option('dataset', 'name')"
        )
    return str(name)


# -- connections ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Connection:
    """Everything an executor needs to reach the server: picklable, opened lazily.

    Credentials are turned into a bearer token once, on the driver (a Basic handshake costs
    the server a password hash); ``username``/``password`` are kept to log in again if the
    token has expired by the time a task runs.
    """

    uri: str
    headers: tuple[tuple[bytes, bytes], ...] = field(default=(), repr=False)  # secrets: no repr
    tls_root_certs: bytes | None = field(default=None, repr=False)
    override_hostname: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @classmethod
    def from_options(cls, options: Any) -> Connection:
        uri = options.get("uri")
        if not uri:
            raise ValueError("lance_flight needs .option('uri', 'grpc://host:port')")
        certs = None
        cert_path = options.get("tls_root_certs")
        if cert_path:
            with open(cert_path, "rb") as f:  # read on the driver: executors may lack the file
                certs = f.read()
        headers: tuple[tuple[bytes, bytes], ...] = ()
        token = options.get("token")
        username, password = options.get("username"), options.get("password")
        if token and username:
            raise ValueError("give either option 'token' or 'username'/'password', not both")
        if token:
            headers = ((b"authorization", f"Bearer {token}".encode()),)
        conn = cls(
            uri=str(uri),
            headers=headers,
            tls_root_certs=certs,
            override_hostname=options.get("tls_override_hostname") or None,
            username=username or None,
            password=password,
        )
        return conn.login() if username else conn

    def client(self, location: str | None = None) -> flight.FlightClient:
        kwargs: dict[str, Any] = {}
        if self.tls_root_certs is not None:
            kwargs["tls_root_certs"] = self.tls_root_certs
        if self.override_hostname:
            kwargs["override_hostname"] = self.override_hostname
        target = self.uri if location in (None, "", _REUSE) else location
        return flight.FlightClient(target, **kwargs)

    def call_options(self) -> flight.FlightCallOptions:
        return flight.FlightCallOptions(headers=list(self.headers))

    def login(self) -> Connection:
        """A copy carrying a fresh bearer token from a Basic handshake."""
        if not self.username:
            return self
        with self.client() as client:
            key, value = client.authenticate_basic_token(self.username, self.password or "")
        return Connection(
            self.uri,
            ((key, value),),
            self.tls_root_certs,
            self.override_hostname,
            self.username,
            self.password,
        )

    def action(self, name: str, body: dict | Wire | None = None) -> Any:
        """Run a ``do_action`` whose body (a :mod:`flight_server.wire` model, or a dict) and
        result are JSON."""
        if isinstance(body, Wire):
            payload = body.model_dump_json(by_alias=True, exclude_defaults=True).encode()
        else:
            payload = json.dumps(body or {}).encode()
        with self.client() as client:
            results = list(
                client.do_action(flight.Action(name, payload), options=self.call_options())
            )
        if not results:
            return None
        raw = results[0].body.to_pybytes()
        return json.loads(raw) if raw else None


# -- the Flight protocol (issue 5) ------------------------------------------------------------


def get_schema(conn: Connection, query: Query) -> pa.Schema:
    with conn.client() as client:
        return client.get_schema(query.descriptor(), conn.call_options()).schema


def get_flight_info(conn: Connection, query: Query) -> flight.FlightInfo:
    with conn.client() as client:
        return client.get_flight_info(query.descriptor(), conn.call_options())


def info_version(info: flight.FlightInfo) -> int | None:
    """The version every ticket of ``info`` is pinned to (for logs and the pipeline)."""
    for endpoint in info.endpoints:
        try:
            return int(json.loads(endpoint.ticket.ticket)["version"])
        except (ValueError, KeyError, TypeError):
            return None
    return None


def latest_version(conn: Connection, dataset: str) -> int:
    """The dataset's latest version number (a NOT_FOUND error when it does not exist)."""
    return int(conn.action("versions", {"dataset": dataset})["latest"])


@dataclass(frozen=True)
class DatasetState:
    version: int
    schema: pa.Schema


def _is_not_found(error: BaseException) -> bool:
    """A server error of kind NOT_FOUND (pyarrow raises it as ``ArrowKeyError``)."""
    return isinstance(error, (flight.FlightError, pa.ArrowException)) and (
        error_kind(error) == "NOT_FOUND"
    )


def dataset_state(conn: Connection, dataset: str) -> DatasetState | None:
    """The dataset's latest version and its schema, or ``None`` when it does not exist."""
    try:
        latest = latest_version(conn, dataset)
    except (flight.FlightError, pa.ArrowException) as e:
        if _is_not_found(e):
            return None
        raise
    return DatasetState(latest, get_schema(conn, Query(dataset=dataset, version=latest)))


def schema_b64(schema: pa.Schema) -> str:
    """An Arrow schema as ``commit_staged`` takes it (base64 of the IPC message)."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def staged_put(
    conn: Connection,
    dataset: str,
    mode: StageMode,
    schema: pa.Schema,
    batches: Iterable[pa.RecordBatch],
    options: dict,
) -> StagedCommitMessage:
    """Stream ``batches`` into staged fragments (written, not committed); ``options`` may
    carry the staging ``job``.

    pyarrow cannot cancel a ``do_put`` from the client, so when the input raises here the
    stream is ended cleanly, which only *stages* what was sent; those fragments are then
    discarded (by name: the job itself goes on, a retry may still succeed) and the error
    re-raised.  A transport error fails the stream itself, and the server removes what it
    wrote.
    """
    command = PutCommand(dataset=dataset, mode=mode, stage=True, **options)
    descriptor = flight.FlightDescriptor.for_command(command.to_json())
    rows = 0
    failure: Exception | None = None

    def pulled() -> Iterator[pa.RecordBatch]:
        """The input, ending (not raising) when it fails: the failure is kept for later."""
        nonlocal failure
        try:
            yield from batches
        except Exception as e:  # noqa: BLE001 - re-raised below, after the cleanup
            failure = e

    with conn.client() as client:
        writer, results = client.do_put(descriptor, schema, conn.call_options())
        for batch in pulled():  # a transport error raises here: the server drops the stream
            writer.write_batch(batch)
            rows += batch.num_rows
        writer.done_writing()
        meta = results.read()
        writer.close()
    out = json.loads(meta.to_pybytes()) if meta is not None else {}
    fragments = list(out.get("fragments", []))
    if failure is not None:
        if fragments:
            discard_staged(conn, dataset, fragments)
        raise failure
    return StagedCommitMessage(fragments, rows, out.get("data_storage_version"))


def commit_staged(
    conn: Connection,
    dataset: str,
    mode: str,
    fragments: list,
    read_version: int | None,
    schema: pa.Schema,
    data_storage_version: str | None,
    job: str | None = None,
) -> dict:
    """ONE transaction for every staged fragment: append, or overwrite (which also creates;
    the schema is what the puts streamed).  With ``job``, the server then ends the job and
    removes what its puts staged that this commit leaves out."""
    body = CommitStagedBody(
        dataset=dataset,
        mode="append" if mode == "append" else "overwrite",
        fragments=fragments,
        schema=schema_b64(schema),
        read_version=read_version,
        data_storage_version=data_storage_version or None,
        job=job,
    )
    return conn.action("commit_staged", body)


def discard_staged(conn: Connection, dataset: str, fragments: list, job: str | None = None) -> dict:
    """Remove staged fragments; with ``job``, abort the whole job (every file it staged)."""
    return conn.action(
        "discard_staged", DiscardStagedBody(dataset=dataset, fragments=fragments, job=job)
    )


# -- types ----------------------------------------------------------------------------------


def _spark_type(typ: pa.DataType, where: str) -> DataType:
    """Arrow -> Spark type; refuses what Spark cannot hold without changing values' meaning."""
    t = pa.types
    if t.is_dictionary(typ):
        return _spark_type(typ.value_type, where)
    simple = {
        pa.bool_(): BooleanType(),
        pa.int8(): ByteType(),
        pa.int16(): ShortType(),
        pa.int32(): IntegerType(),
        pa.int64(): LongType(),
        pa.uint8(): ShortType(),  # unsigned ints widen to the next signed type
        pa.uint16(): IntegerType(),
        pa.uint32(): LongType(),
        pa.float16(): FloatType(),
        pa.float32(): FloatType(),
        pa.float64(): DoubleType(),
        pa.date32(): DateType(),
        pa.date64(): DateType(),
        pa.null(): NullType(),
    }
    for arrow_type, spark_type in simple.items():
        if typ == arrow_type:
            return spark_type
    if t.is_uint64(typ):
        return DecimalType(20, 0)
    if t.is_decimal128(typ):
        return DecimalType(typ.precision, typ.scale)
    if t.is_decimal(typ) and typ.precision <= 38:  # decimal256 of a small precision
        return DecimalType(typ.precision, typ.scale)
    if t.is_string(typ) or t.is_large_string(typ) or t.is_string_view(typ):
        return StringType()
    if t.is_binary(typ) or t.is_large_binary(typ) or t.is_fixed_size_binary(typ):
        return BinaryType()
    if t.is_binary_view(typ):
        return BinaryType()
    if t.is_timestamp(typ):
        # nanoseconds are truncated to Spark's microseconds
        return TimestampType() if typ.tz is not None else TimestampNTZType()
    if t.is_list(typ) or t.is_large_list(typ) or t.is_fixed_size_list(typ) or t.is_list_view(typ):
        element = _spark_type(typ.value_type, f"{where}[]")
        return ArrayType(element, containsNull=typ.value_field.nullable)
    if t.is_struct(typ):
        return StructType(
            [StructField(f.name, _spark_type(f.type, f"{where}.{f.name}"), f.nullable) for f in typ]
        )
    raise SparkSchemaError(
        f"column {where!r} has Arrow type {typ}, which the lance_flight source does not map "
        f"to a Spark type; read other columns with .option('columns', 'a,b,...')"
    )


def arrow_to_spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of a dataset's Arrow schema.

    Refused (``SparkSchemaError``): decimals wider than 38 digits, time-of-day, durations,
    intervals, maps, unions and extension types; ``uint64`` becomes ``decimal(20,0)``, other
    unsigned ints the next wider signed type, dictionaries their values, timestamps with a
    zone ``timestamp`` and without one ``timestamp_ntz`` (nanoseconds truncated to micros).
    """
    return StructType(
        [StructField(f.name, _spark_type(f.type, f.name), f.nullable) for f in schema]
    )


def conform_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``target``'s names, order and types (one vectorised cast per
    column that differs; ``safe=False`` only truncates nanoseconds to microseconds)."""
    arrays = []
    for target_field in target:
        column = batch.column(target_field.name)
        if not column.type.equals(target_field.type):
            column = column.cast(target_field.type, safe=_safe_cast(column.type))
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _safe_cast(source: pa.DataType) -> bool:
    """Unsafe casts only where precision is dropped on purpose (ns timestamps)."""

    def has_ns(t: pa.DataType) -> bool:
        if pa.types.is_timestamp(t):
            return t.unit == "ns"
        if pa.types.is_struct(t):
            return any(has_ns(f.type) for f in t)
        if hasattr(t, "value_type") and not pa.types.is_dictionary(t):
            return has_ns(t.value_type)
        return False

    return not has_ns(source)


def spark_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark checks a Python data source's batches against."""
    return to_arrow_schema(schema, timezone="UTC")


# -- reading --------------------------------------------------------------------------------


class FlightPartition(InputPartition):
    """One Flight endpoint: a Spark task redeems ``ticket`` at the first reachable location."""

    def __init__(self, index: int, ticket: bytes, locations: list[str], connection: Connection):
        super().__init__(index)
        self.index = index
        self.ticket = ticket
        self.locations = locations
        self.connection = connection


class LanceFlightDataSource(DataSource):
    """``lance_flight``: Lance datasets served by a lance-flight server.

    Options (names are case-insensitive): ``uri`` (required), ``dataset`` (or the path of
    ``load``/``save``), ``version`` (number or tag), ``columns`` (comma-separated),
    ``filter`` (SQL predicate run by the server), ``split_rows``, ``batch_size``,
    ``with_row_id``, ``nearest`` (a JSON object: a nearest-neighbour search, one partition)
    and ``prefilter`` (the ``filter`` option and pushed filters run before the search, not
    after); auth: ``username`` + ``password`` (Basic handshake -> bearer token) or
    ``token``; TLS: ``tls_root_certs`` (PEM path), ``tls_override_hostname``; writes:
    ``max_rows_per_file``, ``data_storage_version``.
    """

    @classmethod
    def name(cls) -> str:
        return NAME

    # the connection and the source schema are cached on the instance, which Spark pickles
    # after schema(): the reader and writer then need no second handshake or schema call
    def _connection(self) -> Connection:
        conn = self.__dict__.get("_conn")
        if conn is None:
            conn = Connection.from_options(self.options)
            self.__dict__["_conn"] = conn
        return conn

    def _query(self) -> Query:
        columns = self.options.get("columns")
        fields = dict(
            dataset=_dataset_name(self.options),
            columns=[c.strip() for c in columns.split(",") if c.strip()] if columns else None,
            filter=self.options.get("filter") or None,
            version=self.__dict__.get("_pinned") or _version(self.options.get("version")),
            split_rows=_positive_int(self.options.get("split_rows"), "split_rows"),
            batch_size=_positive_int(self.options.get("batch_size"), "batch_size"),
            with_row_id=_bool(self.options.get("with_row_id"), "with_row_id"),
            nearest=_nearest(self.options.get("nearest")),
            prefilter=_bool(self.options.get("prefilter"), "prefilter"),
        )
        chosen = {k: v for k, v in fields.items() if v is not None}
        return wire.parse(Query, chosen, "the lance_flight read options")

    def source_schema(self) -> pa.Schema:
        """The Arrow schema the server reports for this query (projection applied)."""
        schema = self.__dict__.get("_arrow_schema")
        if schema is None:
            schema = get_schema(self._connection(), self._query())
            self.__dict__["_arrow_schema"] = schema
        return schema

    def schema(self) -> StructType:
        """Called once, by ``load()``: without a ``version`` option the DataFrame is pinned
        here to the latest version, so that every query on it (Spark re-plans filtered
        queries but caches unfiltered ones) reads the same snapshot, with this schema."""
        if not self.options.get("version") and "_pinned" not in self.__dict__:
            conn = self._connection()
            self.__dict__["_pinned"] = latest_version(conn, _dataset_name(self.options))
        return arrow_to_spark_schema(self.source_schema())

    def reader(self, schema: StructType) -> LanceFlightReader:
        return LanceFlightReader(self._connection(), self._query(), schema)

    def writer(self, schema: StructType, overwrite: bool) -> LanceFlightWriter:
        conn = self._connection()
        dataset = _dataset_name(self.options)
        return LanceFlightWriter.start(
            conn,
            dataset,
            schema,
            overwrite,
            max_rows_per_file=_positive_int(
                self.options.get("max_rows_per_file"), "max_rows_per_file"
            ),
            data_storage_version=self.options.get("data_storage_version") or None,
        )


class LanceFlightReader(DataSourceReader):
    """Plans one Flight query per Spark query; partitions are its endpoints."""

    def __init__(
        self,
        connection: Connection,
        query: Query,
        schema: StructType,
    ):
        self.connection = connection
        self.spark_schema = schema
        # fetch exactly the columns Spark asks for (a user schema may name fewer); the row id
        # is not a column: the server adds it for ``with_row_id``
        names = [f.name for f in schema.fields]
        if query.with_row_id:
            names = [n for n in names if n != ROW_ID]
        self.query = query.with_columns(names)
        self.read_version: int | None = None

    # no ``pushFilters``: Spark shares the read plan of a pushdown between the plans of one
    # loaded DataFrame (see the module docstring), so every filter must stay with Spark

    def partitions(self) -> list[FlightPartition]:
        info = get_flight_info(self.connection, self.query)
        self.read_version = info_version(info)
        parts = [
            FlightPartition(
                i,
                endpoint.ticket.ticket,
                [
                    str(loc.uri.decode() if isinstance(loc.uri, bytes) else loc.uri)
                    for loc in endpoint.locations
                ],
                self.connection,
            )
            for i, endpoint in enumerate(info.endpoints)
        ]
        log.info(
            "lance_flight: %s version %s, %d endpoint(s), filter %r",
            self.query.dataset,
            self.read_version,
            len(parts),
            self.query.filter,
        )
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, FlightPartition):  # Spark's stand-in for "no endpoints"
            return
        target = spark_arrow_schema(self.spark_schema)
        for batch in _do_get(partition):
            if batch.num_rows:
                yield conform_batch(batch, target)


def _open_stream(client: flight.FlightClient, ticket: bytes, conn: Connection):
    """``do_get`` and its first chunk (``None``: an empty stream)."""
    reader = client.do_get(flight.Ticket(ticket), conn.call_options())
    try:
        return reader, reader.read_chunk()
    except StopIteration:
        return reader, None


def _do_get(partition: FlightPartition) -> Iterator[pa.RecordBatch]:
    """Stream a ticket from its first reachable location (empty list: the query's uri).

    Failing over is only safe before the first batch; a stream that breaks later fails the
    task (Spark retries it from the start).
    """
    conn = partition.connection
    last_error: Exception | None = None
    locations: list[str | None] = [*partition.locations] or [None]
    for location in locations:
        client = conn.client(location)
        try:
            try:
                reader, first = _open_stream(client, partition.ticket, conn)
            except flight.FlightUnauthenticatedError:
                if not conn.username:
                    raise
                conn = conn.login()  # the token expired since planning
                reader, first = _open_stream(client, partition.ticket, conn)
            except flight.FlightUnavailableError as e:
                last_error = e
                log.warning("lance_flight: %s unreachable, trying the next location", location)
                continue
            if first is None:
                return
            yield first.data
            for chunk in reader:
                yield chunk.data
            return
        finally:
            client.close()
    raise last_error or RuntimeError("no location to read from")


# -- writing --------------------------------------------------------------------------------


@dataclass
class StagedCommitMessage(WriterCommitMessage):
    """What one write task staged: fragment metadata for ``commit_staged``, rows, and the
    Lance file version the server wrote them in."""

    fragments: list = field(default_factory=list)
    rows: int = 0
    data_storage_version: str | None = None


class LanceFlightWriter(DataSourceArrowWriter):
    """Staged puts on executors, ONE ``commit_staged`` on the driver.

    Spark pickles the writer after :meth:`start` (driver), runs :meth:`write` in every task
    and :meth:`commit` or :meth:`abort` on the driver, so the version read at the start is
    the one the commit is checked against (a concurrent incompatible commit fails the job),
    and the staging ``job`` id drawn here is the one every task and the driver send.
    """

    def __init__(
        self,
        connection: Connection,
        dataset: str,
        target: pa.Schema,
        mode: StageMode,
        read_version: int | None,
        put_options: dict,
        job: str | None = None,
    ):
        self.connection = connection
        self.dataset = dataset
        self.target = target
        self.mode = mode
        self.read_version = read_version
        self.put_options = put_options
        self.job = job or uuid.uuid4().hex

    @classmethod
    def start(
        cls,
        connection: Connection,
        dataset: str,
        schema: StructType,
        overwrite: bool,
        *,
        max_rows_per_file: int | None = None,
        data_storage_version: str | None = None,
    ) -> LanceFlightWriter:
        """Read the dataset's latest version and schema once, when the job starts.

        Absent dataset: the tasks stage with mode ``create`` and the commit (an Overwrite
        transaction against version 0) creates it, whatever Spark's save mode.  Appends are
        cast to the dataset's own Arrow types (Spark sends ``string``, the dataset may hold
        ``large_string``); an overwrite stores Spark's schema.
        """
        current = dataset_state(connection, dataset)
        spark_target = spark_arrow_schema(schema)
        mode: StageMode
        if current is None:
            mode, version, target = "create", None, spark_target
        elif overwrite:
            mode, version, target = "overwrite", current.version, spark_target
        else:
            mode, version, target = "append", current.version, current.schema
            if target.names != spark_target.names:
                raise ValueError(
                    f"cannot append columns {spark_target.names} to {dataset!r}, whose "
                    f"columns are {target.names}"
                )
        put_options: dict[str, Any] = {}
        if max_rows_per_file is not None:
            put_options["max_rows_per_file"] = max_rows_per_file
        if data_storage_version is not None:
            put_options["data_storage_version"] = data_storage_version
        writer = cls(connection, dataset, target, mode, version, put_options)
        log.info(
            "lance_flight: writing to %s (%s, read version %s) as staging job %s",
            dataset,
            mode,
            version,
            writer.job,
        )
        return writer

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedCommitMessage:
        batches = (conform_batch(b, self.target) for b in iterator if b.num_rows)
        first = next(batches, None)
        if first is None:  # an empty partition stages nothing
            return StagedCommitMessage()
        return staged_put(
            self.connection,
            self.dataset,
            self.mode,
            self.target,
            itertools.chain([first], batches),
            {**self.put_options, "job": self.job},
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """ONE commit of every reported fragment; the server then removes what the job's
        dropped attempts staged (also when there is nothing to append: no new version)."""
        done = [m for m in messages if isinstance(m, StagedCommitMessage)]  # None: no report
        fragments = [f for m in done for f in m.fragments]
        rows = sum(m.rows for m in done)
        storage = next((m.data_storage_version for m in done if m.data_storage_version), None)
        result = commit_staged(
            self.connection,
            self.dataset,
            self.mode,
            fragments,
            self.read_version,
            self.target,
            storage or self.put_options.get("data_storage_version"),
            self.job,
        )
        log.info(
            "lance_flight: %s %s: %d rows in %d fragment(s), version %s (job %s, %s "
            "unreported staged file(s) removed)",
            self.mode,
            self.dataset,
            rows,
            len(fragments),
            (result or {}).get("version"),
            self.job,
            (result or {}).get("leftovers_removed"),
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Commit nothing; end the job and remove every file it staged: the stages the
        successful tasks reported and those Spark dropped (tasks still running are refused
        at their next check and remove their own)."""
        done = [m for m in messages if isinstance(m, StagedCommitMessage)]  # None: no report
        fragments = [f for m in done for f in m.fragments]
        result = discard_staged(self.connection, self.dataset, fragments, self.job)
        log.warning(
            "lance_flight: write to %s aborted (job %s): nothing committed, %s staged "
            "file(s) removed",
            self.dataset,
            self.job,
            (result or {}).get("removed"),
        )


def register(spark: Any) -> None:
    """Register ``lance_flight`` with a SparkSession (``spark.dataSource.register``)."""
    spark.dataSource.register(LanceFlightDataSource)
