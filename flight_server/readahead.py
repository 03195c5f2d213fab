"""Decode a plan's next endpoint while the client still receives the current one.

A client reading a dataset's endpoints one after the other (pyarrow's ``read_all`` over
``info.endpoints``, the ADBC driver, a single-threaded reader) leaves the server idle between
two of them: the last ranges of endpoint k are sent, the client asks for k+1, and only then
does the server start decoding it, while the client waits for its first rows (tens of
milliseconds per endpoint, a fifth of a hot read of TPC-H lineitem).  So when the stream of
endpoint k has produced its last range, the server starts the stream of endpoint k+1 of the
same plan and *parks* it; the DoGet for k+1 claims the parked stream, already under way.

Bounded and safe by construction:

* a plan's order is known from GetFlightInfo (:meth:`ReadAhead.note_plan`), only for a
  server that serves every endpoint itself (with worker processes, k+1 goes elsewhere);
* nothing is read ahead for an endpoint that a call is already serving (parallel readers,
  such as Spark tasks, each claim their own), and at most ``max_parked`` streams are parked;
* a parked stream holds what its prefetch holds (a range or two, and the first ranges of a
  stream are small); one not claimed within ``ttl`` seconds is closed, which stops it;
* the DoGet that claims a stream has passed every check a DoGet makes (authentication, the
  caller's read permission on the dataset, the ticket itself): parking only saves the decode.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from lance_format import close_iterator

log = logging.getLogger("lance_flight")

PLANS = 4096  # ticket -> next ticket links, and calls, remembered (oldest dropped first)


class ReadAhead:
    """``start(ticket)`` starts the stream of a ticket (already producing) for parking."""

    def __init__(self, start: Callable[[bytes], Any], max_parked: int = 2, ttl: float = 5.0):
        self._start = start
        self.max_parked = max_parked
        self.ttl = ttl
        self._lock = threading.Lock()
        self._next: OrderedDict[bytes, bytes] = OrderedDict()
        self._parked: dict[bytes, tuple[float, Any]] = {}
        self._active: dict[bytes, int] = {}
        # when each active ticket's call began, and when recent ones ended: an endpoint
        # served since the current one began (a reader going backwards, or parallel ones)
        # is not read ahead again
        self._began: dict[bytes, float] = {}
        self._ended: OrderedDict[bytes, float] = OrderedDict()
        # parked streams that finished producing before their DoGet came: their next
        # endpoint starts when they are claimed
        self._chain: set[bytes] = set()
        self.started = 0
        self.claimed = 0
        self.expired = 0

    def note_plan(self, tickets: list[bytes]) -> None:
        """Remember the order of a plan's endpoints."""
        with self._lock:
            for a, b in zip(tickets, tickets[1:], strict=False):
                self._next[a] = b
                self._next.move_to_end(a)
            while len(self._next) > PLANS:
                self._next.popitem(last=False)

    def begin(self, ticket: bytes) -> Any | None:
        """A DoGet of ``ticket`` starts: its parked stream, if one is waiting (else None)."""
        with self._lock:
            self._active[ticket] = self._active.get(ticket, 0) + 1
            self._began[ticket] = time.monotonic()
            # a call whose stream was never pulled never ends: the oldest records go (losing
            # one only allows a read-ahead nobody claims, which expires)
            while len(self._active) > PLANS:
                old = next(iter(self._active))
                self._active.pop(old)
                self._began.pop(old, None)
            parked = self._parked.pop(ticket, None)  # a stream still starting is dropped
            chain = ticket in self._chain and parked is not None and parked[1] is not None
            self._chain.discard(ticket)
        self._expire()
        if parked is None or parked[1] is None:
            return None
        self.claimed += 1
        if chain:
            self.after(ticket)
        return parked[1]

    def end(self, ticket: bytes) -> None:
        """The DoGet of ``ticket`` is over (finished, failed or cancelled)."""
        with self._lock:
            left = self._active.get(ticket, 0) - 1
            if left > 0:
                self._active[ticket] = left
            else:
                self._active.pop(ticket, None)
                self._began.pop(ticket, None)
            self._ended[ticket] = time.monotonic()
            self._ended.move_to_end(ticket)
            while len(self._ended) > PLANS:
                self._ended.popitem(last=False)

    def after(self, ticket: bytes) -> None:
        """``ticket``'s stream has produced its last range: park the stream of the next
        endpoint unless nobody is likely to want it (no next endpoint known, the next one
        being served, served since this one began, or parked, or too many parked).  A stream that finished while parked
        itself goes on once it is claimed (no chain of unclaimed streams)."""
        self._expire()
        with self._lock:
            nxt = self._next.get(ticket)
            if nxt is not None and ticket not in self._active:
                if ticket in self._parked:
                    self._chain.add(ticket)
                return
            if (
                nxt is None
                or nxt in self._active
                or self._ended.get(nxt, -1.0) >= self._began.get(ticket, 0.0)
                or nxt in self._parked
                or len(self._parked) >= self.max_parked
            ):
                return
            self._parked[nxt] = (time.monotonic(), None)  # reserved while it starts
        try:
            stream = self._start(nxt)
        except Exception as exc:  # the DoGet of nxt will meet the problem itself
            log.debug("read-ahead of the next endpoint not started: %s", exc)
            with self._lock:
                self._parked.pop(nxt, None)
            return
        with self._lock:
            if nxt in self._parked:
                self._parked[nxt] = (time.monotonic(), stream)
                self.started += 1
                return
        _close(stream)  # claimed (as nothing) or dropped while starting

    def _expire(self) -> None:
        now = time.monotonic()
        with self._lock:
            old = [
                k for k, (at, s) in self._parked.items() if s is not None and now - at > self.ttl
            ]
            stale = [self._parked.pop(k)[1] for k in old]
            self._chain.difference_update(old)
        for stream in stale:
            self.expired += 1
            _close(stream)

    def close(self) -> None:
        """Stop every parked stream (server shutdown)."""
        with self._lock:
            streams = [s for _, s in self._parked.values() if s is not None]
            self._parked.clear()
            self._chain.clear()
        for stream in streams:
            _close(stream)

    def stats(self) -> dict[str, int]:
        with self._lock:
            parked = sum(1 for _, s in self._parked.values() if s is not None)
        return {
            "started": self.started,
            "claimed": self.claimed,
            "expired": self.expired,
            "parked": parked,
        }


def _close(stream: Any) -> None:
    """Close a parked stream (or each part of a tuple holding one, such as (schema, stream))."""
    for part in stream if isinstance(stream, tuple) else (stream,):
        try:
            close_iterator(part)
        except Exception:  # noqa: BLE001 - closing a stream nobody reads must not fail a call
            log.debug("closing a parked stream failed", exc_info=True)
