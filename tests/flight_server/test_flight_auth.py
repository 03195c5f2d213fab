"""Authentication and TLS of the Flight server, with real ``pyarrow.flight`` clients.

The servers here are a minimal ``FlightServerBase`` subclass wired with
:mod:`flight_server.auth` and :mod:`flight_server.tls` exactly as the real server is, on
127.0.0.1 with a port chosen by the OS, and always shut down.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from flight_fixtures import run_auth_cli
from tls_util import make_self_signed_cert

from flight_server import auth, tls
from flight_server.auth import (
    AuthConfigError,
    Authenticator,
    Identity,
    auth_server_options,
    current_user,
    hash_password,
    require_write,
    verify_password,
)
from flight_server.tls import TLSConfigError

SECRET = "s3cret-for-tests-0123456789abcdef"
ITER = 1000  # cheap hashes for tests; the count is stored in each hash
TABLE = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
DESCRIPTOR = flight.FlightDescriptor.for_path("t")


class MiniServer(flight.FlightServerBase):
    """Serves one tiny table; records who made each call."""

    def __init__(self, location: str = "grpc://127.0.0.1:0", **kwargs):
        super().__init__(location, **kwargs)
        self.seen: list[tuple[str, Identity | None]] = []
        self.puts: list[pa.Table] = []

    def _info(self) -> flight.FlightInfo:
        endpoint = flight.FlightEndpoint(b"t", [])
        return flight.FlightInfo(TABLE.schema, DESCRIPTOR, [endpoint], TABLE.num_rows, -1)

    def list_flights(self, context, criteria):
        self.seen.append(("ListFlights", current_user(context)))
        yield self._info()

    def get_flight_info(self, context, descriptor):
        self.seen.append(("GetFlightInfo", current_user(context)))
        if descriptor.descriptor_type != flight.DescriptorType.PATH:
            raise NotImplementedError("this test server speaks no Flight SQL")
        return self._info()

    def get_schema(self, context, descriptor):
        self.seen.append(("GetSchema", current_user(context)))
        return flight.SchemaResult(TABLE.schema)

    def do_get(self, context, ticket):
        self.seen.append(("DoGet", current_user(context)))
        return flight.RecordBatchStream(TABLE)

    def do_put(self, context, descriptor, reader, writer):
        self.seen.append(("DoPut", current_user(context)))
        require_write(context)
        self.puts.append(reader.read_all())

    def do_exchange(self, context, descriptor, reader, writer):
        self.seen.append(("DoExchange", current_user(context)))
        writer.begin(TABLE.schema)
        writer.write_table(TABLE)

    def list_actions(self, context):
        self.seen.append(("ListActions", current_user(context)))
        return [("whoami", "the caller"), ("mutate", "needs write"), ("health", "ok")]

    def do_action(self, context, action):
        self.seen.append(("DoAction", current_user(context)))
        if action.type == "whoami":
            identity = current_user(context)
            yield json.dumps(None if identity is None else list(identity)).encode()
        elif action.type == "mutate":
            require_write(context)
            yield b"mutated"
        elif action.type == "health":
            yield b'{"status": "ok"}'
        else:
            raise KeyError(action.type)


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users"
    path.write_text(
        "# test users\n"
        f"alice:{hash_password('alice-pw', iterations=ITER)}:write\n"
        "\n"
        f"bob:{hash_password('bob pw: with colon', iterations=ITER)}\n"
    )
    return path


@pytest.fixture
def authenticator(users_file: Path) -> Authenticator:
    return Authenticator.from_files(users_file, secret=SECRET)


def serve(authenticator: Authenticator | None = None, **kwargs) -> MiniServer:
    options = auth_server_options(authenticator) if authenticator is not None else {}
    return MiniServer(**options, **kwargs)


def connect(server: MiniServer) -> flight.FlightClient:
    return flight.connect(f"grpc://127.0.0.1:{server.port}")


def bearer(token: str) -> flight.FlightCallOptions:
    return flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())])


def whoami(client: flight.FlightClient, options: flight.FlightCallOptions | None = None):
    results = list(client.do_action(flight.Action("whoami", b""), options=options))
    return json.loads(results[0].body.to_pybytes())


def put(client: flight.FlightClient, options: flight.FlightCallOptions | None) -> None:
    writer, _ = client.do_put(DESCRIPTOR, TABLE.schema, options=options)
    writer.write_table(TABLE)
    writer.close()


def exchange(client: flight.FlightClient, options: flight.FlightCallOptions | None) -> pa.Table:
    writer, reader = client.do_exchange(DESCRIPTOR, options=options)
    writer.done_writing()
    table = reader.read_all()
    writer.close()
    return table


CALLS = {
    "ListFlights": lambda c, o: list(c.list_flights(options=o)),
    "GetFlightInfo": lambda c, o: c.get_flight_info(DESCRIPTOR, options=o),
    "GetSchema": lambda c, o: c.get_schema(DESCRIPTOR, options=o),
    "DoGet": lambda c, o: c.do_get(flight.Ticket(b"t"), options=o).read_all(),
    "DoPut": put,
    "DoExchange": exchange,
    "ListActions": lambda c, o: list(c.list_actions(options=o)),
    "DoAction": lambda c, o: whoami(c, o),
}


# --------------------------------------------------------------------------------------------
# handshake and bearer tokens


def test_basic_handshake_returns_a_bearer_that_works_on_every_call(authenticator):
    with serve(authenticator) as server, connect(server) as client:
        key, value = client.authenticate_basic_token("alice", "alice-pw")
        assert key == b"authorization" and value.startswith(b"Bearer ")
        options = flight.FlightCallOptions(headers=[(key, value)])
        assert whoami(client, options) == ["alice", "write"]
        assert client.do_get(flight.Ticket(b"t"), options=options).read_all().equals(TABLE)
        for name, call in CALLS.items():
            call(client, options)
            assert server.seen[-1] == (name, Identity("alice", "write")), name
        assert server.puts[-1].equals(TABLE)


def test_password_with_colon_and_default_read_role(authenticator):
    with serve(authenticator) as server, connect(server) as client:
        header = client.authenticate_basic_token("bob", "bob pw: with colon")
        assert whoami(client, flight.FlightCallOptions(headers=[header])) == ["bob", "read"]


@pytest.mark.parametrize(
    "user,password",
    [("alice", "wrong"), ("alice", ""), ("mallory", "alice-pw"), ("ALICE", "alice-pw")],
    ids=["wrong-password", "empty-password", "unknown-user", "case-differs"],
)
def test_bad_login_is_unauthenticated(authenticator, user, password):
    with serve(authenticator) as server, connect(server) as client:
        with pytest.raises(flight.FlightUnauthenticatedError, match="invalid user name or pass"):
            client.authenticate_basic_token(user, password)


@pytest.mark.parametrize("method", list(CALLS), ids=list(CALLS))
@pytest.mark.parametrize(
    "header",
    [
        None,
        b"Bearer not-a-token",
        b"Bearer lf1.garbage",
        b"Bearer lf1.!!!.###",
        b"Bearer ",
        b"Basic " + base64.b64encode(b"alice:wrong-pw"),
        b"Digest username=alice",
    ],
    ids=[
        "missing",
        "unknown",
        "garbled",
        "bad-chars",
        "empty",
        "basic-wrong-password",
        "scheme",
    ],
)
def test_every_rpc_refuses_missing_or_bad_credentials(authenticator, method, header):
    with serve(authenticator) as server, connect(server) as client:
        options = flight.FlightCallOptions(headers=[(b"authorization", header)] if header else [])
        # pyarrow's client raises a plain OSError for GetSchema failures (it skips the Flight
        # error conversion there), still tagged with the Flight status
        expected = OSError if method == "GetSchema" else flight.FlightUnauthenticatedError
        with pytest.raises(expected, match="Detail: Unauthenticated"):
            CALLS[method](client, options)
        assert server.seen == []  # the handler never ran


class SilentClientAuth(flight.ClientAuthHandler):
    """A handshake that sends no authorization header (pyarrow's legacy auth API)."""

    def authenticate(self, outgoing, incoming):
        outgoing.write(b"hello")

    def get_token(self):
        return b""


def test_handshake_without_credentials_is_unauthenticated(authenticator):
    with serve(authenticator) as server, connect(server) as client:
        with pytest.raises(flight.FlightUnauthenticatedError, match="authentication required"):
            client.authenticate(SilentClientAuth())
        with pytest.raises(flight.FlightUnauthenticatedError, match="malformed Basic"):
            client.authenticate_basic_token("", "")


def test_expired_token_is_refused(users_file):
    now = [1_000_000.0]
    authenticator = Authenticator.from_files(
        users_file, secret=SECRET, token_ttl=60, clock=lambda: now[0]
    )
    with serve(authenticator) as server, connect(server) as client:
        options = flight.FlightCallOptions(
            headers=[client.authenticate_basic_token("alice", "alice-pw")]
        )
        now[0] += 59
        assert whoami(client, options) == ["alice", "write"]
        now[0] += 1
        with pytest.raises(flight.FlightUnauthenticatedError, match="expired"):
            whoami(client, options)


def _tamper(token: str, **changes) -> str:
    header, body, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims.update(changes)
    new_body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{new_body}.{signature}"


def test_forged_tokens_are_refused(authenticator, users_file):
    bob_token = authenticator.issue_token(Identity("bob", "read"))
    other = Authenticator.from_files(users_file, secret="another-secret-0123456789")
    forged = {
        "role-raised": _tamper(bob_token, role="write"),
        "user-changed": _tamper(bob_token, sub="alice"),
        "expiry-extended": _tamper(bob_token, exp=2**40),
        "other-secret": other.issue_token(Identity("alice", "write")),
        "signature-dropped": bob_token.rsplit(".", 1)[0] + ".",
        "truncated": bob_token[:-3],
    }
    with serve(authenticator) as server, connect(server) as client:
        assert whoami(client, bearer(bob_token)) == ["bob", "read"]
        for name, token in forged.items():
            assert token != bob_token, name
            with pytest.raises(flight.FlightUnauthenticatedError, match="invalid bearer token"):
                whoami(client, bearer(token))


def test_read_only_user_cannot_write(authenticator):
    with serve(authenticator) as server, connect(server) as client:
        bob = flight.FlightCallOptions(
            headers=[client.authenticate_basic_token("bob", "bob pw: with colon")]
        )
        alice = flight.FlightCallOptions(
            headers=[client.authenticate_basic_token("alice", "alice-pw")]
        )
        with pytest.raises(flight.FlightUnauthorizedError, match="read-only"):
            put(client, bob)
        with pytest.raises(flight.FlightUnauthorizedError, match="read-only"):
            list(client.do_action(flight.Action("mutate", b""), options=bob))
        assert server.puts == []
        assert client.do_get(flight.Ticket(b"t"), options=bob).read_all().equals(TABLE)
        put(client, alice)
        assert [r.body.to_pybytes() for r in client.do_action(flight.Action("mutate", b""), alice)]
        assert len(server.puts) == 1 and server.puts[0].equals(TABLE)


def test_token_from_one_server_works_on_another_with_the_same_secret(users_file):
    first = Authenticator.from_files(users_file, secret=SECRET)
    same = Authenticator.from_files(users_file, secret=SECRET)
    other = Authenticator.from_files(users_file, secret="a-different-secret-0123456789")
    with serve(first) as a, serve(same) as b, serve(other) as c:
        with connect(a) as ca, connect(b) as cb, connect(c) as cc:
            header = ca.authenticate_basic_token("alice", "alice-pw")
            options = flight.FlightCallOptions(headers=[header])
            assert whoami(cb, options) == ["alice", "write"]
            assert cb.do_get(flight.Ticket(b"t"), options=options).read_all().equals(TABLE)
            with pytest.raises(flight.FlightUnauthenticatedError, match="invalid bearer token"):
                whoami(cc, options)


def test_secret_from_environment(users_file, monkeypatch):
    monkeypatch.setenv(auth.SECRET_ENV, SECRET)
    from_env = Authenticator.from_files(users_file)
    explicit = Authenticator.from_files(users_file, secret=SECRET)
    assert not from_env.secret_is_ephemeral and from_env.secret == SECRET.encode()
    assert explicit.verify_token(from_env.issue_token(Identity("bob", "read"))) == ("bob", "read")
    monkeypatch.delenv(auth.SECRET_ENV)
    random_a = Authenticator.from_files(users_file)
    random_b = Authenticator.from_files(users_file)
    assert random_a.secret_is_ephemeral and random_a.secret != random_b.secret
    with pytest.raises(flight.FlightUnauthenticatedError):
        random_b.verify_token(random_a.issue_token(Identity("bob", "read")))


def test_demoted_or_removed_user_loses_token_rights(tmp_path):
    pw = hash_password("pw", iterations=ITER)
    before = tmp_path / "before"
    before.write_text(f"carol:{pw}:write\ndave:{pw}:write\n")
    after = tmp_path / "after"
    after.write_text(f"carol:{pw}:read\n")
    old = Authenticator.from_files(before, secret=SECRET)
    new = Authenticator.from_files(after, secret=SECRET)
    assert new.verify_token(old.issue_token(Identity("carol", "write"))) == ("carol", "read")
    with pytest.raises(flight.FlightUnauthenticatedError):
        new.verify_token(old.issue_token(Identity("dave", "write")))


def test_static_tokens_file(tmp_path, users_file):
    tokens = tmp_path / "tokens"
    write_token, read_token, anon_token = "w" * 20 + "-write", "r" * 24, "anonymous-token-xyz"
    tokens.write_text(
        f"# service tokens\n{write_token} etl write\n{read_token}   dashboards\n{anon_token}\n"
    )
    only_tokens = Authenticator.from_files(tokens_file=tokens, secret=SECRET)
    both = Authenticator.from_files(users_file, tokens, secret=SECRET)
    with serve(only_tokens) as server, connect(server) as client:
        assert whoami(client, bearer(write_token)) == ["etl", "write"]
        assert whoami(client, bearer(read_token)) == ["dashboards", "read"]
        assert whoami(client, bearer(anon_token)) == ["token-line-4", "read"]
        put(client, bearer(write_token))
        with pytest.raises(flight.FlightUnauthorizedError):
            put(client, bearer(read_token))
        for wrong in (read_token[:-1], read_token + "r", write_token.upper()):
            with pytest.raises(flight.FlightUnauthenticatedError):
                whoami(client, bearer(wrong))
        with pytest.raises(flight.FlightUnauthenticatedError, match="password login"):
            client.authenticate_basic_token("alice", "alice-pw")
    with serve(both) as server, connect(server) as client:
        assert whoami(client, bearer(write_token)) == ["etl", "write"]
        header = client.authenticate_basic_token("alice", "alice-pw")
        assert whoami(client, flight.FlightCallOptions(headers=[header])) == ["alice", "write"]


def test_without_auth_nothing_is_checked_and_everyone_may_write():
    with serve() as server, connect(server) as client:
        assert whoami(client) is None
        put(client, None)
        assert server.puts[-1].equals(TABLE)
        # pyarrow itself answers UNIMPLEMENTED to a handshake when no auth is configured
        with pytest.raises(pa.ArrowNotImplementedError, match="authentication mechanism"):
            client.authenticate_basic_token("alice", "alice-pw")


# --------------------------------------------------------------------------------------------
# files, hashes, the command line


def test_hash_password_round_trip_and_salting():
    first, second = hash_password("pw", iterations=ITER), hash_password("pw", iterations=ITER)
    assert first != second  # salted
    assert verify_password("pw", first) and verify_password("pw", second)
    assert not verify_password("pw ", first) and not verify_password("PW", first)
    scheme, iterations, _, _ = first.split("$")
    assert (scheme, int(iterations)) == ("pbkdf2_sha256", ITER)
    assert hash_password("pw").split("$")[1] == str(auth.DEFAULT_ITERATIONS)


@pytest.mark.parametrize(
    "content,problem",
    [
        ("alice\n", "line 1: expected user:password-hash"),
        ("a:b:c:d:e\n", "line 1: expected user:password-hash"),
        ("alice:{h}:read:read=../x\n", "line 1: bad prefix '../x'"),
        ("alice:{h}:read:own=x\n", "line 1: bad grant 'own=x'"),
        ("# c\nalice:plaintext\n", "line 2: password hash must look like"),
        ("alice:{h}:admin\n", "line 1: unknown role 'admin'"),
        ("alice:{h}\nalice:{h}\n", "line 2: user 'alice' appears twice"),
        (":{h}\n", "line 1: bad user name"),
        ("alice:pbkdf2_sha256$0$AAAA$AAAA\n", "iterations 0 outside"),
        ("alice:pbkdf2_sha256$99999999999$AAAA$AAAA\n", "outside 1..10000000"),
        ("alice:pbkdf2_sha256$10$!!$AAAA\n", "malformed password hash"),
        ("alice:pbkdf2_sha256$10$AAAA$AAAA\n", "wrong digest length"),
        ("", "at least one user"),
    ],
    ids=[
        "no-hash",
        "too-many-fields",
        "bad-grant-prefix",
        "bad-grant-key",
        "plaintext",
        "bad-role",
        "duplicate",
        "empty-user",
        "zero-iterations",
        "huge-iterations",
        "bad-salt",
        "short-digest",
        "empty-file",
    ],
)
def test_bad_users_file_is_a_clear_config_error(tmp_path, content, problem):
    path = tmp_path / "users"
    path.write_text(content.replace("{h}", hash_password("x", iterations=ITER)))
    with pytest.raises(AuthConfigError, match=problem.replace("$", r"\$")) as info:
        Authenticator.from_files(path, secret=SECRET)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "content,problem",
    [
        ("short\n", "at least 16"),
        ("lf1.abcdefghijklmnopqrst\n", "reserved"),
        ("abcdefghijklmnopqrstuvwx bob admin\n", "unknown role"),
        ("abcdefghijklmnopqrstuvwx bob write read=a extra\n", "expected TOKEN"),
        ("abcdefghijklmnopqrstuvwx bob write nope\n", "bad grant 'nope'"),
        ("abcdefghijklmnopqrstuvwx\nabcdefghijklmnopqrstuvwx\n", "line 2: the same token"),
        ("tökenwithnonasciichars123\n", "printable ASCII"),
    ],
    ids=[
        "short",
        "reserved-prefix",
        "bad-role",
        "too-many-fields",
        "bad-grant",
        "duplicate",
        "non-ascii",
    ],
)
def test_bad_tokens_file_is_a_clear_config_error(tmp_path, content, problem):
    path = tmp_path / "tokens"
    path.write_text(content)
    with pytest.raises(AuthConfigError, match=problem):
        Authenticator.from_files(tokens_file=path, secret=SECRET)


def test_missing_file_and_weak_secret_are_config_errors(tmp_path, users_file):
    with pytest.raises(AuthConfigError, match="users file not found"):
        Authenticator.from_files(tmp_path / "nope", secret=SECRET)
    with pytest.raises(AuthConfigError, match="at least 16 bytes"):
        Authenticator.from_files(users_file, secret="short")
    with pytest.raises(AuthConfigError, match="users file or a tokens file"):
        Authenticator.from_files()


def test_cli_makes_lines_the_server_accepts(tmp_path):
    hashed = run_auth_cli("hash", "--user", "erin", "--role", "write", "--iterations", "2000",
                          stdin="erin's pw\n")  # fmt: skip
    assert hashed.returncode == 0, hashed.stderr
    token = run_auth_cli("token", "--user", "svc", "--role", "write")
    assert token.returncode == 0, token.stderr
    secret = run_auth_cli("secret")
    assert secret.returncode == 0 and len(secret.stdout.strip()) >= 32
    (tmp_path / "users").write_text(hashed.stdout)
    (tmp_path / "tokens").write_text(token.stdout)
    authenticator = Authenticator.from_files(
        tmp_path / "users", tmp_path / "tokens", secret=secret.stdout.strip()
    )
    assert hashed.stdout.startswith("erin:pbkdf2_sha256$2000$")
    assert authenticator.check_password("erin", "erin's pw") == ("erin", "write")
    assert authenticator.verify_token(token.stdout.split()[0]) == ("svc", "write")
    bad = run_auth_cli("hash", "--user", "bad:name", stdin="pw\n")
    assert bad.returncode == 2 and "bad user name" in bad.stderr


# --------------------------------------------------------------------------------------------
# the ADBC Flight SQL driver


@pytest.mark.filterwarnings("ignore:Cannot disable autocommit")
def test_adbc_driver_completes_the_handshake_and_sends_the_bearer(authenticator):
    dbapi = pytest.importorskip("adbc_driver_flightsql.dbapi", reason="adbc not installed")
    with serve(authenticator) as server:
        uri = f"grpc://127.0.0.1:{server.port}"
        with pytest.raises(Exception, match="UNAUTHENTICATED"):
            dbapi.connect(uri, db_kwargs={"username": "alice", "password": "wrong"})
        assert server.seen == []
        try:
            conn = dbapi.connect(uri, db_kwargs={"username": "alice", "password": "alice-pw"})
        except Exception:  # the server has no Flight SQL; the handshake is the point
            conn = None
        if conn is not None:
            conn.close()
        # after the handshake the driver asked for SqlInfo with the bearer it was given
        assert server.seen, "the driver made no call after the handshake"
        assert all(identity == ("alice", "write") for _, identity in server.seen)
        assert server.seen[0][0] == "GetFlightInfo"


# --------------------------------------------------------------------------------------------
# TLS


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("certs")
    server_cert, server_key = make_self_signed_cert(directory, "server")
    other_cert, other_key = make_self_signed_cert(directory, "other")
    client_cert, client_key = make_self_signed_cert(directory, "client", "test-client", (), ())
    return {
        "cert": server_cert,
        "key": server_key,
        "other_key": other_key,
        "other_cert": other_cert,
        "client_cert": client_cert,
        "client_key": client_key,
        "dir": directory,
    }


def tls_serve(certs, authenticator=None, client_ca=None) -> MiniServer:
    options = tls.tls_server_options(certs["cert"], certs["key"], client_ca=client_ca)
    if authenticator is not None:
        options.update(auth_server_options(authenticator))
    return MiniServer(tls.location("127.0.0.1", 0, tls=True), **options)


QUICK = flight.FlightCallOptions(timeout=5)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"], ids=["ip", "dns"])
def test_tls_client_with_the_cert_reads_data(certs, host):
    with tls_serve(certs) as server:
        uri = f"grpc+tls://{host}:{server.port}"
        with flight.connect(uri, tls_root_certs=certs["cert"].read_bytes()) as client:
            assert client.do_get(flight.Ticket(b"t"), options=QUICK).read_all().equals(TABLE)


def test_tls_clients_without_the_cert_or_without_tls_fail(certs):
    with tls_serve(certs) as server:
        untrusted = flight.connect(
            f"grpc+tls://127.0.0.1:{server.port}", tls_root_certs=certs["other_cert"].read_bytes()
        )
        with untrusted, pytest.raises(flight.FlightUnavailableError):
            untrusted.do_get(flight.Ticket(b"t"), options=QUICK).read_all()
        with flight.connect(f"grpc+tls://127.0.0.1:{server.port}") as system_roots:
            with pytest.raises(flight.FlightUnavailableError):
                system_roots.do_get(flight.Ticket(b"t"), options=QUICK).read_all()
        with flight.connect(f"grpc://127.0.0.1:{server.port}") as plaintext:
            with pytest.raises(flight.FlightUnavailableError):
                plaintext.do_get(flight.Ticket(b"t"), options=QUICK).read_all()
        assert server.seen == []


def test_tls_with_basic_auth(certs, authenticator):
    with tls_serve(certs, authenticator) as server:
        uri = f"grpc+tls://localhost:{server.port}"
        with flight.connect(uri, tls_root_certs=certs["cert"].read_bytes()) as client:
            header = client.authenticate_basic_token("alice", "alice-pw", QUICK)
            options = flight.FlightCallOptions(timeout=5, headers=[header])
            assert client.do_get(flight.Ticket(b"t"), options=options).read_all().equals(TABLE)
            with pytest.raises(flight.FlightUnauthenticatedError):
                client.do_get(flight.Ticket(b"t"), options=QUICK).read_all()


def test_mutual_tls_needs_a_client_certificate(certs):
    with tls_serve(certs, client_ca=certs["client_cert"]) as server:
        uri = f"grpc+tls://localhost:{server.port}"
        roots = certs["cert"].read_bytes()
        with flight.connect(
            uri,
            tls_root_certs=roots,
            cert_chain=certs["client_cert"].read_bytes(),
            private_key=certs["client_key"].read_bytes(),
        ) as client:
            assert client.do_get(flight.Ticket(b"t"), options=QUICK).read_all().equals(TABLE)
        with flight.connect(uri, tls_root_certs=roots) as anonymous:
            with pytest.raises(flight.FlightUnavailableError):
                anonymous.do_get(flight.Ticket(b"t"), options=QUICK).read_all()


def test_tls_file_problems_are_clear_errors(certs, tmp_path):
    cert, key = certs["cert"], certs["key"]
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("this is not a certificate\n")
    encrypted = tmp_path / "encrypted.key"
    done = subprocess.run(
        ["openssl", "pkey", "-in", str(key), "-aes256", "-passout", "pass:pw", "-out",
         str(encrypted)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    bogus_pem = tmp_path / "bogus.crt"
    bogus_pem.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    cases = [
        ((tmp_path / "missing.crt", key), "TLS certificate file not found"),
        ((cert, tmp_path / "missing.key"), "TLS key file not found"),
        ((tmp_path, key), "not a regular file"),
        ((garbage, key), "TLS certificate file is not PEM"),
        ((cert, garbage), "TLS key file is not PEM"),
        ((cert, certs["other_key"]), "does not belong to the certificate"),
        ((cert, encrypted), "encrypted"),
        ((bogus_pem, key), "cannot be loaded"),
    ]
    for (cert_file, key_file), problem in cases:
        with pytest.raises(TLSConfigError, match=problem):
            tls.load_cert_key_pair(cert_file, key_file)
    pair = tls.load_cert_key_pair(cert, key)
    assert pair.cert == cert.read_bytes() and pair.key == key.read_bytes()


def test_tls_location():
    assert tls.location("0.0.0.0", 8815, tls=True) == "grpc+tls://0.0.0.0:8815"
    assert tls.location("::1", 1, tls=False) == "grpc://[::1]:1"
