"""Prometheus metrics of the server, on ``prometheus_client``.

:class:`ServerMetrics` declares the metrics the Flight server (and its REST API) update, with
one helper per event; :class:`MetricsMiddlewareFactory` counts every RPC by method and final
gRPC status; :func:`serve_metrics` serves ``GET /metrics`` on a daemon thread.

With ``--workers N`` the supervisor makes a directory for ``prometheus_client``'s
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, set before the workers start): every worker
writes its values there and the supervisor alone serves ``/metrics``, summing the workers
(:func:`multiprocess_registry`).  Gauges of a worker that exits are dropped
(:func:`worker_exited`); its counters stay in the sums, so they never go down.

The search cache's numbers are read from ``SearchCache.stats`` (a callable) and copied into
the metrics when a call ends and at every scrape of this process's own registry, so they are
also summed over workers.  pyarrow reports a ``do_get`` that the client cancelled mid-stream
as OK to middleware; a handler that wants it counted must check ``context.is_cancelled()``.
"""

from __future__ import annotations

import http.server
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import prometheus_client
import pyarrow.flight as flight
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    multiprocess,
)
from prometheus_client.exposition import choose_encoder

__all__ = [
    "CONTENT_TYPE",
    "MULTIPROC_ENV",
    "MetricsMiddlewareFactory",
    "MetricsServer",
    "ServerMetrics",
    "method_name",
    "multiprocess_registry",
    "serve_metrics",
    "status_name",
    "worker_exited",
]

log = logging.getLogger(__name__)

CONTENT_TYPE = prometheus_client.exposition.CONTENT_TYPE_PLAIN_0_0_4  # without an Accept header
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# ``*_created`` series would double every counter and histogram for no use here
prometheus_client.disable_created_metrics()


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

_CACHE_COUNTERS = (
    ("hits", "lance_flight_cache_hits", "Search cache hits"),
    ("misses", "lance_flight_cache_misses", "Search cache misses"),
)
_CACHE_GAUGES = (
    ("bytes", "lance_flight_cache_bytes", "Bytes held by the search cache"),
    ("entries", "lance_flight_cache_entries", "Entries in the search cache"),
    ("capacity_bytes", "lance_flight_cache_capacity_bytes", "Cache budget"),
)
_PAGE_COUNTERS = (
    ("hits", "lance_flight_page_cache_hits", "Decoded-page cache hits"),
    ("misses", "lance_flight_page_cache_misses", "Decoded-page cache misses"),
    ("evictions", "lance_flight_page_cache_evictions", "Pages evicted to stay within budget"),
    (
        "derived_hits",
        "lance_flight_page_cache_derived_hits",
        "Hot tickets answered whole from results kept beside their pages",
    ),
    (
        "derived_misses",
        "lance_flight_page_cache_derived_misses",
        "Range-scan tickets with no whole result kept",
    ),
)
_PAGE_GAUGES = (
    ("bytes", "lance_flight_page_cache_bytes", "Bytes of decoded pages held"),
    ("entries", "lance_flight_page_cache_entries", "Pages in the decoded-page cache"),
    ("capacity_bytes", "lance_flight_page_cache_capacity_bytes", "Decoded-page cache budget"),
    (
        "derived",
        "lance_flight_page_cache_derived_entries",
        "Whole ticket results kept beside the pages they share memory with",
    ),
)


class _Refresh:
    """A collector that yields nothing but brings the callback-fed metrics up to date first
    (registered before them, so a scrape sees fresh values)."""

    def __init__(self, refresh: Callable[[], None]):
        self._refresh = refresh

    def collect(self) -> Iterator[Any]:
        self._refresh()
        return iter(())


class ServerMetrics:
    """The metrics of one server process, with a helper per event it reports.

    ``registry`` (default: a new one) is what :func:`serve_metrics` renders for a single
    process; in multiprocess mode the values also land in ``PROMETHEUS_MULTIPROC_DIR``.
    """

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self._cache_stats: Callable[[], Mapping[str, float]] | None = None
        self._cache_seen: dict[str, float] = {}
        self._cache_lock = threading.Lock()
        self._page_feed: tuple | None = None  # (stats, counters, gauges, last seen)
        r.register(_Refresh(self.refresh))
        self.requests = Counter(
            "lance_flight_requests", "Flight RPCs by method and final gRPC status",
            ("method", "status"), registry=r,
        )  # fmt: skip
        self.request_seconds = Histogram(
            "lance_flight_request_duration_seconds", "Flight RPC duration", ("method",),
            buckets=DURATION_BUCKETS, registry=r,
        )  # fmt: skip
        self.in_flight = Gauge(
            "lance_flight_requests_in_flight", "Flight RPCs currently running", ("method",),
            multiprocess_mode="livesum", registry=r,
        )  # fmt: skip
        self.actions = Counter(
            "lance_flight_actions", "DoAction calls by type", ("action",), registry=r
        )
        self.rows_served = Counter("lance_flight_rows_served", "Rows sent by DoGet", registry=r)
        self.bytes_served = Counter(
            "lance_flight_bytes_served", "Arrow bytes sent by DoGet", registry=r
        )
        self.rows_written = Counter(
            "lance_flight_rows_written", "Rows received by DoPut", registry=r
        )
        self.bytes_written = Counter(
            "lance_flight_bytes_written", "Arrow bytes received by DoPut", registry=r
        )
        self.decode_seconds = Histogram(
            "lance_flight_decode_seconds", "Time spent decoding Lance pages into Arrow batches",
            buckets=DURATION_BUCKETS, registry=r,
        )  # fmt: skip
        self.commit_conflicts = Counter(
            "lance_flight_commit_conflicts", "Commits that lost against a concurrent one",
            registry=r,
        )  # fmt: skip
        self._cache_counters = {
            key: Counter(name, text, registry=r) for key, name, text in _CACHE_COUNTERS
        }
        self._cache_gauges = {
            key: Gauge(name, text, multiprocess_mode="livesum", registry=r)
            for key, name, text in _CACHE_GAUGES
        }
        if not os.environ.get(MULTIPROC_ENV):  # in multiprocess mode the supervisor's own
            ProcessCollector(registry=r)

    def value(self, name: str, **labels: str) -> float:
        """A sample of this process's registry by its exposed name (0 when absent)."""
        self.refresh()
        return self.registry.get_sample_value(name, labels) or 0.0

    def record_request(self, method: str, status: str, seconds: float) -> None:
        self.requests.labels(method=method, status=status).inc()
        self.request_seconds.labels(method=method).observe(seconds)

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
        self.actions.labels(action=action_type).inc()

    def watch_cache(self, stats: Callable[[], Mapping[str, float]]) -> None:
        """Report a ``SearchCache.stats``-like callable (read at refresh)."""
        if self._cache_stats is not None:
            raise ValueError("a cache is already watched")
        self._cache_stats = stats
        self.refresh()

    def watch_page_cache(self, stats: Callable[[], Mapping[str, float]]) -> None:
        """Report a ``PageCache.stats``-like callable (decoded pages; read at refresh)."""
        r = self.registry
        counters = {key: Counter(name, text, registry=r) for key, name, text in _PAGE_COUNTERS}
        gauges = {
            key: Gauge(name, text, multiprocess_mode="livesum", registry=r)
            for key, name, text in _PAGE_GAUGES
        }
        self._page_feed = (stats, counters, gauges, {})
        self.refresh()

    def refresh(self) -> None:
        """Copy the watched caches' numbers into the metrics: counters advance by what the
        cache counted since the last refresh.  A failing callback is logged, never raised
        (a scrape must not break)."""
        if self._cache_stats is not None:
            self._copy("search cache", self._cache_stats, self._cache_counters,
                       self._cache_gauges, self._cache_seen)  # fmt: skip
        if self._page_feed is not None:
            self._copy("decoded-page cache", *self._page_feed)

    def _copy(self, what: str, stats_fn, counters, gauges, seen: dict[str, float]) -> None:
        try:
            stats = stats_fn()
        except Exception:  # noqa: BLE001
            log.exception("reading the %s's stats for metrics failed", what)
            return
        with self._cache_lock:
            for key, counter in counters.items():
                now = float(stats[key])
                grown = now - seen.get(key, 0.0)
                if grown > 0:
                    counter.inc(grown)
                seen[key] = max(now, seen.get(key, 0.0))
            for key, gauge in gauges.items():
                gauge.set(float(stats[key]))

    def middleware(self) -> MetricsMiddlewareFactory:
        return MetricsMiddlewareFactory(self)


class _MetricsMiddleware(flight.ServerMiddleware):
    def __init__(self, metrics: ServerMetrics, method: str, headers: Mapping[str, Any]):
        self._metrics = metrics
        self.method = method
        self.headers = headers
        self._start = time.perf_counter()
        self._done = False
        metrics.in_flight.labels(method=method).inc()

    def call_completed(self, exception: Exception | None) -> None:
        if self._done:
            return
        self._done = True
        m = self._metrics
        m.in_flight.labels(method=self.method).dec()
        m.record_request(self.method, status_name(exception), time.perf_counter() - self._start)
        m.refresh()


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
# multiprocess mode


def multiprocess_registry(path: str) -> CollectorRegistry:
    """The supervisor's registry: every worker's values under ``path``, summed (gauges of
    live workers only), plus the supervisor's own process metrics."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)
    ProcessCollector(registry=registry)
    return registry


def worker_exited(pid: int, path: str) -> None:
    """Drop the live gauges of a worker that exited (its counters stay in the sums)."""
    multiprocess.mark_process_dead(pid, path)


# ---------------------------------------------------------------------------------------------
# HTTP endpoint


class MetricsServer:
    """A running ``/metrics`` endpoint: ``.port``, ``.url``, ``.close()``."""

    def __init__(self, httpd: http.server.ThreadingHTTPServer, thread: threading.Thread):
        self._httpd = httpd
        self._thread = thread
        address = httpd.server_address
        host = address[0]
        self.host = host.decode() if isinstance(host, bytes) else str(host)
        self.port = int(address[1])

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
    registry: CollectorRegistry | ServerMetrics, host: str = "127.0.0.1", port: int = 0
) -> MetricsServer:
    """Serve ``GET /metrics`` on a daemon thread (port 0 picks a free port), in the format
    the scraper's ``Accept`` header asks for (the text format 0.0.4 by default)."""
    reg = registry.registry if isinstance(registry, ServerMetrics) else registry

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics is served here")
                return
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            body = encoder(reg)
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics %s - %s", self.address_string(), format % args)

    server_class: type[http.server.ThreadingHTTPServer] = http.server.ThreadingHTTPServer
    if ":" in host:
        import socket

        class V6Server(http.server.ThreadingHTTPServer):
            address_family = socket.AF_INET6

        server_class = V6Server
    httpd = server_class((host, port), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return MetricsServer(httpd, thread)
