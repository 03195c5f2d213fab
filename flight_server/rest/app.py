"""The HTTP side of the Lance Namespace REST API: routes, auth, bodies, errors, logs, metrics.

Routes are the spec's (``POST /v1/<object>/{id}/<action>``, the list routes with GET).  A JSON
body is validated with the spec's request model from the ``lance_namespace`` package; an
identifier in the body must match the route's.  Arrow bodies (CreateTable, InsertIntoTable)
are spooled to a temporary file (memory up to a limit, then disk) before a worker thread
writes them, so a slow client never holds a writer; QueryTable's Arrow IPC file is streamed
batch by batch.  With an :class:`~flight_server.auth.Authenticator`, every call needs
``Authorization: Bearer <token>`` or ``x-api-key: <token>`` (or the request body's
``identity``; headers win), and changes need the ``write`` role, as over Flight.  The rest
of Flight's rules hold too: per-dataset grants (:mod:`flight_server.permissions`, installed
around each handler; uploads are refused before their body is read), failed logins counted
and rate-limited (a throttled login is 429 with ``Retry-After``), JSON and token-endpoint
bodies bounded by ``max_message_bytes`` and each record batch of an upload by
``max_batch_bytes``.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs

import pyarrow as pa
import pyarrow.flight as flight
import pydantic
from lance_namespace import (
    AlterTableAddColumnsRequest,
    AlterTableAlterColumnsRequest,
    AlterTableDropColumnsRequest,
    CountTableRowsRequest,
    CreateNamespaceRequest,
    CreateTableIndexRequest,
    CreateTableTagRequest,
    DeleteFromTableRequest,
    DeleteTableTagRequest,
    DescribeNamespaceRequest,
    DescribeTableIndexStatsRequest,
    DescribeTableRequest,
    DescribeTableVersionRequest,
    DropNamespaceRequest,
    DropTableIndexRequest,
    GetTableTagVersionRequest,
    ListTableIndicesRequest,
    NamespaceExistsRequest,
    QueryTableRequest,
    RenameTableRequest,
    RestoreTableRequest,
    TableExistsRequest,
    UpdateTableRequest,
    UpdateTableTagRequest,
)
from lance_namespace.errors import ErrorCode
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lance_format.errors import first_line

from .. import logs, permissions
from ..auth import Authenticator, Identity
from ..context import ServiceContext
from ..logs import REQUEST_ID_HEADER, TRACEPARENT_HEADER, CallIds
from ..metrics import ServerMetrics
from ..permissions import Grants
from .errors import RestError, from_exception, unsupported
from .naming import parse_id
from .operations import ArrowResult, Call, Operations

log = logging.getLogger("flight_server.requests")
SPOOL_IN_MEMORY = 64 << 20  # Arrow bodies beyond this go to a temporary file
DEFAULT_MAX_BODY = 64 << 30
ARROW_STREAM = "application/vnd.apache.arrow.stream"
ARROW_FILE = "application/vnd.apache.arrow.file"

# (method, path, operation, request model or body kind, changes data?)
_NONE, _ARROW = "none", "arrow"
ROUTES: list[tuple[str, str, str, Any, bool]] = [
    ("POST", "/v1/namespace/{id}/create", "create_namespace", CreateNamespaceRequest, True),
    ("GET", "/v1/namespace/{id}/list", "list_namespaces", _NONE, False),
    ("POST", "/v1/namespace/{id}/describe", "describe_namespace", DescribeNamespaceRequest, False),
    ("POST", "/v1/namespace/{id}/drop", "drop_namespace", DropNamespaceRequest, True),
    ("POST", "/v1/namespace/{id}/exists", "namespace_exists", NamespaceExistsRequest, False),
    ("GET", "/v1/namespace/{id}/table/list", "list_tables", _NONE, False),
    ("GET", "/v1/table", "list_all_tables", _NONE, False),
    ("POST", "/v1/table/{id}/describe", "describe_table", DescribeTableRequest, False),
    ("POST", "/v1/table/{id}/exists", "table_exists", TableExistsRequest, False),
    ("POST", "/v1/table/{id}/drop", "drop_table", _NONE, True),
    ("POST", "/v1/table/{id}/restore", "restore_table", RestoreTableRequest, True),
    ("POST", "/v1/table/{id}/rename", "rename_table", RenameTableRequest, True),
    ("POST", "/v1/table/{id}/version/list", "list_table_versions", _NONE, False),
    (
        "POST",
        "/v1/table/{id}/version/describe",
        "describe_table_version",
        DescribeTableVersionRequest,
        False,
    ),
    ("POST", "/v1/table/{id}/tags/list", "list_table_tags", _NONE, False),
    (
        "POST",
        "/v1/table/{id}/tags/version",
        "get_table_tag_version",
        GetTableTagVersionRequest,
        False,
    ),
    ("POST", "/v1/table/{id}/tags/create", "create_table_tag", CreateTableTagRequest, True),
    ("POST", "/v1/table/{id}/tags/delete", "delete_table_tag", DeleteTableTagRequest, True),
    ("POST", "/v1/table/{id}/tags/update", "update_table_tag", UpdateTableTagRequest, True),
    ("POST", "/v1/table/{id}/create", "create_table", _ARROW, True),
    ("POST", "/v1/table/{id}/insert", "insert_into_table", _ARROW, True),
    ("POST", "/v1/table/{id}/delete", "delete_from_table", DeleteFromTableRequest, True),
    ("POST", "/v1/table/{id}/update", "update_table", UpdateTableRequest, True),
    ("POST", "/v1/table/{id}/merge_insert", "merge_insert_into_table", _ARROW, True),
    ("POST", "/v1/table/{id}/count_rows", "count_table_rows", CountTableRowsRequest, False),
    ("POST", "/v1/table/{id}/query", "query_table", QueryTableRequest, False),
    ("POST", "/v1/table/{id}/create_index", "create_table_index", CreateTableIndexRequest, True),
    ("POST", "/v1/table/{id}/index/list", "list_table_indices", ListTableIndicesRequest, False),
    (
        "POST",
        "/v1/table/{id}/index/{index_name}/stats",
        "describe_table_index_stats",
        DescribeTableIndexStatsRequest,
        False,
    ),
    (
        "GET",
        "/v1/table/{id}/index/{index_name}/stats",
        "describe_table_index_stats",
        DescribeTableIndexStatsRequest,
        False,
    ),
    (
        "POST",
        "/v1/table/{id}/index/{index_name}/drop",
        "drop_table_index",
        DropTableIndexRequest,
        True,
    ),
    (
        "POST",
        "/v1/table/{id}/add_columns",
        "alter_table_add_columns",
        AlterTableAddColumnsRequest,
        True,
    ),
    (
        "POST",
        "/v1/table/{id}/alter_columns",
        "alter_table_alter_columns",
        AlterTableAlterColumnsRequest,
        True,
    ),
    (
        "POST",
        "/v1/table/{id}/drop_columns",
        "alter_table_drop_columns",
        AlterTableDropColumnsRequest,
        True,
    ),
]

# the spec's other operations: answered with its Unsupported error (code 0, HTTP 406)
UNSUPPORTED: list[tuple[str, str, str, str]] = [
    (
        "POST",
        "/v1/table/{id}/register",
        "RegisterTable",
        "a table is the directory its name names under the root",
    ),
    (
        "POST",
        "/v1/table/{id}/deregister",
        "DeregisterTable",
        "a table is the directory its name names under the root",
    ),
    ("POST", "/v1/table/{id}/declare", "DeclareTable", ""),
    ("POST", "/v1/table/{id}/backfill_column", "AlterTableBackfillColumns", ""),
    ("POST", "/v1/table/{id}/update_field_metadata", "UpdateFieldMetadata", ""),
    ("POST", "/v1/table/{id}/schema_metadata/update", "UpdateTableSchemaMetadata", ""),
    ("GET", "/v1/table/{id}/stats", "GetTableStats", ""),
    ("POST", "/v1/table/{id}/stats", "GetTableStats", ""),
    ("POST", "/v1/table/{id}/explain_plan", "ExplainTableQueryPlan", ""),
    ("POST", "/v1/table/{id}/analyze_plan", "AnalyzeTableQueryPlan", ""),
    (
        "POST",
        "/v1/table/{id}/create_scalar_index",
        "CreateTableScalarIndex",
        "the server builds vector indexes (IVF_FLAT, IVF_PQ) only",
    ),
    (
        "POST",
        "/v1/table/{id}/version/create",
        "CreateTableVersion",
        "commits go through the server",
    ),
    ("POST", "/v1/table/{id}/version/delete", "BatchDeleteTableVersions", ""),
    ("POST", "/v1/table/version/batch-create", "BatchCreateTableVersions", ""),
    ("POST", "/v1/table/batch-commit", "BatchCommitTables", ""),
    ("POST", "/v1/table/{id}/branches/list", "ListTableBranches", "no branch support"),
    ("POST", "/v1/table/{id}/branches/create", "CreateTableBranch", "no branch support"),
    ("POST", "/v1/table/{id}/branches/delete", "DeleteTableBranch", "no branch support"),
    ("POST", "/v1/transaction/{id}/describe", "DescribeTransaction", ""),
    ("POST", "/v1/transaction/{id}/alter", "AlterTransaction", ""),
    ("POST", "/v1/materialized_view/{id}/create", "CreateMaterializedView", ""),
    ("POST", "/v1/materialized_view/{id}/refresh", "RefreshMaterializedView", ""),
]

# what a SchemaError means per operation: an unknown column when reading or dropping
_COLUMN_NOT_FOUND = {
    "query_table",
    "count_table_rows",
    "delete_from_table",
    "update_table",
    "merge_insert_into_table",
    "alter_table_drop_columns",
    "alter_table_alter_columns",
}


class RestApp:
    """The Starlette application over one service context (its catalog, message limits and
    metrics) and optionally one authenticator."""

    def __init__(
        self,
        context: ServiceContext,
        *,
        authenticator: Authenticator | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY,
    ):
        self.context = context
        self.catalog = context.catalog
        self.limits = context.limits
        self.ops = Operations(self.catalog, self.limits.max_batch_bytes)
        self.authenticator = authenticator
        self.metrics = context.metrics
        self.max_body_bytes = max_body_bytes
        routes = [
            Route(path, self._endpoint(op, kind, write), methods=[method])
            for method, path, op, kind, write in ROUTES
        ]
        routes += [
            Route(path, self._unsupported(name, why), methods=[method])
            for method, path, name, why in UNSUPPORTED
        ]
        routes.append(Route("/oauth/token", self._oauth_token, methods=["POST"]))
        self.app = Starlette(routes=routes)
        self.app.add_exception_handler(404, self._not_found)
        self.app.add_exception_handler(405, self._not_found)

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)

    # -- endpoints --------------------------------------------------------------------------

    def _endpoint(self, op: str, kind: Any, write: bool) -> Callable:
        handler = getattr(self.ops, op)

        async def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            ids = _call_ids(request)
            logs.enter_call(ids)  # this request's task: lines logged while it runs carry them
            rid = ids.request_id
            user, grants = None, None
            spool = None
            try:
                call = Call(
                    ids=parse_id(
                        request.path_params.get("id", "$"), request.query_params.get("delimiter")
                    ),
                    delimiter=request.query_params.get("delimiter"),
                    params=dict(request.query_params),
                    repeated={"on": request.query_params.getlist("on")},
                    index_name=request.path_params.get("index_name"),
                )
                if kind is _ARROW or kind is _NONE:
                    # before reading a byte of the body: no upload without credentials
                    user, grants = self._authenticate(request, None, write)
                    if kind is _ARROW:
                        if op == "create_table":  # nor without the grant to write there
                            await run_in_threadpool(
                                _scoped, user, grants, self.ops.writable_new_table, call.ids
                            )
                        spool = await self._spool(request)
                        call.data = spool
                else:  # a small JSON body, whose ``identity`` may carry the credentials
                    call.model = await _json_model(request, kind, self.limits.max_message_bytes)
                    user, grants = self._authenticate(request, call.model.identity, write)
                    _check_body_id(call.model, call.ids)
                if call.params.get("branch") or getattr(call.model, "branch", None):
                    raise unsupported("branches", "only the main history is served")
                result = await run_in_threadpool(_scoped, user, grants, handler, call)
                response = self._respond(result, spool)
                self._done(request, op, ids, user, started, response.status_code, None)
            except Exception as exc:  # noqa: BLE001 - every error becomes the spec's response
                schema_code = (
                    ErrorCode.TABLE_COLUMN_NOT_FOUND
                    if op in _COLUMN_NOT_FOUND
                    else ErrorCode.TABLE_SCHEMA_VALIDATION_ERROR
                )
                err = from_exception(
                    exc, root=self.catalog.root, schema_code=schema_code, request_id=rid
                )
                response = JSONResponse(err.body(), status_code=err.status, headers=err.headers())
                self._done(request, op, ids, user, started, err.status, err)
            finally:
                if spool is not None:  # written by now: only QueryTable streams, from no body
                    spool.close()
            response.headers[REQUEST_ID_HEADER] = rid
            return response

        return endpoint

    def _unsupported(self, name: str, why: str) -> Callable:
        async def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            ids = _call_ids(request)
            logs.enter_call(ids)  # this request's task: lines logged while it runs carry them
            rid = ids.request_id
            try:
                user, _ = self._authenticate(request, None, False)
                err = unsupported(name, why)
            except Exception as exc:  # noqa: BLE001
                user, err = None, from_exception(exc, root=self.catalog.root, request_id=rid)
            self._done(request, name, ids, user, started, err.status, err)
            return JSONResponse(
                err.body(),
                status_code=err.status,
                headers={REQUEST_ID_HEADER: rid, **err.headers()},
            )

        return endpoint

    async def _oauth_token(self, request: Request) -> Response:
        """The spec's OAuth2 client-credentials flow: a user of the users file trades its
        name and password (form fields ``client_id``/``client_secret``, or HTTP Basic) for
        the same signed bearer token the Flight handshake issues."""
        started = time.perf_counter()
        ids = _call_ids(request)
        logs.enter_call(ids)

        def refuse(status: int, error: str, text: str, wait: int | None = None) -> Response:
            code = ErrorCode.THROTTLING if status == 429 else ErrorCode.UNAUTHENTICATED
            self._done(request, "oauth_token", ids, None, started, status, RestError(code, text))
            body = {"error": error, "error_description": text}
            headers = {"cache-control": "no-store"}
            if wait is not None:
                headers["retry-after"] = str(wait)
            return JSONResponse(body, status_code=status, headers=headers)

        if self.authenticator is None or not self.authenticator.has_users:
            return refuse(400, "unsupported_grant_type", "password logins are not enabled")
        try:
            raw = await _bounded_body(request, self.limits.max_message_bytes)
        except RestError as exc:
            return refuse(400, "invalid_request", exc.message)
        form = {k: v[0] for k, v in parse_qs(raw.decode("utf-8", "replace")).items()}
        if form.get("grant_type") != "client_credentials":
            return refuse(400, "unsupported_grant_type", "grant_type must be client_credentials")
        user, password = form.get("client_id"), form.get("client_secret")
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("basic "):
            try:
                decoded = base64.b64decode(auth[6:].strip(), validate=True).decode("utf-8")
            except (ValueError, UnicodeError):
                return refuse(401, "invalid_client", "malformed Basic credentials")
            user, _, password = decoded.partition(":")
        if not user or password is None:
            return refuse(401, "invalid_client", "client_id and client_secret are required")
        try:
            identity = await run_in_threadpool(self.authenticator.check_password, user, password)
        except Exception as exc:  # noqa: BLE001 - a wrong password, whatever the class
            wait = getattr(exc, "retry_after", None)
            if wait is not None:  # the login limits of the Flight handshake, as HTTP's 429
                return refuse(429, "slow_down", first_line(exc), wait)
            if isinstance(exc, flight.FlightUnavailableError):
                return refuse(503, "temporarily_unavailable", first_line(exc))
            return refuse(401, "invalid_client", "invalid user name or password")
        token = self.authenticator.issue_token(identity)
        self._done(request, "oauth_token", ids, identity.user, started, 200, None)
        body = {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": int(self.authenticator.token_ttl),
        }
        return JSONResponse(body, headers={"cache-control": "no-store"})

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        err = RestError(ErrorCode.INVALID_INPUT, f"no route {request.method} {request.url.path}")
        return JSONResponse(err.body(), status_code=404)

    # -- pieces -----------------------------------------------------------------------------

    def _respond(self, result: Any, spool: Any) -> Response:
        if result is None:
            return Response(status_code=200)
        if isinstance(result, ArrowResult):
            return StreamingResponse(_ipc_file(result, self.metrics), media_type=ARROW_FILE)
        if self.metrics is not None and spool is not None and isinstance(result, dict):
            spool.seek(0, 2)
            self.metrics.record_written(result.get("num_inserted_rows") or 0, spool.tell())
        return JSONResponse(result)  # a dict, or CountTableRows' bare integer

    def _authenticate(
        self, request: Request, body_identity: Any, write: bool
    ) -> tuple[str | None, Grants | None]:
        """The caller's user name and grant (None, None without auth); a bad bearer token
        counts as a failed login, as over Flight."""
        if self.authenticator is None:
            return None, None
        token = None
        auth = request.headers.get("authorization")
        if auth:
            scheme, _, credentials = auth.strip().partition(" ")
            if scheme.lower() != "bearer" or not credentials.strip():
                raise RestError(
                    ErrorCode.UNAUTHENTICATED,
                    "unsupported authorization scheme: send 'Authorization: Bearer <token>' or 'x-api-key'",
                )
            token = credentials.strip()
        elif request.headers.get("x-api-key"):
            token = request.headers["x-api-key"].strip()
        elif body_identity is not None:
            token = body_identity.auth_token or body_identity.api_key
        if not token:
            raise RestError(
                ErrorCode.UNAUTHENTICATED,
                "authentication required: send 'Authorization: Bearer <token>' or 'x-api-key: <token>'",
            )
        try:
            identity: Identity = self.authenticator.verify_token(token)
        except flight.FlightUnauthenticatedError as exc:
            if not getattr(exc, "expired", False):
                claimed = self.authenticator.claimed_user({"authorization": [f"Bearer {token}"]})
                self.authenticator.limiter.failed(claimed, password=False, how="bearer (REST)")
            raise
        if write and identity.role != "write":
            raise RestError(
                ErrorCode.PERMISSION_DENIED,
                f"user {identity.user!r} has read-only access; this call needs the write role",
            )
        return identity.user, self.authenticator.grants_of(identity)

    async def _spool(self, request: Request):
        """The request body in a temporary file (in memory up to a limit)."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise RestError(
                ErrorCode.INVALID_INPUT, f"the body exceeds {self.max_body_bytes} bytes"
            )
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)
        total = 0
        try:
            async for chunk in request.stream():
                total += len(chunk)
                if total > self.max_body_bytes:
                    raise RestError(
                        ErrorCode.INVALID_INPUT, f"the body exceeds {self.max_body_bytes} bytes"
                    )
                spool.write(chunk)
        except BaseException:
            spool.close()
            raise
        spool.seek(0)
        return spool

    def _done(self, request, op, ids: CallIds, user, started, status, err) -> None:
        seconds = time.perf_counter() - started
        code = "OK" if err is None else err.code.name
        if self.metrics is not None:
            self.metrics.record_request(f"rest.{op}", code, seconds)
        record = {
            **ids.fields(),
            "method": f"rest.{op}",
            "peer": f"{request.client.host}:{request.client.port}" if request.client else None,
            "user": user,
            "status": code,
            "http_status": status,
            "duration_ms": round(seconds * 1000.0, 3),
            "path": request.url.path,
        }
        if err is not None:
            record["error"] = err.message[:300]
        level = logging.INFO if err is None else logging.WARNING
        log.log(level, "rest.%s %s", op, code, extra={"fields": record})


def _call_ids(request: Request) -> CallIds:
    """The call's request id (the client's ``x-request-id`` when sane) and trace context."""
    return logs.call_ids(
        request.headers.get(REQUEST_ID_HEADER), request.headers.get(TRACEPARENT_HEADER)
    )


def _scoped(user: str | None, grants: Grants | None, fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` under the caller's grant (on the worker thread that runs it)."""
    with permissions.scope(user, grants):
        return fn(*args)


async def _bounded_body(request: Request, limit: int) -> bytes:
    """The whole (small) body, refused once it passes ``limit`` bytes: by its declared
    ``Content-Length`` before a byte is read, else while it arrives."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RestError(ErrorCode.INVALID_INPUT, f"the body exceeds the limit of {limit} bytes")
    parts, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise RestError(ErrorCode.INVALID_INPUT, f"the body exceeds the limit of {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


async def _json_model(request: Request, model: Any, limit: int) -> Any:
    body = await _bounded_body(request, limit)
    try:
        obj = json.loads(body) if body.strip() else {}
    except ValueError as exc:
        raise RestError(ErrorCode.INVALID_INPUT, f"the body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise RestError(ErrorCode.INVALID_INPUT, "the body must be a JSON object")
    try:
        return model.from_dict(obj)
    except (pydantic.ValidationError, ValueError, TypeError) as exc:
        raise RestError(
            ErrorCode.INVALID_INPUT, f"invalid {model.__name__}: {_short(exc)}"
        ) from None


def _short(exc: Exception) -> str:
    if isinstance(exc, pydantic.ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        )
    return str(exc)


def _check_body_id(model: Any, ids: list[str]) -> None:
    body_id = getattr(model, "id", None)
    if body_id is not None and list(body_id) != ids:
        raise RestError(
            ErrorCode.INVALID_INPUT, f"the body names {list(body_id)}, the route names {ids}"
        )


class _Chunks(io.RawIOBase):
    """A write-only file handing out what was written so far (the IPC writer asks ``tell``
    for its block offsets, so the position counts every byte ever written)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.position = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        chunk = bytes(data)
        self.parts.append(chunk)
        self.position += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self.position

    def take(self) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        return out


def _ipc_file(result: ArrowResult, metrics: ServerMetrics | None = None) -> Iterator[bytes]:
    """The Arrow IPC file of a query, produced batch by batch (run on a worker thread)."""
    sink = _Chunks()
    rows = 0
    with pa.ipc.new_file(pa.PythonFile(sink, mode="w"), result.schema) as writer:
        yield sink.take()
        for batch in result.batches:
            writer.write_batch(batch)
            rows += batch.num_rows
            yield sink.take()
    yield sink.take()
    if metrics is not None:
        metrics.record_served(rows, sink.position)
