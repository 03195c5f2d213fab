"""One mapping from the project's errors onto Flight error kinds, applied in every handler.

pyarrow sends a Python ``KeyError``/``ValueError`` raised by a handler as NOT_FOUND /
INVALID_ARGUMENT, but appends the server's Python traceback to the message the client sees.
A service must not leak that, so request errors travel as ``FlightServerError`` whose
message starts with the kind (``[INVALID_ARGUMENT] ...``) and whose ``extra_info`` carries
it as JSON (``{"kind": ..., "retryable": ...}``) for programs; authentication, permission,
cancellation and internal failures use pyarrow's dedicated classes (their own gRPC codes).
Unexpected exceptions become INTERNAL with a short message; the traceback goes to the log.
"""

from __future__ import annotations

import functools
import json
import logging
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

log = logging.getLogger("lance_flight")

NOT_FOUND = "NOT_FOUND"
INVALID_ARGUMENT = "INVALID_ARGUMENT"
ALREADY_EXISTS = "ALREADY_EXISTS"
ABORTED = "ABORTED"  # a commit lost to a concurrent, incompatible one
UNIMPLEMENTED = "UNIMPLEMENTED"
INTERNAL = "INTERNAL"


class ServiceError(LanceError):
    """An error of the service itself (not of the format layer), with its Flight kind."""

    kind = INVALID_ARGUMENT


class BadRequest(ServiceError, InvalidArgumentError):
    """A descriptor, ticket, command or action body that is not acceptable."""

    kind = INVALID_ARGUMENT


class NotFound(ServiceError):
    """An unknown dataset, version, tag or action."""

    kind = NOT_FOUND


class AlreadyExists(ServiceError):
    kind = ALREADY_EXISTS


class Unimplemented(ServiceError):
    kind = UNIMPLEMENTED


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
    return INTERNAL


def to_flight_error(exc: BaseException) -> BaseException:
    """The exception a handler raises to the client for ``exc``."""
    if isinstance(exc, (flight.FlightError, pa.ArrowCancelled)):
        return exc
    kind = kind_of(exc)
    if isinstance(exc, LanceError):
        message = str(exc)
    else:  # a bug: keep the client's message short, the log gets the traceback
        log.error("internal error: %s", exc, exc_info=exc)
        message = f"internal error ({type(exc).__name__})"
    retryable = bool(getattr(exc, "retryable", False))
    extra = json.dumps({"kind": kind, "retryable": retryable}).encode()
    text = f"[{kind}] {message}"
    if kind == INTERNAL:
        return flight.FlightInternalError(text, extra)
    return flight.FlightServerError(text, extra)


def error_kind(exc: flight.FlightError) -> str | None:
    """Client side: the kind a server error carries (None when it carries none)."""
    try:
        return json.loads(exc.extra_info or b"{}").get("kind")
    except (ValueError, AttributeError):
        return None


F = TypeVar("F", bound=Callable[..., Any])


def flight_errors(fn: F) -> F:
    """Handler decorator: every exception leaves as the Flight error of its kind."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - this is the one place that maps them all
            raise to_flight_error(exc) from None

    return wrapper  # type: ignore[return-value]


def guarded(items: Iterator[Any]) -> Iterator[Any]:
    """Map errors raised while a lazy stream is being consumed (do_get generators)."""
    try:
        yield from items
    except Exception as exc:  # noqa: BLE001
        raise to_flight_error(exc) from None
