"""Hardening of the Flight server against what a client may send, with real clients.

Dataset names outside the safe set, oversized messages (with and without credentials, and the
server's memory while they arrive), floods of bad logins, Basic credentials on every call
(pyarrow with raw headers, the ADBC driver), calls made before the server is ready, and
per-dataset grants through Flight, Flight SQL (ADBC) and actions.  Truth: pylance's reads of
the datasets, the gRPC status each client sees, and the server process's own memory figures.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import socket
import threading
import time
import warnings
from pathlib import Path

import adbc_driver_flightsql.dbapi as dbapi
import jwt
import lance
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_fixtures import (
    action,
    cmd,
    every_version,
    login_flood,
    make_table,
    put,
    read_info,
    run_auth_cli,
    serve,
    status_of,
)
from flight_sql_helpers import running_server
from google.protobuf import any_pb2

from flight_server.auth import Authenticator, Grants, hash_password
from flight_server.limits import Limits
from flight_server.loginlimit import LoginLimiter, Rate
from flight_server.logs import LogfmtFormatter
from flight_server.server import LanceFlightServer
from flight_server.sql import flight_sql_pb2 as pb
from flight_server.sql.protocol import pack
from flight_server.tickets import Ticket

SECRET = "hardening-secret-0123456789abcdef"
ITER = 1000  # cheap hashes; the flood test uses a costly one of its own
# what a pyarrow client raises for a refused call: a Flight error, or for the request errors
# that travel with their real gRPC status (INVALID_ARGUMENT, NOT_FOUND) pyarrow's own classes
REFUSED = (fl.FlightError, pa.ArrowException)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hroot")
    for name, n in (("public/a", 500), ("public/b", 300), ("team/c", 200), ("secret/d", 100)):
        lance.write_dataset(make_table(n, seed=n), str(root / name))
    return root


def basic(user: str, password: str) -> bytes:
    return b"Basic " + base64.b64encode(f"{user}:{password}".encode())


def bearer_options(token: bytes) -> fl.FlightCallOptions:
    return fl.FlightCallOptions(headers=[(b"authorization", token)])


def users_file(tmp_path: Path, lines: list[tuple[str, str, str]], iterations: int = ITER) -> Path:
    path = tmp_path / "users"
    text = "".join(
        f"{user}:{hash_password(pw, iterations=iterations)}:{rest}\n" for user, pw, rest in lines
    )
    path.write_text(text)
    return path


# -- names ---------------------------------------------------------------------------------

BAD_NAMES = [
    "public/nl\n",
    "nl\n",
    "a b",
    "tab\tx",
    "cr\r",
    ".hidden",
    "_versions",
    "a//b",
    "a/../b",
    "a/./b",
    "caf\u00e9",
    "x" * 256,
    "/abs",
    "a\\b",
    "nul\x00",
    "del\x7f",
    "trailing/",
]


def test_bad_dataset_names_are_invalid_argument_everywhere(tmp_path):
    lance.write_dataset(make_table(5), str(tmp_path / "ok"))
    before = sorted(os.listdir(tmp_path))
    table = make_table(3)
    with running_server(str(tmp_path)) as server:
        client = fl.FlightClient(f"grpc://127.0.0.1:{server.port}")
        conn = _adbc(server)
        for name in BAD_NAMES:
            calls = {
                "descriptor": lambda n=name: client.get_flight_info(
                    fl.FlightDescriptor.for_path(n)
                ),
                "schema": lambda n=name: client.get_flight_info(cmd(dataset=n)),
                "ticket": lambda n=name: client.do_get(
                    Ticket(dataset=n, version=1).encode()
                ).read_all(),
                "put": lambda n=name: put(client, cmd(dataset=n, mode="create"), table),
                "put-path": lambda n=name: put(client, fl.FlightDescriptor.for_path(n), table),
                "action": lambda n=name: action(client, "dataset_info", dataset=n),
                "mutating-action": lambda n=name: action(
                    client, "delete", dataset=n, filter="id=1"
                ),
            }
            for what, call in calls.items():
                with pytest.raises(REFUSED) as info:
                    call()
                assert status_of(info.value) == "INVALID_ARGUMENT", (name, what, info.value)
            # one SQL table name: the Flight SQL ingest path (the driver's C strings end at NUL)
            if "/" not in name and "\x00" not in name:
                with conn.cursor() as cur, pytest.raises(dbapi.Error, match="dataset name"):
                    cur.adbc_ingest(name, table, mode="create")
        conn.close()
    assert sorted(os.listdir(tmp_path)) == before  # nothing was created
    assert lance.dataset(str(tmp_path / "ok")).to_table().equals(make_table(5))


def test_listing_hides_directories_no_client_could_name(tmp_path):
    lance.write_dataset(make_table(5), str(tmp_path / "good"))
    lance.write_dataset(make_table(5), str(tmp_path / "bad name"))
    with running_server(str(tmp_path)) as server:
        client = fl.FlightClient(f"grpc://127.0.0.1:{server.port}")
        listed = [i.descriptor.path[0].decode() for i in client.list_flights()]
        assert listed == ["good"]
        assert action(client, "list_datasets")["datasets"] == ["good"]


def _adbc(server, **db_kwargs):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Cannot disable autocommit")
        return dbapi.connect(f"grpc://127.0.0.1:{server.port}", db_kwargs=db_kwargs or None)


# -- message sizes -------------------------------------------------------------------------

LIMIT = 64 << 10
BIG = 1 << 20


def oversized_calls(client: fl.FlightClient, options: fl.FlightCallOptions | None = None):
    big = b"x" * BIG
    sql = pack(pb.CommandStatementQuery(query="SELECT 1 -- " + "x" * BIG))
    big_batch = pa.table({"b": pa.array([b"y" * BIG] * 2, pa.binary())})

    def big_put():
        writer, reader = client.do_put(
            cmd(dataset="public/new", mode="create"), big_batch.schema, options=options
        )
        try:
            writer.write_table(big_batch)
            writer.done_writing()
            reader.read()
        finally:
            writer.close()

    return {
        "ticket": lambda: client.do_get(fl.Ticket(big), options=options).read_all(),
        "command": lambda: client.get_flight_info(fl.FlightDescriptor.for_command(big), options),
        "sql-command": lambda: client.get_flight_info(
            fl.FlightDescriptor.for_command(sql), options
        ),
        "path": lambda: client.get_flight_info(fl.FlightDescriptor.for_path(big.decode()), options),
        "action": lambda: list(client.do_action(fl.Action("list_datasets", big), options)),
        "sql-action": lambda: list(
            client.do_action(fl.Action("CreatePreparedStatement", big), options)
        ),
        "criteria": lambda: list(client.list_flights(big, options)),
        "put-batch": big_put,
    }


def test_oversized_messages_are_refused_before_use(root, tmp_path):
    users = users_file(tmp_path, [("alice", "pw", "write")])
    auth = Authenticator.from_files(users, secret=SECRET)
    before = every_version(root)
    limits = Limits(max_message_bytes=LIMIT, max_batch_bytes=LIMIT)
    with running_server(str(root), authenticator=auth, limits=limits) as server:
        client = fl.FlightClient(f"grpc://127.0.0.1:{server.port}")
        for what, call in oversized_calls(client).items():  # no credentials
            with pytest.raises(REFUSED) as info:
                call()
            assert status_of(info.value) == "UNAUTHENTICATED", (what, info.value)
        token = client.authenticate_basic_token("alice", "pw")[1]
        options = bearer_options(token)
        for what, call in oversized_calls(client, options).items():
            with pytest.raises(REFUSED) as info:
                call()
            assert status_of(info.value) == "RESOURCE_EXHAUSTED", (what, info.value)
            assert "limit" in str(info.value)
        # headers: gRPC refuses more than 16 KiB of metadata before any code of ours runs
        huge = fl.FlightCallOptions(headers=[(b"authorization", token), (b"x-pad", b"p" * BIG)])
        with pytest.raises(pa.ArrowException, match="metadata size exceeds"):
            client.list_actions(huge)
        # under the limits, the same calls work
        got = read_info_with(
            client,
            client.get_flight_info(fl.FlightDescriptor.for_path("public/a"), options),
            options,
        )
        assert got.equals(lance.dataset(str(root / "public/a")).to_table())
    assert every_version(root) == before
    assert not (root / "public" / "new").exists()


def read_public_a(client: fl.FlightClient, options: fl.FlightCallOptions) -> pa.Table:
    info = client.get_flight_info(fl.FlightDescriptor.for_path("public/a"), options)
    return read_info_with(client, info, options)


def _rss_mib(pid: int, key: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {key} for {pid}")


def test_server_memory_stays_bounded_under_oversized_messages(root, tmp_path):
    users = users_file(tmp_path, [("alice", "pw", "write")])
    before = every_version(root)
    size = 8 << 20
    with serve(
        str(root),
        "--auth-users",
        str(users),
        "--max-message-bytes",
        "1M",
        "--no-warm",
        env={"LANCE_FLIGHT_SECRET": SECRET},
    ) as s:
        pid = s.process.pid
        client = fl.FlightClient(s.location)
        token = client.authenticate_basic_token("alice", "pw")[1]
        options = bearer_options(token)
        want = lance.dataset(str(root / "public/a")).to_table()
        assert read_public_a(client, options).equals(want)
        start = _rss_mib(pid)
        blob = b"x" * size
        for _ in range(3):
            for opts, code in ((None, "UNAUTHENTICATED"), (options, "RESOURCE_EXHAUSTED")):
                calls = [
                    lambda o=opts: client.do_get(fl.Ticket(blob), options=o).read_all(),
                    lambda o=opts: client.get_flight_info(fl.FlightDescriptor.for_command(blob), o),
                    lambda o=opts: list(client.do_action(fl.Action("dataset_info", blob), o)),
                ]
                for call in calls:
                    with pytest.raises(REFUSED) as info:
                        call()
                    assert status_of(info.value) == code
        grown = _rss_mib(pid) - start
        # 18 messages of 8 MiB, each held whole by gRPC (and copied by pyarrow) while it is
        # refused: nothing may accumulate
        assert grown < 150, f"server RSS grew by {grown:.0f} MiB"
        # and what the allocator kept of them is soon given back (trimmed after refusals):
        # all of them kept would be 288 MiB (two copies each); the allocator's arenas may
        # keep a few (80-85 MiB seen on a busy machine), so the bound is a dozen messages
        deadline = time.monotonic() + 20
        while _rss_mib(pid) - start > 96 and time.monotonic() < deadline:
            time.sleep(0.2)
        kept = _rss_mib(pid) - start
        assert kept <= 96, f"RSS stayed {kept:.0f} MiB up"
        assert read_public_a(client, options).equals(want)
        assert s.process.poll() is None
    assert every_version(root) == before


# -- logins ----------------------------------------------------------------------------------


def test_flood_of_bad_logins_is_limited_while_good_clients_work(root, tmp_path):
    # a costly hash, as in production, so an unlimited flood would show
    users = users_file(
        tmp_path, [("alice", "pw", "write"), ("bob", "bob-pw", "read")], iterations=100_000
    )
    limiter = LoginLimiter(Rate(3, 60.0), Rate(8, 60.0))
    auth = Authenticator.from_files(users, secret=SECRET, limiter=limiter)
    want = lance.dataset(str(root / "public/a")).to_table()
    with running_server(str(root), authenticator=auth) as server:
        loc = f"grpc://127.0.0.1:{server.port}"
        good = fl.FlightClient(loc)
        options = bearer_options(good.authenticate_basic_token("bob", "bob-pw")[1])
        stop = threading.Event()
        good_reads: list[bool] = []

        def reader():
            while not stop.is_set():
                info = good.get_flight_info(fl.FlightDescriptor.for_path("public/a"), options)
                good_reads.append(read_info_with(good, info, options).equals(want))

        t = threading.Thread(target=reader)
        t.start()
        outcomes = login_flood(loc, ["alice", "mallory", "eve", "alice"], 6)
        stop.set()
        t.join()
        assert "in" not in outcomes
        # per user 3 checks at most, 8 for the server: the other 16 never reached a hash
        assert outcomes.count("bad") <= 8
        assert outcomes.count("limited") == len(outcomes) - outcomes.count("bad") >= 16
        assert limiter.refused >= 16
        assert good_reads and all(good_reads)
        # alice is locked out for now, even with her password: nothing is hashed for her
        with pytest.raises(fl.FlightUnauthenticatedError, match="too many failed logins"):
            fl.FlightClient(loc).authenticate_basic_token("alice", "pw")
        # the bearer token of a good client still works
        info = good.get_flight_info(fl.FlightDescriptor.for_path("public/a"), options)
        assert read_info_with(good, info, options).equals(want)


def test_login_limit_forgives_after_refill_and_on_success():
    now = [0.0]
    limiter = LoginLimiter(Rate(2, 10.0), Rate(100, 1.0), clock=lambda: now[0])
    users = {"u": (hash_password("pw", iterations=ITER), "read")}
    auth = Authenticator(users, secret=SECRET, limiter=limiter)
    for _ in range(2):
        with pytest.raises(fl.FlightUnauthenticatedError, match="invalid user"):
            auth.check_password("u", "nope")
    with pytest.raises(fl.FlightUnauthenticatedError, match=r"retry in 10s"):
        auth.check_password("u", "pw")
    now[0] += 10.0  # one attempt regained
    assert auth.check_password("u", "pw") == ("u", "read")
    for _ in range(2):  # success forgave the earlier failures: a full burst again
        with pytest.raises(fl.FlightUnauthenticatedError, match="invalid user"):
            auth.check_password("u", "nope")


# -- Basic credentials on every call -----------------------------------------------------------


class _Headers(fl.ClientMiddlewareFactory):
    """Records the headers of every response."""

    def __init__(self):
        self.received: list[dict] = []

    def start_call(self, info):
        factory = self

        class _M(fl.ClientMiddleware):
            def received_headers(self, headers):
                factory.received.append(headers)

        return _M()


def test_basic_credentials_on_every_call_with_pyarrow(root, tmp_path):
    users = users_file(tmp_path, [("alice", "pw", "write"), ("bob", "bob-pw", "read")])
    auth = Authenticator.from_files(users, secret=SECRET)
    want = lance.dataset(str(root / "public/b")).to_table()
    with running_server(str(root), authenticator=auth) as server:
        headers = _Headers()
        client = fl.FlightClient(f"grpc://127.0.0.1:{server.port}", middleware=[headers])
        options = bearer_options(basic("bob", "bob-pw"))
        info = client.get_flight_info(fl.FlightDescriptor.for_path("public/b"), options)
        assert read_info_with(client, info, options).equals(want)
        got = [
            json.loads(r.body.to_pybytes())
            for r in client.do_action(fl.Action("list_datasets", b"{}"), options)
        ]
        assert got[0]["datasets"] == ["public/a", "public/b", "secret/d", "team/c"]
        tokens = [h["authorization"][0] for h in headers.received if "authorization" in h]
        assert tokens and all(t.startswith("Bearer ") for t in tokens)
        assert all(jwt.get_unverified_header(t[7:])["alg"] == "HS256" for t in tokens)
        # the returned bearer token works on its own, with bob's role
        follow = bearer_options(tokens[-1].encode())
        with pytest.raises(fl.FlightUnauthorizedError, match="read-only"):
            put(client_with(client, follow), cmd(dataset="public/x", mode="create"), make_table(2))
        info = client.get_flight_info(fl.FlightDescriptor.for_path("public/b"), follow)
        assert read_info_with(client, info, follow).equals(want)
        for bad in (basic("bob", "wrong"), basic("nobody", "x"), b"Basic !!!"):
            with pytest.raises(fl.FlightUnauthenticatedError):
                client.get_flight_info(
                    fl.FlightDescriptor.for_path("public/b"), bearer_options(bad)
                )
    assert not (root / "public" / "x").exists()


def client_with(client: fl.FlightClient, options: fl.FlightCallOptions):
    """``client`` whose do_put sends ``options`` (for the ``put`` helper)."""

    class _C:
        def do_put(self, descriptor, schema):
            return client.do_put(descriptor, schema, options=options)

    return _C()


def read_info_with(client, info, options) -> pa.Table:
    return pa.concat_tables(
        [client.do_get(e.ticket, options).read_all() for e in info.endpoints]
    ).combine_chunks()


def test_basic_credentials_on_every_call_with_adbc(root, tmp_path):
    users = users_file(tmp_path, [("alice", "pw", "write")])
    auth = Authenticator.from_files(users, secret=SECRET)
    want = lance.dataset(str(root / "team/c")).to_table()
    with running_server(str(root), authenticator=auth) as server:
        header = basic("alice", "pw").decode()
        conn = _adbc(server, **{"adbc.flight.sql.authorization_header": header})
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM team.c ORDER BY id")
            assert cur.fetch_arrow_table().equals(want.sort_by("id"))
            cur.execute("SELECT count(*) AS n FROM public.a")
            assert cur.fetchall() == [(500,)]
        conn.close()
        bad = basic("alice", "nope").decode()
        with pytest.raises(dbapi.Error, match="invalid user name or password"):
            conn = _adbc(server, **{"adbc.flight.sql.authorization_header": bad})
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
        # the handshake path (username/password) is unchanged
        conn = _adbc(server, username="alice", password="pw")
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM secret.d")
            assert cur.fetchall() == [(100,)]
        conn.close()


# -- startup ---------------------------------------------------------------------------------


class _SlowStart(LanceFlightServer):
    """Its Flight SQL service becomes ready only when the test says so."""

    release = threading.Event()
    waiting = threading.Event()

    def _start_services(self, sql: bool) -> None:
        self.waiting.set()
        assert self.release.wait(30)
        super()._start_services(sql)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_port_answers_unavailable_until_every_service_is_ready(root):
    port = _free_port()
    made: list[LanceFlightServer] = []
    builder = threading.Thread(
        target=lambda: made.append(
            _SlowStart(str(root), f"grpc://127.0.0.1:{port}", sql=True, warm=False)
        )
    )
    builder.start()
    try:
        assert _SlowStart.waiting.wait(30)
        client = fl.FlightClient(f"grpc://127.0.0.1:{port}")
        tables = fl.FlightDescriptor.for_command(pack(pb.CommandGetTables()))
        calls = {
            "sql-info": lambda: client.get_flight_info(tables),
            "sql-get": lambda: client.do_get(fl.Ticket(pack(pb.CommandGetTables()))).read_all(),
            "sql-action": lambda: list(
                client.do_action(
                    fl.Action(
                        "CreatePreparedStatement",
                        pack(pb.ActionCreatePreparedStatementRequest(query="SELECT 1")),
                    )
                )
            ),
            "flight": lambda: client.get_flight_info(fl.FlightDescriptor.for_path("public/a")),
            "list": lambda: list(client.list_flights()),
            "actions": lambda: client.list_actions(),
        }
        for _what, call in calls.items():
            with pytest.raises(fl.FlightUnavailableError, match="starting"):
                call()
    finally:
        _SlowStart.release.set()
        builder.join(30)
    server = made[0]
    try:
        info = client.get_flight_info(tables)
        got = client.do_get(info.endpoints[0].ticket).read_all()
        assert sorted(got.column("table_name").to_pylist()) == ["a", "b", "c", "d"]
        want = lance.dataset(str(root / "public/a")).to_table()
        info = client.get_flight_info(fl.FlightDescriptor.for_path("public/a"))
        assert read_info(client, info).equals(want)
    finally:
        server.shutdown()


# -- per-dataset grants ------------------------------------------------------------------------


@pytest.fixture
def granted(tmp_path):
    root = tmp_path / "groot"
    for name, n in (("public/a", 50), ("public/w", 20), ("team/c", 30), ("secret/d", 10)):
        lance.write_dataset(make_table(n, seed=n), str(root / name))
    users = users_file(
        tmp_path,
        [
            ("alice", "pw", "write:read=public;write=public/w,public/new"),
            ("bob", "pw", "write"),
            ("rita", "pw", "read:read=team/"),
        ],
    )
    tokens = tmp_path / "tokens"
    tokens.write_text("svc-token-0123456789abcdef svc write write=team\n")
    auth = Authenticator.from_files(users, tokens, secret=SECRET)
    return root, auth


def test_grants_limit_flight_reads_writes_and_actions(granted):
    root, auth = granted
    before = every_version(root)
    with running_server(str(root), authenticator=auth) as server:
        client = fl.FlightClient(f"grpc://127.0.0.1:{server.port}")
        alice = bearer_options(client.authenticate_basic_token("alice", "pw")[1])
        bob = bearer_options(client.authenticate_basic_token("bob", "pw")[1])
        svc = bearer_options(b"Bearer svc-token-0123456789abcdef")

        def listed(options):
            return sorted(i.descriptor.path[0].decode() for i in client.list_flights(b"", options))

        assert listed(alice) == ["public/a", "public/w"]
        assert listed(bob) == ["public/a", "public/w", "secret/d", "team/c"]
        assert listed(svc) == ["public/a", "public/w", "secret/d", "team/c"]  # no read= limit

        def acts(options, kind_, **body):
            results = client.do_action(fl.Action(kind_, json.dumps(body).encode()), options)
            return json.loads(next(iter(results)).body.to_pybytes())

        assert acts(alice, "list_datasets")["datasets"] == ["public/a", "public/w"]
        # reads outside the grant: descriptor, schema, a ticket bob was given, actions
        secret = fl.FlightDescriptor.for_path("secret/d")
        ticket = client.get_flight_info(secret, bob).endpoints[0].ticket
        denied = {
            "info": lambda: client.get_flight_info(secret, alice),
            "schema": lambda: client.get_schema(secret, alice),
            "ticket": lambda: client.do_get(ticket, alice).read_all(),
            "dataset_info": lambda: acts(alice, "dataset_info", dataset="secret/d"),
            "versions": lambda: acts(alice, "versions", dataset="team/c"),
            "put-outside-write": lambda: put(
                client_with(client, alice), cmd(dataset="public/a", mode="append"), make_table(2)
            ),
            "create-outside": lambda: put(
                client_with(client, alice), cmd(dataset="secret/new", mode="create"), make_table(2)
            ),
            "delete-action": lambda: acts(alice, "delete", dataset="public/a", filter="id < 5"),
            "svc-delete-outside": lambda: acts(svc, "delete", dataset="public/a", filter="id<5"),
            "create-index-outside": lambda: acts(
                alice, "create_index", dataset="public/a", column="x", index_type="IVF_FLAT"
            ),
            "drop-index-outside": lambda: acts(alice, "drop_index", dataset="public/a", name="i"),
            "list-indices-unreadable": lambda: acts(alice, "list_indices", dataset="secret/d"),
        }
        for what, call in denied.items():
            with pytest.raises((fl.FlightError, pa.ArrowException)) as info:
                call()
            assert "PERMISSION_DENIED" in str(info.value) or isinstance(
                info.value, fl.FlightUnauthorizedError
            ), (what, info.value)
        assert every_version(root) == before
        # inside the grant
        assert read_info_with(
            client, client.get_flight_info(fl.FlightDescriptor.for_path("public/a"), alice), alice
        ).equals(lance.dataset(str(root / "public/a")).to_table())
        put(
            client_with(client, alice),
            cmd(dataset="public/w", mode="append"),
            make_table(5, start=1000),
        )
        acts(svc, "delete", dataset="team/c", filter="id < 3")
    assert lance.dataset(str(root / "public/w")).count_rows() == 25
    assert lance.dataset(str(root / "team/c")).count_rows() == 27
    for name in ("public/a", "secret/d"):
        assert every_version(root)[name] == before[name]


def test_grants_limit_flight_sql_metadata_queries_and_writes(granted):
    root, auth = granted
    before = every_version(root)
    with running_server(str(root), authenticator=auth) as server:
        rita = _adbc(server, username="rita", password="pw")
        objects = rita.adbc_get_objects(depth="tables").read_all().to_pylist()
        schemas = {
            s["db_schema_name"]: [t["table_name"] for t in s["db_schema_tables"]]
            for s in objects[0]["catalog_db_schemas"]
        }
        assert schemas == {"team": ["c"]}
        with rita.cursor() as cur:
            cur.execute("SELECT count(*) FROM team.c")
            assert cur.fetchall() == [(30,)]
            for sql in ("SELECT * FROM secret.d", "SELECT * FROM team.c JOIN public.a USING (id)"):
                with pytest.raises(dbapi.Error, match="may not read"):
                    cur.execute(sql)
                    cur.fetchall()
        rita.close()
        alice = _adbc(server, username="alice", password="pw")
        with alice.cursor() as cur:
            with pytest.raises(dbapi.Error, match="may not change"):
                cur.execute("DELETE FROM public.a WHERE id < 10")
                cur.fetchall()
            with pytest.raises(dbapi.Error, match="may not change"):
                cur.adbc_ingest("new", make_table(3), mode="create", db_schema_name="secret")
            cur.execute("DELETE FROM public.w WHERE id < 10")
            cur.fetchall()
            cur.adbc_ingest("new", make_table(3), mode="create", db_schema_name="public")
        alice.close()
    assert not (root / "secret" / "new").exists()
    assert lance.dataset(str(root / "public/w")).count_rows() == 10
    assert lance.dataset(str(root / "public/new")).to_table().equals(make_table(3))
    after = every_version(root)
    for name in ("public/a", "team/c", "secret/d"):
        assert after[name] == before[name]


def test_grant_prefixes_name_subtrees():
    g = Grants.parse("read=team,pub/;write=team/w")
    assert [g.can_read(n) for n in ("team", "team/x", "teammate", "pub", "pub/a", "x")] == [
        True,
        True,
        False,
        False,
        True,
        False,
    ]
    assert [g.can_write(n) for n in ("team/w", "team/w/x", "team/wx", "team/x")] == [
        True,
        True,
        False,
        False,
    ]
    assert Grants.parse("write=a").can_read("b")  # no read= part: reads are not limited
    assert not Grants.parse("read=a;write=").can_write("a")  # an empty list allows nothing
    assert Grants.parse("read=*").can_read("anything/at/all")
    for bad in ("read=a b", "own=x", "read=a;read=b", "read=_x", "read=../x"):
        with pytest.raises(ValueError):
            Grants.parse(bad)


@pytest.mark.parametrize(
    "flag,value",
    [("--login-limit", "lots"), ("--login-server-limit", "5/0"), ("--max-message-bytes", "12")],
)
def test_bad_limit_flags_are_refused_at_start(tmp_path, flag, value, capsys):
    from flight_server.cli import main

    with pytest.raises(SystemExit) as info:
        code = main(["serve", str(tmp_path), "--port", "0", flag, value])
        raise SystemExit(code)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert flag in err or "at least 1 KiB" in err, err


def test_auth_cli_writes_grant_lines_the_server_reads(tmp_path):
    def run(*args: str, stdin: str = "") -> str:
        out = run_auth_cli(*args, stdin=stdin)
        assert out.returncode == 0, out.stderr
        return out.stdout

    users = run("hash", "--user", "ann", "--grant", "read=public, team/", "--iterations", "1000",
                stdin="ann-pw\n")  # fmt: skip
    tokens = run("token", "--user", "bot", "--role", "write", "--grant", "write=team/")
    (tmp_path / "users").write_text(users)
    (tmp_path / "tokens").write_text(tokens)
    auth = Authenticator.from_files(tmp_path / "users", tmp_path / "tokens", secret=SECRET)
    ann = auth.check_password("ann", "ann-pw")
    assert ann == ("ann", "read")
    assert auth.grants_of(ann) == Grants(read=("public", "team/"))
    bot = auth.verify_token(tokens.split()[0])
    assert bot == ("bot", "write") and auth.grants_of(bot) == Grants(write=("team/",))


def test_expired_tokens_do_not_count_as_failed_logins_but_forged_ones_do():
    now = [1000.0]
    limiter = LoginLimiter(Rate(2, 60.0), Rate(100, 1.0))
    users = {"u": (hash_password("pw", iterations=ITER), "read")}
    auth = Authenticator(users, secret=SECRET, limiter=limiter, clock=lambda: now[0])
    token = auth.issue_token(auth.check_password("u", "pw"), ttl=10)
    now[0] += 60
    for _ in range(5):  # a dashboard polling with its old token
        with pytest.raises(fl.FlightUnauthenticatedError, match="expired"):
            auth.authenticate({"authorization": [f"Bearer {token}"]}, handshake=False)
    assert auth.check_password("u", "pw") == ("u", "read")  # not locked out
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    for _ in range(2):
        with pytest.raises(fl.FlightUnauthenticatedError, match="invalid bearer token"):
            auth.authenticate({"authorization": [f"Bearer {forged}"]}, handshake=False)
    with pytest.raises(fl.FlightUnauthenticatedError, match="too many failed logins"):
        auth.check_password("u", "pw")


def test_a_flood_of_calls_without_credentials_does_not_flood_the_log(root, tmp_path, caplog):
    users = users_file(tmp_path, [("alice", "pw", "read")])
    auth = Authenticator.from_files(users, secret=SECRET)
    caplog.set_level(logging.INFO, logger="flight_server.requests")
    with running_server(str(root), authenticator=auth) as server:
        client = fl.FlightClient(f"grpc://127.0.0.1:{server.port}")
        started = time.monotonic()
        for _ in range(300):
            with pytest.raises(fl.FlightUnauthenticatedError):
                client.list_actions()
        elapsed = time.monotonic() - started
        time.sleep(0.2)  # the budget refills: the next refusal is logged with the count
        with pytest.raises(fl.FlightUnauthenticatedError):
            client.list_actions()
    lines = [text(r) for r in caplog.records if "status=UNAUTHENTICATED" in text(r)]
    left_out = sum(
        int(m.group(1)) for line in lines if (m := re.search(r"refusals_not_logged=(\d+)", line))
    )
    assert len(lines) <= 40 + 20 * (elapsed + 0.2) + 1
    assert len(lines) + left_out == 301  # every refusal logged or counted


def test_sql_parameters_are_bounded_in_all_while_ingest_streams(tmp_path):
    lance.write_dataset(make_table(100), str(tmp_path / "t"))
    limits = Limits(max_message_bytes=LIMIT, max_batch_bytes=LIMIT)
    chunk = pa.record_batch({"0": pa.array(["v" * 1000] * 10)})  # ~10 KiB a batch
    with running_server(str(tmp_path), limits=limits) as server:
        client = fl.FlightClient(f"grpc://127.0.0.1:{server.port}")
        req = pack(
            pb.ActionCreatePreparedStatementRequest(query="SELECT count(*) FROM t WHERE s = ?")
        )
        [res] = list(client.do_action(fl.Action("CreatePreparedStatement", req)))
        wrapper = any_pb2.Any.FromString(res.body.to_pybytes())
        handle = pb.ActionCreatePreparedStatementResult.FromString(wrapper.value)
        bind = fl.FlightDescriptor.for_command(
            pack(
                pb.CommandPreparedStatementQuery(
                    prepared_statement_handle=handle.prepared_statement_handle
                )
            )
        )
        writer, reader = client.do_put(bind, chunk.schema)
        with pytest.raises((*REFUSED, OSError)) as info:
            for _ in range(12):  # 120 KiB in all, each batch well under the limit
                writer.write_batch(chunk)
            writer.done_writing()
            reader.read()
            writer.close()
        assert "[RESOURCE_EXHAUSTED]" in str(info.value) and "in all" in str(info.value)
        # a bulk ingest of the same size streams to disk: no total limit
        data = pa.Table.from_batches([chunk.rename_columns(["s"])] * 12)
        opts = pb.CommandStatementIngest.TableDefinitionOptions
        ingest = fl.FlightDescriptor.for_command(
            pack(
                pb.CommandStatementIngest(
                    table="big",
                    table_definition_options=opts(
                        if_not_exist=opts.TABLE_NOT_EXIST_OPTION_CREATE,
                        if_exists=opts.TABLE_EXISTS_OPTION_FAIL,
                    ),
                )
            )
        )
        writer, reader = client.do_put(ingest, data.schema)
        writer.write_table(data, max_chunksize=10)
        writer.done_writing()
        reader.read()
        writer.close()
    assert lance.dataset(str(tmp_path / "big")).to_table().equals(data.combine_chunks())


def text(record) -> str:
    """The line the server's text formatter writes for ``record``."""
    return LogfmtFormatter().format(record)
