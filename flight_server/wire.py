"""The JSON contracts on the wire, as typed models: the server validates with them and the
Spark client (:mod:`flight_server.spark`) builds its requests with them.

* :class:`Query`: the ``get_flight_info``/``get_schema`` command (``for_command(json)``);
* :class:`PutCommand`: the ``do_put`` command;
* the action bodies, one model per ``do_action`` type (:data:`ACTION_BODIES`).

Models are strict (a JSON ``true`` is no integer, ``"5"`` no number) and refuse unknown
keys; :func:`parse` turns a validation failure into a BadRequest (INVALID_ARGUMENT) naming
each wrong key, without pydantic's links.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, TypeVar

import pyarrow.flight as flight
import pydantic
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from lance_format import staging
from lance_format.errors import UnsupportedError
from lance_format.version import writable

from .errors import BadRequest

DEFAULT_SPLIT_ROWS = 1 << 20  # rows per endpoint; a fragment above it is split at pages
DEFAULT_BATCH_SIZE = 64 * 1024
MAX_BATCH_SIZE = 1 << 24
MAX_ROW_IDS = 10_000_000
MAX_INT = (1 << 63) - 1  # counts and offsets; row ids are uint64
MAX_ROW_ID = (1 << 64) - 1
DEFAULT_CLEANUP_AGE = 14 * 86400

Count = Annotated[StrictInt, Field(ge=0, le=MAX_INT)]
Positive = Annotated[StrictInt, Field(ge=1, le=MAX_INT)]
Name = Annotated[StrictStr, Field(min_length=1)]
Predicate = Annotated[StrictStr, Field(min_length=1, pattern=r"\S")]  # not blank
Version = Annotated[StrictInt, Field(ge=1)] | Annotated[StrictStr, Field(min_length=1)]
Number = Annotated[float, Field(strict=True)]


def _writable(value: str) -> str:
    try:
        writable(value)
    except UnsupportedError as exc:
        raise ValueError(exc.problem) from None
    return value


WritableVersion = Annotated[StrictStr, pydantic.AfterValidator(_writable)]
Vector = list[Number]


class Wire(BaseModel):
    """Strict, closed, immutable."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    def to_json(self) -> bytes:
        """The compact JSON a client sends: keys left at their defaults are left out."""
        return self.model_dump_json(exclude_defaults=True).encode()


class Nearest(BaseModel):
    """The shape of a nearest-neighbour search: ``q`` is a vector, a list of vectors (a
    batch of queries), or base64 of little-endian float32; the other keys (column, k,
    metric, nprobes, ...) are checked against the dataset when the query is planned."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    q: StrictStr | Vector | Annotated[list[Vector], Field(min_length=1)]


_NEAREST_SHAPE = (
    "'nearest' needs 'q': a list of numbers, a list of such lists, or base64 little-endian float32"
)


def check_nearest(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` if it has the shape of a search (kept as sent: the scanner takes it)."""
    try:
        Nearest.model_validate(value)
    except pydantic.ValidationError:
        raise ValueError(_NEAREST_SHAPE) from None
    return value


class Query(Wire):
    """What to read: a dataset (at a version), columns, a filter, a window or row ids, or a
    nearest-neighbour search; ``split_rows`` rows per endpoint at most."""

    dataset: Name
    columns: list[StrictStr] | None = None
    filter: Predicate | None = None
    version: Version | None = None
    limit: Count | None = None
    offset: Count | None = None
    with_row_id: StrictBool = False
    row_ids: Annotated[
        list[Annotated[StrictInt, Field(ge=0, le=MAX_ROW_ID)]], Field(max_length=MAX_ROW_IDS)
    ] | None = None  # fmt: skip
    batch_size: Annotated[StrictInt, Field(ge=1, le=MAX_BATCH_SIZE)] = DEFAULT_BATCH_SIZE
    split_rows: Positive = DEFAULT_SPLIT_ROWS
    nearest: Any = None  # a search (a JSON object), checked below
    prefilter: StrictBool = False

    @pydantic.field_validator("nearest")
    @classmethod
    def _nearest(cls, value: Any) -> dict[str, Any] | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ValueError(f"'nearest' must be a JSON object, got {value!r}"[:200])
        return check_nearest(value)

    def with_columns(self, columns: list[str]) -> Query:
        return self.model_copy(update={"columns": list(columns)})

    def command(self) -> bytes:
        """The JSON a client sends as the descriptor's command."""
        return self.to_json()

    def descriptor(self) -> flight.FlightDescriptor:
        return flight.FlightDescriptor.for_command(self.command())

    @pydantic.model_validator(mode="after")
    def _combinations(self) -> Query:
        if self.row_ids is not None:
            if self.filter is not None or self.limit is not None or self.offset is not None:
                raise ValueError("'row_ids' cannot be combined with 'filter', 'limit' or 'offset'")
            if self.nearest is not None:
                raise ValueError("'nearest' cannot be combined with 'row_ids'")
        return self


_MERGE_FIELDS = (
    "on",
    "when_matched_update_all",
    "when_not_matched_insert_all",
    "when_not_matched_by_source_delete",
)


class PutCommand(Wire):
    """A ``do_put`` command: where and how to write the stream."""

    dataset: Name
    mode: Literal["create", "append", "overwrite", "merge"] = "append"
    data_storage_version: WritableVersion | None = None
    max_rows_per_file: Positive | None = None
    idempotency_key: Annotated[StrictStr, Field(min_length=1, max_length=256)] | None = None
    stage: StrictBool = False
    job: Any = None  # checked below, with the rule in the message whatever its type
    # mode "merge" (flight_server.merge_put runs it): the key column(s) and the clauses,
    # true/false or, where pylance takes one, a SQL condition
    on: Name | Annotated[list[Name], Field(min_length=1)] | None = None
    when_matched_update_all: StrictBool | Predicate | None = None
    when_not_matched_insert_all: StrictBool | None = None
    when_not_matched_by_source_delete: StrictBool | Predicate | None = None

    @pydantic.model_validator(mode="after")
    def _merge_keys(self) -> PutCommand:
        given = [k for k in _MERGE_FIELDS if getattr(self, k) is not None]
        if given and self.mode != "merge":
            raise ValueError(f"{given} are options of mode 'merge'")
        if self.mode != "merge":
            return self
        if self.on is None:
            raise ValueError("a merge put needs 'on': the key column name(s)")
        for key in ("idempotency_key", "stage", "job"):
            if getattr(self, key):
                raise ValueError(f"'{key}' cannot be combined with mode 'merge'")
        clauses = (self.when_matched_update_all, self.when_not_matched_insert_all)
        if not any(
            c not in (None, False) for c in (*clauses, self.when_not_matched_by_source_delete)
        ):
            raise ValueError("a merge put needs at least one when_* clause")
        return self

    @property
    def merge_keys(self) -> list[str]:
        """``on`` as a list (a single key may be sent as a string)."""
        return [self.on] if isinstance(self.on, str) else list(self.on or ())

    @pydantic.model_validator(mode="after")
    def _job(self) -> PutCommand:
        if self.job is not None:
            if not self.stage:
                raise ValueError("'job' groups staged puts: it needs \"stage\": true")
            if not staging.valid_job_id(self.job):
                raise ValueError(f"'job' must be {staging.JOB_ID_RULE}, got {self.job!r}")
        return self


class Ticket(Wire):
    """A ``do_get`` ticket: the dataset at a pinned version and what to read (one
    fragment's physical row range, the whole version for limit/offset queries and searches,
    or row ids), self-contained so any server process can redeem it."""

    dataset: StrictStr
    version: Annotated[StrictInt, Field(ge=1, le=MAX_INT)]
    columns: list[StrictStr] | None = None
    filter: StrictStr | None = None
    with_row_id: StrictBool = False
    batch_size: Annotated[StrictInt, Field(ge=1, le=MAX_BATCH_SIZE)] = DEFAULT_BATCH_SIZE
    fragment: Count | None = None  # None: every fragment of the version, in order
    start: Count | None = None  # physical row range inside ``fragment``
    stop: Count | None = None
    limit: Count | None = None
    offset: Count | None = None
    row_ids: Annotated[
        list[Annotated[StrictInt, Field(ge=0, le=MAX_ROW_ID)]], Field(max_length=MAX_ROW_IDS)
    ] | None = None  # fmt: skip
    nearest: dict[StrictStr, Any] | None = None  # a search over the whole version
    prefilter: StrictBool = False

    @pydantic.model_validator(mode="after")
    def _range(self) -> Ticket:
        if (self.start is None) != (self.stop is None):
            raise ValueError("'start' and 'stop' go together")
        if (
            self.start is not None
            and self.stop is not None
            and (self.fragment is None or self.start > self.stop)
        ):
            raise ValueError("a row range needs its fragment and start <= stop")
        return self


# -- action bodies --------------------------------------------------------------------------


class NoBody(Wire):
    pass


class AnyBody(BaseModel):
    """An action that takes whatever it is sent (``health``)."""

    model_config = ConfigDict(extra="allow", frozen=True)


class DatasetBody(Wire):
    dataset: Name


class DatasetVersionBody(DatasetBody):
    version: Version | None = None


class CreateTagBody(DatasetVersionBody):
    tag: Name


class DeleteTagBody(DatasetBody):
    tag: Any = None  # an unknown tag of any shape is NOT_FOUND, checked by the action


class RestoreBody(DatasetBody):
    version: Version


class DeleteBody(DatasetBody):
    filter: Predicate


SqlByColumn = Annotated[dict[StrictStr, StrictStr], Field(min_length=1)]


class UpdateBody(DatasetBody):
    values: SqlByColumn
    where: Predicate | None = None


class AddColumnsBody(DatasetBody):
    columns: SqlByColumn


class DropColumnsBody(DatasetBody):
    columns: Annotated[list[StrictStr], Field(min_length=1)]


class CreateIndexBody(DatasetBody):
    column: Name
    index_type: Name
    name: Name | None = None
    metric: Name | None = None
    replace: StrictBool = False
    num_partitions: Positive | None = None
    num_sub_vectors: Positive | None = None
    num_bits: Positive | None = None


class DropIndexBody(DatasetBody):
    name: Name


class CompactBody(DatasetBody):
    target_rows_per_fragment: Positive | None = None
    materialize_deletions_threshold: Annotated[Number, Field(ge=0, le=1)] | None = None


class CleanupBody(DatasetBody):
    older_than_seconds: Annotated[Number, Field(ge=0)] = DEFAULT_CLEANUP_AGE
    delete_unverified: StrictBool = False


class CommitStagedBody(DatasetBody):
    fragments: list[StrictStr]
    read_version: Count | None = None
    mode: Literal["append", "overwrite"] = "append"
    schema_: StrictStr | None = Field(default=None, alias="schema")
    data_storage_version: WritableVersion | None = None
    job: StrictStr | None = None

    model_config = ConfigDict(populate_by_name=True)


class DiscardStagedBody(DatasetBody):
    fragments: list[StrictStr] | None = None
    job: StrictStr | None = None

    @pydantic.model_validator(mode="after")
    def _something(self) -> DiscardStagedBody:
        if self.fragments is None and self.job is None:
            raise ValueError("discard_staged needs 'fragments', 'job' or both")
        return self


ACTION_BODIES: dict[str, type[BaseModel]] = {
    "list_datasets": NoBody,
    "dataset_info": DatasetVersionBody,
    "versions": DatasetBody,
    "create_tag": CreateTagBody,
    "delete_tag": DeleteTagBody,
    "restore": RestoreBody,
    "delete": DeleteBody,
    "update": UpdateBody,
    "add_columns": AddColumnsBody,
    "drop_columns": DropColumnsBody,
    "create_index": CreateIndexBody,
    "drop_index": DropIndexBody,
    "list_indices": DatasetVersionBody,
    "describe_indices": DatasetVersionBody,
    "compact": CompactBody,
    "cleanup": CleanupBody,
    "commit_staged": CommitStagedBody,
    "discard_staged": DiscardStagedBody,
    "cache_stats": NoBody,
    "health": AnyBody,
}


# -- validation -----------------------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], value: Any, what: str) -> M:
    """``value`` (decoded JSON) as ``model``, or a BadRequest naming each wrong key."""
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object, got {type(value).__name__}")
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        raise BadRequest(f"{what} is invalid: {describe(exc)}") from None


def describe(exc: pydantic.ValidationError, most: int = 5) -> str:
    """The errors of a validation, one clause per key: ``'key': problem`` (the branches of
    a union that all failed joined with "or")."""
    by_key: dict[str, list[str]] = {}
    for error in exc.errors(include_url=False, include_context=False):
        path = []
        for part in error["loc"]:  # a union's branch names ("constrained-int") end the path
            if isinstance(part, int) or str(part).isidentifier():
                path.append(str(part))
            else:
                break
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        elif error["type"] == "missing":
            message = "required"
        messages = by_key.setdefault(".".join(path), [])
        if message not in messages:
            messages.append(message)
    clauses = [
        f"'{key}': {' or '.join(msgs)}" if key else " or ".join(msgs)
        for key, msgs in list(by_key.items())[:most]
    ]
    more = len(by_key) - most
    return "; ".join(clauses) + (f" (and {more} more)" if more > 0 else "")


def loads_nearest(text: str) -> dict[str, Any]:
    """A ``nearest`` search from its JSON text (the Spark option), or a ValueError."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ValueError(
            'option \'nearest\' must be a JSON object such as {"column": "vec", "q": [...], '
            '"k": 10}'
        )
    return check_nearest(value)
