"""Flight SQL on the wire: messages packed in ``google.protobuf.Any``.

Descriptors (``FlightDescriptor.cmd``), tickets and action bodies carry a serialised ``Any``
whose type URL is ``type.googleapis.com/arrow.flight.protocol.sql.<Message>``.  This module
recognises those bytes (:func:`is_flight_sql`), decodes them into our generated messages
(:func:`unpack`) and encodes replies (:func:`pack`).  Bytes that are not an ``Any`` of a
Flight SQL message (the server's own JSON commands, plain paths) are left to the server.
"""

from __future__ import annotations

from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message

from lance_format.errors import InvalidArgumentError

from . import flight_sql_pb2 as pb

__all__ = [
    "ACTION_TYPES",
    "COMMANDS",
    "METADATA_COMMANDS",
    "TYPE_URL_PREFIX",
    "is_flight_sql",
    "message_name",
    "pack",
    "unpack",
]

PACKAGE = "arrow.flight.protocol.sql"
TYPE_URL_PREFIX = f"type.googleapis.com/{PACKAGE}."

#: The catalog (metadata) commands: each answers one result table.
METADATA_COMMANDS: tuple[type[Message], ...] = (
    pb.CommandGetSqlInfo,
    pb.CommandGetXdbcTypeInfo,
    pb.CommandGetCatalogs,
    pb.CommandGetDbSchemas,
    pb.CommandGetTables,
    pb.CommandGetTableTypes,
    pb.CommandGetPrimaryKeys,
    pb.CommandGetExportedKeys,
    pb.CommandGetImportedKeys,
    pb.CommandGetCrossReference,
)

#: Messages that may arrive Any-packed in a descriptor, a ticket or an action body.
_PACKED: tuple[type[Message], ...] = (
    *METADATA_COMMANDS,
    pb.CommandStatementQuery,
    pb.CommandStatementSubstraitPlan,
    pb.CommandPreparedStatementQuery,
    pb.CommandStatementUpdate,
    pb.CommandPreparedStatementUpdate,
    pb.CommandStatementIngest,
    pb.TicketStatementQuery,
    pb.ActionCreatePreparedStatementRequest,
    pb.ActionCreatePreparedSubstraitPlanRequest,
    pb.ActionClosePreparedStatementRequest,
    pb.ActionBeginTransactionRequest,
    pb.ActionBeginSavepointRequest,
    pb.ActionEndTransactionRequest,
    pb.ActionEndSavepointRequest,
    pb.ActionCancelQueryRequest,
)

#: The same, by message name (what an Any's type URL ends with).
COMMANDS: dict[str, type[Message]] = {cls.DESCRIPTOR.name: cls for cls in _PACKED}

#: Flight SQL action types (Action.type) and what they do; CancelFlightInfo is Flight's own
#: cancellation action, answered here for Flight SQL tickets.
ACTION_TYPES: dict[str, str] = {
    "CreatePreparedStatement": "Flight SQL: prepare a SQL statement (self-contained handle)",
    "ClosePreparedStatement": "Flight SQL: release a prepared statement (nothing is held)",
    "CreatePreparedSubstraitPlan": "Flight SQL: not supported (no Substrait)",
    "BeginTransaction": "Flight SQL: not supported (every statement autocommits)",
    "EndTransaction": "Flight SQL: not supported (every statement autocommits)",
    "BeginSavepoint": "Flight SQL: not supported (no transactions)",
    "EndSavepoint": "Flight SQL: not supported (no transactions)",
    "CancelQuery": "Flight SQL (deprecated): cancel a query's running result streams",
    "CancelFlightInfo": "Cancel the running result streams of a Flight SQL FlightInfo",
}


def _parse_any(data: bytes) -> any_pb2.Any | None:
    if not data:
        return None
    wrapper = any_pb2.Any()
    try:
        wrapper.ParseFromString(bytes(data))
    except (DecodeError, ValueError, TypeError):
        return None
    if not wrapper.type_url.startswith(TYPE_URL_PREFIX):
        return None
    return wrapper


def message_name(data: bytes) -> str | None:
    """The Flight SQL message name an Any holds, or None if the bytes are not one."""
    wrapper = _parse_any(data)
    return None if wrapper is None else wrapper.type_url[len(TYPE_URL_PREFIX) :]


def is_flight_sql(data: bytes) -> bool:
    """Whether ``data`` is a serialised Any of a Flight SQL message this server knows."""
    return message_name(data) in COMMANDS


def unpack(data: bytes) -> Message:
    """Decode an Any-packed Flight SQL message; bad bytes are an invalid-argument error."""
    wrapper = _parse_any(data)
    if wrapper is None:
        raise InvalidArgumentError("not a Flight SQL command (an Any of arrow.flight.protocol.sql)")
    name = wrapper.type_url[len(TYPE_URL_PREFIX) :]
    cls = COMMANDS.get(name)
    if cls is None:
        raise InvalidArgumentError(f"unknown Flight SQL message {name!r}")
    msg = cls()
    try:
        msg.ParseFromString(wrapper.value)
    except DecodeError as e:
        raise InvalidArgumentError(f"malformed Flight SQL {name}: {e}") from None
    return msg


def pack(msg: Message) -> bytes:
    """Serialise ``msg`` wrapped in an Any with the Flight SQL type URL."""
    wrapper = any_pb2.Any(
        type_url=TYPE_URL_PREFIX + msg.DESCRIPTOR.name, value=msg.SerializeToString()
    )
    return wrapper.SerializeToString()
