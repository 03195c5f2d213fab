"""The Lance Namespace operations over the catalog's root: namespaces, tables, versions,
tags, data and schema, each returning the spec's response (a dict, a bare count, or an Arrow
stream for QueryTable).

Handlers run on worker threads and use the format layer's public dataset API (``dataset``,
``write_dataset``, ``delete``, ``restore``, tags, ``add_columns``/``drop_columns``, the
scanner with its ``nearest`` search, ``alter_columns``, ``update``, ``merge_insert``,
``create_index``/``drop_index``/``describe_indices``); what it lacks (scalar and full-text
indexes) is answered as unsupported.  Files are reached only through :mod:`lance_format.storage`, so a
root on an object store serves the same way as a local one.  Each handler checks the
caller's grant (:mod:`flight_server.permissions`) before it looks at a table: a name outside
the grant is PERMISSION_DENIED whether or not it exists, and listings leave it out.
"""

from __future__ import annotations

import datetime
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import pyarrow as pa
from lance_namespace.errors import ErrorCode

from lance_format import Dataset, layout, storage, tags, write_dataset
from lance_format.errors import (
    IndexExistsError,
    IndexNotFoundError,
    InvalidArgumentError,
    LanceIOError,
    ObjectNotFoundError,
)
from lance_format.vector import index_metric, vector_details

from .. import permissions
from ..catalog import Catalog
from ..errors import NotFound
from ..limits import DEFAULT_MAX_BATCH_BYTES
from .errors import RestError, unsupported
from .naming import NAMESPACE_MARKER, TABLE_SUFFIX, Layout, TableRef, is_dataset, join_id
from .schema_json import schema_to_json, type_from_json

MAX_PAGE = 10_000  # entries per list page when the client sets no limit
BUILT_INDEXES = ("IVF_FLAT", "IVF_PQ")
# CreateTableIndex tuning fields: accepted at the values the build uses
TUNING_DEFAULTS = {"sample_rate": 256, "max_iterations": 50}
# CreateTableIndex fields of index types not built here (HNSW, full-text)
UNBUILT_FIELDS = (
    "m",
    "ef_construction",
    "with_position",
    "base_tokenizer",
    "language",
    "max_token_length",
    "lower_case",
    "stem",
    "remove_stop_words",
    "ascii_folding",
)
# QueryTable vector options this server does not implement
UNSEARCHED_FIELDS = ("lower_bound", "upper_bound", "ef", "minimum_nprobes", "maximum_nprobes")
DEFAULT_VECTOR_COLUMN = "vector"  # pylance's, when a query names no column


@dataclass
class Call:
    """One request: the route's identifier, query parameters, parsed JSON body (a
    ``lance_namespace`` request model) or spooled Arrow body."""

    ids: list[str]
    delimiter: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    model: Any = None
    data: IO[bytes] | None = None
    # every value of a parameter the spec lets repeat (MergeInsert's composite ``on`` key)
    repeated: dict[str, list[str]] = field(default_factory=dict)
    index_name: str | None = None  # the route's ``{index_name}``

    def flag(self, name: str, default: bool = False) -> bool:
        value = self.params.get(name)
        if value is None:
            got = getattr(self.model, name, None) if self.model is not None else None
            return default if got is None else bool(got)
        if value.lower() in ("true", "1"):
            return True
        if value.lower() in ("false", "0"):
            return False
        raise RestError(
            ErrorCode.INVALID_INPUT, f"query parameter {name}={value!r} is not a boolean"
        )

    def int_param(self, name: str) -> int | None:
        value = self.params.get(name)
        if value is None or value == "":
            return None
        try:
            number = int(value)
        except ValueError:
            raise RestError(
                ErrorCode.INVALID_INPUT, f"{name}={value!r} is not an integer"
            ) from None
        if number < 0:
            raise RestError(ErrorCode.INVALID_INPUT, f"{name} must not be negative")
        return number


@dataclass
class ArrowResult:
    """A QueryTable answer: the schema and the batches, streamed as an Arrow IPC file."""

    schema: pa.Schema
    batches: Iterator[pa.RecordBatch]


def _mode(text: str | None, allowed: tuple[str, ...], default: str) -> str:
    """A mode in any of the spec's spellings (``ExistOk``, ``exist_ok``, ``existok``)."""
    if text is None or text == "":
        return default
    norm = text.replace("_", "").lower()
    if norm not in allowed:
        raise RestError(
            ErrorCode.INVALID_INPUT, f"unsupported mode {text!r} (one of {', '.join(allowed)})"
        )
    return norm


def _page(names: list[str], call: Call) -> dict:
    """One page of a sorted listing: names after the page token, at most ``limit``; the
    token of the next page is the last name sent (absent on the last page)."""
    limit, token = _paging(call)
    if token:
        names = [n for n in names if n > token]
    limit = MAX_PAGE if limit is None or limit == 0 else min(limit, MAX_PAGE)
    page = names[:limit]
    out: dict = {"items": page}
    if len(names) > limit:
        out["page_token"] = page[-1]
    return out


def _paging(call: Call) -> tuple[int | None, str | None]:
    limit = call.int_param("limit")
    if limit is None and call.model is not None:
        limit = getattr(call.model, "limit", None)
    token = call.params.get("page_token")
    if token is None and call.model is not None:
        token = getattr(call.model, "page_token", None)
    return limit, token


class Operations:
    """Every supported operation, by its spec name in snake case."""

    def __init__(self, catalog: Catalog, max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES):
        self.catalog = catalog
        self.layout = Layout(catalog)
        self.max_batch_bytes = max_batch_bytes

    # -- namespaces -------------------------------------------------------------------------

    def create_namespace(self, call: Call) -> dict:
        ns = call.ids
        req = call.model
        mode = _mode(getattr(req, "mode", None), ("create", "existok", "overwrite"), "create")
        if getattr(req, "properties", None):
            raise unsupported("namespace properties")
        if not ns:
            raise RestError(ErrorCode.NAMESPACE_ALREADY_EXISTS, "the root namespace always exists")
        path = self.layout.namespace_path(ns)
        permissions.check_write("/".join(ns))
        self.layout.require_namespace(ns[:-1])
        if is_dataset(path):
            raise RestError(
                ErrorCode.INVALID_INPUT, f"{join_id(ns)!r} names a table, not a namespace"
            )
        if self.layout.namespace_exists(ns) or not storage.put_if_not_exists(
            storage.join(path, NAMESPACE_MARKER), b""
        ):
            if mode == "create":
                raise RestError(
                    ErrorCode.NAMESPACE_ALREADY_EXISTS, f"namespace {join_id(ns)!r} already exists"
                )
            if mode == "overwrite" and _contents(path):
                raise RestError(
                    ErrorCode.NAMESPACE_NOT_EMPTY,
                    f"namespace {join_id(ns)!r} is not empty: drop its tables first",
                )
        return {}

    def _visible_namespace(self, ns: list[str]) -> None:
        """Refuse a namespace that can hold nothing the caller may read (the root never)."""
        if ns:
            self.layout.namespace_path(ns)  # a well-formed name first
            permissions.check_visible("/".join(ns))

    def list_namespaces(self, call: Call) -> dict:
        self._visible_namespace(call.ids)
        names = self.layout.child_namespaces(call.ids)
        page = _page(names, call)
        return {"namespaces": page.pop("items"), **page}

    def describe_namespace(self, call: Call) -> dict:
        self._visible_namespace(call.ids)
        self.layout.require_namespace(call.ids)
        return {}

    def namespace_exists(self, call: Call) -> None:
        self._visible_namespace(call.ids)
        self.layout.require_namespace(call.ids)

    def drop_namespace(self, call: Call) -> dict:
        ns = call.ids
        req = call.model
        mode = _mode(getattr(req, "mode", None), ("fail", "skip"), "fail")
        behavior = _mode(getattr(req, "behavior", None), ("restrict", "cascade"), "restrict")
        if not ns:
            raise RestError(ErrorCode.INVALID_INPUT, "the root namespace cannot be dropped")
        self.layout.namespace_path(ns)
        permissions.check_write("/".join(ns))
        if not self.layout.namespace_exists(ns):
            if mode == "skip":
                return {}
            self.layout.require_namespace(ns)
        path = self.layout.namespace_path(ns)
        if behavior == "cascade":
            self._drop_contents(ns)
        entries = _contents(path)
        if entries:
            raise RestError(
                ErrorCode.NAMESPACE_NOT_EMPTY,
                f"namespace {join_id(ns)!r} is not empty ({len(entries)} entries)",
            )
        storage.delete(storage.join(path, NAMESPACE_MARKER), missing_ok=True)
        storage.prune(path)  # the empty local directory (object stores have none)
        return {}

    def _drop_contents(self, ns: list[str]) -> None:
        """Cascade: every table of ``ns`` dropped, every child namespace emptied and removed
        (other files stay, and keep the namespace from being dropped)."""
        for child in self.layout.child_namespaces(ns):
            self._drop_contents(ns + [child])
            path = self.layout.namespace_path(ns + [child])
            if not _contents(path):  # else reported by the caller's emptiness check
                storage.delete(storage.join(path, NAMESPACE_MARKER), missing_ok=True)
                storage.prune(path)
        for table in self.layout.tables(ns):
            _drop_directory(self.layout.existing_table(ns + [table]))

    # -- table metadata ---------------------------------------------------------------------

    def list_tables(self, call: Call) -> dict:
        self._visible_namespace(call.ids)
        names = self.layout.tables(call.ids)
        page = _page(names, call)
        return {"tables": page.pop("items"), **page}

    def list_all_tables(self, call: Call) -> dict:
        names = self.layout.all_tables(call.params.get("delimiter"))
        page = _page(names, call)
        return {"tables": page.pop("items"), **page}

    def _table(self, ids: list[str], *, write: bool = False) -> TableRef:
        """The existing table ``ids`` names, if the caller's grant allows reading (or, with
        ``write``, changing) it: checked before its existence, so a refusal tells nothing."""
        ref = self.layout.table(ids)
        (permissions.check_write if write else permissions.check_read)(ref.name)
        return self.layout.existing(ref)

    def writable_new_table(self, ids: list[str]) -> TableRef:
        """Where CreateTable puts ``ids``, if the caller may write there (checked before an
        upload is read)."""
        ref = self.layout.table(ids)
        permissions.check_write(ref.name)
        return ref

    def _open(
        self, ref: TableRef, version: int | str | None = None, *, to_change: bool = False
    ) -> Dataset:
        """The table's dataset; ``to_change`` gives a private object to write through."""
        opener = self.catalog.open_to_change if to_change else self.catalog.open
        try:
            return opener(ref.name, version)
        except NotFound:
            if not is_dataset(ref.path):
                raise RestError(
                    ErrorCode.TABLE_NOT_FOUND, f"table {join_id(ref.id)!r} does not exist"
                ) from None
            raise RestError(
                ErrorCode.TABLE_VERSION_NOT_FOUND,
                f"table {join_id(ref.id)!r} has no version {version}",
            ) from None

    def describe_table(self, call: Call) -> dict:
        ref = self._table(call.ids)
        out: dict = {
            "table": ref.id[-1],
            "namespace": ref.namespace,
            "location": ref.path,
            "table_uri": _uri(ref.path),
        }
        version = getattr(call.model, "version", None)
        if call.flag("load_detailed_metadata") or version is not None:
            ds = self._open(ref, version)
            if call.flag("load_detailed_metadata"):
                out["version"] = ds.version
                out["schema"] = schema_to_json(ds.schema)
                out["metadata"] = _stats(ds)
                out["is_only_declared"] = False
        return out

    def table_exists(self, call: Call) -> None:
        self._table(call.ids)

    def drop_table(self, call: Call) -> dict:
        ref = self._table(call.ids, write=True)
        _drop_directory(ref)
        return {"id": ref.id, "location": ref.path}

    def rename_table(self, call: Call) -> dict:
        """Move the table's directory (atomic: one rename within the root)."""
        ref = self._table(call.ids, write=True)
        req = call.model
        namespace = ref.namespace if req.new_namespace_id is None else list(req.new_namespace_id)
        target = self.writable_new_table(namespace + [req.new_table_name])
        self.layout.require_namespace(target.namespace)
        for taken in (target.path, target.path.removesuffix(TABLE_SUFFIX)):
            if storage.exists(taken) or storage.is_dir(taken):
                raise RestError(
                    ErrorCode.TABLE_ALREADY_EXISTS, f"table {join_id(target.id)!r} already exists"
                )
        try:
            storage.move_tree(ref.path, target.path, last=layout.VERSIONS_DIR)
        except ObjectNotFoundError:
            raise RestError(
                ErrorCode.TABLE_NOT_FOUND, f"table {join_id(ref.id)!r} does not exist"
            ) from None
        return {}

    # -- versions ---------------------------------------------------------------------------

    def list_table_versions(self, call: Call) -> dict:
        ref = self._table(call.ids)
        entries = layout.list_versions(ref.path)
        descending = call.flag("descending")
        if descending:
            entries = entries[::-1]
        limit, token = _paging(call)
        if token:
            try:
                after = int(token)
            except ValueError:
                raise RestError(ErrorCode.INVALID_INPUT, f"bad page_token {token!r}") from None
            entries = [
                e for e in entries if (e.version < after if descending else e.version > after)
            ]
        limit = MAX_PAGE if not limit else min(limit, MAX_PAGE)
        out: dict = {"versions": [_version_entry(e) for e in entries[:limit]]}
        if len(entries) > limit:
            out["page_token"] = str(entries[limit - 1].version)
        return out

    def describe_table_version(self, call: Call) -> dict:
        ref = self._table(call.ids)
        version = getattr(call.model, "version", None)
        ds = self._open(ref, version)
        entry = layout.find_version(ref.path, ds.version)
        return {"version": _version_entry(entry)}

    def restore_table(self, call: Call) -> dict:
        ref = self._table(call.ids, write=True)
        target = self._open(ref, call.model.version, to_change=True)
        target.restore()
        return {"transaction_id": _transaction_id(target)}

    # -- tags -------------------------------------------------------------------------------

    def list_table_tags(self, call: Call) -> dict:
        ref = self._table(call.ids)
        found = tags.read_all_tags(ref.path)
        page = _page(sorted(found), call)
        out: dict = {"tags": {n: _tag_json(found[n]) for n in page.pop("items")}}
        out.update(page)
        return out

    def get_table_tag_version(self, call: Call) -> dict:
        ref = self._table(call.ids)
        return {"version": self._tag(ref, call.model.tag).version}

    def _tag(self, ref: TableRef, name: str) -> tags.TagContents:
        tags.check_valid_tag(name)
        if not storage.exists(layout.tag_path(ref.path, name)):
            raise RestError(
                ErrorCode.TABLE_TAG_NOT_FOUND, f"table {join_id(ref.id)!r} has no tag {name!r}"
            )
        return tags.read_tag(ref.path, name)

    def _check_version(self, ref: TableRef, version: int) -> None:
        if not any(e.version == version for e in layout.list_versions(ref.path)):
            raise RestError(
                ErrorCode.TABLE_VERSION_NOT_FOUND,
                f"table {join_id(ref.id)!r} has no version {version}",
            )

    def create_table_tag(self, call: Call) -> dict:
        ref = self._table(call.ids, write=True)
        name, version = call.model.tag, call.model.version
        tags.check_valid_tag(name)
        if storage.exists(layout.tag_path(ref.path, name)):
            raise RestError(ErrorCode.TABLE_TAG_ALREADY_EXISTS, f"tag {name!r} already exists")
        self._check_version(ref, version)
        try:
            tags.create_tag(ref.path, name, version)
        except InvalidArgumentError:
            if storage.exists(layout.tag_path(ref.path, name)):  # lost a race for the name
                raise RestError(
                    ErrorCode.TABLE_TAG_ALREADY_EXISTS, f"tag {name!r} already exists"
                ) from None
            raise
        return {}

    def update_table_tag(self, call: Call) -> dict:
        ref = self._table(call.ids, write=True)
        self._tag(ref, call.model.tag)
        self._check_version(ref, call.model.version)
        tags.update_tag(ref.path, call.model.tag, call.model.version)
        return {}

    def delete_table_tag(self, call: Call) -> dict:
        ref = self._table(call.ids, write=True)
        self._tag(ref, call.model.tag)
        try:
            tags.delete_tag(ref.path, call.model.tag)
        except InvalidArgumentError:
            raise RestError(ErrorCode.TABLE_TAG_NOT_FOUND, f"no tag {call.model.tag!r}") from None
        return {}

    # -- data -------------------------------------------------------------------------------

    def create_table(self, call: Call) -> dict:
        mode = _mode(call.params.get("mode"), ("create", "existok", "overwrite"), "create")
        ref = self.writable_new_table(call.ids)
        self.layout.require_namespace(ref.namespace)
        exists = is_dataset(ref.path)
        if exists and mode == "create":
            raise RestError(
                ErrorCode.TABLE_ALREADY_EXISTS, f"table {join_id(ref.id)!r} already exists"
            )
        if exists and mode == "existok":
            return {"location": ref.path}
        counted = _Counted(_ipc_reader(call.data, "CreateTable"), self.max_batch_bytes)
        try:
            ds = write_dataset(counted.reader(), ref.path, mode="overwrite" if exists else "create")
        except InvalidArgumentError as exc:
            if "already exists" in exc.problem:
                raise RestError(
                    ErrorCode.TABLE_ALREADY_EXISTS, f"table {join_id(ref.id)!r} already exists"
                ) from None
            raise
        return {"location": ref.path, "version": ds.version}

    def insert_into_table(self, call: Call) -> dict:
        mode = _mode(call.params.get("mode"), ("append", "overwrite"), "append")
        ref = self._table(call.ids, write=True)
        reader = _ipc_reader(call.data, "InsertIntoTable")
        counted = _Counted(reader, self.max_batch_bytes)
        ds = write_dataset(counted.reader(), ref.path, mode=mode)
        return {"num_inserted_rows": counted.rows, "version": ds.version}

    def delete_from_table(self, call: Call) -> dict:
        ref = self._table(call.ids, write=True)
        predicate = call.model.predicate
        if not predicate or not predicate.strip():
            raise RestError(ErrorCode.INVALID_INPUT, "DeleteFromTable needs a predicate")
        ds = self._open(ref, to_change=True)
        ds.delete(predicate)
        return {"version": ds.version}

    def update_table(self, call: Call) -> dict:
        ref = self._table(call.ids, write=True)
        pairs = call.model.updates or []
        if not pairs:
            raise RestError(ErrorCode.INVALID_INPUT, "UpdateTable needs at least one update")
        values = dict(pairs)
        if len(values) != len(pairs):
            raise RestError(ErrorCode.INVALID_INPUT, "UpdateTable sets a column twice")
        ds = self._open(ref, to_change=True)
        result = ds.update(values, call.model.predicate or None)
        return {"updated_rows": result["num_rows_updated"], "version": ds.version}

    def merge_insert_into_table(self, call: Call) -> dict:
        ref = self._table(call.ids, write=True)
        on = [key for key in call.repeated.get("on", []) if key]
        if not on:
            raise RestError(ErrorCode.INVALID_INPUT, "MergeInsertIntoTable needs an 'on' column")
        matched = call.flag("when_matched_update_all")
        insert = call.flag("when_not_matched_insert_all")
        by_source = call.flag("when_not_matched_by_source_delete")
        matched_filter = call.params.get("when_matched_update_all_filt") or None
        source_filter = call.params.get("when_not_matched_by_source_delete_filt") or None
        # use_index only lets a server look keys up in a scalar index; the join here reads
        # the keys either way, so both answers are the same rows
        call.flag("use_index", True)
        timeout = _duration(call.params.get("timeout"))
        counted = _Counted(_ipc_reader(call.data, "MergeInsertIntoTable"), self.max_batch_bytes)
        ds = self._open(ref, to_change=True)
        builder = ds.merge_insert(on)
        if timeout is not None:  # the time spent retrying after conflicts, as pylance's
            builder = builder.retry_timeout(timeout)
        if matched or matched_filter:
            builder = builder.when_matched_update_all(matched_filter)
        if insert:
            builder = builder.when_not_matched_insert_all()
        if by_source or source_filter:
            builder = builder.when_not_matched_by_source_delete(source_filter)
        stats = builder.execute(counted.reader())
        return {
            "num_inserted_rows": stats["num_inserted_rows"],
            "num_updated_rows": stats["num_updated_rows"],
            "num_deleted_rows": stats["num_deleted_rows"],
            "version": ds.version,
        }

    def count_table_rows(self, call: Call) -> int:
        ref = self._table(call.ids)
        ds = self._open(ref, call.model.version)
        return ds.count_rows(call.model.predicate or None)

    def query_table(self, call: Call) -> ArrowResult:
        req = call.model
        ref = self._table(call.ids)
        if req.full_text_query is not None:
            raise unsupported("full-text search (QueryTable with full_text_query)")
        ds = self._open(ref, req.version)
        columns, renames = None, None
        if req.columns is not None:
            if req.columns.column_aliases:
                renames = dict(req.columns.column_aliases)
                columns = list(renames.values())
            elif req.columns.column_names is not None:
                columns = list(req.columns.column_names)
        search = _nearest(req)
        if search is None:
            scanner = ds.scanner(
                columns=columns,
                filter=req.filter or None,
                limit=req.k or None,
                offset=req.offset or None,
                with_row_id=bool(req.with_row_id),
            )
        else:
            scanner = ds.scanner(
                columns=columns,
                filter=req.filter or None,
                offset=req.offset or None,
                with_row_id=bool(req.with_row_id),
                prefilter=bool(req.prefilter),
                fast_search=bool(req.fast_search),
                nearest=search,
            )
        schema = scanner.schema
        batches = scanner.to_batches()
        if renames:
            extra = [n for n in schema.names[len(renames) :]]  # _distance, _rowid
            names = list(renames.keys()) + extra
            schema = pa.schema(
                [f.with_name(n) for f, n in zip(schema, names, strict=True)],
                metadata=schema.metadata,
            )
            batches = (pa.RecordBatch.from_arrays(b.columns, schema=schema) for b in batches)
        return ArrowResult(schema, batches)

    # -- indexes ----------------------------------------------------------------------------

    def create_table_index(self, call: Call) -> dict:
        req = call.model
        ref = self._table(call.ids, write=True)
        index_type = req.index_type.upper()
        if index_type not in BUILT_INDEXES:
            raise unsupported(
                f"{req.index_type} indexes", f"the server builds {', '.join(BUILT_INDEXES)}"
            )
        for key, default in TUNING_DEFAULTS.items():
            value = getattr(req, key, None)
            if value is not None and value != default:
                raise unsupported(f"CreateTableIndex with {key}={value}", f"it is {default}")
        given = sorted(k for k in UNBUILT_FIELDS if getattr(req, k, None) is not None)
        if given:
            raise unsupported(f"CreateTableIndex with {', '.join(given)}", "no such index built")
        ds = self._open(ref, to_change=True)
        partitions = req.num_partitions
        if partitions is None and req.target_partition_size is not None:
            partitions = min(max(1, ds.count_rows() // req.target_partition_size), 4096)
        options: dict[str, Any] = {"num_partitions": partitions}
        if req.num_sub_vectors is not None:
            options["num_sub_vectors"] = req.num_sub_vectors
        if req.num_bits is not None:
            options["num_bits"] = req.num_bits
        try:
            new = ds.create_index(
                req.column,
                index_type,
                name=req.name,
                metric=req.distance_type or "l2",
                **options,
            )
        except IndexExistsError as exc:
            raise RestError(ErrorCode.TABLE_INDEX_ALREADY_EXISTS, str(exc)) from None
        return {"transaction_id": _transaction_id(new)}

    def list_table_indices(self, call: Call) -> dict:
        ref = self._table(call.ids)
        ds = self._open(ref, getattr(call.model, "version", None))
        entries = {e["name"]: e for e in ds.describe_indices()}
        listed = {e["name"]: e for e in ds.list_indices()}
        total = ds.count_rows()
        page = _page(sorted(entries), call)
        metas = {m.name: m for m in ds.manifest.indices}
        out: dict = {
            "indexes": [
                _index_content(entries[n], listed[n], vector_details(metas[n]), total)
                for n in page["items"]
            ]
        }
        if "page_token" in page:
            out["page_token"] = page["page_token"]
        return out

    def describe_table_index_stats(self, call: Call) -> dict:
        ref = self._table(call.ids)
        ds = self._open(ref, getattr(call.model, "version", None))
        name = call.index_name
        entry = next((e for e in ds.describe_indices() if e["name"] == name), None)
        if entry is None:
            raise RestError(ErrorCode.TABLE_INDEX_NOT_FOUND, f"no index named {name!r}")
        out = {
            "index_type": entry["index_type"],
            "num_indexed_rows": entry["num_rows_indexed"],
            "num_unindexed_rows": ds.count_rows() - entry["num_rows_indexed"],
            "num_indices": entry["num_segments"],
        }
        meta = next(m for m in ds.manifest.indices if m.name == name)
        if meta.index_details.type_url.endswith("VectorIndexDetails"):
            out["distance_type"] = index_metric(ds.uri, meta)
        return out

    def drop_table_index(self, call: Call) -> dict:
        ref = self._table(call.ids, write=True)
        ds = self._open(ref, to_change=True)
        assert call.index_name is not None  # the route's {index_name}
        try:
            ds.drop_index(call.index_name)  # in place
        except IndexNotFoundError as exc:
            raise RestError(ErrorCode.TABLE_INDEX_NOT_FOUND, str(exc)) from None
        return {"transaction_id": _transaction_id(ds)}

    # -- schema -----------------------------------------------------------------------------

    def alter_table_add_columns(self, call: Call) -> dict:
        ref = self._table(call.ids, write=True)
        transforms = {}
        for entry in call.model.new_columns:
            if (
                entry.computed is not None
                or entry.virtual_column is not None
                or not entry.expression
            ):
                raise unsupported(
                    "AlterTableAddColumns without an expression (computed or virtual columns)"
                )
            transforms[entry.name] = entry.expression
        ds = self._open(ref, to_change=True)
        ds.add_columns(transforms)
        return {"version": ds.version}

    def alter_table_alter_columns(self, call: Call) -> dict:
        ref = self._table(call.ids, write=True)
        changes = []
        for entry in call.model.alterations:
            if entry.virtual_column is not None:
                raise unsupported("AlterTableAlterColumns changing a virtual column")
            change = {"path": entry.path, "name": entry.rename, "nullable": entry.nullable}
            if entry.data_type is not None:  # a cast: the column's data is rewritten
                change["data_type"] = type_from_json(entry.data_type)
            changes.append(change)
        ds = self._open(ref, to_change=True)
        ds.alter_columns(*changes)
        return {"version": ds.version}

    def alter_table_drop_columns(self, call: Call) -> dict:
        ref = self._table(call.ids, write=True)
        ds = self._open(ref, to_change=True)
        names = {f.name for f in ds.schema}
        missing = [c for c in call.model.columns if c not in names]
        if missing:
            raise RestError(
                ErrorCode.TABLE_COLUMN_NOT_FOUND,
                f"table {join_id(ref.id)!r} has no column {missing[0]!r}",
            )
        ds.drop_columns(list(call.model.columns))
        return {"version": ds.version}


def _drop_directory(ref: TableRef) -> None:
    """The manifests first, so the table stops being a dataset at once (no reader finds
    a version whose files are going), then everything else under it."""
    if not storage.delete_prefix(storage.join(ref.path, layout.VERSIONS_DIR)) and not is_dataset(
        ref.path
    ):
        raise RestError(ErrorCode.TABLE_NOT_FOUND, f"table {join_id(ref.id)!r} does not exist")
    storage.delete_prefix(ref.path)
    storage.prune(ref.path)


def _contents(path: str) -> list[str]:
    """What a namespace holds besides its marker."""
    return [n for n in storage.list_names(path) if n != NAMESPACE_MARKER]


def _nearest(req: Any) -> dict | None:
    """QueryTable's vector fields as a ``nearest`` search (None without a vector); the
    options this server does not implement are refused, never ignored."""
    vector = req.vector
    if vector is None or (vector.single_vector is None and vector.multi_vector is None):
        return None
    if vector.multi_vector:
        raise unsupported("multi-vector queries (QueryTable with multi_vector)")
    given = [k for k in UNSEARCHED_FIELDS if getattr(req, k, None) is not None]
    if given:
        raise unsupported(f"QueryTable with {', '.join(given)}")
    return {
        "column": req.vector_column or DEFAULT_VECTOR_COLUMN,
        "q": list(vector.single_vector),
        "k": req.k,
        "metric": req.distance_type or None,
        "nprobes": req.nprobes or None,
        "refine_factor": req.refine_factor or None,
        "use_index": not req.bypass_vector_index,
    }


def _index_content(entry: dict, listed: dict, details: dict, total_rows: int) -> dict:
    """An ``IndexContent`` of ListTableIndices, as pylance's adapter fills it."""
    created = [s["created_at"] for s in entry["segments"] if s["created_at"] is not None]
    return {
        "index_name": entry["name"],
        "index_uuid": listed["uuid"],
        "columns": entry["field_names"],
        "status": "SUCCEEDED",
        "index_type": entry["index_type"],
        "type_url": entry["type_url"],
        "num_indexed_rows": entry["num_rows_indexed"],
        "num_unindexed_rows": total_rows - entry["num_rows_indexed"],
        "size_bytes": entry["total_size_bytes"],
        "num_segments": entry["num_segments"],
        **({"created_at": min(created).isoformat()} if created else {}),
        "index_version": entry["segments"][0]["index_version"] or 0,
        "index_details": json.dumps(details, separators=(",", ":")),
    }


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(text: str | None) -> datetime.timedelta | None:
    """A duration as the spec writes it (``30s``, ``5m``, ``250ms``, ``1h``)."""
    if text is None or text == "":
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text)
    if match is None:
        raise RestError(
            ErrorCode.INVALID_INPUT, f"timeout {text!r} is not a duration like '30s' or '5m'"
        )
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"]
    return datetime.timedelta(seconds=seconds)


def _uri(path: str) -> str:
    return "file://" + path if path.startswith("/") else path


def _stats(ds: Dataset) -> dict[str, str]:
    """The table statistics pylance puts in DescribeTable's ``metadata``."""
    frags = ds.manifest.fragments
    data_files = sum(len(f.files) for f in frags)
    size = 0
    for f in frags:
        for df in f.files:
            size += df.file_size_bytes or _size(storage.join(ds.uri, layout.DATA_DIR, df.path))
    deletions = [f for f in frags if f.HasField("deletion_file")]
    deleted = sum(f.deletion_file.num_deleted_rows for f in deletions)
    physical = sum(f.physical_rows for f in frags)
    return {
        "total_rows": str(physical - deleted),
        "total_data_files": str(data_files),
        "total_deletion_files": str(len(deletions)),
        "total_fragments": str(len(frags)),
        "total_files_size": str(size),
        "total_data_file_rows": str(physical),
        "total_deletion_file_rows": str(deleted),
    }


def _size(path: str) -> int:
    try:
        return storage.file_size(path)
    except LanceIOError:
        return 0


def _version_entry(entry: layout.VersionEntry) -> dict:
    """A ``TableVersion`` as pylance lists it, from the manifest file as an object store
    sees it: its key (no leading slash, no scheme or bucket), size, ETag and last-modified
    time, from one HEAD through the storage layer."""
    meta = storage.head(entry.path)
    if meta is None:  # removed by a cleanup since the listing
        raise RestError(ErrorCode.TABLE_VERSION_NOT_FOUND, f"version {entry.version} is gone")
    out = {
        "version": entry.version,
        "manifest_path": storage.resolve(entry.path)[1].lstrip("/"),
        "manifest_size": meta.size,
        "timestamp_millis": int(meta.mtime * 1000),
    }
    if meta.e_tag is not None:
        out["e_tag"] = meta.e_tag
    return out


def _transaction_id(ds: Dataset) -> str | None:
    """The uuid of the transaction that made ``ds`` (its file is ``{read}-{uuid}.txn``)."""
    name = ds.manifest.transaction_file
    if not name:
        return None
    stem = storage.basename(name).removesuffix(".txn")
    return stem.split("-", 1)[1] if "-" in stem else stem


def _tag_json(t: tags.TagContents) -> dict:
    out: dict = {"version": t.version, "manifestSize": t.manifest_size}
    if t.branch is not None:
        out["branch"] = t.branch
    return out


def _ipc_reader(data: IO[bytes] | None, operation: str) -> pa.RecordBatchReader:
    if data is None:
        raise RestError(ErrorCode.INVALID_INPUT, f"{operation} needs an Arrow IPC stream body")
    data.seek(0, io.SEEK_END)
    if data.tell() == 0:
        raise RestError(ErrorCode.INVALID_INPUT, f"{operation} needs an Arrow IPC stream body")
    data.seek(0)
    try:
        return pa.ipc.open_stream(pa.PythonFile(data, mode="r"))
    except (pa.ArrowInvalid, OSError) as exc:
        raise RestError(
            ErrorCode.INVALID_INPUT, f"the body is not an Arrow IPC stream: {exc}"
        ) from None


class _Counted:
    """Counts the rows a reader hands on (the insert's ``num_inserted_rows``), turning a
    malformed stream into bad input."""

    def __init__(self, reader: pa.RecordBatchReader, max_batch_bytes: int):
        self._reader = reader
        self._max = max_batch_bytes
        self.rows = 0

    def reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self._reader.schema, self._batches())

    def _batches(self) -> Iterator[pa.RecordBatch]:
        while True:
            try:
                batch = self._reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowInvalid as exc:
                raise RestError(
                    ErrorCode.INVALID_INPUT, f"malformed Arrow IPC stream: {exc}"
                ) from None
            if batch.nbytes > self._max:  # as a Flight put's batch is bounded
                raise RestError(
                    ErrorCode.INVALID_INPUT,
                    f"a record batch of the body holds {batch.nbytes} bytes, over the server's "
                    f"limit of {self._max} bytes: send smaller batches",
                )
            self.rows += batch.num_rows
            yield batch


__all__ = ["ArrowResult", "Call", "Operations"]
