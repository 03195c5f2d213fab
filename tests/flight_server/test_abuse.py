"""Abuse a running ``lance-flight serve`` (two workers, auth on, loopback) while well-behaved
clients keep reading.

Every abuse is bounded in count and time: malformed Arrow IPC in every place a client can send
it (a put, Flight SQL parameters, Flight SQL ingest), malformed and oversized tickets,
commands and action bodies, a client that vanishes in the middle of a put, a flood of bad
logins, and a heavy query.  Throughout, a reader checks its answers against pylance; at the
end, no worker has died, and every version of every dataset reads as before in pylance, with
no new file anywhere under the root.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_fixtures import (
    REPO,
    cmd,
    every_version,
    login_flood,
    make_table,
    serve,
    status_of,
)
from google.protobuf import any_pb2

from flight_server.auth import hash_password
from flight_server.sql import flight_sql_pb2 as pb
from flight_server.sql.protocol import pack

SECRET = "abuse-secret-0123456789abcdef0123"
_Opts = pb.CommandStatementIngest.TableDefinitionOptions


def _files(root: Path) -> set[str]:
    """Every file under ``root``; a directory the server removes during the walk (a failed
    create's cleanup) is skipped rather than failing the walk, as ``rglob`` would."""
    return {
        os.path.relpath(os.path.join(top, name), root)
        for top, _dirs, names in os.walk(root)
        for name in names
    }


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("abuse")
    lance.write_dataset(make_table(3000), str(root / "data" / "a"), max_rows_per_file=1000)
    lance.dataset(str(root / "data" / "a")).delete("id % 7 = 0")
    lance.write_dataset(make_table(400, seed=2), str(root / "data" / "b"))
    users = root.parent / f"{root.name}-users"
    users.write_text(
        f"writer:{hash_password('writer-pw', iterations=1000)}:write\n"
        f"reader:{hash_password('reader-pw', iterations=1000)}:read\n"
    )
    before = every_version(root)
    files = _files(root)
    with serve(
        str(root),
        "--workers",
        "2",
        "--auth-users",
        str(users),
        "--max-message-bytes",
        "1M",
        "--login-limit",
        "3/60",
        "--login-server-limit",
        "12/5",
        env={"LANCE_FLIGHT_SECRET": SECRET},
    ) as server:
        client = fl.FlightClient(server.location)
        writer = client.authenticate_basic_token("writer", "writer-pw")[1]
        reader = client.authenticate_basic_token("reader", "reader-pw")[1]
        yield _Site(root, server, writer, reader, before, files)
    assert server.process.returncode == 0  # every worker stopped cleanly


class _Site:
    def __init__(self, root, server, writer_token, reader_token, before, files):
        self.root, self.server = root, server
        self.writer_token = writer_token
        self.writer, self.reader = _bearer(writer_token), _bearer(reader_token)
        self.reader_token = reader_token
        self.before, self.files = before, files

    def client(self) -> fl.FlightClient:
        return fl.FlightClient(self.server.location)


def _bearer(token: bytes, timeout: float = 60) -> fl.FlightCallOptions:
    return fl.FlightCallOptions(headers=[(b"authorization", token)], timeout=timeout)


@pytest.fixture(scope="module")
def good_readers(site):
    """Two clients reading all along, one plain Flight, one Flight SQL; each answer is
    compared with pylance."""
    want = lance.dataset(str(site.root / "data" / "a")).to_table()
    want_sum = int(np.asarray(want.column("id")).sum())
    stop = threading.Event()
    results: list[tuple[str, bool | str]] = []

    def flight_reader():
        client = site.client()
        while not stop.is_set():
            try:
                info = client.get_flight_info(fl.FlightDescriptor.for_path("data/a"), site.reader)
                parts = [client.do_get(e.ticket, site.reader).read_all() for e in info.endpoints]
                results.append(("flight", pa.concat_tables(parts).equals(want)))
            except Exception as exc:  # noqa: BLE001 - any failure is a wrong answer
                results.append(("flight", repr(exc)))

    def sql_reader():
        client = site.client()
        query = pack(pb.CommandStatementQuery(query="SELECT sum(id) AS s FROM data.a"))
        while not stop.is_set():
            try:
                info = client.get_flight_info(fl.FlightDescriptor.for_command(query), site.reader)
                got = client.do_get(info.endpoints[0].ticket, site.reader).read_all()
                results.append(("sql", got.column("s").to_pylist() == [want_sum]))
            except Exception as exc:  # noqa: BLE001
                results.append(("sql", repr(exc)))
            time.sleep(0.05)

    threads = [threading.Thread(target=f, daemon=True) for f in (flight_reader, sql_reader)]
    for t in threads:
        t.start()
    yield results
    stop.set()
    for t in threads:
        t.join(60)
    bad = [r for r in results if r[1] is not True]
    assert not bad, f"well-behaved clients got wrong answers or errors: {bad[:5]}"
    assert {kind for kind, _ in results} == {"flight", "sql"}


def _backwards_strings(n: int = 4) -> pa.RecordBatch:
    """The schema of ``data/a``, with a string column whose offsets go backwards (pyarrow
    builds it without validating)."""
    offsets = pa.py_buffer(np.array([0, 8, 3, 12, 1][: n + 1], dtype=np.int32).tobytes())
    data = pa.py_buffer(b"abcdefghijklmnop")
    bad = pa.Array.from_buffers(pa.string(), n, [None, offsets, data])
    ids = pa.array(np.arange(n), pa.int64())
    xs = pa.array(np.zeros(n))
    return pa.RecordBatch.from_arrays([ids, xs, bad], names=["id", "x", "s"])


def _unordered_binary(n: int = 3) -> pa.RecordBatch:
    """A binary column whose offsets are not monotonic (within its data, so the client sends
    it)."""
    offsets = pa.py_buffer(np.array([0, 5, 2, 6][: n + 1], dtype=np.int32).tobytes())
    bad = pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(b"abcdefgh")])
    return pa.RecordBatch.from_arrays([bad], names=["b"])


def _put_raw(client, descriptor, batch: pa.RecordBatch, options) -> None:
    writer, reader = client.do_put(descriptor, batch.schema, options=options)
    try:
        writer.write_batch(batch)
        writer.done_writing()
        reader.read()
    finally:
        writer.close()


class _Expect:
    """Runs every abuse and collects what went wrong, so one run reports all of it."""

    def __init__(self):
        self.problems: list[str] = []

    def refused(self, label: str, call, *statuses: str) -> None:
        try:
            call()
        except (fl.FlightError, pa.ArrowException) as exc:
            status = status_of(exc)
            if status not in statuses:
                self.problems.append(f"{label}: {status} {str(exc)[:200]!r}")
            return
        self.problems.append(f"{label}: accepted")

    def check(self) -> None:
        assert not self.problems, "\n".join(self.problems)


def _prepared(client, sql: str, options) -> bytes:
    req = pack(pb.ActionCreatePreparedStatementRequest(query=sql))
    [result] = list(client.do_action(fl.Action("CreatePreparedStatement", req), options))
    wrapper = any_pb2.Any.FromString(result.body.to_pybytes())
    return pb.ActionCreatePreparedStatementResult.FromString(
        wrapper.value
    ).prepared_statement_handle


def test_malformed_ipc_everywhere(site, good_readers):
    client = site.client()
    expect = _Expect()
    bad = "INVALID_ARGUMENT"
    for what, batch in (
        ("backwards strings", _backwards_strings()),
        ("unordered binary", _unordered_binary()),
    ):

        def put_to(descriptor, options, b=batch):
            return lambda: _put_raw(client, descriptor, b, options)

        # plain puts: appending to a dataset (when the schema fits) and creating one
        if batch.schema.names == ["id", "x", "s"]:
            expect.refused(
                f"{what}: put append",
                put_to(cmd(dataset="data/a", mode="append"), site.writer),
                bad,
            )
        expect.refused(
            f"{what}: put create", put_to(cmd(dataset="data/new", mode="create"), site.writer), bad
        )
        # Flight SQL parameters: bound to a prepared statement by a read-only user, and an
        # update's parameters
        last = batch.column(batch.num_columns - 1)
        params = pa.RecordBatch.from_arrays([last], names=["0"])
        handle = _prepared(client, "SELECT count(*) FROM data.a WHERE s = ?", site.reader)
        bind = fl.FlightDescriptor.for_command(
            pack(pb.CommandPreparedStatementQuery(prepared_statement_handle=handle))
        )
        expect.refused(
            f"{what}: SQL parameters",
            lambda d=bind, p=params: _put_raw(client, d, p, site.reader),
            bad,
        )
        update = fl.FlightDescriptor.for_command(
            pack(pb.CommandStatementUpdate(query="DELETE FROM data.a WHERE s = ?"))
        )
        expect.refused(
            f"{what}: update parameters",
            lambda d=update, p=params: _put_raw(client, d, p, site.writer),
            bad,
        )
        # Flight SQL bulk ingest: a new table, and appending to one
        for table, if_exists in (
            ("fresh", _Opts.TABLE_EXISTS_OPTION_FAIL),
            ("b", _Opts.TABLE_EXISTS_OPTION_APPEND),
        ):
            options = _Opts(if_not_exist=_Opts.TABLE_NOT_EXIST_OPTION_CREATE, if_exists=if_exists)
            ingest = fl.FlightDescriptor.for_command(
                pack(
                    pb.CommandStatementIngest(
                        table=table, schema="data", table_definition_options=options
                    )
                )
            )
            expect.refused(f"{what}: ingest {table}", put_to(ingest, site.writer), bad)
    # parameters travel inside a prepared statement's handle: a damaged one
    handle = _prepared(client, "SELECT count(*) FROM data.a WHERE s = ?", site.reader)
    for label, damaged in (
        ("truncated", handle[: len(handle) // 2]),
        ("garbled tail", handle[:-8] + b"\xff" * 8),
    ):
        query = pack(pb.CommandPreparedStatementQuery(prepared_statement_handle=damaged))
        expect.refused(
            f"handle {label}",
            lambda q=query: client.get_flight_info(fl.FlightDescriptor.for_command(q), site.reader),
            bad,
            "NOT_FOUND",
        )
    expect.check()


def test_malformed_and_oversized_requests(site, good_readers):
    client = site.client()
    expect = _Expect()
    big = b"{" * (2 << 20)
    for options in (None, site.reader):
        want = "UNAUTHENTICATED" if options is None else "RESOURCE_EXHAUSTED"
        who = "anonymous" if options is None else "reader"
        expect.refused(
            f"{who}: big ticket",
            lambda o=options: client.do_get(fl.Ticket(big), o).read_all(),
            want,
        )
        expect.refused(
            f"{who}: big command",
            lambda o=options: client.get_flight_info(fl.FlightDescriptor.for_command(big), o),
            want,
        )
        expect.refused(
            f"{who}: big action body",
            lambda o=options: list(client.do_action(fl.Action("dataset_info", big), o)),
            want,
        )
    malformed = {
        "empty": b"",
        "binary": b"\x00\xff\xfe garbage",
        "negative version": b'{"v": 1, "dataset": "data/a", "version": -1}',
        "no such fragment": b'{"v": 1, "dataset": "data/a", "version": 1, "fragment": 99999}',
        "escaping name": b'{"v": 1, "dataset": "../../etc", "version": 1}',
        "newline name": b'{"v": 1, "dataset": "public/nl\\n", "version": 1}',
        "deep JSON": b"[" * 100_000 + b"]" * 100_000,
        "unknown statement": pack(pb.TicketStatementQuery(statement_handle=b"\x00" * 64)),
        "unknown Any": b"\x0a\x05type.\x12\x00",
    }
    either = ("INVALID_ARGUMENT", "NOT_FOUND")
    for label, raw in malformed.items():
        expect.refused(
            f"ticket {label}",
            lambda r=raw: client.do_get(fl.Ticket(r), site.reader).read_all(),
            *either,
        )
        expect.refused(
            f"command {label}",
            lambda r=raw: client.get_flight_info(fl.FlightDescriptor.for_command(r), site.reader),
            *either,
        )
        expect.refused(
            f"action body {label}",
            lambda r=raw: list(client.do_action(fl.Action("dataset_info", r), site.reader)),
            *either,
        )
    for name in ("", "a b", "_versions", "data/a/..", "x" * 600, "data/a\n"):
        expect.refused(
            f"path {name[:20]!r}",
            lambda n=name: client.get_flight_info(fl.FlightDescriptor.for_path(n), site.reader),
            "INVALID_ARGUMENT",
        )
    expect.check()


_VANISHING_PUT = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np, pyarrow as pa, pyarrow.flight as fl
    location, token = sys.argv[1], sys.argv[2].encode()
    client = fl.FlightClient(location)
    options = fl.FlightCallOptions(headers=[(b"authorization", token)])
    batch = pa.record_batch({"id": pa.array(np.arange(10_000), pa.int64()),
                             "x": pa.array(np.random.default_rng(0).random(10_000)),
                             "s": pa.array(["s"] * 10_000)})
    desc = fl.FlightDescriptor.for_command(json.dumps(
        {"dataset": sys.argv[3], "mode": sys.argv[4]}).encode())
    writer, _ = client.do_put(desc, batch.schema, options=options)
    for _ in range(20):
        writer.write_batch(batch)
    print("sent", flush=True)
    time.sleep(60)
    """
)


def test_client_vanishing_mid_put(site, good_readers):
    token = site.writer_token
    for dataset, mode in (("data/a", "append"), ("data/gone", "create")):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _VANISHING_PUT,
                site.server.location,
                token.decode(),
                dataset,
                mode,
            ],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": REPO},
        )
        try:
            assert proc.stdout.readline().strip() == "sent"
            time.sleep(0.3)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    _eventually_unchanged(site)


def _eventually_unchanged(site, seconds: float = 20) -> None:
    """The server notices a vanished client at its next read: wait for the files to go."""
    deadline = time.monotonic() + seconds
    while _files(site.root) != site.files and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _files(site.root) == site.files


def test_flood_of_bad_logins(site, good_readers):
    outcomes = login_flood(site.server.location, ["writer", "reader", "nobody", "writer"], 8)
    assert "in" not in outcomes
    assert outcomes.count("limited") >= len(outcomes) // 2, outcomes
    # a client holding a token is not locked out
    client = site.client()
    info = client.get_flight_info(fl.FlightDescriptor.for_path("data/b"), site.writer)
    assert info.total_records == 400


def test_heavy_sql_while_others_read(site, good_readers):
    client = site.client()
    heavy = pack(
        pb.CommandStatementQuery(
            query="SELECT sum(x.id * y.id * z.id) FROM data.a x, data.a y, data.b z"
        )
    )
    options = _bearer(site.reader_token, timeout=3)
    started = time.monotonic()
    try:
        info = client.get_flight_info(fl.FlightDescriptor.for_command(heavy), options)
        client.do_get(info.endpoints[0].ticket, options).read_all()
    except (fl.FlightError, pa.ArrowException) as exc:
        assert status_of(exc) in (
            "DEADLINE_EXCEEDED",
            "CANCELLED",
            "RESOURCE_EXHAUSTED",
            "INVALID_ARGUMENT",
        )
    # the readers keep going (checked by good_readers); give them a moment under load
    time.sleep(max(0.0, 2 - (time.monotonic() - started)))


def test_nothing_changed_and_every_worker_is_alive(site, good_readers):
    _eventually_unchanged(site)
    assert every_version(site.root) == site.before
    log = site.server.log()
    assert "restarting" not in log and "exited with" not in log, log[-2000:]
    assert site.server.process.poll() is None
    # still serving, both workers: read every endpoint
    client = site.client()
    info = client.get_flight_info(fl.FlightDescriptor.for_path("data/a"), site.reader)
    parts = [client.do_get(e.ticket, site.reader).read_all() for e in info.endpoints]
    assert pa.concat_tables(parts).equals(lance.dataset(str(site.root / "data/a")).to_table())
