"""One structured log line per Flight RPC, with a request id the client also receives.

Every call gets a request id: the client's ``x-request-id`` header when it sends a sane one
(so ids can be followed across services), otherwise 16 random hex digits.  The id goes back
in the ``x-request-id`` response header.  When the call ends, one line is logged (logfmt by
default, or JSON) with ``ts``, ``request_id``, ``method``, ``peer``, ``user``, ``status``,
``duration_ms``, ``error`` on failure, and whatever handlers attached with
:func:`annotate` (``dataset``, ``rows``, ``bytes``, ...).

pyarrow middleware does not see the peer address; :func:`annotate` records it from the call
context, so handlers should call ``annotate(context, ...)`` at least once (a bare
``annotate(context)`` is enough).  The user comes from the auth middleware when this factory is
registered as one of its observers (:func:`flight_server.auth.auth_server_options`).
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pyarrow.flight as flight

from flight_server.metrics import method_name, status_name

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
REQUEST_ID_HEADER = "x-request-id"
_SANE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # nothing that could forge a log field
_MAX_ERROR_CHARS = 300
_FIXED = ("ts", "request_id", "method", "peer", "user", "status", "duration_ms")


class _RequestLogMiddleware(flight.ServerMiddleware):
    def __init__(self, factory: RequestLogMiddlewareFactory, method: str, headers, rid: str):
        self._factory = factory
        self.headers = headers
        self.request_id = rid
        self.method = method
        self.peer: str | None = None
        self.user: str | None = None
        self.fields: dict[str, Any] = {}
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
    """Gives each call a request id and logs one line when it ends.

    ``fmt`` is ``"logfmt"`` or ``"json"``; lines go to ``logger`` (default
    ``flight_server.requests``) at ``level``; failed calls are logged at WARNING when
    ``level`` is lower.  Calls refused by the auth middleware are logged at most
    ``refusals_per_second`` a second (after a burst of twice as many): a flood of calls
    without credentials must not flood the log; the next line logged says how many were left
    out (``refusals_not_logged``).
    """

    def __init__(
        self,
        logger: logging.Logger | None = None,
        *,
        fmt: str = "logfmt",
        level: int = logging.INFO,
        refusals_per_second: float = 20.0,
    ):
        if fmt not in ("logfmt", "json"):
            raise ValueError("fmt must be 'logfmt' or 'json'")
        self.logger = logger if logger is not None else logging.getLogger("flight_server.requests")
        self.fmt = fmt
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
        incoming = (headers.get(REQUEST_ID_HEADER) or [None])[0]
        if isinstance(incoming, bytes):
            incoming = incoming.decode("ascii", "replace")
        rid = incoming if incoming and _SANE_ID.fullmatch(incoming) else secrets.token_hex(8)
        instance = _RequestLogMiddleware(self, method_name(info.method), headers, rid)
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
        record: dict[str, Any] = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "request_id": call.request_id,
            "method": call.method,
            "peer": call.peer,
            "user": call.user,
            "status": status_name(exception),
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
        line = format_json(record) if self.fmt == "json" else format_logfmt(record)
        level = self.level if exception is None else max(self.level, logging.WARNING)
        self.logger.log(level, line, extra={"flight_request": record})


def _short_error(exception: BaseException) -> str:
    text = f"{type(exception).__name__}: {exception}"
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


def format_json(record: Mapping[str, Any]) -> str:
    return json.dumps(
        {k: v for k, v in record.items() if v is not None}, default=str, separators=(",", ":")
    )


def format_logfmt(record: Mapping[str, Any]) -> str:
    """``key=value`` pairs; values quoted when they contain spaces, quotes, ``=`` or are empty."""
    parts = []
    for key, value in record.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text = str(value)
        else:
            text = str(value)
            if text == "" or any(c in text for c in ' ="\\') or not text.isprintable():
                escaped = text.replace("\\", "\\\\").replace('"', '\\"')
                escaped = escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
                text = f'"{escaped}"'
        parts.append(f"{_clean_key(key)}={text}")
    return " ".join(parts)


def _clean_key(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(key)) or "_"


def _middleware(context: flight.ServerCallContext) -> _RequestLogMiddleware | None:
    return context.get_middleware(REQUEST_LOG_KEY)


def annotate(context: flight.ServerCallContext, **fields: Any) -> None:
    """Attach fields (``dataset=``, ``rows=``, ``bytes=``...) to the call's log line; also
    records the peer address.  A no-op when the request log is off."""
    call = _middleware(context)
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


def request_id(context: flight.ServerCallContext) -> str | None:
    """The call's request id (for error messages), or None when the request log is off."""
    call = _middleware(context)
    return None if call is None else call.request_id
