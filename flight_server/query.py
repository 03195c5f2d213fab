"""What a client asks for: descriptors parsed into a validated :class:`Query`.

``FlightDescriptor.for_path(name)`` is the whole dataset at its latest version;
``for_command(json)`` carries a :class:`.wire.Query`, whose model checks every key for type
and range, so a bad request fails before anything is opened, with a message naming the key.
The JSON itself is bounded here (size, nesting) before it is parsed.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pyarrow.flight as flight

from . import wire
from .errors import BadRequest
from .wire import Query

MAX_COMMAND_BYTES = 64 << 20
MAX_JSON_DEPTH = 64  # our commands nest 3 deep; filters travel as text
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')


def load_json(data: bytes | str, what: str) -> Any:
    """JSON a client sent (a command, ticket, handle header, token), or a BadRequest.

    Nesting is bounded (``MAX_JSON_DEPTH``) before parsing: the parser recurses once per
    level, and JSON nested 100k deep would otherwise end in a RecursionError."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc}") from None
    if _nests_deeper(text, MAX_JSON_DEPTH):
        raise BadRequest(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc}") from None


def _nests_deeper(text: str, limit: int) -> bool:
    """Whether ``text``'s arrays and objects nest deeper than ``limit`` (brackets inside
    strings not counted): linear time, no recursion, nothing to do with few brackets."""
    if text.count("[") + text.count("{") <= limit:
        return False
    raw = np.frombuffer(_JSON_STRING.sub("", text).encode("utf-8"), dtype=np.uint8)
    steps = np.zeros(len(raw), dtype=np.int64)
    steps[(raw == ord("[")) | (raw == ord("{"))] = 1
    steps[(raw == ord("]")) | (raw == ord("}"))] = -1
    return int(np.cumsum(steps).max(initial=0)) > limit


def parse_json(data: bytes, what: str) -> dict[str, Any]:
    """A JSON object from a command/body, or a BadRequest saying what is wrong."""
    if len(data) > MAX_COMMAND_BYTES:
        raise BadRequest(f"{what} is larger than {MAX_COMMAND_BYTES} bytes")
    value = load_json(data or b"{}", what)
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def parse_descriptor(descriptor: flight.FlightDescriptor) -> Query:
    if descriptor.descriptor_type == flight.DescriptorType.PATH:
        parts = [p.decode() if isinstance(p, bytes) else p for p in descriptor.path]
        if len(parts) != 1:
            raise BadRequest(f"a path descriptor names one dataset, got {len(parts)} parts")
        return wire.parse(Query, {"dataset": parts[0]}, "the path descriptor")
    return parse_command(parse_json(descriptor.command, "the descriptor command"))


def parse_command(cmd: Any) -> Query:
    """A decoded command as a :class:`.wire.Query`, or a BadRequest naming each wrong key."""
    return wire.parse(Query, cmd, "the command")
