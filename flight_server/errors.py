"""One mapping from the project's errors onto Flight error kinds, applied in every handler.

What pyarrow 26 does with an exception raised by a ``FlightServerBase`` handler (pinned by
``tests/test_flight_server.py::test_pyarrow_error_facts``):

==============================  =================  ========================================
raised by the handler           gRPC status        the pyarrow client raises
==============================  =================  ========================================
``ValueError``/``ArrowInvalid``   INVALID_ARGUMENT   ``ArrowInvalid`` + the server traceback
``KeyError``                      NOT_FOUND          ``ArrowKeyError`` + the server traceback
``NotImplementedError``           UNIMPLEMENTED      ``ArrowNotImplementedError`` + traceback
any other non-Flight exception    UNKNOWN            ``FlightServerError`` + traceback
``FlightServerError(m, extra)``   UNKNOWN            ``FlightServerError``, ``extra_info`` kept
``FlightInternalError``           INTERNAL           ``FlightInternalError``
``FlightUnauthenticatedError``    UNAUTHENTICATED    ``FlightUnauthenticatedError``
``FlightUnauthorizedError``       PERMISSION_DENIED  ``FlightUnauthorizedError``
``FlightUnavailableError``        UNAVAILABLE        ``FlightUnavailableError``
``FlightCancelledError``          CANCELLED          ``FlightCancelledError``
==============================  =================  ========================================

Only the Flight classes travel without the server's Python traceback appended to the message,
and none of them has the INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION,
ABORTED or UNIMPLEMENTED codes.  A service must not leak tracebacks, so the request errors
travel as ``FlightServerError`` (gRPC UNKNOWN) whose message starts with the kind
(``[INVALID_ARGUMENT] unknown key(s) ...``) and whose ``extra_info`` carries it as JSON
(``{"kind": "INVALID_ARGUMENT", "retryable": false}``), which :func:`error_kind` reads back.
The kinds with a Flight class of their own use it: unauthenticated, unauthorized
(PERMISSION_DENIED), unavailable (a server shutting down), cancelled, internal.

pyarrow's ``get_schema`` is the exception: it turns every exception, Flight classes included,
into a status carrying the traceback (pinned by ``test_pyarrow_error_facts``).  There the
request errors use the classes that give the right gRPC code (``ArrowInvalid`` ->
INVALID_ARGUMENT, ``ArrowKeyError`` -> NOT_FOUND, ``NotImplementedError`` -> UNIMPLEMENTED),
with the same ``[KIND] message``, raised from a frame compiled as ``<lance-flight>`` so that
the traceback pyarrow appends names no file of the server (:func:`schema_errors`).

Commit conflicts are ``ABORTED`` (gRPC's code for "a concurrent transaction won; retry the
read-modify-write"), with ``retryable`` true when redoing the operation may succeed;
``ALREADY_EXISTS`` is kept for creating what exists.  ``FAILED_PRECONDITION`` is a valid call
that the state forbids and that must not be retried as is (a staged put or commit for a
staging job that was already aborted or committed).  Unexpected exceptions become INTERNAL
with a short message naming the request id; the traceback goes to the server log.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from lance_format.errors import (
    CommitConflictError,
    CorruptFileError,
    InvalidArgumentError,
    LanceError,
    LanceIOError,
    SchemaError,
    UnsupportedError,
)

from . import requestlog

log = logging.getLogger("lance_flight")

NOT_FOUND = "NOT_FOUND"
INVALID_ARGUMENT = "INVALID_ARGUMENT"
ALREADY_EXISTS = "ALREADY_EXISTS"
FAILED_PRECONDITION = "FAILED_PRECONDITION"  # the state forbids the call: do not retry it
ABORTED = "ABORTED"  # a commit lost to a concurrent, incompatible one
UNIMPLEMENTED = "UNIMPLEMENTED"
UNAUTHENTICATED = "UNAUTHENTICATED"
PERMISSION_DENIED = "PERMISSION_DENIED"
UNAVAILABLE = "UNAVAILABLE"
CANCELLED = "CANCELLED"
RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
INTERNAL = "INTERNAL"

# kinds sent with a pyarrow Flight class of their own (the gRPC code says it all)
_OWN_CLASS: dict[str, type[flight.FlightError]] = {
    INTERNAL: flight.FlightInternalError,
    UNAUTHENTICATED: flight.FlightUnauthenticatedError,
    PERMISSION_DENIED: flight.FlightUnauthorizedError,
    UNAVAILABLE: flight.FlightUnavailableError,
    CANCELLED: flight.FlightCancelledError,
}


class ServiceError(LanceError):
    """An error of the service itself (not of the format layer), with its Flight kind."""

    kind = INVALID_ARGUMENT


class BadRequest(ServiceError, InvalidArgumentError):
    """A descriptor, ticket, command or action body that is not acceptable."""

    kind = INVALID_ARGUMENT


class NotFound(ServiceError):
    """An unknown dataset, version, tag, fragment or action."""

    kind = NOT_FOUND


class AlreadyExists(ServiceError):
    """Creating a dataset that exists."""

    kind = ALREADY_EXISTS


class FailedPrecondition(ServiceError):
    """A call the current state forbids: e.g. staging into, or committing, a job that was
    already aborted or committed.  Retrying it unchanged cannot succeed."""

    kind = FAILED_PRECONDITION


class Unimplemented(ServiceError):
    """A call this server does not implement (e.g. an operation the datasets layer lacks)."""

    kind = UNIMPLEMENTED


class Unauthenticated(ServiceError):
    """No or bad credentials."""

    kind = UNAUTHENTICATED


class Forbidden(ServiceError):
    """Authenticated, but not allowed to do this (e.g. a read-only user writing)."""

    kind = PERMISSION_DENIED


class ResourceExhausted(ServiceError):
    """A request over a configured limit (message size, login attempts): retrying it as is
    fails again; a smaller request, or one after the advertised wait, may not."""

    kind = RESOURCE_EXHAUSTED


class Unavailable(ServiceError):
    """The server cannot take the call now (shutting down): retry, possibly elsewhere."""

    kind = UNAVAILABLE
    retryable = True


def kind_of(exc: BaseException) -> str:
    """The Flight kind an exception is reported as."""
    if isinstance(exc, ServiceError):
        return exc.kind
    if isinstance(exc, CommitConflictError):
        return ABORTED
    if isinstance(exc, (InvalidArgumentError, SchemaError)):
        return INVALID_ARGUMENT
    if isinstance(exc, UnsupportedError):
        return UNIMPLEMENTED
    if isinstance(exc, (CorruptFileError, LanceIOError)):
        return INTERNAL
    if isinstance(exc, LanceError):
        return INVALID_ARGUMENT
    if isinstance(exc, pa.ArrowCancelled):
        return CANCELLED
    return INTERNAL


def to_flight_error(
    exc: BaseException, *, root: str | None = None, request_id: str | None = None
) -> BaseException:
    """The exception a handler raises to the client for ``exc``.

    ``root``: the dataset root, cut out of messages (clients name datasets relative to it and
    need not learn where the server keeps them).
    """
    if isinstance(exc, flight.FlightError):
        return exc
    kind = kind_of(exc)
    if isinstance(exc, LanceError):
        message = str(exc)
        if root:
            message = message.replace(root.rstrip("/") + "/", "")
    elif isinstance(exc, pa.ArrowCancelled):
        message = "the call was cancelled"
    else:  # a bug: keep the client's message short, the log gets the traceback
        log.error("internal error (request %s): %s", request_id, exc, exc_info=exc)
        message = f"internal error ({type(exc).__name__})"
    if kind == INTERNAL and request_id:
        message += f"; request id {request_id}"
    retryable = bool(getattr(exc, "retryable", False))
    extra = json.dumps({"kind": kind, "retryable": retryable}).encode()
    cls = _OWN_CLASS.get(kind, flight.FlightServerError)
    return cls(f"[{kind}] {message}", extra)


_KIND_PREFIX = re.compile(r"^(?:[A-Za-z ]+: )?\[([A-Z_]+)\] ")


def error_kind(exc: BaseException) -> str | None:
    """Client side: the kind a server error carries, from ``extra_info`` or else from the
    ``[KIND]`` prefix of its message (None when it carries none)."""
    try:
        kind = json.loads(getattr(exc, "extra_info", None) or b"{}").get("kind")
    except (ValueError, AttributeError):
        kind = None
    if kind is None:
        match = _KIND_PREFIX.match(str(exc))
        kind = match.group(1) if match else None
    return kind


F = TypeVar("F", bound=Callable[..., Any])


def _call_info(args: tuple) -> tuple[str | None, Any]:
    """(dataset root, call context) of a handler called as ``handler(server, context, ...)``."""
    server = args[0] if args else None
    catalog = getattr(server, "catalog", None)
    context = args[1] if len(args) > 1 and isinstance(args[1], flight.ServerCallContext) else None
    return getattr(catalog, "root", None), context


def convert(exc: BaseException, args: tuple) -> BaseException:
    """Map ``exc`` for the handler call ``args`` and note its kind in the request log."""
    root, context = _call_info(args)
    rid = None
    if context is not None:
        rid = requestlog.request_id(context)
        if not isinstance(exc, flight.FlightError):
            requestlog.annotate(context, error_kind=kind_of(exc))
    return to_flight_error(exc, root=root, request_id=rid)


def flight_errors(fn: F) -> F:
    """Handler decorator: every exception leaves as the Flight error of its kind."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - this is the one place that maps them all
            raise convert(exc, args) from None

    return wrapper  # type: ignore[return-value]


# get_schema's wrapper is compiled here so the traceback pyarrow sends shows no server file
_SCHEMA_WRAPPER = """
def wrap(fn, convert):
    def handler(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise convert(exc, args) from None
    return handler
"""
_namespace: dict[str, Any] = {}
exec(compile(_SCHEMA_WRAPPER, "<lance-flight>", "exec"), _namespace)  # noqa: S102
_BY_CODE: dict[str, type[Exception]] = {
    INVALID_ARGUMENT: pa.ArrowInvalid,
    NOT_FOUND: pa.ArrowKeyError,
    UNIMPLEMENTED: NotImplementedError,
}


def _schema_convert(exc: BaseException, args: tuple) -> BaseException:
    mapped = convert(exc, args)
    kind = error_kind(mapped)
    if kind in _BY_CODE:
        return _BY_CODE[kind](str(mapped))
    return mapped


def schema_errors(fn: F) -> F:
    """``flight_errors`` for ``get_schema``, where pyarrow ignores the Flight classes."""
    return functools.wraps(fn)(_namespace["wrap"](fn, _schema_convert))  # type: ignore[return-value]


def guarded(items: Iterator[Any], *args: Any) -> Iterator[Any]:
    """Map errors raised while a lazy stream is being consumed (do_get generators); ``args``
    are the handler's ``(server, context)``."""
    try:
        yield from items
    except Exception as exc:  # noqa: BLE001
        raise convert(exc, args) from None
