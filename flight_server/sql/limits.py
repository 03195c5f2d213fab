"""Bounds on Flight SQL statements: memory, threads, work time, how many run at once, and
stopping a statement whose client cancelled or went away.

Every statement holds one of ``max_statements`` slots while it runs (a DoGet from its first
batch to its last); a statement that finds none free waits up to ``queue_seconds`` and then
fails with RESOURCE_EXHAUSTED (retryable, sent with gRPC UNAVAILABLE so clients back off and
retry).  The engine marks the stretches where DuckDB works for a statement (planning,
producing a batch, a DELETE's scan) with :meth:`Watch.busy`; one monitor thread per service
looks at the statements inside such a stretch every ``poll`` seconds and interrupts DuckDB
(``interrupt()``) when the statement's work time passes ``timeout`` (DEADLINE_EXCEEDED) or its
call was cancelled: the client cancelled, timed out or disconnected (CANCELLED).  Work time
is what DuckDB spends, not the time a slow client takes to read the result.  The monitor
touches a call's context only while the call's own thread is inside DuckDB for it, so never
after the call has ended.

DuckDB's memory limit is a hard limit here: spilling to a temporary directory is off (an
in-memory DuckDB would otherwise write ``.tmp`` files into the server's working directory,
up to 90% of the disk), so a statement that needs more fails cleanly with
RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import duckdb
import pyarrow.flight as flight

from flight_server.errors import DeadlineExceeded, ResourceExhausted

__all__ = ["Governor", "SqlLimits", "Watch", "default_memory_limit", "default_threads"]

DEFAULT_TIMEOUT = 300.0
DEFAULT_MAX_STATEMENTS = 8
DEFAULT_QUEUE_SECONDS = 5.0
_MEMORY_CAP = 2 << 30
_SIZE = re.compile(r"^\s*\d+(\.\d+)?\s*([kmgt]i?b|b|bytes)?\s*$", re.IGNORECASE)


def default_memory_limit() -> str:
    """A quarter of physical memory, at most 2 GiB: DuckDB's own default (80% of RAM) let one
    read-only query take the whole machine; this leaves room for the scanner's cache, gRPC
    buffers and the other worker processes."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 8 << 30
    return f"{max(256 << 20, min(total // 4, _MEMORY_CAP)) >> 20}MiB"


def default_threads() -> int:
    """Half the cores (at least one): a heavy statement leaves the other half to the Flight
    streams and the other clients."""
    return max(1, (os.cpu_count() or 2) // 2)


@dataclass(frozen=True)
class SqlLimits:
    """The resource bounds of the Flight SQL engine (per server process).

    ``timeout``: seconds of DuckDB work per statement (None: unbounded).  ``memory_limit``:
    DuckDB's memory limit for all statements together (e.g. ``"2GiB"``; None: the default of
    :func:`default_memory_limit`).  ``threads``: DuckDB's threads (None:
    :func:`default_threads`).  ``max_statements``: statements running at once;
    ``queue_seconds``: how long one more waits for a slot."""

    timeout: float | None = DEFAULT_TIMEOUT
    memory_limit: str | None = None
    threads: int | None = None
    max_statements: int = DEFAULT_MAX_STATEMENTS
    queue_seconds: float = DEFAULT_QUEUE_SECONDS

    def __post_init__(self) -> None:
        if self.memory_limit is not None and not _SIZE.match(self.memory_limit):
            raise ValueError(
                f"the SQL memory limit must be a size such as 512MiB or 4GB, got "
                f"{self.memory_limit!r}"
            )
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"the SQL statement timeout must be positive, got {self.timeout}")
        if self.max_statements < 1:
            raise ValueError(f"max_statements must be at least 1, got {self.max_statements}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"SQL threads must be at least 1, got {self.threads}")
        if self.queue_seconds < 0:
            raise ValueError(f"queue_seconds must not be negative, got {self.queue_seconds}")

    @property
    def duckdb_threads(self) -> int:
        return self.threads or default_threads()

    @property
    def duckdb_memory_limit(self) -> str:
        return self.memory_limit or default_memory_limit()


class Watch:
    """One admitted statement: its call, its DuckDB work time, how to stop it, why it
    stopped (``reason``: None, ``"timeout"`` or ``"cancelled"``)."""

    def __init__(self, context: flight.ServerCallContext | None, timeout: float | None):
        self.context = context
        self.timeout = timeout
        self.reason: str | None = None
        self._stops: list[Callable[[], None]] = []
        self._busy_since: float | None = None
        self._worked = 0.0
        self._lock = threading.Lock()

    def on_stop(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` (e.g. a DuckDB connection's ``interrupt``) when the statement stops."""
        with self._lock:
            if self.reason is None:
                self._stops.append(fn)
                return
        fn()

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """A stretch of DuckDB work for the statement, in the call's own thread; an interrupt
        the watch caused leaves it as the error of its reason."""
        with self._lock:
            if self.reason is not None:
                raise self.error()
            self._busy_since = time.monotonic()
        try:
            yield
        except Exception as exc:
            # DuckDB reports an interrupt as InterruptException, or through an Arrow stream
            # as a plain error
            if self.reason is not None:
                raise self.error() from None
            if isinstance(exc, duckdb.InterruptException):
                raise flight.FlightCancelledError("the query was cancelled") from None
            raise
        finally:
            with self._lock:
                self._worked += time.monotonic() - (self._busy_since or time.monotonic())
                self._busy_since = None
        if self.reason is not None:
            raise self.error()

    def check(self, now: float) -> None:
        """The monitor's look: stop the statement if its call is gone or its time is up."""
        with self._lock:
            if self._busy_since is None or self.reason is not None:
                return  # not in DuckDB: the call may even have ended
            worked = self._worked + now - self._busy_since
            if self.context is not None and self.context.is_cancelled():
                reason = "cancelled"
            elif self.timeout is not None and worked > self.timeout:
                reason = "timeout"
            else:
                return
        self.stop(reason)

    def stop(self, reason: str) -> None:
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            stops, self._stops = self._stops, []
        for fn in stops:
            try:
                fn()
            except Exception:  # noqa: BLE001 - a finished connection cannot be interrupted
                pass

    def error(self) -> Exception:
        """The error a stopped statement ends with (only asked once ``reason`` is set)."""
        if self.reason == "timeout":
            return DeadlineExceeded(
                f"the statement was stopped after {self.timeout:g} s of work (the server's SQL "
                "statement timeout)"
            )
        assert self.reason == "cancelled", self.reason
        return flight.FlightCancelledError("the statement was cancelled")


class Governor:
    """Admits statements (``max_statements`` at once) and watches the running ones."""

    def __init__(self, limits: SqlLimits, poll: float = 0.1):
        self.limits = limits
        self.poll = poll
        self._slots = threading.BoundedSemaphore(limits.max_statements)
        self._running: set[Watch] = set()
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def admit(self, context: flight.ServerCallContext | None) -> Watch:
        """A slot for one statement (wait up to ``queue_seconds``); :meth:`release` it."""
        if not self._slots.acquire(timeout=self.limits.queue_seconds):
            raise ResourceExhausted(
                f"{self.limits.max_statements} SQL statements are running, the server's limit; "
                "retry shortly",
                retryable=True,
            )
        watch = Watch(context, self.limits.timeout)
        with self._cond:
            self._running.add(watch)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._monitor, name="lance-flight-sql-monitor", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return watch

    def release(self, watch: Watch) -> None:
        with self._cond:
            if watch not in self._running:
                return
            self._running.discard(watch)
        self._slots.release()

    @contextlib.contextmanager
    def statement(self, context: flight.ServerCallContext | None) -> Iterator[Watch]:
        watch = self.admit(context)
        try:
            yield watch
        finally:
            self.release(watch)

    @property
    def running(self) -> int:
        with self._cond:
            return len(self._running)

    def close(self) -> None:
        """Stop the monitor (running statements are left to their connections' close)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _monitor(self) -> None:
        while True:
            with self._cond:
                while not self._running and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                watches = list(self._running)
            now = time.monotonic()
            for watch in watches:
                watch.check(now)
            time.sleep(self.poll)
