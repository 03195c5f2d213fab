"""Errors of the Flight SQL adapter, reported with the server's one mapping.

The adapter's errors are the server's kinds (:mod:`flight_server.errors`): a statement the
client must fix is ``INVALID_ARGUMENT`` (:class:`SqlError`, and DuckDB's parser, binder and
conversion errors), an unknown table, version or tag ``NOT_FOUND``, a table that must not
exist yet ``ALREADY_EXISTS``, an unsupported statement (INSERT, transactions, Substrait)
``UNIMPLEMENTED``, a lost commit ``ABORTED``, a statement over the memory limit
``RESOURCE_EXHAUSTED``.  :func:`to_flight` turns any exception leaving a
Flight SQL call into the server's error of that kind (:func:`flight_server.errors.to_flight_error`:
the kind's gRPC code where pyarrow can send it, ``[KIND] message``, no server traceback), so
the ADBC driver raises ProgrammingError for bad SQL (INVALID_ARGUMENT).
"""

from __future__ import annotations

import duckdb
import pyarrow.flight as flight

from flight_server import requestlog
from flight_server.errors import (
    AlreadyExists,
    BadRequest,
    NotFound,
    ResourceExhausted,
    to_flight_error,
)
from lance_format.errors import first_line

__all__ = [
    "AlreadyExistsError",
    "NotFoundError",
    "SqlError",
    "to_flight",
]


class SqlError(BadRequest):
    """The SQL text is wrong: syntax, unknown column or function, wrong parameter count."""


class NotFoundError(NotFound):
    """A table, version, tag or statement that does not exist."""


class AlreadyExistsError(AlreadyExists):
    """A table that must not exist yet (ingest in create mode)."""


# DuckDB errors that describe the statement, not the server: the client's to fix.
_DUCKDB_USER_ERRORS = (
    duckdb.ParserException,
    duckdb.BinderException,
    duckdb.CatalogException,
    duckdb.ConversionException,
    duckdb.InvalidInputException,
    duckdb.OutOfRangeException,
    duckdb.TypeMismatchException,
    duckdb.InvalidTypeException,
    duckdb.PermissionException,
    duckdb.NotImplementedException,
    duckdb.SyntaxException,
    duckdb.ConstraintException,
)


def to_flight(
    error: BaseException,
    *,
    root: str | None = None,
    context: flight.ServerCallContext | None = None,
) -> BaseException:
    """The Flight error to raise to the client for ``error``; ``root`` is cut out of
    messages, ``context`` gives the request id for internal errors."""
    if isinstance(error, duckdb.InterruptException):
        return flight.FlightCancelledError("the query was cancelled")
    if isinstance(error, _DUCKDB_USER_ERRORS):
        error = SqlError(f"SQL error: {first_line(error)}")
    elif isinstance(error, duckdb.OutOfMemoryException):
        error = ResourceExhausted(
            "the statement needs more memory than the server's SQL memory limit allows: "
            + first_line(error)
        )
    rid = requestlog.request_id(context) if context is not None else None
    return to_flight_error(error, root=root, request_id=rid)
