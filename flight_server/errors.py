"""One mapping from the project's errors onto Flight error kinds, applied in every handler.

Each kind reaches every client (pyarrow, the ADBC driver, any gRPC client) with its gRPC
status code, a message starting with the kind (``[INVALID_ARGUMENT] unknown key(s) ...``)
and no server traceback.  What pyarrow 26's server does with an exception raised by a
``FlightServerBase`` handler decides how (pinned by
``tests/flight_server/test_flight_server.py::test_pyarrow_error_facts``):

* The Flight classes (``FlightInternalError``, ``FlightUnauthenticatedError``, ...) become an
  Arrow status with a ``FlightStatusDetail``: gRPC INTERNAL, UNAUTHENTICATED,
  PERMISSION_DENIED, UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED (``FlightTimedOutError``) or
  UNKNOWN (``FlightServerError``), the message as raised, ``extra_info`` sent along.
* Any other exception becomes an Arrow status whose code follows its Python class
  (``ValueError`` -> Invalid -> gRPC INVALID_ARGUMENT, ``KeyError`` -> NOT_FOUND,
  ``NotImplementedError`` -> UNIMPLEMENTED, the rest UNKNOWN) with a ``PythonErrorDetail``:
  the gRPC message is ``<message>. Detail: Python exception: <traceback.format_exception(...)>``,
  i.e. the server's traceback.  pyarrow looks ``traceback.format_exception`` up each time it
  formats one, so this module wraps it once (:func:`_install_format_hook`): for the
  exceptions this module makes (class :class:`_Wire`) it returns just the kind; every other
  exception is formatted exactly as before.  That is how INVALID_ARGUMENT, NOT_FOUND and
  UNIMPLEMENTED travel (as ``ArrowInvalid``, ``ArrowKeyError``, ``ArrowNotImplementedError``
  subclasses): ``[KIND] message. Detail: Python exception: KIND``.
* ``get_schema`` catches no Flight class: there every exception takes the second path, so
  the Flight-class kinds arrive as UNKNOWN (with their clean ``[KIND]`` message).

No status a Python handler can produce carries ALREADY_EXISTS, FAILED_PRECONDITION, ABORTED
or RESOURCE_EXHAUSTED: pyarrow maps no Python class to Arrow's AlreadyExists, Arrow's Flight
transport has no code for the other three, and a ``grpc-status-details-bin`` whose code
differs from the call's status is refused by gRPC clients (grpc-go reports INTERNAL
"grpc-status-details-bin mismatch"; pinned by
``tests/flight_server/sql/test_flight_sql_hardening.py::test_grpc_clients_refuse_a_status_detail_with_another_code``).
These kinds travel as ``FlightServerError`` (gRPC UNKNOWN) whose ``extra_info`` carries the
kind as JSON (``{"kind": "ABORTED", "retryable": true}``), which :func:`error_kind` reads
back, like the ``[KIND]`` prefix every message has; a retryable RESOURCE_EXHAUSTED (a busy
server) travels as UNAVAILABLE so clients back off and retry.

Commit conflicts are ``ABORTED`` (gRPC's code for "a concurrent transaction won; retry the
read-modify-write"), with ``retryable`` true when redoing the operation may succeed;
``ALREADY_EXISTS`` is kept for creating what exists.  ``FAILED_PRECONDITION`` is a valid call
that the state forbids and that must not be retried as is (a staged put or commit for a
staging job that was already aborted or committed).  Unexpected exceptions become INTERNAL
with a short message naming the request id; the traceback goes to the server log.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import traceback
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar, runtime_checkable

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

from . import logs, requestlog

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
RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"  # a server limit (memory, concurrent statements)
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"  # the server's time limit for the call ran out
CANCELLED = "CANCELLED"
INTERNAL = "INTERNAL"

UNKNOWN = "UNKNOWN"


class _Wire:
    """Marks the exceptions this module makes for clients: pyarrow formats their detail as
    the kind alone (no traceback)."""

    kind = UNKNOWN


def _wire(base: type[Exception], kind: str) -> type[Exception]:
    return type(base.__name__, (base, _Wire), {"kind": kind, "__module__": __name__})


# the class each kind is raised as, chosen for the gRPC code pyarrow's server gives it
_TRANSPORT: dict[str, type[Exception]] = {
    INVALID_ARGUMENT: _wire(pa.ArrowInvalid, INVALID_ARGUMENT),
    NOT_FOUND: _wire(pa.ArrowKeyError, NOT_FOUND),
    UNIMPLEMENTED: _wire(pa.ArrowNotImplementedError, UNIMPLEMENTED),
    INTERNAL: _wire(flight.FlightInternalError, INTERNAL),
    UNAUTHENTICATED: _wire(flight.FlightUnauthenticatedError, UNAUTHENTICATED),
    PERMISSION_DENIED: _wire(flight.FlightUnauthorizedError, PERMISSION_DENIED),
    UNAVAILABLE: _wire(flight.FlightUnavailableError, UNAVAILABLE),
    CANCELLED: _wire(flight.FlightCancelledError, CANCELLED),
    DEADLINE_EXCEEDED: _wire(flight.FlightTimedOutError, DEADLINE_EXCEEDED),
    UNKNOWN: _wire(flight.FlightServerError, UNKNOWN),  # kinds gRPC cannot carry from here
}
# a Flight error raised as is (auth, cancellation): its kind, from its class
_FLIGHT_KINDS = [
    (flight.FlightInternalError, INTERNAL),
    (flight.FlightUnauthenticatedError, UNAUTHENTICATED),
    (flight.FlightUnauthorizedError, PERMISSION_DENIED),
    (flight.FlightUnavailableError, UNAVAILABLE),
    (flight.FlightCancelledError, CANCELLED),
    (flight.FlightTimedOutError, DEADLINE_EXCEEDED),
]


def _install_format_hook() -> None:
    """Make pyarrow format the detail of a :class:`_Wire` exception as its kind."""
    original = traceback.format_exception
    if getattr(original, "_lance_flight", False):
        return

    @functools.wraps(original)
    def format_exception(exc: Any, /, *args: Any, **kwargs: Any) -> list[str]:
        value = args[0] if args else kwargs.get("value", exc)
        if isinstance(value, _Wire):
            return [value.kind]
        return original(exc, *args, **kwargs)

    format_exception._lance_flight = True  # type: ignore[attr-defined]
    traceback.format_exception = format_exception


_install_format_hook()


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


class Unavailable(ServiceError):
    """The server cannot take the call now (shutting down): retry, possibly elsewhere."""

    kind = UNAVAILABLE
    retryable = True


class ResourceExhausted(ServiceError):
    """A server limit was reached: a message's size, memory for a statement, concurrent
    statements.
    ``retryable`` when waiting may help (a busy server, not a statement too big)."""

    kind = RESOURCE_EXHAUSTED

    def __init__(self, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


class DeadlineExceeded(ServiceError):
    """The server's time limit for the call (e.g. a SQL statement's) ran out."""

    kind = DEADLINE_EXCEEDED


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
    if isinstance(exc, _Wire):
        return exc
    if isinstance(exc, flight.FlightError):  # raised as is: same class and message, no traceback
        kind = next((k for cls, k in _FLIGHT_KINDS if isinstance(exc, cls)), UNKNOWN)
        return _TRANSPORT[kind](str(exc), exc.extra_info)
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
    transport = kind
    if kind == RESOURCE_EXHAUSTED and retryable:  # gRPC clients back off and retry these
        transport = UNAVAILABLE
    cls = _TRANSPORT.get(transport, _TRANSPORT[UNKNOWN])
    text = f"[{kind}] {message}"
    return cls(text, extra) if issubclass(cls, flight.FlightError) else cls(text)


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


class _Catalog(Protocol):
    root: str


@runtime_checkable
class _Service(Protocol):
    """What the mapping reads of the server whose handler raised: its datasets' root, which
    error messages leave out."""

    @property
    def catalog(self) -> _Catalog: ...


def _call_info(args: tuple) -> tuple[str | None, Any]:
    """(dataset root, call context) of a handler called as ``handler(server, context, ...)``."""
    root = args[0].catalog.root if args and isinstance(args[0], _Service) else None
    context = args[1] if len(args) > 1 and isinstance(args[1], flight.ServerCallContext) else None
    return root, context


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
    """Handler decorator: every exception leaves as the Flight error of its kind, and lines
    logged while the handler runs carry the call's request id (:func:`.logs.call_scope`)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _, context = _call_info(args)
        ids = requestlog.call_ids(context) if context is not None else None
        with logs.call_scope(ids) if ids is not None else contextlib.nullcontext():
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - this is the one place that maps them all
                raise convert(exc, args) from None

    return wrapper  # type: ignore[return-value]


def guarded(items: Iterator[Any], *args: Any) -> Iterator[Any]:
    """Map errors raised while a lazy stream is being consumed (do_get generators); ``args``
    are the handler's ``(server, context)``."""
    try:
        yield from items
    except Exception as exc:  # noqa: BLE001
        raise convert(exc, args) from None
