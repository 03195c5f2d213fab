"""The Lance Namespace REST errors: a spec error code, its HTTP status, a JSON body.

The spec's ``ErrorResponse`` is ``{"error": message, "code": n}``; the codes are the ones the
``lance_namespace`` package defines (``ErrorCode``) and the statuses follow the spec's response
table: not-found codes are 404, already-exists and conflicts 409, bad input 400, unsupported
406, auth 401/403, throttling 429, the rest 500.  Errors of the format layer are translated
by :func:`from_exception`, with per-operation hints (an unknown column is
``TableColumnNotFound`` in a query but ``TableSchemaValidationError`` in an insert).
"""

from __future__ import annotations

import logging

import pyarrow.flight as flight
from lance_namespace.errors import ErrorCode

from lance_format.errors import (
    CommitConflictError,
    CorruptFileError,
    InvalidArgumentError,
    LanceError,
    LanceIOError,
    SchemaError,
    UnsupportedError,
    first_line,
)

from .. import errors as service_errors

log = logging.getLogger("lance_flight.rest")

_STATUS: dict[ErrorCode, int] = {
    ErrorCode.UNSUPPORTED: 406,
    ErrorCode.NAMESPACE_NOT_FOUND: 404,
    ErrorCode.NAMESPACE_ALREADY_EXISTS: 409,
    ErrorCode.NAMESPACE_NOT_EMPTY: 409,
    ErrorCode.TABLE_NOT_FOUND: 404,
    ErrorCode.TABLE_ALREADY_EXISTS: 409,
    ErrorCode.TABLE_INDEX_NOT_FOUND: 404,
    ErrorCode.TABLE_INDEX_ALREADY_EXISTS: 409,
    ErrorCode.TABLE_TAG_NOT_FOUND: 404,
    ErrorCode.TABLE_TAG_ALREADY_EXISTS: 409,
    ErrorCode.TRANSACTION_NOT_FOUND: 404,
    ErrorCode.TABLE_VERSION_NOT_FOUND: 404,
    ErrorCode.TABLE_COLUMN_NOT_FOUND: 404,
    ErrorCode.INVALID_INPUT: 400,
    ErrorCode.CONCURRENT_MODIFICATION: 409,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.SERVICE_UNAVAILABLE: 503,
    ErrorCode.INTERNAL: 500,
    ErrorCode.INVALID_TABLE_STATE: 409,
    ErrorCode.TABLE_SCHEMA_VALIDATION_ERROR: 400,
    ErrorCode.THROTTLING: 429,
    ErrorCode.TABLE_BRANCH_NOT_FOUND: 404,
    ErrorCode.TABLE_BRANCH_ALREADY_EXISTS: 409,
}


class RestError(Exception):
    """An error answered as the spec's ``ErrorResponse`` with ``code`` and its HTTP status."""

    def __init__(self, code: ErrorCode, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.retry_after = retry_after  # seconds, sent as ``Retry-After`` (throttling)

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"retry-after": str(self.retry_after)}

    @property
    def status(self) -> int:
        return _STATUS.get(self.code, 500)

    def body(self) -> dict:
        return {"error": self.message, "code": int(self.code)}


def unsupported(operation: str, why: str = "") -> RestError:
    """The spec's answer for an operation this root-confined server does not offer."""
    text = f"{operation} is not supported by this server"
    return RestError(ErrorCode.UNSUPPORTED, f"{text}: {why}" if why else text)


def from_exception(
    exc: BaseException,
    *,
    root: str,
    schema_code: ErrorCode = ErrorCode.TABLE_SCHEMA_VALIDATION_ERROR,
    request_id: str = "",
) -> RestError:
    """The REST error for any exception a handler raised.

    ``schema_code``: what a :class:`SchemaError` means for this operation (an unknown column
    when reading, a mismatched schema when writing).  Messages lose the server's root
    directory, as the Flight errors do; unexpected exceptions are logged with their
    traceback and answered with a short ``Internal`` message.
    """
    if isinstance(exc, RestError):
        return exc
    if isinstance(exc, flight.FlightUnauthenticatedError):
        if getattr(exc, "retry_after", None) is not None:  # a login flood: slowed down
            return RestError(ErrorCode.THROTTLING, first_line(exc), exc.retry_after)
        return RestError(ErrorCode.UNAUTHENTICATED, first_line(exc))
    if isinstance(exc, flight.FlightUnavailableError):
        return RestError(ErrorCode.SERVICE_UNAVAILABLE, first_line(exc))
    if isinstance(exc, flight.FlightUnauthorizedError):
        return RestError(ErrorCode.PERMISSION_DENIED, first_line(exc))
    if not isinstance(exc, LanceError):
        log.error("internal error (request %s): %s", request_id, exc, exc_info=exc)
        return RestError(
            ErrorCode.INTERNAL, f"internal error ({type(exc).__name__}); request id {request_id}"
        )
    message = str(exc).replace(root.rstrip("/") + "/", "")
    if isinstance(exc, CommitConflictError):
        code = ErrorCode.CONCURRENT_MODIFICATION
    elif isinstance(exc, service_errors.NotFound):
        code = ErrorCode.TABLE_NOT_FOUND
    elif isinstance(exc, service_errors.AlreadyExists):
        code = ErrorCode.TABLE_ALREADY_EXISTS
    elif isinstance(exc, (service_errors.Unavailable,)):
        code = ErrorCode.SERVICE_UNAVAILABLE
    elif isinstance(exc, service_errors.ResourceExhausted):
        code = ErrorCode.THROTTLING if exc.retryable else ErrorCode.INVALID_INPUT
    elif isinstance(exc, (service_errors.Unauthenticated,)):
        code = ErrorCode.UNAUTHENTICATED
    elif isinstance(exc, (service_errors.Forbidden,)):
        code = ErrorCode.PERMISSION_DENIED
    elif isinstance(exc, SchemaError):
        code = schema_code
    elif isinstance(exc, (UnsupportedError, service_errors.Unimplemented)):
        code = ErrorCode.UNSUPPORTED
    elif isinstance(exc, (CorruptFileError, LanceIOError)):
        log.error("storage error (request %s): %s", request_id, exc)
        code = ErrorCode.INTERNAL
    elif isinstance(exc, InvalidArgumentError):
        code = ErrorCode.INVALID_INPUT
    else:
        code = ErrorCode.INVALID_INPUT
    return RestError(code, message)
