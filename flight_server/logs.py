"""Log records with fields, rendered by a formatter: JSON lines or logfmt text.

Code that logs attaches structured fields to a record (``log.info("DoGet OK",
extra={"fields": {...}})``) and never formats them itself; a handler's formatter renders
them: :class:`JsonFormatter` (one JSON object per line) or :class:`LogfmtFormatter`
(``key=value`` pairs), both with ``ts``, ``level``, ``logger``, ``msg`` and the fields.
:func:`configure` installs one of them on stderr (``lance-flight serve --log-format``).

Every line logged while a call runs also carries the call's ``request_id`` and, when the
client sent a W3C ``traceparent`` header, its ``trace_id`` (:func:`call_scope`), so a
warning deep inside a handler can be matched to the request log line and to the caller's
trace.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import secrets
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "REQUEST_ID_HEADER",
    "TRACEPARENT_HEADER",
    "CallIds",
    "JsonFormatter",
    "LogfmtFormatter",
    "call_ids",
    "call_scope",
    "configure",
    "current_call",
    "enter_call",
    "fields_of",
]

REQUEST_ID_HEADER = "x-request-id"
TRACEPARENT_HEADER = "traceparent"
_SANE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # nothing that could forge a log field
# version-traceid-parentid-flags; all-zero ids are invalid (W3C Trace Context)
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_FIXED = ("ts", "level", "logger", "msg")


class CallIds:
    """A call's request id, and its W3C trace context when the client sent one."""

    __slots__ = ("request_id", "traceparent", "trace_id")

    def __init__(self, request_id: str, traceparent: str | None = None):
        self.request_id = request_id
        self.traceparent = traceparent
        self.trace_id = traceparent.split("-")[1] if traceparent else None

    def fields(self) -> dict[str, str]:
        out = {"request_id": self.request_id}
        if self.trace_id:
            out["trace_id"] = self.trace_id
        return out


def _first(value: Any) -> str | None:
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    return value if isinstance(value, str) else None


def call_ids(request_id: Any = None, traceparent: Any = None) -> CallIds:
    """The ids of a call from its headers' values (a value, a list of values, or None): the
    client's ``x-request-id`` when sane, else 16 random hex digits; a ``traceparent`` only
    when well-formed."""
    rid = _first(request_id)
    if not rid or not _SANE_ID.fullmatch(rid):
        rid = secrets.token_hex(8)
    parent = _first(traceparent)
    match = _TRACEPARENT.fullmatch(parent.strip().lower()) if parent else None
    if match is None or match.group(1) == "ff" or "0" * 32 == match.group(2):
        return CallIds(rid)
    if match.group(3) == "0" * 16:
        return CallIds(rid)
    return CallIds(rid, match.group(0))


_CURRENT: contextvars.ContextVar[CallIds | None] = contextvars.ContextVar(
    "lance_flight_call", default=None
)


def current_call() -> CallIds | None:
    """The ids of the call running on this thread (None outside a call)."""
    return _CURRENT.get()


def enter_call(ids: CallIds | None) -> None:
    """Mark this thread as running the call ``ids`` (None: no call), for middleware whose
    start and end hooks cannot share a ``with`` block."""
    _CURRENT.set(ids)


@contextlib.contextmanager
def call_scope(ids: CallIds) -> Iterator[CallIds]:
    """Lines logged inside the block carry ``ids``."""
    token = _CURRENT.set(ids)
    try:
        yield ids
    finally:
        _CURRENT.reset(token)


def _stamp_records() -> None:
    """Every record made while a call runs remembers the call's ids (read when the record is
    made, on the call's thread: a handler may format it later, elsewhere)."""
    make = logging.getLogRecordFactory()
    if getattr(make, "stamps_call_ids", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        ids = _CURRENT.get()
        if ids is not None:
            record.call_ids = ids
        return record

    factory.stamps_call_ids = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


_stamp_records()


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """Everything a formatter renders for ``record``, in order: ``ts``, ``level``,
    ``logger``, ``msg``, the running call's ids, the record's ``fields``, the traceback."""
    ts = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
    out: dict[str, Any] = {
        "ts": ts.replace("+00:00", "Z"),
        "level": record.levelname,
        "logger": record.name,
        "msg": record.getMessage(),
    }
    ids = getattr(record, "call_ids", None)
    if ids is not None:
        out |= ids.fields()
    for key, value in (getattr(record, "fields", None) or {}).items():
        if value is None:
            continue
        out[f"x_{key}" if key in _FIXED else key] = value  # never overwrite the fixed ones
    if record.exc_info:
        out["exc"] = logging.Formatter().formatException(record.exc_info)
    return out


class JsonFormatter(logging.Formatter):
    """One JSON object per line (values JSON cannot hold become strings)."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(fields_of(record), default=str, separators=(",", ":"))


class LogfmtFormatter(logging.Formatter):
    """``key=value`` pairs; values quoted when they contain spaces, quotes or ``=``, or are
    empty; control characters escaped, so one record is one line."""

    def format(self, record: logging.LogRecord) -> str:
        return logfmt(fields_of(record))


def logfmt(fields: Mapping[str, Any]) -> str:
    parts = []
    for key, value in fields.items():
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
        parts.append(f"{re.sub(r'[^A-Za-z0-9_.-]', '_', str(key)) or '_'}={text}")
    return " ".join(parts)


FORMATS = {"json": JsonFormatter, "text": LogfmtFormatter}


def configure(level: str | int = "INFO", fmt: str = "text") -> None:
    """Send every log line to stderr, rendered by the formatter ``fmt`` names."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(FORMATS[fmt]())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    if isinstance(level, str):
        level = getattr(logging, level.upper(), logging.INFO)
    root.setLevel(level)
