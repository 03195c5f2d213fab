"""Optional OpenTelemetry tracing: one server span per Flight / Flight SQL call, child of
the W3C ``traceparent`` the client sent.

Off unless ``lance-flight serve --otel`` (or :func:`middleware` with ``enabled=True``) and the
``opentelemetry`` packages are installed (``pip install lance-flight[otel]``); without them
nothing changes.  The span is named after the RPC (``DoGet``, ``DoPut``, ...), has kind
SERVER, and carries ``rpc.system``, ``rpc.method``, ``lance_flight.request_id``,
``lance_flight.status`` and the fields handlers attach to the request log
(:func:`flight_server.requestlog.annotate`): ``lance_flight.dataset``, ``lance_flight.rows``,
``lance_flight.bytes``, ...  A failed call's span has status ERROR.

Where spans go is the standard OpenTelemetry configuration: a tracer provider the embedding
application installed, else one built from the ``OTEL_*`` environment variables
(``OTEL_SERVICE_NAME``, ``OTEL_TRACES_EXPORTER=console|otlp``; ``otlp`` needs
``opentelemetry-exporter-otlp``).  pyarrow runs a call's middleware and handler in separate
callbacks, so the span is not made "current"; it lives on the call's middleware.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

import pyarrow.flight as flight

from flight_server.metrics import method_name, status_name

__all__ = ["TRACING_KEY", "TracingMiddlewareFactory", "available", "middleware", "tracer"]

#: Key of this middleware in ``FlightServerBase(middleware=...)``.
TRACING_KEY = "tracing"
_PREFIX = "lance_flight."
log = logging.getLogger("lance_flight")
_SETUP_LOCK = threading.Lock()


def available() -> bool:
    """True when the OpenTelemetry API and SDK can be imported."""
    try:
        import opentelemetry.sdk.trace  # noqa: F401
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _install_provider() -> None:
    """Install an SDK tracer provider from the ``OTEL_*`` variables, unless the process
    already has one (an application embedding the server configures its own)."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    with _SETUP_LOCK:
        if isinstance(trace.get_tracer_provider(), TracerProvider):
            return
        resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "lance-flight"}))
        provider = TracerProvider(resource=resource)
        exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")[0].strip()
        exporter: Any = None
        if exporter_name == "console":
            exporter = ConsoleSpanExporter()
        elif exporter_name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
                    OTLPSpanExporter,
                )
            except ImportError:
                log.warning("--otel: no OTLP exporter installed (opentelemetry-exporter-otlp)")
            else:
                exporter = OTLPSpanExporter()
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)


def tracer(enabled: bool) -> Any:
    """The tracer spans are made with, or None when tracing is off or not installed."""
    if not enabled:
        return None
    if not available():
        log.warning("--otel: the opentelemetry packages are not installed; tracing is off")
        return None
    from opentelemetry import trace

    _install_provider()
    return trace.get_tracer("lance_flight")


def middleware(enabled: bool, tracer_: Any = None) -> dict[str, flight.ServerMiddlewareFactory]:
    """``{TRACING_KEY: factory}`` to merge into a server's middleware, or ``{}`` when off."""
    chosen = tracer_ if tracer_ is not None else tracer(enabled)
    return {TRACING_KEY: TracingMiddlewareFactory(chosen)} if chosen is not None else {}


def _attribute(value: Any) -> Any:
    """An OpenTelemetry attribute value (str, bool, int, float), or None to leave it out."""
    if isinstance(value, (str, bool, int, float)):
        return value
    return None if value is None else str(value)


class _TracingMiddleware(flight.ServerMiddleware):
    def __init__(self, span: Any):
        self.span = span
        self._lock = threading.Lock()  # a do_get generator may annotate from another thread
        self._sums: dict[str, float] = {}
        self._done = False

    def annotate(self, fields: Mapping[str, Any]) -> None:
        for key, value in fields.items():
            converted = _attribute(value)
            if converted is not None:
                self.span.set_attribute(_PREFIX + key, converted)

    def accumulate(self, amounts: Mapping[str, float]) -> None:
        with self._lock:
            for key, amount in amounts.items():
                self._sums[key] = self._sums.get(key, 0) + amount
                self.span.set_attribute(_PREFIX + key, self._sums[key])

    def call_completed(self, exception: Exception | None) -> None:
        from opentelemetry.trace import Status, StatusCode

        with self._lock:
            if self._done:
                return
            self._done = True
        self.span.set_attribute(_PREFIX + "status", status_name(exception))
        if exception is not None:
            self.span.set_status(Status(StatusCode.ERROR, type(exception).__name__))
        self.span.end()


class TracingMiddlewareFactory(flight.ServerMiddlewareFactory):
    """Starts a SERVER span per call, parented by the client's W3C trace context."""

    def __init__(self, tracer_: Any):
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.tracer = tracer_
        self._propagator = TraceContextTextMapPropagator()

    def start_call(self, info: flight.CallInfo, headers: Mapping[str, Any]) -> _TracingMiddleware:
        from opentelemetry.trace import SpanKind

        # the propagator reads a list-valued carrier (pyarrow gives header -> [values])
        parent = self._propagator.extract(carrier=dict(headers))
        method = method_name(info.method)
        span = self.tracer.start_span(
            method,
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "rpc.system": "apache_arrow_flight",
                "rpc.service": "arrow.flight.protocol.FlightService",
                "rpc.method": method,
            },
        )
        return _TracingMiddleware(span)
