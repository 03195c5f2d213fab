"""Failed logins, rate-limited: token buckets per user and for the whole server.

A password check is deliberately slow (PBKDF2, about half a second of CPU at the default
iterations), so a flood of bad logins could take the server's CPU.  Every password login
takes one token from the bucket of the user it names and one from the server's bucket before
the check (a good password gives them back); a bad bearer token takes one from its user's.
While either bucket is empty, password logins for that user (for the server bucket: any
password login) are refused at once, without hashing.  Buckets refill one token per
``refill`` seconds.  Valid bearer tokens are never refused (checking one costs microseconds),
and expired ones do not count, so a flood cannot lock out clients that already logged in.
At most ``max_concurrent`` password checks run at once; the others wait their turn (up to
``queue_seconds``, then UNAVAILABLE).

pyarrow's server middleware is not told the peer's address, so the buckets are keyed by the
user a call names, plus the one server-wide bucket; a proxy in front of the server can add
per-address limits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow.flight as flight

log = logging.getLogger("lance_flight.auth")

MAX_TRACKED_USERS = 10_000  # memory bound: a flood of invented user names


@dataclass(frozen=True)
class Rate:
    """``burst`` failures at once, then one more per ``refill`` seconds (burst 0: no limit)."""

    burst: int
    refill: float

    @classmethod
    def parse(cls, text: str) -> Rate:
        """``"5/30"``: 5 failures, then one per 30 seconds; ``"0"``: unlimited."""
        burst, slash, refill = text.strip().partition("/")
        try:
            rate = cls(int(burst), float(refill) if slash else 1.0)
        except ValueError:
            raise ValueError(f"bad rate {text!r}: expected BURST/SECONDS, e.g. 5/30") from None
        if rate.burst < 0 or not rate.refill > 0:
            raise ValueError(f"bad rate {text!r}: BURST >= 0 and SECONDS > 0")
        return rate


DEFAULT_USER_RATE = Rate(5, 30.0)
DEFAULT_SERVER_RATE = Rate(20, 2.0)


class _Bucket:
    __slots__ = ("tokens", "stamp", "logged")

    def __init__(self, burst: int, now: float):
        self.tokens = float(burst)
        self.stamp = now
        self.logged = False

    def refill(self, rate: Rate, now: float) -> None:
        self.tokens = min(float(rate.burst), self.tokens + (now - self.stamp) / rate.refill)
        self.stamp = now
        if self.tokens >= 1:
            self.logged = False  # the next time it runs dry is news again

    def wait(self, rate: Rate) -> float:
        return max(0.0, (1.0 - self.tokens) * rate.refill)


class LoginLimiter:
    """Counts failed logins and says when a password check must not even be tried."""

    def __init__(
        self,
        user_rate: Rate = DEFAULT_USER_RATE,
        server_rate: Rate = DEFAULT_SERVER_RATE,
        *,
        max_concurrent: int = 1,
        queue_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.user_rate = user_rate
        self.server_rate = server_rate
        self._clock = clock
        self._users: OrderedDict[str, _Bucket] = OrderedDict()
        self._server = _Bucket(server_rate.burst, clock())
        self._lock = threading.Lock()
        self._hashing = threading.BoundedSemaphore(max(1, max_concurrent))
        self._queue_seconds = queue_seconds
        self.refused = 0  # logins refused without a check (for tests and metrics)
        self._last_log = float("-inf")
        self._suppressed = 0

    def _user(self, user: str, now: float) -> _Bucket:
        bucket = self._users.get(user)
        if bucket is None:
            bucket = self._users[user] = _Bucket(self.user_rate.burst, now)
            while len(self._users) > MAX_TRACKED_USERS:
                self._users.popitem(last=False)
        else:
            self._users.move_to_end(user)
            bucket.refill(self.user_rate, now)
        return bucket

    def begin_password_login(self, user: str) -> None:
        """Take one attempt from ``user``'s bucket and the server's, or refuse at once
        (UNAUTHENTICATED, nothing hashed) while either is empty.  Taking the attempt before
        the check, not after it fails, keeps concurrent attempts within the burst; a good
        password gives it back (:meth:`succeeded`)."""
        now = self._clock()
        with self._lock:
            user_bucket = self._user(user, now) if self.user_rate.burst else None
            if self.server_rate.burst:
                self._server.refill(self.server_rate, now)
            limited = None
            if user_bucket is not None and user_bucket.tokens < 1:
                limited = (f"user {user!r}", user_bucket, self.user_rate)
            elif self.server_rate.burst and self._server.tokens < 1:
                limited = ("this server", self._server, self.server_rate)
            if limited is None:
                if user_bucket is not None:
                    user_bucket.tokens -= 1
                if self.server_rate.burst:
                    self._server.tokens -= 1
                return
            what, bucket, rate = limited
            self.refused += 1
            wait = bucket.wait(rate)
            if not bucket.logged:
                bucket.logged = True
                log.warning("too many failed logins for %s: refusing for %.0fs", what, wait)
        error = flight.FlightUnauthenticatedError(
            f"too many failed logins for {what}; retry in {max(1, round(wait))}s"
        )
        error.retry_after = max(1, round(wait))  # HTTP answers it as 429 with Retry-After
        raise error

    def failed(self, user: str | None, *, password: bool, how: str) -> None:
        """Count one failed login and log it (a password attempt was counted when it began);
        the log says at most one line per second, with how many it left out."""
        now = self._clock()
        with self._lock:
            if user is not None and not password and self.user_rate.burst:
                bucket = self._user(user, now)
                bucket.tokens = max(0.0, bucket.tokens - 1)
            if now - self._last_log < 1.0:
                self._suppressed += 1
                return
            self._last_log, suppressed, self._suppressed = now, self._suppressed, 0
        more = f" ({suppressed} more failed logins not logged)" if suppressed else ""
        log.warning("failed login (%s) for user %r%s", how, user, more)

    def succeeded(self, user: str) -> None:
        """A good password: the user's failures are forgiven, the server's attempt returned."""
        with self._lock:
            self._users.pop(user, None)
            if self.server_rate.burst:
                self._server.tokens = min(float(self.server_rate.burst), self._server.tokens + 1)

    @contextmanager
    def hashing(self) -> Iterator[None]:
        """One password check at a time (per ``max_concurrent``); a call that cannot start
        one within ``queue_seconds`` is refused as UNAVAILABLE, to be retried."""
        if not self._hashing.acquire(timeout=self._queue_seconds):
            raise flight.FlightUnavailableError("the server is busy checking logins; retry")
        try:
            yield
        finally:
            self._hashing.release()
