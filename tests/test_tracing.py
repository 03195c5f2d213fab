"""OpenTelemetry tracing of real Flight and Flight SQL calls: each call's SERVER span is a
child of the W3C traceparent the client sent, caught by the SDK's in-memory exporter."""

from __future__ import annotations

import lance
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from flight_fixtures import cmd
from flight_sql_helpers import adbc_connect, running_server
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from flight_server import tracing

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def _tracer():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def _options(trace: str = TRACE, parent: str = PARENT) -> flight.FlightCallOptions:
    return flight.FlightCallOptions(headers=[(b"traceparent", f"00-{trace}-{parent}-01".encode())])


def test_flight_calls_are_children_of_the_clients_traceparent(tmp_path):
    table = pa.table({"id": pa.array(range(1000), pa.int64())})
    lance.write_dataset(table, str(tmp_path / "t"))  # written by pylance, served by us
    tracer, exporter = _tracer()
    with running_server(str(tmp_path), middleware=tracing.middleware(True, tracer)) as server:
        with flight.connect(f"grpc://127.0.0.1:{server.port}") as client:
            info = client.get_flight_info(cmd(dataset="t"), options=_options())
            tickets = [e.ticket for e in info.endpoints]
            got = pa.concat_tables(
                client.do_get(t, options=_options(parent="b7ad6b7169203331")).read_all()
                for t in tickets
            )
            assert got.num_rows == 1000
            with pytest.raises(KeyError, match="no dataset named"):  # gRPC NOT_FOUND
                client.get_flight_info(cmd(dataset="missing"), options=_options())
            list(client.list_flights())  # no traceparent: a new trace
    spans = exporter.get_finished_spans()
    by_name: dict[str, list] = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    info_ok, info_missing = by_name["GetFlightInfo"]
    for span in (info_ok, info_missing, *by_name["DoGet"]):
        assert format(span.context.trace_id, "032x") == TRACE
        assert span.kind == SpanKind.SERVER and span.parent.is_remote
    assert format(info_ok.parent.span_id, "016x") == PARENT
    assert info_ok.attributes["rpc.method"] == "GetFlightInfo"
    assert info_ok.attributes["lance_flight.dataset"] == "t"
    assert info_ok.attributes["lance_flight.status"] == "OK"
    assert sum(s.attributes["lance_flight.rows"] for s in by_name["DoGet"]) == 1000
    assert all(format(s.parent.span_id, "016x") == "b7ad6b7169203331" for s in by_name["DoGet"])
    assert info_missing.attributes["lance_flight.status"] == "NOT_FOUND"
    assert info_missing.status.status_code == StatusCode.ERROR
    (listing,) = by_name["ListFlights"]
    assert listing.parent is None and format(listing.context.trace_id, "032x") != TRACE


def test_flight_sql_calls_through_adbc_carry_the_trace(tmp_path):
    """A real Flight SQL client (ADBC) sending the traceparent as a call header."""
    lance.write_dataset(pa.table({"x": [1, 2, 3]}), str(tmp_path / "t"))
    tracer, exporter = _tracer()
    with running_server(str(tmp_path), middleware=tracing.middleware(True, tracer)) as server:
        header = {"adbc.flight.sql.rpc.call_header.traceparent": f"00-{TRACE}-{PARENT}-01"}
        with adbc_connect(server, **header) as conn, conn.cursor() as cur:
            cur.execute("SELECT sum(x) AS s FROM t")
            assert cur.fetchall() == [(6,)]
    spans = exporter.get_finished_spans()
    assert {"GetFlightInfo", "DoGet"} <= {s.name for s in spans}
    for span in spans:
        assert format(span.context.trace_id, "032x") == TRACE
        assert format(span.parent.span_id, "016x") == PARENT
    for span in (s for s in spans if s.name in ("GetFlightInfo", "DoGet")):
        assert span.attributes["lance_flight.status"] == "OK"
    assert sum(s.attributes.get("lance_flight.rows", 0) for s in spans if s.name == "DoGet") == 1


def test_tracing_off_adds_no_middleware():
    """Without ``--otel`` the server's middleware is unchanged."""
    assert tracing.middleware(False) == {}
    assert tracing.tracer(False) is None


def test_serve_otel_exports_spans_as_the_otel_variables_say(tmp_path):
    """``lance-flight serve --otel`` with ``OTEL_TRACES_EXPORTER=console``: the span of a
    call sent with a traceparent is printed with the client's trace id and parent."""
    import json

    from flight_fixtures import serve

    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "flight-test"}
    with serve(str(tmp_path), "--no-warm", "--otel", env=env) as s:
        with flight.connect(s.location) as client:
            assert list(client.list_flights(options=_options())) == []
        assert s.stop() == 0
        printed = s.process.stdout.read()
    decoder, spans, at = json.JSONDecoder(), [], printed.find("{")
    while at >= 0:  # the console exporter prints indented JSON objects one after another
        span, end = decoder.raw_decode(printed, at)
        spans.append(span)
        at = printed.find("{", end)
    (span,) = [s for s in spans if s["name"] == "ListFlights"]
    assert span["context"]["trace_id"] == f"0x{TRACE}" and span["parent_id"] == f"0x{PARENT}"
    assert span["kind"] == "SpanKind.SERVER"
    assert span["attributes"]["lance_flight.status"] == "OK"
    assert span["resource"]["attributes"]["service.name"] == "flight-test"
