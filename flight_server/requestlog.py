"""One structured log record per Flight RPC, with a request id the client also receives.

Every call gets a request id: the client's ``x-request-id`` header when it sends a sane one
(so ids can be followed across services), otherwise 16 random hex digits; a W3C
``traceparent`` header is honoured as the ``trace_id`` field (:mod:`.logs`).  The id goes back
in the ``x-request-id`` response header.  When the call ends, one record is logged to
``flight_server.requests`` with the fields ``request_id``, ``method``, ``peer``, ``user``,
``status``, ``duration_ms``, ``error`` on failure, and whatever handlers attached with
:func:`annotate` (``dataset``, ``rows``, ``bytes``, ...); the handler's formatter renders
them (:class:`.logs.JsonFormatter` or :class:`.logs.LogfmtFormatter`).  Lines a handler logs
carry the call's ids too (:func:`flight_server.errors.flight_errors` enters
:func:`.logs.call_scope`: pyarrow runs middleware and handler in separate callbacks, which
share no thread state).

pyarrow middleware does not see the peer address; :func:`annotate` records it from the call
context, so handlers should call ``annotate(context, ...)`` at least once (a bare
``annotate(context)`` is enough).  The user comes from the auth middleware when this factory is
registered as one of its observers (:func:`flight_server.auth.auth_server_options`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import pyarrow.flight as flight

from flight_server import logs
from flight_server.logs import REQUEST_ID_HEADER, TRACEPARENT_HEADER
from flight_server.metrics import method_name, status_name
from flight_server.tracing import TRACING_KEY

__all__ = [
    "REQUEST_ID_HEADER",
    "REQUEST_LOG_KEY",
    "RequestLogMiddlewareFactory",
    "accumulate",
    "annotate",
    "request_id",
]

#: Key of this middleware in ``FlightServerBase(middleware=...)``.
REQUEST_LOG_KEY = "requestlog"
_MAX_ERROR_CHARS = 300
_FIXED = ("request_id", "trace_id", "method", "peer", "user", "status", "duration_ms")


class _RequestLogMiddleware(flight.ServerMiddleware):
    def __init__(self, factory: RequestLogMiddlewareFactory, method: str, headers, ids):
        self._factory = factory
        self.headers = headers
        self.ids: logs.CallIds = ids
        self.request_id = ids.request_id
        self.method = method
        self.peer: str | None = None
        self.user: str | None = None
        self.fields: dict[str, Any] = {}
        self.expected_failure = False  # see expect_failure()
        self._lock = threading.Lock()  # a do_get generator may annotate from another thread
        self._start = time.perf_counter()
        self._done = False

    def annotate(self, fields: Mapping[str, Any]) -> None:
        with self._lock:
            self.fields.update(fields)

    def accumulate(self, amounts: Mapping[str, float]) -> None:
        with self._lock:
            for key, amount in amounts.items():
                self.fields[key] = self.fields.get(key, 0) + amount

    def sending_headers(self) -> dict[str, str]:
        return {REQUEST_ID_HEADER: self.request_id}

    def call_completed(self, exception: Exception | None) -> None:
        if self._done:
            return
        self._done = True
        self._factory._emit(self, exception, time.perf_counter() - self._start)


class RequestLogMiddlewareFactory(flight.ServerMiddlewareFactory):
    """Gives each call a request id and logs one record when it ends.

    Records go to ``logger`` (default ``flight_server.requests``) at ``level``; failed calls
    are logged at WARNING when
    ``level`` is lower.  Calls refused by the auth middleware are logged at most
    ``refusals_per_second`` a second (after a burst of twice as many): a flood of calls
    without credentials must not flood the log; the next line logged says how many were left
    out (``refusals_not_logged``).
    """

    def __init__(
        self,
        logger: logging.Logger | None = None,
        *,
        level: int = logging.INFO,
        refusals_per_second: float = 20.0,
    ):
        self.logger = logger if logger is not None else logging.getLogger("flight_server.requests")
        self.level = level
        self._local = threading.local()
        self._refusal_rate = float(refusals_per_second)
        self._refusal_tokens = 2 * self._refusal_rate
        self._refusal_stamp = time.monotonic()
        self._refusals_skipped = 0
        self._refusal_lock = threading.Lock()

    def start_call(
        self, info: flight.CallInfo, headers: Mapping[str, Any]
    ) -> _RequestLogMiddleware:
        ids = logs.call_ids(headers.get(REQUEST_ID_HEADER), headers.get(TRACEPARENT_HEADER))
        instance = _RequestLogMiddleware(self, method_name(info.method), headers, ids)
        self._local.current = instance
        return instance

    def auth_outcome(
        self,
        info: flight.CallInfo,
        headers: Mapping[str, Any],
        user: str | None,
        error: Exception | None,
    ) -> None:
        instance = getattr(self._local, "current", None)
        if instance is None or instance.headers is not headers:
            if error is None:
                return  # registered after auth: the user is simply not known
            instance = self.start_call(info, headers)
        instance.user = user
        if error is not None:
            skipped = self._refusal_budget()
            if skipped is None:
                instance._done = True  # over the budget: counted, not logged
                return
            if skipped:
                instance.annotate({"refusals_not_logged": skipped})
            instance.call_completed(error)

    def _refusal_budget(self) -> int | None:
        """None when this refusal is over the log budget; else how many were left out."""
        if self._refusal_rate <= 0:
            return 0
        with self._refusal_lock:
            now = time.monotonic()
            self._refusal_tokens = min(
                2 * self._refusal_rate,
                self._refusal_tokens + (now - self._refusal_stamp) * self._refusal_rate,
            )
            self._refusal_stamp = now
            if self._refusal_tokens < 1:
                self._refusals_skipped += 1
                return None
            self._refusal_tokens -= 1
            skipped, self._refusals_skipped = self._refusals_skipped, 0
            return skipped

    def _emit(self, call: _RequestLogMiddleware, exception: Exception | None, seconds: float):
        status = status_name(exception)
        record: dict[str, Any] = {
            **call.ids.fields(),
            "method": call.method,
            "peer": call.peer,
            "user": call.user,
            "status": status,
            "duration_ms": round(seconds * 1000.0, 3),
        }
        if exception is not None:
            record["error"] = _short_error(exception)
        with call._lock:
            extra = dict(call.fields)
        for key, value in extra.items():
            if key in _FIXED:
                key = f"x_{key}"  # handlers cannot overwrite the fixed fields
            record[key] = value
        failed = exception is not None and not call.expected_failure
        level = max(self.level, logging.WARNING) if failed else self.level
        self.logger.log(level, "%s %s", call.method, status, extra={"fields": record})


def _short_error(exception: BaseException) -> str:
    text = f"{type(exception).__name__}: {exception}"
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


def _middleware(context: flight.ServerCallContext) -> _RequestLogMiddleware | None:
    return context.get_middleware(REQUEST_LOG_KEY)


def _span(context: flight.ServerCallContext):
    """The call's tracing middleware (:mod:`.tracing`), or None when tracing is off."""
    return context.get_middleware(TRACING_KEY)


def expect_failure(context: flight.ServerCallContext) -> None:
    """Log this call's failure at the normal level, not WARNING: the answer is an expected
    one (an optional action a client probes for, such as ADBC's CloseSession on every
    connection close), and a warning per connection would only be noise."""
    call = _middleware(context)
    if call is not None:
        call.expected_failure = True


def annotate(context: flight.ServerCallContext, **fields: Any) -> None:
    """Attach fields (``dataset=``, ``rows=``, ``bytes=``...) to the call's log line (and its
    trace span, when tracing is on); also records the peer address.  A no-op when the
    request log is off."""
    span = _span(context)
    call = _middleware(context)
    if span is not None:
        span.annotate(fields if call is None else {"request_id": call.request_id, **fields})
    if call is None:
        return
    if call.peer is None:
        try:
            call.peer = context.peer()
        except Exception:  # the context of a finished call; the peer is only nice to have
            pass
    call.annotate(fields)


def accumulate(context: flight.ServerCallContext, **amounts: float) -> None:
    """Add to numeric fields of the call's log line (e.g. ``rows=batch.num_rows`` per batch
    of a ``do_get`` stream).  A no-op when the request log is off."""
    call = _middleware(context)
    if call is not None:
        call.accumulate(amounts)
    span = _span(context)
    if span is not None:
        span.accumulate(amounts)


def call_ids(context: flight.ServerCallContext) -> logs.CallIds | None:
    """The call's request id and trace context, or None when the request log is off."""
    call = _middleware(context)
    return None if call is None else call.ids


def header(context: flight.ServerCallContext, name: str) -> str | None:
    """The call's first value of request header ``name`` (lower case), or None (absent,
    or the request log is off)."""
    call = _middleware(context)
    values = None if call is None else call.headers.get(name)
    return str(values[0]) if values else None


def request_id(context: flight.ServerCallContext) -> str | None:
    """The call's request id (for error messages), or None when the request log is off."""
    call = _middleware(context)
    return None if call is None else call.request_id
