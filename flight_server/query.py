"""What a client asks for: descriptors parsed into a validated :class:`Query`.

``FlightDescriptor.for_path(name)`` is the whole dataset at its latest version;
``for_command(json)`` carries the keys below.  Every key is checked for type and range
here, so a bad request fails before anything is opened, with a message naming the key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow.flight as flight

from .errors import BadRequest

DEFAULT_SPLIT_ROWS = 1 << 20  # rows per endpoint; a fragment above it is split at pages
DEFAULT_BATCH_SIZE = 64 * 1024
MAX_BATCH_SIZE = 1 << 24
MAX_ROW_IDS = 10_000_000
MAX_COMMAND_BYTES = 64 << 20
MAX_JSON_DEPTH = 64  # our commands nest 3 deep; filters travel as text
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
MAX_INT = (1 << 63) - 1  # counts and offsets; row ids are uint64
MAX_ROW_ID = (1 << 64) - 1


@dataclass
class Query:
    dataset: str
    columns: list[str] | None = None
    filter: str | None = None
    version: int | str | None = None
    limit: int | None = None
    offset: int | None = None
    with_row_id: bool = False
    row_ids: list[int] | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    split_rows: int = DEFAULT_SPLIT_ROWS
    nearest: dict[str, Any] | None = None
    prefilter: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


_KEYS = {
    "dataset",
    "columns",
    "filter",
    "version",
    "limit",
    "offset",
    "with_row_id",
    "row_ids",
    "batch_size",
    "split_rows",
    "nearest",
    "prefilter",
}


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


def non_negative_int(obj: dict, key: str, *, positive: bool = False, limit: int | None = None):
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < (1 if positive else 0):
        kind = "a positive" if positive else "a non-negative"
        raise BadRequest(f"{key!r} must be {kind} integer, got {value!r}")
    limit = MAX_INT if limit is None else limit
    if value > limit:
        raise BadRequest(f"{key!r} must be at most {limit}, got {value}")
    return value


def version_value(obj: dict, key: str = "version") -> int | str | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BadRequest(f"{key!r} must be a version number or a tag name, got {value!r}")
    if isinstance(value, int) and value < 1:
        raise BadRequest(f"{key!r} must be >= 1, got {value}")
    if isinstance(value, str) and not value:
        raise BadRequest(f"{key!r} must not be empty")
    return value


def string_list(obj: dict, key: str) -> list[str] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise BadRequest(f"{key!r} must be a list of column names, got {value!r}")
    return value


def nearest_value(obj: dict) -> dict[str, Any] | None:
    """The ``nearest`` object, shape-checked here (its values are checked against the
    dataset's schema when the query is planned): ``q`` is a list of numbers, a list of such
    lists (a batch of queries), or base64 of little-endian float32."""
    value = obj.get("nearest")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest(f"'nearest' must be a JSON object, got {value!r}")
    q = value.get("q")

    def numbers(v: object) -> bool:
        return isinstance(v, list) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in v
        )

    if not (
        isinstance(q, str)
        or numbers(q)
        or (isinstance(q, list) and q and all(numbers(r) for r in q))
    ):
        raise BadRequest(
            "'nearest' needs 'q': a list of numbers, a list of such lists, or base64 "
            "little-endian float32"
        )
    return value


def parse_descriptor(descriptor: flight.FlightDescriptor) -> Query:
    if descriptor.descriptor_type == flight.DescriptorType.PATH:
        parts = [p.decode() if isinstance(p, bytes) else p for p in descriptor.path]
        if len(parts) != 1:
            raise BadRequest(f"a path descriptor names one dataset, got {len(parts)} parts")
        return Query(dataset=parts[0])
    return parse_command(parse_json(descriptor.command, "the descriptor command"))


def parse_command(cmd: dict[str, Any]) -> Query:
    unknown = sorted(set(cmd) - _KEYS)
    if unknown:
        raise BadRequest(f"unknown key(s) {unknown} in the command; known: {sorted(_KEYS)}")
    dataset = cmd.get("dataset")
    if not isinstance(dataset, str) or not dataset:
        raise BadRequest("the command needs 'dataset': the dataset's name")
    flt = cmd.get("filter")
    if flt is not None and (not isinstance(flt, str) or not flt.strip()):
        raise BadRequest(f"'filter' must be a non-empty SQL predicate string, got {flt!r}")
    with_row_id = cmd.get("with_row_id", False)
    if not isinstance(with_row_id, bool):
        raise BadRequest(f"'with_row_id' must be true or false, got {with_row_id!r}")
    row_ids = cmd.get("row_ids")
    if row_ids is not None:
        if (
            not isinstance(row_ids, list)
            or len(row_ids) > MAX_ROW_IDS
            or not all(
                isinstance(r, int) and not isinstance(r, bool) and 0 <= r <= MAX_ROW_ID
                for r in row_ids
            )
        ):
            raise BadRequest(
                f"'row_ids' must be a list of at most {MAX_ROW_IDS} integers in [0, 2**64)"
            )
        if flt is not None or cmd.get("limit") is not None or cmd.get("offset") is not None:
            raise BadRequest("'row_ids' cannot be combined with 'filter', 'limit' or 'offset'")
    nearest = nearest_value(cmd)
    prefilter = cmd.get("prefilter", False)
    if not isinstance(prefilter, bool):
        raise BadRequest(f"'prefilter' must be true or false, got {prefilter!r}")
    if nearest is not None and row_ids is not None:
        raise BadRequest("'nearest' cannot be combined with 'row_ids'")
    return Query(
        dataset=dataset,
        nearest=nearest,
        prefilter=prefilter,
        columns=string_list(cmd, "columns"),
        filter=flt,
        version=version_value(cmd),
        limit=non_negative_int(cmd, "limit"),
        offset=non_negative_int(cmd, "offset"),
        with_row_id=with_row_id,
        row_ids=row_ids,
        batch_size=non_negative_int(cmd, "batch_size", positive=True, limit=MAX_BATCH_SIZE)
        or DEFAULT_BATCH_SIZE,
        split_rows=non_negative_int(cmd, "split_rows", positive=True) or DEFAULT_SPLIT_ROWS,
    )
