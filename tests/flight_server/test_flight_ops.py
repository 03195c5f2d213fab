"""Operations pieces of the Flight server: Prometheus metrics, request log, health probe.

A minimal ``FlightServerBase`` subclass is wired with the middleware exactly as the real server
is and driven by real ``pyarrow.flight`` clients; status codes are checked against a raw gRPC
client, metrics by scraping the HTTP endpoint, log lines through ``caplog``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import sys
import urllib.error
import urllib.request

import grpc
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from prometheus_client import generate_latest
from repo_paths import REPO
from tls_util import make_self_signed_cert

from flight_server import health, tls
from flight_server.auth import (
    Authenticator,
    AuthMiddlewareFactory,
    HandshakeAuthHandler,
    Identity,
    auth_server_options,
    hash_password,
)
from flight_server.logs import JsonFormatter, LogfmtFormatter
from flight_server.metrics import (
    CONTENT_TYPE,
    ServerMetrics,
    serve_metrics,
    status_name,
)
from flight_server.requestlog import (
    REQUEST_ID_HEADER,
    RequestLogMiddlewareFactory,
    accumulate,
    annotate,
    request_id,
)
from lance_format.cache import SearchCache
from lance_format.errors import InvalidArgumentError

LOGGER = "flight_server.requests"
TABLE = pa.table({"id": pa.array(range(10), pa.int64()), "s": [f"v{i}" for i in range(10)]})
BATCHES = TABLE.to_batches(max_chunksize=4)  # 4 + 4 + 2 rows
FAILURES = {
    "not-found": KeyError("no such dataset"),
    "invalid": InvalidArgumentError("bad column"),
    "arrow-invalid": pa.ArrowInvalid("bad"),
    "overflow": OverflowError("too big"),
    "unimplemented": NotImplementedError("later"),
    "unknown": RuntimeError("boom"),
    "type": TypeError("wrong type"),
    "io": OSError("disk"),
    "unauthorized": flight.FlightUnauthorizedError("no"),
    "unauthenticated": flight.FlightUnauthenticatedError("who"),
    "internal": flight.FlightInternalError("oops"),
    "timeout": flight.FlightTimedOutError("slow"),
    "unavailable": flight.FlightUnavailableError("busy"),
    "cancelled": flight.FlightCancelledError("stop"),
    "server": flight.FlightServerError("failed"),
    "arrow-cancelled": pa.ArrowCancelled("stop"),
}


class OpsServer(flight.FlightServerBase):
    """A tiny table and a few actions; reports to the metrics and the request log."""

    def __init__(
        self,
        metrics: ServerMetrics | None = None,
        health_status: str = "ok",
        location: str = "grpc://127.0.0.1:0",
        **kwargs,
    ):
        super().__init__(location, **kwargs)
        self.metrics = metrics
        self.health_status = health_status
        self.request_ids: list[str | None] = []

    def list_flights(self, context, criteria):
        annotate(context, dataset="t")
        endpoint = flight.FlightEndpoint(b"t", [])
        yield flight.FlightInfo(
            TABLE.schema, flight.FlightDescriptor.for_path("t"), [endpoint], TABLE.num_rows, -1
        )

    def do_get(self, context, ticket):
        annotate(context, dataset=ticket.ticket.decode())
        self.request_ids.append(request_id(context))

        def batches():
            for batch in BATCHES:
                accumulate(context, rows=batch.num_rows, bytes=batch.nbytes)
                if self.metrics is not None:
                    with self.metrics.time_decode():
                        pass
                    self.metrics.record_served(batch.num_rows, batch.nbytes)
                yield batch

        return flight.GeneratorStream(TABLE.schema, batches())

    def list_actions(self, context):
        return [("health", "is the server well"), ("fail", "raise the named error")]

    def do_action(self, context, action):
        annotate(context, action=action.type)
        if self.metrics is not None:
            self.metrics.record_action(action.type)
        if action.type == "health":
            yield json.dumps({"status": self.health_status, "datasets": 1}).encode()
        elif action.type == "fail":
            raise FAILURES[action.body.to_pybytes().decode()]
        else:
            raise KeyError(action.type)


def connect(server: flight.FlightServerBase, **kwargs) -> flight.FlightClient:
    return flight.connect(f"grpc://127.0.0.1:{server.port}", **kwargs)


def health_action(client, options=None):
    return list(client.do_action(flight.Action("health", b""), options=options))


def fail_action(client, name, options=None):
    with pytest.raises(pa.ArrowException):  # the kind is checked against raw gRPC elsewhere
        list(client.do_action(flight.Action("fail", name.encode()), options=options))


# --------------------------------------------------------------------------------------------
# an independent parser of the exposition format


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text: str) -> dict[tuple[str, frozenset], float]:
    """{(name, frozenset(labels)): value}; also checks HELP/TYPE precede every family."""
    assert text.endswith("\n")
    samples: dict[tuple[str, frozenset], float] = {}
    typed: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "histogram", "untyped")
            typed[name] = kind
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels_text, value = match.groups()
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in typed else name
        assert family in typed, f"{name} has no TYPE line before it"
        labels = {}
        if labels_text:
            for label, raw in _LABEL.findall(labels_text):
                labels[label] = re.sub(
                    r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), raw
                )
        key = (name, frozenset(labels.items()))
        assert key not in samples, f"duplicate sample {key}"
        samples[key] = float(value)
    return samples


def sample(samples, name, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def scrape(endpoint) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(endpoint.url, timeout=10) as response:
        assert response.headers["Content-Type"] == CONTENT_TYPE
        return parse_exposition(response.read().decode("utf-8"))


def render(metrics: ServerMetrics) -> str:
    return generate_latest(metrics.registry).decode("utf-8")


def series(samples, name) -> dict[frozenset, float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


# --------------------------------------------------------------------------------------------
# the server's metrics


def test_failing_cache_callback_leaves_the_rest_of_the_scrape(caplog):
    metrics = ServerMetrics()
    metrics.record_written(3, 30)
    with caplog.at_level(logging.ERROR, logger="flight_server.metrics"):
        metrics.watch_cache(lambda: 1 / 0)
        samples = parse_exposition(render(metrics))
    assert sample(samples, "lance_flight_rows_written_total") == 3
    assert sample(samples, "lance_flight_cache_hits_total") == 0
    assert "search cache" in caplog.text


def test_server_metric_helpers_and_cache_gauges():
    metrics = ServerMetrics()
    cache = SearchCache(capacity_bytes=10_000)
    metrics.watch_cache(cache.stats)
    for key in ("a", "b", "a", "a", "c"):
        cache.get_or_load(key, lambda: b"x" * 100)
    metrics.record_written(7, 700)
    metrics.record_written(3, 300)
    metrics.record_decode(0.25)
    with metrics.time_decode():
        pass
    metrics.record_commit_conflict()
    metrics.record_action("compact")
    with serve_metrics(metrics) as endpoint:
        samples = scrape(endpoint)
    stats = cache.stats()
    assert (stats["hits"], stats["misses"]) == (2, 3)
    assert sample(samples, "lance_flight_cache_hits_total") == stats["hits"]
    assert sample(samples, "lance_flight_cache_misses_total") == stats["misses"]
    assert sample(samples, "lance_flight_cache_bytes") == stats["bytes"] > 0
    assert sample(samples, "lance_flight_cache_entries") == 3
    assert sample(samples, "lance_flight_cache_capacity_bytes") == 10_000
    assert sample(samples, "lance_flight_rows_written_total") == 10
    assert sample(samples, "lance_flight_bytes_written_total") == 1000
    assert sample(samples, "lance_flight_decode_seconds_count") == 2
    assert sample(samples, "lance_flight_decode_seconds_sum") >= 0.25
    assert sample(samples, "lance_flight_commit_conflicts_total") == 1
    assert sample(samples, "lance_flight_actions_total", action="compact") == 1
    assert sample(samples, "process_start_time_seconds") > 1e9


def test_metrics_endpoint_serves_only_metrics_and_closes():
    endpoint = serve_metrics(ServerMetrics(), "127.0.0.1", 0)
    try:
        base = f"http://127.0.0.1:{endpoint.port}"
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{base}/other", timeout=10)
        assert info.value.code == 404
        with urllib.request.urlopen(f"{base}/metrics?x=1", timeout=10) as response:
            assert response.status == 200
    finally:
        endpoint.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{base}/metrics", timeout=5)


# --------------------------------------------------------------------------------------------
# RPC metrics, checked against a raw gRPC client


def raw_do_action(port: int, action_type: str, body: bytes) -> str:
    """DoAction over plain gRPC; returns the status code name the server sent."""

    def field(number: int, payload: bytes) -> bytes:
        length, out = len(payload), b""
        while True:  # varint
            byte, length = length & 0x7F, length >> 7
            out += bytes([byte | (0x80 if length else 0)])
            if not length:
                break
        return bytes([(number << 3) | 2]) + out + payload

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_stream(
            "/arrow.flight.protocol.FlightService/DoAction",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            list(call(field(1, action_type.encode()) + field(2, body), timeout=10))
        except grpc.RpcError as exc:
            return exc.code().name
    return "OK"


def test_status_names_match_what_grpc_clients_receive():
    metrics = ServerMetrics()
    with OpsServer(metrics, middleware={"metrics": metrics.middleware()}) as server:
        assert raw_do_action(server.port, "health", b"") == "OK"
        for name in FAILURES:
            before = {k: v for k, v in series(parse_exposition(render(metrics)),
                                              "lance_flight_requests_total").items()}  # fmt: skip
            code = raw_do_action(server.port, "fail", name.encode())
            assert status_name(FAILURES[name]) == code, name
            after = series(parse_exposition(render(metrics)), "lance_flight_requests_total")
            changed = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k)}
            assert changed == {frozenset({("method", "DoAction"), ("status", code)}): 1}, name
    assert status_name(None) == "OK"


def test_metrics_count_every_rpc_by_method_and_status():
    metrics = ServerMetrics()
    with (
        OpsServer(metrics, middleware={"metrics": metrics.middleware()}) as server,
        serve_metrics(metrics) as endpoint,
        connect(server) as client,
    ):
        for _ in range(5):
            health_action(client)
        for _ in range(3):
            assert client.do_get(flight.Ticket(b"t")).read_all().equals(TABLE)
        for _ in range(2):
            list(client.list_flights())
        list(client.list_actions())
        fail_action(client, "not-found")
        fail_action(client, "invalid")
        fail_action(client, "not-found")
        samples = scrape(endpoint)
    requests = series(samples, "lance_flight_requests_total")
    expected = {
        ("DoAction", "OK"): 5,
        ("DoGet", "OK"): 3,
        ("ListFlights", "OK"): 2,
        ("ListActions", "OK"): 1,
        ("DoAction", "NOT_FOUND"): 2,
        ("DoAction", "INVALID_ARGUMENT"): 1,
    }
    assert requests == {
        frozenset({("method", m), ("status", s)}): n for (m, s), n in expected.items()
    }
    assert sample(samples, "lance_flight_request_duration_seconds_count", method="DoAction") == 8
    assert sample(samples, "lance_flight_request_duration_seconds_count", method="DoGet") == 3
    assert all(v == 0 for v in series(samples, "lance_flight_requests_in_flight").values())
    assert sample(samples, "lance_flight_rows_served_total") == 3 * TABLE.num_rows
    assert sample(samples, "lance_flight_bytes_served_total") == 3 * sum(b.nbytes for b in BATCHES)
    assert sample(samples, "lance_flight_decode_seconds_count") == 3 * len(BATCHES)
    assert sample(samples, "lance_flight_actions_total", action="health") == 5
    assert sample(samples, "lance_flight_actions_total", action="fail") == 3


# --------------------------------------------------------------------------------------------
# request log


class HeaderCapture(flight.ClientMiddlewareFactory):
    """Records the x-request-id response header of every call, in call order.

    ``received_headers`` runs for the headers and again for the trailers; a failed call may
    carry its headers in the trailers only.
    """

    def __init__(self):
        self.ids: list[str | None] = []

    def start_call(self, info):
        capture, slot = self, len(self.ids)
        self.ids.append(None)

        class Middleware(flight.ClientMiddleware):
            def received_headers(self, headers):
                values = headers.get(REQUEST_ID_HEADER)
                if values and capture.ids[slot] is None:
                    capture.ids[slot] = values[0]

        return Middleware()


def logfmt(line: str) -> dict[str, str]:
    fields = {}
    for token in shlex.split(line):
        key, _, value = token.partition("=")
        assert key not in fields, f"duplicate field {key} in {line!r}"
        fields[key] = value
    return fields


def request_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER]


def text(record: logging.LogRecord) -> str:
    """The line the server's text formatter writes for ``record``."""
    return LogfmtFormatter().format(record)


def test_one_log_line_per_call_with_the_request_id_sent_back(caplog):
    capture = HeaderCapture()
    caplog.set_level(logging.INFO, logger=LOGGER)
    with (
        OpsServer(middleware={"requestlog": RequestLogMiddlewareFactory()}) as server,
        connect(server, middleware=[capture]) as client,
    ):
        health_action(client)
        assert client.do_get(flight.Ticket(b"tpch/lineitem")).read_all().equals(TABLE)
        list(client.list_flights())
        fail_action(client, "not-found")
        given = flight.FlightCallOptions(headers=[(b"x-request-id", b"trace-abc.123:7")])
        health_action(client, given)
        forged = flight.FlightCallOptions(headers=[(b"x-request-id", b"x status=OK")])
        health_action(client, forged)
        list(client.list_actions())
    records = request_lines(caplog)
    lines = [logfmt(text(r)) for r in records]
    assert len(lines) == 7 == len(capture.ids)
    assert [f["request_id"] for f in lines] == capture.ids
    assert len(set(capture.ids)) == 7
    assert [f["method"] for f in lines] == [
        "DoAction", "DoGet", "ListFlights", "DoAction", "DoAction", "DoAction", "ListActions",
    ]  # fmt: skip
    assert [f["status"] for f in lines] == ["OK", "OK", "OK", "NOT_FOUND", "OK", "OK", "OK"]
    assert capture.ids[4] == "trace-abc.123:7"
    assert re.fullmatch(r"[0-9a-f]{16}", capture.ids[5])  # the forged id was replaced
    assert server.request_ids == [capture.ids[1]]  # handlers see the same id
    get = lines[1]
    assert get["dataset"] == "tpch/lineitem"
    assert int(get["rows"]) == TABLE.num_rows
    assert int(get["bytes"]) == sum(b.nbytes for b in BATCHES)
    assert get["peer"].startswith("ipv4:127.0.0.1:")
    assert float(get["duration_ms"]) >= 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", get["ts"])
    failed = lines[3]
    assert "no such dataset" in failed["error"] and failed["action"] == "fail"
    assert records[3].levelno == logging.WARNING and records[0].levelno == logging.INFO
    assert "user" not in get  # no auth: no user field
    assert "error" not in get
    assert records[1].fields["rows"] == TABLE.num_rows  # the structured fields themselves


def test_json_request_log(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    capture = HeaderCapture()
    with (
        OpsServer(middleware={"requestlog": RequestLogMiddlewareFactory()}) as server,
        connect(server, middleware=[capture]) as client,
    ):
        client.do_get(flight.Ticket(b'weird "name"\nx=1')).read_all()
        fail_action(client, "unauthorized")
    first, second = (json.loads(JsonFormatter().format(r)) for r in request_lines(caplog))
    assert first["request_id"] == capture.ids[0] and first["dataset"] == 'weird "name"\nx=1'
    assert first["rows"] == TABLE.num_rows and first["status"] == "OK"
    assert second["status"] == "PERMISSION_DENIED" and second["request_id"] == capture.ids[1]


def test_lines_inside_a_call_carry_its_request_id_and_trace_id(tmp_path, caplog):
    """A W3C traceparent becomes ``trace_id``; a line the real server's handler logs (a
    dataset that cannot be listed) carries the request line's request id and trace id; a
    malformed traceparent is ignored."""
    from flight_server.server import LanceFlightServer

    versions = tmp_path / "broken" / "_versions"
    versions.mkdir(parents=True)
    (versions / "1.manifest").write_bytes(b"not a manifest")
    caplog.set_level(logging.INFO)
    capture = HeaderCapture()
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    server = LanceFlightServer(str(tmp_path), "grpc://127.0.0.1:0", warm=False)
    try:
        with connect(server, middleware=[capture]) as client:
            for parent in (
                f"00-{trace}-00f067aa0ba902b7-01",
                "00-xyz-00f067aa0ba902b7-01",
                f"00-{'0' * 32}-00f067aa0ba902b7-01",
            ):
                options = flight.FlightCallOptions(headers=[(b"traceparent", parent.encode())])
                assert list(client.list_flights(options=options)) == []
    finally:
        server.shutdown()
    inside = [
        json.loads(JsonFormatter().format(r))
        for r in caplog.records
        if "skipping dataset" in r.getMessage()
    ]
    calls = [json.loads(JsonFormatter().format(r)) for r in request_lines(caplog)]
    assert [c["request_id"] for c in calls] == capture.ids == [i["request_id"] for i in inside]
    assert calls[0]["trace_id"] == inside[0]["trace_id"] == trace
    assert all("trace_id" not in line for line in calls[1:] + inside[1:])
    assert inside[0]["level"] == "WARNING" and "'broken'" in inside[0]["msg"]


def test_serve_logs_json_lines(tmp_path):
    """``lance-flight serve --log-format json``: every stderr line is a JSON object; the
    request line carries the client's request id and trace id."""
    from flight_fixtures import serve

    (tmp_path / "root").mkdir()
    trace = "0af7651916cd43dd8448eb211c80319c"
    headers = [
        (b"x-request-id", b"json-log-1"),
        (b"traceparent", f"00-{trace}-b7ad6b7169203331-01".encode()),
    ]
    with serve(str(tmp_path / "root"), "--no-warm", "--log-format", "json") as s:
        with flight.connect(s.location) as client:
            list(client.list_flights(options=flight.FlightCallOptions(headers=headers)))
        s.stop()
        log = s.log()
    lines = [json.loads(line) for line in log.splitlines() if line.strip()]
    assert lines and all({"ts", "level", "logger", "msg"} <= set(line) for line in lines)
    (call,) = [line for line in lines if line["logger"] == LOGGER]
    assert call["request_id"] == "json-log-1" and call["trace_id"] == trace
    assert call["method"] == "ListFlights" and call["status"] == "OK"


def test_logfmt_quotes_what_needs_quoting(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with (
        OpsServer(middleware={"requestlog": RequestLogMiddlewareFactory()}) as server,
        connect(server) as client,
    ):
        client.do_get(flight.Ticket(b'a b="c"\\')).read_all()
    (record,) = request_lines(caplog)
    fields = logfmt(text(record))
    assert fields["dataset"] == 'a b="c"\\'
    assert "\n" not in text(record)


# --------------------------------------------------------------------------------------------
# auth rejections seen by metrics and the request log


@pytest.fixture
def authenticator(tmp_path) -> Authenticator:
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('pw', iterations=1000)}:write\n")
    return Authenticator.from_files(users, secret="ops-tests-secret-0123456789")


@pytest.mark.parametrize("order", ["observers-first", "auth-first"])
def test_rejected_calls_are_counted_and_logged_once(authenticator, caplog, order):
    caplog.set_level(logging.INFO, logger=LOGGER)
    metrics = ServerMetrics()
    requestlog = RequestLogMiddlewareFactory()
    observers = {"requestlog": requestlog, "metrics": metrics.middleware()}
    if order == "observers-first":
        options = auth_server_options(authenticator, observers)
        assert list(options["middleware"]) == ["requestlog", "metrics", "auth"]
    else:  # hand-built, auth first: rejected calls must still be seen exactly once
        factory = AuthMiddlewareFactory(authenticator, observers.values())
        options = {
            "auth_handler": HandshakeAuthHandler(),
            "middleware": {"auth": factory, **observers},
        }
    with OpsServer(metrics, **options) as server, connect(server) as client:
        with pytest.raises(flight.FlightUnauthenticatedError):
            client.authenticate_basic_token("alice", "wrong")
        with pytest.raises(flight.FlightUnauthenticatedError):
            client.do_get(flight.Ticket(b"t")).read_all()
        header = client.authenticate_basic_token("alice", "pw")
        health_action(client, flight.FlightCallOptions(headers=[header]))
    requests = series(parse_exposition(render(metrics)), "lance_flight_requests_total")
    assert requests == {
        frozenset({("method", "Handshake"), ("status", "UNAUTHENTICATED")}): 1,
        frozenset({("method", "DoGet"), ("status", "UNAUTHENTICATED")}): 1,
        frozenset({("method", "Handshake"), ("status", "OK")}): 1,
        frozenset({("method", "DoAction"), ("status", "OK")}): 1,
    }
    assert all(v == 0 for v in series(parse_exposition(render(metrics)),
                                      "lance_flight_requests_in_flight").values())  # fmt: skip
    lines = [logfmt(text(r)) for r in request_lines(caplog)]
    assert [(f["method"], f["status"]) for f in lines] == [
        ("Handshake", "UNAUTHENTICATED"), ("DoGet", "UNAUTHENTICATED"),
        ("Handshake", "OK"), ("DoAction", "OK"),
    ]  # fmt: skip
    assert lines[0]["user"] == "alice"  # the claimed name of a failed login
    assert "user" not in lines[1]
    if order == "observers-first":  # only then does the log learn who succeeded
        assert lines[2]["user"] == "alice" and lines[3]["user"] == "alice"


# --------------------------------------------------------------------------------------------
# health


def test_health_check_against_servers():
    with OpsServer() as server:
        uri = f"grpc://127.0.0.1:{server.port}"
        assert health.check(uri, timeout=5)
        assert health.probe(uri, 5) == {"status": "ok", "datasets": 1}
    with OpsServer(health_status="degraded") as sick:
        assert not health.check(f"grpc://127.0.0.1:{sick.port}", timeout=5)
    # the first server is gone: nothing listens on its port
    assert not health.check(uri, timeout=2)
    assert not health.check("grpc://", timeout=2)


def test_health_check_with_auth(authenticator):
    options = auth_server_options(authenticator)
    with OpsServer(**options) as server:
        uri = f"grpc://127.0.0.1:{server.port}"
        assert health.check(uri, 5)  # up, and enforcing auth
        assert not health.check(uri, 5, accept_auth_required=False)
        assert health.check(uri, 5, username="alice", password="pw", accept_auth_required=False)
        assert not health.check(uri, 5, username="alice", password="bad")
        token = authenticator.issue_token(Identity("alice", "read"))
        assert health.check(uri, 5, token=token, accept_auth_required=False)
        assert not health.check(uri, 5, token=token + "x")


def test_health_check_over_tls(tmp_path):
    cert, key = make_self_signed_cert(tmp_path)
    location = tls.location("127.0.0.1", 0, tls=True)
    with OpsServer(location=location, **tls.tls_server_options(cert, key)) as server:
        uri = f"grpc+tls://localhost:{server.port}"
        assert health.check(uri, 5, tls_root_certs=cert.read_bytes())
        assert health.check(uri, 5, disable_server_verification=True)
        assert not health.check(uri, 3)  # system roots do not trust a self-signed cert
        cli = run_health_cli(uri, "--tls-root-certs", str(cert))
        assert cli.returncode == 0, cli.stdout + cli.stderr


def run_health_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flight_server.health", *args, "--timeout", "5"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_health_cli_exit_codes():
    with OpsServer() as good, OpsServer(health_status="starting") as sick:
        ok = run_health_cli(f"grpc://127.0.0.1:{good.port}")
        assert ok.returncode == 0 and ok.stdout.startswith("healthy"), ok.stdout + ok.stderr
        bad = run_health_cli(f"grpc://127.0.0.1:{sick.port}")
        assert bad.returncode == 1 and "starting" in bad.stdout, bad.stdout + bad.stderr
        from_env = run_health_cli(env={health.URI_ENV: f"grpc://127.0.0.1:{good.port}"})
        assert from_env.returncode == 0, from_env.stdout + from_env.stderr
