"""Prometheus metrics without a dependency: a small registry, text exposition, an HTTP endpoint.

:class:`MetricsRegistry` holds counters, gauges and histograms (optionally labelled, optionally
computed by a callback at scrape time) and renders the text exposition format 0.0.4.
:func:`serve_metrics` serves it on a daemon thread.  :class:`ServerMetrics` declares the
metrics the Flight server updates, with one helper per event, and
:class:`MetricsMiddlewareFactory` counts every RPC by method and final gRPC status.

With ``--workers N`` every process has its own registry: give each its own metrics port.
pyarrow reports a ``do_get`` that the client cancelled mid-stream as OK to middleware; a
handler that wants it counted must check ``context.is_cancelled()`` itself.
"""

from __future__ import annotations

import bisect
import http.server
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow.flight as flight

__all__ = [
    "CONTENT_TYPE",
    "Counter",
    "Gauge",
    "Histogram",
    "MetricsMiddlewareFactory",
    "MetricsRegistry",
    "MetricsServer",
    "ServerMetrics",
    "method_name",
    "serve_metrics",
    "status_name",
]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

LabelValues = tuple[str, ...]


def _format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels_text(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    pairs = ",".join(f'{n}="{_escape_label(v)}"' for n, v in zip(names, values, strict=True))
    return "{" + pairs + "}"


class _Metric:
    kind = "untyped"

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        fn: Callable[[], float | Mapping[LabelValues, float]] | None = None,
    ):
        if not _NAME_RE.fullmatch(name):
            raise ValueError(f"bad metric name {name!r}")
        for label in labelnames:
            if not _LABEL_RE.fullmatch(label) or label.startswith("__") or label == "le":
                raise ValueError(f"bad label name {label!r}")
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)
        self._fn = fn
        self._lock = threading.Lock()
        self._values: dict[LabelValues, float] = {}

    def _key(self, labels: Mapping[str, Any]) -> LabelValues:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {tuple(labels)}")
        return tuple(str(labels[n]) for n in self.labelnames)

    def value(self, **labels: Any) -> float:
        """The current value (0 for a label combination never touched)."""
        key = self._key(labels)
        if self._fn is not None:
            return float(self._samples().get(key, 0.0))
        with self._lock:
            return self._values.get(key, 0.0)

    def _samples(self) -> dict[LabelValues, float]:
        if self._fn is None:
            with self._lock:
                return dict(self._values)
        got = self._fn()
        if isinstance(got, Mapping):
            return {tuple(map(str, k)): float(v) for k, v in got.items()}
        return {(): float(got)}

    def render(self) -> list[str]:
        try:
            samples = self._samples()
        except Exception:  # a failing callback must not break the whole scrape
            log.exception("metric callback for %s failed", self.name)
            return []
        lines = [f"# HELP {self.name} {_escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]
        for key in sorted(samples):
            lines.append(
                f"{self.name}{_labels_text(self.labelnames, key)} {_format_value(samples[key])}"
            )
        return lines


class Counter(_Metric):
    """A monotonically increasing count (or, with ``fn``, a monotonic value read at scrape)."""

    kind = "counter"

    def inc(self, amount: float = 1.0, **labels: Any) -> None:
        if amount < 0:
            raise ValueError("a counter cannot decrease")
        if self._fn is not None:
            raise TypeError(f"{self.name} is computed by a callback")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount


class Gauge(_Metric):
    """A value that goes up and down (or, with ``fn``, is read at scrape time)."""

    kind = "gauge"

    def set(self, value: float, **labels: Any) -> None:
        if self._fn is not None:
            raise TypeError(f"{self.name} is computed by a callback")
        key = self._key(labels)
        with self._lock:
            self._values[key] = float(value)

    def inc(self, amount: float = 1.0, **labels: Any) -> None:
        if self._fn is not None:
            raise TypeError(f"{self.name} is computed by a callback")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def dec(self, amount: float = 1.0, **labels: Any) -> None:
        self.inc(-amount, **labels)


class Histogram(_Metric):
    """Observations counted into cumulative ``le`` buckets, with their sum and count."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = DURATION_BUCKETS,
    ):
        super().__init__(name, help, labelnames)
        bounds = sorted(float(b) for b in buckets if not math.isinf(b))
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError("histogram buckets must be distinct and non-empty")
        self.buckets = tuple(bounds)
        # per label set: [count per bucket (non-cumulative, last = +Inf), sum]
        self._data: dict[LabelValues, tuple[list[int], list[float]]] = {}

    def observe(self, value: float, **labels: Any) -> None:
        key = self._key(labels)
        slot = bisect.bisect_left(self.buckets, value)  # le is inclusive
        with self._lock:
            counts, total = self._data.setdefault(key, ([0] * (len(self.buckets) + 1), [0.0]))
            counts[slot] += 1
            total[0] += value

    @contextmanager
    def time(self, **labels: Any) -> Iterator[None]:
        """Observe the duration of a ``with`` block in seconds."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.observe(time.perf_counter() - start, **labels)

    def count(self, **labels: Any) -> int:
        with self._lock:
            data = self._data.get(self._key(labels))
            return sum(data[0]) if data else 0

    def sum(self, **labels: Any) -> float:
        with self._lock:
            data = self._data.get(self._key(labels))
            return data[1][0] if data else 0.0

    def value(self, **labels: Any) -> float:
        return float(self.count(**labels))

    def render(self) -> list[str]:
        with self._lock:
            snapshot = {k: (list(c), t[0]) for k, (c, t) in self._data.items()}
        lines = [f"# HELP {self.name} {_escape_help(self.help)}", f"# TYPE {self.name} histogram"]
        names = (*self.labelnames, "le")
        for key in sorted(snapshot):
            counts, total = snapshot[key]
            running = 0
            for bound, count in zip((*self.buckets, math.inf), counts, strict=True):
                running += count
                labels = _labels_text(names, (*key, _format_value(bound)))
                lines.append(f"{self.name}_bucket{labels} {running}")
            plain = _labels_text(self.labelnames, key)
            lines.append(f"{self.name}_sum{plain} {_format_value(total)}")
            lines.append(f"{self.name}_count{plain} {running}")
        return lines


class MetricsRegistry:
    """A thread-safe set of metrics, rendered together for a scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._metrics: dict[str, _Metric] = {}

    def _add(self, metric: _Metric) -> Any:
        with self._lock:
            if metric.name in self._metrics:
                raise ValueError(f"metric {metric.name!r} is already registered")
            self._metrics[metric.name] = metric
        return metric

    def counter(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        fn: Callable[[], float | Mapping[LabelValues, float]] | None = None,
    ) -> Counter:
        return self._add(Counter(name, help, labelnames, fn))

    def gauge(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        fn: Callable[[], float | Mapping[LabelValues, float]] | None = None,
    ) -> Gauge:
        return self._add(Gauge(name, help, labelnames, fn))

    def histogram(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = DURATION_BUCKETS,
    ) -> Histogram:
        return self._add(Histogram(name, help, labelnames, buckets))

    def get(self, name: str) -> _Metric:
        return self._metrics[name]

    def render(self) -> str:
        """The whole registry in the Prometheus text exposition format 0.0.4."""
        with self._lock:
            metrics = list(self._metrics.values())
        lines: list[str] = []
        for metric in metrics:
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# RPC naming


_METHOD_NAMES = {
    flight.FlightMethod.HANDSHAKE: "Handshake",
    flight.FlightMethod.LIST_FLIGHTS: "ListFlights",
    flight.FlightMethod.GET_FLIGHT_INFO: "GetFlightInfo",
    flight.FlightMethod.GET_SCHEMA: "GetSchema",
    flight.FlightMethod.DO_GET: "DoGet",
    flight.FlightMethod.DO_PUT: "DoPut",
    flight.FlightMethod.DO_ACTION: "DoAction",
    flight.FlightMethod.LIST_ACTIONS: "ListActions",
    flight.FlightMethod.DO_EXCHANGE: "DoExchange",
}


def method_name(method: flight.FlightMethod) -> str:
    """The gRPC method name of a Flight RPC (``DoGet``, ``Handshake``, ...)."""
    return _METHOD_NAMES.get(method, "Unknown")


def status_name(exception: BaseException | None) -> str:
    """The gRPC status code name a call ends with, given the exception its handler raised.

    Mirrors Arrow: Flight error classes carry their own code; other exceptions become an Arrow
    status the way pyarrow converts Python errors (KeyError -> not found, ValueError/
    OverflowError -> invalid argument, NotImplementedError -> unimplemented, the rest unknown),
    and Arrow maps those onto gRPC codes.
    """
    if exception is None:
        return "OK"
    if isinstance(exception, flight.FlightError):
        for cls, name in (
            (flight.FlightUnauthenticatedError, "UNAUTHENTICATED"),
            (flight.FlightUnauthorizedError, "PERMISSION_DENIED"),
            (flight.FlightUnavailableError, "UNAVAILABLE"),
            (flight.FlightTimedOutError, "DEADLINE_EXCEEDED"),
            (flight.FlightCancelledError, "CANCELLED"),
            (flight.FlightInternalError, "INTERNAL"),
        ):
            if isinstance(exception, cls):
                return name
        return "UNKNOWN"
    # the order of pyarrow's Python-exception mapping matters for multiple inheritance
    if isinstance(exception, (MemoryError, IndexError)):
        return "UNKNOWN"
    if isinstance(exception, KeyError):
        return "NOT_FOUND"
    if isinstance(exception, TypeError):
        return "UNKNOWN"
    if isinstance(exception, (ValueError, OverflowError)):
        return "INVALID_ARGUMENT"
    if isinstance(exception, OSError):
        return "UNKNOWN"
    if isinstance(exception, NotImplementedError):
        return "UNIMPLEMENTED"
    # includes pa.ArrowCancelled raised by a handler: pyarrow sends that as UNKNOWN
    return "UNKNOWN"


# ---------------------------------------------------------------------------------------------
# the server's metrics


class ServerMetrics:
    """The metrics of one Flight server process, with a helper per event it reports."""

    def __init__(self, registry: MetricsRegistry | None = None):
        self.registry = registry if registry is not None else MetricsRegistry()
        r = self.registry
        self.requests = r.counter(
            "lance_flight_requests_total", "Flight RPCs by method and final gRPC status",
            ("method", "status"),
        )  # fmt: skip
        self.request_seconds = r.histogram(
            "lance_flight_request_duration_seconds", "Flight RPC duration", ("method",)
        )
        self.in_flight = r.gauge(
            "lance_flight_requests_in_flight", "Flight RPCs currently running", ("method",)
        )
        self.actions = r.counter(
            "lance_flight_actions_total", "DoAction calls by type", ("action",)
        )
        self.rows_served = r.counter("lance_flight_rows_served_total", "Rows sent by DoGet")
        self.bytes_served = r.counter(
            "lance_flight_bytes_served_total", "Arrow bytes sent by DoGet"
        )
        self.rows_written = r.counter("lance_flight_rows_written_total", "Rows received by DoPut")
        self.bytes_written = r.counter(
            "lance_flight_bytes_written_total", "Arrow bytes received by DoPut"
        )
        self.decode_seconds = r.histogram(
            "lance_flight_decode_seconds", "Time spent decoding Lance pages into Arrow batches"
        )
        self.commit_conflicts = r.counter(
            "lance_flight_commit_conflicts_total", "Commits that lost against a concurrent one"
        )
        start = time.time()
        r.gauge(
            "process_start_time_seconds", "Start time of the process (Unix time)", fn=lambda: start
        )
        self._cache_stats: Callable[[], Mapping[str, float]] | None = None

    def record_served(self, rows: int, nbytes: int) -> None:
        self.rows_served.inc(rows)
        self.bytes_served.inc(nbytes)

    def record_written(self, rows: int, nbytes: int) -> None:
        self.rows_written.inc(rows)
        self.bytes_written.inc(nbytes)

    def record_decode(self, seconds: float) -> None:
        self.decode_seconds.observe(seconds)

    def time_decode(self) -> Any:
        """``with metrics.time_decode(): ...`` observes the block's duration."""
        return self.decode_seconds.time()

    def record_commit_conflict(self) -> None:
        self.commit_conflicts.inc()

    def record_action(self, action_type: str) -> None:
        self.actions.inc(action=action_type)

    def watch_cache(self, stats: Callable[[], Mapping[str, float]]) -> None:
        """Expose a ``SearchCache.stats``-like callable, read at every scrape."""
        if self._cache_stats is not None:
            raise ValueError("a cache is already watched")
        self._cache_stats = stats
        r = self.registry
        for key, name, kind, text in (
            ("hits", "lance_flight_cache_hits_total", r.counter, "Search cache hits"),
            ("misses", "lance_flight_cache_misses_total", r.counter, "Search cache misses"),
            ("bytes", "lance_flight_cache_bytes", r.gauge, "Bytes held by the search cache"),
            ("entries", "lance_flight_cache_entries", r.gauge, "Entries in the search cache"),
            ("capacity_bytes", "lance_flight_cache_capacity_bytes", r.gauge, "Cache budget"),
        ):
            kind(name, text, fn=lambda key=key: stats()[key])

    def watch_page_cache(self, stats: Callable[[], Mapping[str, float]]) -> None:
        """Expose a ``PageCache.stats``-like callable (decoded pages), read at every scrape."""
        r = self.registry
        for key, name, kind, text in (
            ("hits", "lance_flight_page_cache_hits_total", r.counter, "Page cache hits"),
            ("misses", "lance_flight_page_cache_misses_total", r.counter, "Page cache misses"),
            ("evictions", "lance_flight_page_cache_evictions_total", r.counter, "Pages evicted"),
            ("bytes", "lance_flight_page_cache_bytes", r.gauge, "Bytes of decoded pages held"),
            ("capacity_bytes", "lance_flight_page_cache_capacity_bytes", r.gauge, "Page budget"),
        ):
            kind(name, text, fn=lambda key=key: stats()[key])

    def middleware(self) -> MetricsMiddlewareFactory:
        return MetricsMiddlewareFactory(self)


class _MetricsMiddleware(flight.ServerMiddleware):
    def __init__(self, metrics: ServerMetrics, method: str, headers: Mapping[str, Any]):
        self._metrics = metrics
        self.method = method
        self.headers = headers
        self._start = time.perf_counter()
        self._done = False
        metrics.in_flight.inc(method=method)

    def call_completed(self, exception: Exception | None) -> None:
        if self._done:
            return
        self._done = True
        m = self._metrics
        m.in_flight.dec(method=self.method)
        m.requests.inc(method=self.method, status=status_name(exception))
        m.request_seconds.observe(time.perf_counter() - self._start, method=self.method)


class MetricsMiddlewareFactory(flight.ServerMiddlewareFactory):
    """Counts every RPC by method and final status, with its duration.

    Also an auth observer (see :class:`flight_server.auth.AuthObserver`): calls rejected by the
    auth middleware are counted as UNAUTHENTICATED.
    """

    def __init__(self, metrics: ServerMetrics):
        self.metrics = metrics
        self._local = threading.local()

    def start_call(self, info: flight.CallInfo, headers: Mapping[str, Any]) -> _MetricsMiddleware:
        instance = _MetricsMiddleware(self.metrics, method_name(info.method), headers)
        self._local.current = instance
        return instance

    def auth_outcome(
        self,
        info: flight.CallInfo,
        headers: Mapping[str, Any],
        user: str | None,
        error: Exception | None,
    ) -> None:
        if error is None:
            return
        instance = getattr(self._local, "current", None)
        if instance is None or instance.headers is not headers:
            instance = self.start_call(info, headers)  # registered after auth: count anyway
        instance.call_completed(error)


# ---------------------------------------------------------------------------------------------
# HTTP endpoint


class MetricsServer:
    """A running ``/metrics`` endpoint: ``.port``, ``.url``, ``.close()``."""

    def __init__(self, httpd: http.server.ThreadingHTTPServer, thread: threading.Thread):
        self._httpd = httpd
        self._thread = thread
        self.host = httpd.server_address[0]
        self.port = int(httpd.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in str(self.host) else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(
    registry: MetricsRegistry | ServerMetrics, host: str = "127.0.0.1", port: int = 0
) -> MetricsServer:
    """Serve ``GET /metrics`` on a daemon thread (port 0 picks a free port)."""
    reg = registry.registry if isinstance(registry, ServerMetrics) else registry

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics is served here")
                return
            body = reg.render().encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics %s - %s", self.address_string(), format % args)

    server_class = http.server.ThreadingHTTPServer
    if ":" in host:
        import socket

        server_class = type("V6Server", (server_class,), {"address_family": socket.AF_INET6})
    httpd = server_class((host, port), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return MetricsServer(httpd, thread)
