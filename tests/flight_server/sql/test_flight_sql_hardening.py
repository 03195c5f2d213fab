"""Abuse of the Flight SQL and do_put entry points by a client: malformed Arrow data in every
place a client can send it, ADBC's parameterless update calls, runaway statements.

Truth: the real clients (pyarrow.flight, the ADBC driver, plain gRPC for raw frames), the
datasets as pylance reads them (every version), the files on disk, DuckDB over pylance for
the answers well-behaved clients must still get.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from pathlib import Path

import grpc
import lance
import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from flight_sql_helpers import adbc_connect, duckdb_truth, running_server, uri
from google.protobuf import any_pb2

from flight_server.errors import error_kind
from flight_server.sql import flight_sql_pb2 as pb
from flight_server.sql.limits import SqlLimits
from flight_server.sql.protocol import pack
from flight_server.sql.statements import Handle

# -- malformed data --------------------------------------------------------------------------


def backwards_strings() -> pa.Array:
    """A string array whose offsets go backwards: it passes pyarrow's cheap checks (and IPC)
    but not full validation; native code reading it can run off its buffers."""
    good = pa.array(["aaaa", "bbbb", "cccc"])
    offsets = np.array([0, 12, 4, 8], dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), 3, [None, pa.py_buffer(offsets.tobytes()), good.buffers()[2]]
    )


def bad_dictionary() -> pa.Array:
    """Dictionary indices past the end of the dictionary."""
    indices = pa.array([0, 1, 7], pa.int32())
    return pa.DictionaryArray.from_buffers(
        pa.dictionary(pa.int32(), pa.string()), 3, indices.buffers(), pa.array(["x", "y"])
    )


BAD_ARRAYS = {"backwards_offsets": backwards_strings, "dictionary_index": bad_dictionary}


def test_the_malformed_arrays_pass_cheap_checks_but_not_full_validation():
    for make in BAD_ARRAYS.values():
        arr = make()
        arr.validate()  # what decoding checks: fine
        with pytest.raises(pa.ArrowInvalid):
            arr.validate(full=True)


def ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


# -- fixtures --------------------------------------------------------------------------------


class Scene:
    """A root with one dataset, a server over it, and what must never change."""

    def __init__(self, root: Path, server):
        self.root = root
        self.server = server
        self.path = root / "people"

    def snapshot(self) -> tuple[list[int], set[str], list[pa.Table]]:
        """(versions, data files, every version's rows as pylance reads them)."""
        ds = lance.dataset(str(self.path))
        versions = [v["version"] for v in ds.versions()]
        tables = [lance.dataset(str(self.path), version=v).to_table() for v in versions]
        files = set(os.listdir(self.path / "data"))
        return versions, files, tables

    def assert_alive(self) -> None:
        """A well-behaved client still gets the right answer."""
        truth = lance.dataset(str(self.path)).to_table()
        want = duckdb_truth("SELECT count(*) AS n, max(name) AS m FROM people", {"people": truth})
        c = adbc_connect(self.server)
        try:
            cur = c.cursor()
            cur.execute("SELECT count(*) AS n, max(name) AS m FROM people")
            assert cur.fetch_arrow_table().equals(want)
            cur.close()
        finally:
            c.close()


@pytest.fixture
def scene(tmp_path: Path):
    table = pa.table({"id": pa.array(range(20), pa.int64()), "name": [f"n{i}" for i in range(20)]})
    lance.write_dataset(table, tmp_path / "people", max_rows_per_file=8)
    with running_server(str(tmp_path)) as server:
        yield Scene(tmp_path, server)


def cmd(msg) -> flight.FlightDescriptor:
    return flight.FlightDescriptor.for_command(pack(msg))


def prepare(client: flight.FlightClient, sql: str) -> bytes:
    body = pack(pb.ActionCreatePreparedStatementRequest(query=sql))
    [res] = client.do_action(flight.Action("CreatePreparedStatement", body))
    result = pb.ActionCreatePreparedStatementResult()
    assert any_pb2.Any.FromString(res.body.to_pybytes()).Unpack(result)
    return result.prepared_statement_handle


def put(client: flight.FlightClient, descriptor, table: pa.Table) -> bytes | None:
    writer, meta = client.do_put(descriptor, table.schema)
    try:
        writer.write_table(table)
        writer.done_writing()
        buf = meta.read()
        return None if buf is None else buf.to_pybytes()
    finally:
        writer.close()


def assert_refused(call, *args) -> None:
    """``call(*args)`` fails with an INVALID_ARGUMENT error carrying no server traceback."""
    with pytest.raises(pa.ArrowException) as e:
        call(*args)
    assert error_kind(e.value) == "INVALID_ARGUMENT", e.value
    assert "Traceback" not in str(e.value)


# -- A: malformed Arrow data through every path ---------------------------------------------


@pytest.mark.parametrize("bad", sorted(BAD_ARRAYS))
def test_malformed_parameters_are_refused_everywhere(scene, bad):
    before = scene.snapshot()
    params = pa.table({"p": BAD_ARRAYS[bad]()})
    client = flight.connect(uri(scene.server))
    prepared_query = pb.CommandPreparedStatementQuery
    try:
        # DoPut on a prepared query, DoPut updates (ad hoc and prepared)
        handle = prepare(client, "SELECT * FROM people WHERE name = ?")
        assert_refused(put, client, cmd(prepared_query(prepared_statement_handle=handle)), params)
        delete = "DELETE FROM people WHERE name = ?"
        assert_refused(put, client, cmd(pb.CommandStatementUpdate(query=delete)), params)
        update = pb.CommandPreparedStatementUpdate(
            prepared_statement_handle=prepare(client, delete)
        )
        assert_refused(put, client, cmd(update), params)
        # the parameters carried inside a handle (GetFlightInfo) and a ticket (DoGet)
        for sql in ("SELECT * FROM people WHERE name = ?", delete):
            forged = Handle(sql, params, ident="x").encode()
            assert_refused(
                client.get_flight_info, cmd(prepared_query(prepared_statement_handle=forged))
            )
        ticket = Handle("SELECT * FROM people WHERE name = ?", params, pins=[("people", 1)])
        body = pack(pb.TicketStatementQuery(statement_handle=ticket.encode()))
        assert_refused(lambda: client.do_get(flight.Ticket(body)).read_all())
    finally:
        client.close()
    assert scene.snapshot()[:2] == before[:2]
    assert all(a.equals(b) for a, b in zip(scene.snapshot()[2], before[2], strict=True))
    scene.assert_alive()


@pytest.mark.parametrize("bad", sorted(BAD_ARRAYS))
def test_malformed_batches_are_refused_by_puts_and_ingest(scene, bad):
    before = scene.snapshot()
    data = pa.table({"id": pa.array([100, 101, 102], pa.int64()), "name": BAD_ARRAYS[bad]()})
    if bad == "dictionary_index":  # the dataset stores plain strings; a new one takes both
        target = {"dataset": "fresh", "mode": "create"}
    else:
        target = {"dataset": "people", "mode": "append"}
    client = flight.connect(uri(scene.server))
    try:
        assert_refused(put, client, flight.FlightDescriptor.for_command(json.dumps(target)), data)
        if bad != "dictionary_index":
            assert_refused(put, client, flight.FlightDescriptor.for_path("people"), data)
        opts = pb.CommandStatementIngest.TableDefinitionOptions
        ingest = pb.CommandStatementIngest(
            table="people" if bad != "dictionary_index" else "fresh",
            table_definition_options=opts(
                if_not_exist=opts.TABLE_NOT_EXIST_OPTION_CREATE,
                if_exists=opts.TABLE_EXISTS_OPTION_APPEND,
            ),
        )
        assert_refused(put, client, cmd(ingest), data)
    finally:
        client.close()
    after = scene.snapshot()
    assert after[:2] == before[:2]
    assert all(a.equals(b) for a, b in zip(after[2], before[2], strict=True))
    assert not (scene.root / "fresh").exists()
    scene.assert_alive()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def _flight_data(
    descriptor: bytes | None, message: pa.ipc.Message | None, body: bytes | None
) -> bytes:
    """A FlightData protobuf: descriptor (1), data_header (2), data_body (1000)."""
    out = b""
    if descriptor is not None:
        out += _field(1, descriptor)
    if message is not None:
        out += _field(2, message.metadata.to_pybytes())
    if body is not None:
        out += _field(1000, body)
    return out


def _raw_put(port: int, frames: list[bytes]) -> tuple[str, str]:
    """DoPut over plain gRPC: the status code name and message the server answered with."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream(
            "/arrow.flight.protocol.FlightService/DoPut",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            list(call(iter(frames), timeout=20))
        except grpc.RpcError as exc:
            return exc.code().name, exc.details()
    return "OK", ""


def test_truncated_and_garbage_ipc_is_refused(scene):
    before = scene.snapshot()
    table = pa.table({"id": pa.array([7, 8], pa.int64()), "name": ["a", "b"]})
    schema_msg = pa.ipc.read_message(table.schema.serialize())
    batch_msg = pa.ipc.read_message(table.to_batches()[0].serialize())
    body = batch_msg.body.to_pybytes()
    descriptors = {
        "put": flight.FlightDescriptor.for_path("people").serialize(),
        "update": cmd(
            pb.CommandStatementUpdate(query="DELETE FROM people WHERE name = ?")
        ).serialize(),
    }
    for name, desc in descriptors.items():
        first = _flight_data(desc, schema_msg, None)
        truncated = _flight_data(None, batch_msg, body[: len(body) // 2])
        garbage = _field(2, os.urandom(64)) + _field(1000, os.urandom(64))
        for frames in ([first, truncated], [first, garbage]):
            code, message = _raw_put(scene.server.port, frames)
            assert code == "INVALID_ARGUMENT", (name, code, message)
            assert message.startswith("[INVALID_ARGUMENT] ") and "Traceback" not in message
        # a garbage first message is refused by pyarrow before any handler runs (UNKNOWN)
        code, message = _raw_put(scene.server.port, [_field(1, desc) + garbage])
        assert code != "OK" and "flatbuffer" in message.lower(), (code, message)
    # a handle whose parameter stream is cut short
    params = ipc_bytes(pa.table({"p": ["n1"]}))
    forged = (
        Handle("SELECT * FROM people WHERE name = ?", ident="x").encode()
        + params[: len(params) - 20]
    )
    client = flight.connect(uri(scene.server))
    query = pb.CommandPreparedStatementQuery(prepared_statement_handle=forged)
    assert_refused(client.get_flight_info, cmd(query))
    client.close()
    after = scene.snapshot()
    assert after[:2] == before[:2]
    scene.assert_alive()


# -- B: DELETE through ADBC's update path ----------------------------------------------------


def test_adbc_execute_update_and_executescript_delete(scene):
    truth = lance.dataset(str(scene.path)).to_table()
    c = adbc_connect(scene.server)
    cur = c.cursor()
    cur.adbc_statement.set_sql_query("DELETE FROM people WHERE id < 3")
    assert cur.adbc_statement.execute_update() == 3
    cur.executescript("DELETE FROM people WHERE name = 'n7'")
    cur.close()
    c.close()
    want = duckdb_truth(
        "SELECT * FROM people WHERE NOT (id < 3 OR name = 'n7') ORDER BY id", {"people": truth}
    )
    assert lance.dataset(str(scene.path)).to_table().sort_by("id").equals(want)


def test_update_with_parameters_but_none_sent_is_a_clear_error(scene):
    before = scene.snapshot()
    c = adbc_connect(scene.server)
    cur = c.cursor()
    cur.adbc_statement.set_sql_query("DELETE FROM people WHERE id = ?")
    with pytest.raises(Exception, match=r"takes 1 parameter") as e:
        cur.adbc_statement.execute_update()
    assert "Traceback" not in str(e.value)
    cur.close()
    c.close()
    assert scene.snapshot()[:2] == before[:2]


# -- C: statement limits ---------------------------------------------------------------------

# minutes of DuckDB work for one thread, whatever the machine: only an interrupt ends it early
HEAVY = "SELECT count(*) AS n FROM range(200000) a, range(200000) b WHERE (a.range * 7 + b.range) % 1000003 = 5"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_after(seconds: float = 2.0) -> float:
    """CPU the server (this process: the server runs in it) uses in the next ``seconds``."""
    before = cpu_seconds(os.getpid())
    time.sleep(seconds)
    return cpu_seconds(os.getpid()) - before


def query_descriptor(sql: str) -> flight.FlightDescriptor:
    return cmd(pb.CommandStatementQuery(query=sql))


def run_query(client: flight.FlightClient, sql: str, options=None) -> pa.Table:
    info = client.get_flight_info(query_descriptor(sql), options)
    return client.do_get(info.endpoints[0].ticket, options).read_all()


def start_heavy(server) -> tuple[flight.FlightClient, flight.FlightInfo, threading.Thread, list]:
    """HEAVY read by a client in a thread, once the server runs it: (client, its FlightInfo,
    the thread, the list that receives the error the read ends with)."""
    client = flight.connect(uri(server))
    info = client.get_flight_info(query_descriptor(HEAVY))
    failure: list[BaseException] = []

    def read() -> None:
        # chunk by chunk: pyarrow's read_all() turns CANCELLED into a simulated SIGINT
        try:
            stream = client.do_get(info.endpoints[0].ticket)
            while True:
                stream.read_chunk()
        except StopIteration:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            failure.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    deadline = time.monotonic() + 10
    while server.service.governor.running == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    return client, info, thread, failure


@pytest.fixture
def limited(tmp_path: Path, request):
    """A server over a small dataset with the SqlLimits the test passes (indirect)."""
    table = pa.table({"id": pa.array(range(20), pa.int64()), "name": [f"n{i}" for i in range(20)]})
    lance.write_dataset(table, tmp_path / "people")
    limits = SqlLimits(**request.param)
    with running_server(str(tmp_path), sql_limits=limits) as server:
        yield Scene(tmp_path, server)


@pytest.mark.parametrize("limited", [dict(timeout=1.0, threads=2)], indirect=True)
def test_a_statement_over_its_time_is_stopped(limited):
    client = flight.connect(uri(limited.server))
    with pytest.raises(flight.FlightTimedOutError) as e:
        run_query(client, HEAVY)
    assert error_kind(e.value) == "DEADLINE_EXCEEDED"
    assert "statement timeout" in str(e.value)
    # DuckDB stopped: it would use both threads for minutes otherwise
    assert cpu_after() < 0.2
    assert limited.server.service.governor.running == 0
    limited.assert_alive()
    client.close()


@pytest.mark.parametrize("limited", [dict(timeout=600.0, threads=2)], indirect=True)
def test_a_statement_stops_when_its_client_goes_away(limited):
    client = flight.connect(uri(limited.server))
    with pytest.raises(flight.FlightTimedOutError):  # the client's own deadline
        run_query(client, HEAVY, flight.FlightCallOptions(timeout=1.0))
    client.close()
    deadline = time.monotonic() + 10
    while limited.server.service.governor.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert limited.server.service.governor.running == 0
    assert cpu_after() < 0.2
    limited.assert_alive()


@pytest.mark.parametrize("limited", [dict(timeout=600.0, threads=1)], indirect=True)
def test_cancel_flight_info_stops_a_blocking_statement(limited):
    client, info, reader, failure = start_heavy(limited.server)
    other = flight.connect(uri(limited.server))
    # while it runs, a well-behaved client gets right answers
    truth = lance.dataset(str(limited.path)).to_table()
    want = duckdb_truth(
        "SELECT id, name FROM people WHERE id % 3 = 1 ORDER BY id", {"people": truth}
    )
    assert run_query(other, "SELECT id, name FROM people WHERE id % 3 = 1 ORDER BY id").equals(want)
    body = _field(1, info.serialize())  # CancelFlightInfoRequest{info}
    [res] = other.do_action(flight.Action("CancelFlightInfo", body))
    assert res.body.to_pybytes()[:2] == b"\x08\x01"  # CANCEL_STATUS_CANCELLED
    reader.join(20)
    assert not reader.is_alive()
    assert failure and isinstance(failure[0], flight.FlightCancelledError)
    assert cpu_after() < 0.2
    other.close()
    client.close()


@pytest.mark.parametrize("limited", [dict(memory_limit="64MiB", threads=1)], indirect=True)
def test_a_statement_over_the_memory_limit_fails_cleanly(limited):
    client = flight.connect(uri(limited.server))
    with pytest.raises(pa.ArrowException) as e:
        run_query(client, "SELECT count(DISTINCT i::VARCHAR || 'x') AS n FROM range(20000000) t(i)")
    assert error_kind(e.value) == "RESOURCE_EXHAUSTED"
    assert "memory limit" in str(e.value) and "Traceback" not in str(e.value)
    assert not (Path.cwd() / ".tmp").exists()  # nothing spilled into the working directory
    assert run_query(client, "SELECT count(DISTINCT i) AS n FROM range(1000) t(i)").to_pylist() == [
        {"n": 1000}
    ]
    client.close()


@pytest.mark.parametrize(
    "limited", [dict(max_statements=1, queue_seconds=0.2, timeout=3.0, threads=1)], indirect=True
)
def test_statements_beyond_the_limit_are_refused_then_served(limited):
    client, _, holder, failure = start_heavy(limited.server)
    other = flight.connect(uri(limited.server))
    with pytest.raises(flight.FlightUnavailableError) as e:
        run_query(other, "SELECT 1 AS x")
    assert error_kind(e.value) == "RESOURCE_EXHAUSTED"
    holder.join(30)
    assert failure and isinstance(failure[0], flight.FlightTimedOutError)  # its 3 s ran out
    assert run_query(other, "SELECT 1 AS x").to_pylist() == [{"x": 1}]
    other.close()
    client.close()


def test_limits_are_checked():
    for bad in ({"timeout": 0}, {"max_statements": 0}, {"memory_limit": "lots"}, {"threads": 0}):
        with pytest.raises(ValueError):
            SqlLimits(**bad)
    assert SqlLimits(memory_limit="1.5GiB").duckdb_memory_limit == "1.5GiB"


class _IdleCall:
    """The one method of a call context the service uses before a stream starts."""

    def is_cancelled(self) -> bool:
        return False


def test_a_stream_dropped_before_its_first_batch_frees_its_slot(scene):
    """gRPC drops a DoGet stream unread when its client leaves right away; a generator that
    never started runs no ``finally``, so the slot must be freed another way."""
    service = scene.server.service
    client = flight.connect(uri(scene.server))
    info = client.get_flight_info(query_descriptor("SELECT * FROM people"))
    client.close()
    for _ in range(service.limits.max_statements + 2):  # more than the slots: none may leak
        stream = service.do_get(_IdleCall(), info.endpoints[0].ticket)
        assert service.governor.running == 1
        del stream
        gc.collect()
        assert service.governor.running == 0 and not service._running
    scene.assert_alive()


@pytest.mark.parametrize("limited", [dict(timeout=1.0, threads=1)], indirect=True)
def test_a_delete_over_its_time_deletes_nothing(limited):
    before = limited.snapshot()
    heavy_ids = HEAVY.replace("count(*) AS n", "count(*)")
    c = adbc_connect(limited.server)
    cur = c.cursor()
    cur.adbc_statement.set_sql_query(f"DELETE FROM people WHERE id IN ({heavy_ids})")
    with pytest.raises(Exception, match=r"\[DEADLINE_EXCEEDED\].*statement timeout") as e:
        cur.adbc_statement.execute_update()
    assert "Traceback" not in str(e.value)
    cur.close()
    c.close()
    after = limited.snapshot()
    assert after[:2] == before[:2] and after[2][-1].equals(before[2][-1])
    assert limited.server.service.governor.running == 0


def test_serve_options_set_the_sql_limits():
    import argparse

    from flight_server.serve import add_serve_arguments, sql_limits

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    defaults = sql_limits(vars(parser.parse_args(["root"])))
    assert defaults == SqlLimits()  # timeout 300 s, 8 statements, 5 s queue
    assert defaults.duckdb_threads >= 1 and defaults.duckdb_memory_limit.endswith("MiB")
    args = ["root", "--sql-timeout", "0", "--sql-memory-limit", "3GiB", "--sql-threads", "3"]
    args += ["--sql-max-statements", "2", "--sql-queue-seconds", "0.5"]
    got = sql_limits(vars(parser.parse_args(args)))
    assert got == SqlLimits(None, "3GiB", 3, 2, 0.5)


class _RichStatus(flight.FlightServerBase):
    """Answers every GetFlightInfo with UNKNOWN carrying a google.rpc.Status detail whose code
    is ALREADY_EXISTS: the one way left to name another code, and why errors.py cannot."""

    def get_flight_info(self, context, descriptor):
        detail = b"\x08\x06" + _field(2, b"m")  # google.rpc.Status{code: 6, message: "m"}
        raise flight.FlightServerError("[ALREADY_EXISTS] m", detail)


def test_grpc_clients_refuse_a_status_detail_with_another_code():
    import adbc_driver_flightsql.dbapi as dbapi

    server = _RichStatus("grpc://127.0.0.1:0")
    try:
        c = adbc_connect(server)
        cur = c.cursor()
        with pytest.raises(dbapi.InternalError, match="grpc-status-details-bin mismatch"):
            cur.execute("SELECT 1")
        cur.close()
        c.close()
    finally:
        server.shutdown()
