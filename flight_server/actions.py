"""``do_action``: administrative calls, JSON body in, one JSON result out.

Each action is a function ``(server, body) -> result`` registered with its description (what
``list_actions`` shows) and whether it changes data (those need the write role when auth
is on).  Every mutating action commits through the datasets layer's conflict-checked
transactions, so concurrent actions and puts never half-commit.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lance_format import storage
from lance_format.container.describe import describe
from lance_format.errors import LanceError
from lance_format.schema import LanceSchema
from lance_format.table import paths, staging, write

from . import permissions
from .errors import AlreadyExists, BadRequest, NotFound, Unimplemented
from .ingest import check_job_running, staged_schema
from .query import non_negative_int, string_list, version_value

if TYPE_CHECKING:
    from .server import LanceFlightServer

log = logging.getLogger("lance_flight")


@dataclass
class Action:
    fn: Callable[[LanceFlightServer, dict], Any]
    description: str
    mutates: bool = False


ACTIONS: dict[str, Action] = {}


def action(name: str, description: str, mutates: bool = False):
    def register(fn):
        ACTIONS[name] = Action(fn, description, mutates)
        return fn

    return register


def _sql_by_column(body: dict, key: str) -> dict[str, str]:
    """A non-empty object of column name -> SQL expression from the request body."""
    value = body.get(key)
    if (
        not isinstance(value, dict)
        or not value
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    ):
        raise BadRequest(f"'{key}' must be an object of column name -> SQL expression")
    return value


def _name(body: dict) -> str:
    name = body.get("dataset")
    if not isinstance(name, str) or not name:
        raise BadRequest("the action needs 'dataset': the dataset's name")
    return name


def _check_keys(body: dict, allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise BadRequest(f"unknown key(s) {unknown} in the action body; known: {sorted(allowed)}")


def _schema_json(schema: pa.Schema) -> list[dict]:
    return [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema]


@action("list_datasets", "Names of every dataset under the root (paths relative to it).")
def list_datasets(server, body: dict) -> dict:
    _check_keys(body, set())
    return {"datasets": permissions.readable(server.catalog.names())}


@action(
    "dataset_info",
    "Schema, version, versions, fragments, rows, bytes and page encodings of a dataset "
    '({"dataset", "version"?}).',
)
def dataset_info(server, body: dict) -> dict:
    _check_keys(body, {"dataset", "version"})
    ds = server.catalog.open(_name(body), version_value(body))
    return {"dataset": _name(body), **describe_dataset(ds)}


def describe_dataset(ds) -> dict:
    """Everything ``dataset_info`` answers about one version of a dataset (shared with
    ``lance-flight inspect DIR``, so the CLI and the action never disagree)."""
    frags = ds.get_fragments()
    encodings: dict[str, Counter] = {}
    for frag in frags:
        for reader in frag.readers():
            for col, field in zip(reader.metadata.columns, _column_names(reader), strict=False):
                counter = encodings.setdefault(field, Counter())
                counter.update(describe(p.encoding) for p in col.pages)
    return {
        "version": ds.version,
        "latest_version": ds.latest_version,
        "data_storage_version": ds.data_storage_version,
        "schema": _schema_json(ds.schema),
        "rows": sum(f.count_rows() for f in frags),
        "bytes": sum(f.file_size_bytes for frag in frags for f in frag.pb.files),
        "fragments": [
            {
                "id": f.fragment_id,
                "physical_rows": f.physical_rows,
                "rows": f.count_rows(),
                "files": f.data_files(),
            }
            for f in frags
        ],
        "versions": [v["version"] for v in ds.versions()],
        "tags": ds.tags.list(),
        "encodings": {k: dict(v.most_common(5)) for k, v in encodings.items()},
    }


def _column_names(reader) -> list[str]:
    from lance_format.structural.column import leaf_fields
    from lance_format.v2_0.decoder import v20_column_fields

    fields = reader.lance_schema.fields
    cols = v20_column_fields(fields) if reader.version == "2.0" else leaf_fields(fields)
    return [f.name for f in cols]


@action("versions", 'Every version of a dataset with its timestamp ({"dataset"}).')
def versions(server, body: dict) -> dict:
    _check_keys(body, {"dataset"})
    ds = server.catalog.open(_name(body))
    out = [{"version": v["version"], "timestamp": str(v["timestamp"])} for v in ds.versions()]
    return {"dataset": _name(body), "latest": ds.version, "versions": out}


@action("create_tag", 'Tag a version ({"dataset", "tag", "version"?: latest}).', mutates=True)
def create_tag(server, body: dict) -> dict:
    _check_keys(body, {"dataset", "tag", "version"})
    name = _name(body)
    tag = body.get("tag")
    if not isinstance(tag, str) or not tag:
        raise BadRequest("'tag' must be a non-empty string")
    target = server.catalog.open(name, version_value(body))  # NOT_FOUND for a missing one
    if tag in target.tags.list():
        raise AlreadyExists(f"dataset {name!r} already has a tag {tag!r}")
    target.tags.create(tag, target.version)
    return {"dataset": name, "tag": tag, "version": target.tags.get_version(tag)}


@action("delete_tag", 'Delete a tag ({"dataset", "tag"}).', mutates=True)
def delete_tag(server, body: dict) -> dict:
    _check_keys(body, {"dataset", "tag"})
    ds = server.catalog.open(_name(body))
    tag = body.get("tag")
    if not isinstance(tag, str) or tag not in ds.tags.list():
        raise NotFound(f"dataset {_name(body)!r} has no tag {tag!r}")
    ds.tags.delete(tag)
    return {"dataset": _name(body), "deleted": tag}


@action("restore", 'Make an older version the latest ({"dataset", "version"}).', mutates=True)
def restore(server, body: dict) -> dict:
    _check_keys(body, {"dataset", "version"})
    version = version_value(body)
    if version is None:
        raise BadRequest("'version' is required")
    ds = server.catalog.open_to_change(_name(body), version)
    restored = ds.version
    ds.restore()
    return {"dataset": _name(body), "restored": restored, "version": ds.version}


@action("delete", 'Delete the rows matching a SQL filter ({"dataset", "filter"}).', mutates=True)
def delete(server, body: dict) -> dict:
    _check_keys(body, {"dataset", "filter"})
    flt = body.get("filter")
    if not isinstance(flt, str) or not flt.strip():
        raise BadRequest("'filter' must be a non-empty SQL predicate")
    ds = server.catalog.open_to_change(_name(body))
    deleted = ds.delete(flt)["num_deleted_rows"]
    return {"dataset": _name(body), "version": ds.version, "deleted": deleted}


@action(
    "update",
    "Set columns to SQL expressions on the rows matching a filter "
    '({"dataset", "values": {"column": "expr"}, "where"?}).',
    mutates=True,
)
def update(server, body: dict) -> dict:
    _check_keys(body, {"dataset", "values", "where"})
    values = _sql_by_column(body, "values")
    where = body.get("where")
    if where is not None and (not isinstance(where, str) or not where.strip()):
        raise BadRequest("'where' must be a non-empty SQL predicate when given")
    ds = server.catalog.open_to_change(_name(body))
    updated = ds.update(values, where)["num_rows_updated"]
    return {"dataset": _name(body), "version": ds.version, "updated": updated}


@action(
    "add_columns",
    'Add columns computed by SQL expressions ({"dataset", "columns": {"name": "expr"}}).',
    mutates=True,
)
def add_columns(server, body: dict) -> dict:
    _check_keys(body, {"dataset", "columns"})
    cols = _sql_by_column(body, "columns")
    ds = server.catalog.open_to_change(_name(body))
    ds.add_columns(cols)
    return {"dataset": _name(body), "version": ds.version, "schema": _schema_json(ds.schema)}


@action("drop_columns", 'Drop columns ({"dataset", "columns": [...]}).', mutates=True)
def drop_columns(server, body: dict) -> dict:
    _check_keys(body, {"dataset", "columns"})
    cols = string_list(body, "columns")
    if not cols:
        raise BadRequest("'columns' must be a non-empty list of column names")
    ds = server.catalog.open_to_change(_name(body))
    ds.drop_columns(cols)
    return {"dataset": _name(body), "version": ds.version, "schema": _schema_json(ds.schema)}


@action(
    "compact",
    "Rewrite small or heavily deleted fragments "
    '({"dataset", "target_rows_per_fragment"?, "materialize_deletions_threshold"?}).',
    mutates=True,
)
def compact(server, body: dict) -> dict:
    _check_keys(body, {"dataset", "target_rows_per_fragment", "materialize_deletions_threshold"})
    opts: dict[str, Any] = {}
    target = non_negative_int(body, "target_rows_per_fragment", positive=True)
    if target:
        opts["target_rows_per_fragment"] = target
    threshold = body.get("materialize_deletions_threshold")
    if threshold is not None:
        if not isinstance(threshold, (int, float)) or isinstance(threshold, bool):
            raise BadRequest("'materialize_deletions_threshold' must be a number in [0, 1]")
        opts["materialize_deletions_threshold"] = float(threshold)
    ds = server.catalog.open_to_change(_name(body))
    if not hasattr(ds, "compact_files"):
        raise Unimplemented("compaction is not available in this version of the datasets layer")
    m = ds.compact_files(**opts)
    latest = server.catalog.latest_version(_name(body))
    return {"dataset": _name(body), "version": latest, **m.__dict__}


@action(
    "cleanup",
    "Remove old versions and unreferenced files "
    '({"dataset", "older_than_seconds"?: 1209600, "delete_unverified"?: false}).',
    mutates=True,
)
def cleanup(server, body: dict) -> dict:
    _check_keys(body, {"dataset", "older_than_seconds", "delete_unverified"})
    age = body.get("older_than_seconds", 14 * 86400)
    if isinstance(age, bool) or not isinstance(age, (int, float)) or age < 0:
        raise BadRequest("'older_than_seconds' must be a non-negative number")
    unverified = body.get("delete_unverified", False)
    if not isinstance(unverified, bool):
        raise BadRequest("'delete_unverified' must be true or false")
    stats = server.catalog.open(_name(body)).cleanup_old_versions(
        dt.timedelta(seconds=age), delete_unverified=unverified, error_if_tagged_old_versions=False
    )
    return {"dataset": _name(body), **stats.__dict__}


@action(
    "commit_staged",
    "Commit fragments from staged puts in ONE transaction against a pinned version "
    '({"dataset", "fragments": [...], "read_version"?, "mode"?: "append"|"overwrite", '
    '"schema"? (base64 IPC, needed to create or overwrite), "data_storage_version"?, "job"?}). '
    'With "job" (the staged puts\' job): afterwards the job is marked committed (its later '
    "puts are refused) and every file its puts staged that was not committed is removed; "
    "FAILED_PRECONDITION if the job already ended.",
    mutates=True,
)
def commit_staged(server, body: dict) -> dict:
    _check_keys(
        body,
        {"dataset", "fragments", "read_version", "mode", "schema", "data_storage_version", "job"},
    )
    name = _name(body)
    mode = body.get("mode", "append")
    if mode not in ("append", "overwrite"):
        raise BadRequest(f"'mode' must be 'append' or 'overwrite', got {mode!r}")
    root = server.catalog.path_of(name)
    job = _job(body, root)
    if job is not None:
        check_job_running(job)  # an aborted job's files are gone; a committed one is done
    frags = _staged_fragments(body, root)
    exists = server.catalog.exists(name)
    read_version = non_negative_int(body, "read_version")
    if read_version is None:
        read_version = server.catalog.latest_version(name) if exists else 0
    rows = sum(f.physical_rows for f in frags)
    if mode == "append" and exists and not frags:  # nothing to append: no new version
        result = {"dataset": name, "version": read_version, "rows_written": 0, "fragments": 0}
        return _job_committed(job, result)
    if mode == "append" and exists:
        schema, storage = None, server.catalog.open(name).data_storage_version
    else:
        if "schema" not in body:
            raise BadRequest("creating or overwriting a dataset needs 'schema' from the put")
        schema = staged_schema(body["schema"])
        storage = body.get("data_storage_version") or (
            server.catalog.open(name).data_storage_version if exists else "stable"
        )
        if storage not in write.WRITABLE_VERSIONS:
            raise BadRequest(f"'data_storage_version' {storage!r} is not writable")
    _check_file_versions(frags, storage)
    m = staging.commit_staged(
        root,
        frags,
        mode="append" if schema is None else "overwrite",
        read_version=read_version,
        schema=None if schema is None else LanceSchema.from_arrow(schema),
        schema_metadata=None if schema is None else schema.metadata,
        data_storage_version=storage,
    )
    result = {"dataset": name, "version": m.version, "rows_written": rows, "fragments": len(frags)}
    return _job_committed(job, result)


def _job(body: dict, root: str) -> staging.StagingJob | None:
    job = body.get("job")
    if job is None:
        return None
    if not staging.valid_job_id(job):
        raise BadRequest(f"'job' must be {staging.JOB_ID_RULE}, got {job!r}")
    return staging.StagingJob(root, job)


def _job_committed(job: staging.StagingJob | None, result: dict) -> dict:
    """After a successful commit: mark the job committed, so its late puts are refused, then
    remove what its puts staged that the commit left out (attempts whose results the
    driver dropped).  The commit stands whatever happens here: a failure is only logged."""
    if job is None:
        return result
    result["job"] = job.job
    try:
        job.mark(staging.COMMITTED, version=result["version"])
        result["leftovers_removed"] = job.remove_uncommitted()
    except (OSError, LanceError) as exc:
        log.warning("commit_staged: job %s committed; its cleanup failed: %s", job.job, exc)
        result["leftovers_removed"] = None
    return result


def _check_file_versions(frags: list, storage: str) -> None:
    """Staged files must be of the version the commit declares (a manifest saying 2.2 over
    2.1 files would not read)."""
    want = write.WRITABLE_VERSIONS.get(storage)
    for f in frags:
        for df in f.files:
            if want is not None and (df.file_major_version, df.file_minor_version) != want:
                raise BadRequest(
                    f"staged file {df.path!r} is Lance {df.file_major_version}."
                    f"{df.file_minor_version}, the commit is for {storage}"
                )


@action(
    "discard_staged",
    "Remove staged files that will not be committed "
    '({"dataset", "fragments"?: [...], "job"?: at least one of them}). With "job": the job '
    "is marked aborted first (its later puts are refused and remove their own files), then "
    "every file its puts staged is removed; idempotent, an unknown job is just marked. "
    "Files any version references are never removed.",
    mutates=True,
)
def discard_staged(server, body: dict) -> dict:
    _check_keys(body, {"dataset", "fragments", "job"})
    name = _name(body)
    root = server.catalog.path_of(name)
    if "fragments" not in body and "job" not in body:
        raise BadRequest("discard_staged needs 'fragments', 'job' or both")
    job = _job(body, root)
    frags = _staged_fragments(body, root, must_exist=False) if "fragments" in body else []
    if frags:  # named fragments: refuse if any is committed, before removing anything
        referenced = staging.referenced_data_files(root)  # every version's, not the latest's
        for f in frags:
            for df in f.files:
                if df.path in referenced:
                    raise BadRequest(f"data file {df.path!r} is committed: not removed")
    result: dict[str, Any] = {"dataset": name}
    removed = 0
    if job is not None:
        state = job.state()
        if state is None:
            job.mark(staging.ABORTED)  # first: a put still running now fails at its next check
        removed += job.remove_uncommitted()
        result |= {"job": job.job, "job_state": state or "aborted"}
    removed += sum(
        storage.exists(paths.data_file_path(root, df.path)) for f in frags for df in f.files
    )
    write.remove_fragment_files(root, frags)
    if not server.catalog.exists(name):  # staged into a dataset never created
        _remove_empty_dataset_dirs(server.catalog.root, root)
    return {**result, "removed": removed}


def _remove_empty_dataset_dirs(catalog_root: str, root: str) -> None:
    """After a discard in a dataset that has no version: its empty ``data/``, then the
    dataset's directory and its parents while empty (a job's marker keeps them)."""
    storage.prune(root, (paths.DATA_DIR,), stop=catalog_root)


_STAGED_FILE = re.compile(r"^[A-Za-z0-9_-]{1,200}\.lance$")


def _staged_fragments(body: dict, root: str, *, must_exist: bool = True) -> list:
    """The fragments a staged put returned; each data file must be a plain file name that
    exists in the dataset's ``data/`` (a forged path must not make a manifest point
    elsewhere)."""
    raw = body.get("fragments")
    if not isinstance(raw, list) or not all(isinstance(f, str) for f in raw):
        raise BadRequest(
            "'fragments' must be the list of fragment JSON strings staged puts returned"
        )
    try:
        frags = [write.fragment_from_json(f) for f in raw]
    except Exception as exc:  # noqa: BLE001 - any parse failure is the client's input
        raise BadRequest(f"a staged fragment does not parse: {exc}") from None
    for f in frags:
        if not f.files or f.physical_rows <= 0 or f.HasField("deletion_file"):
            raise BadRequest("a staged fragment has no data files, no rows, or deletions")
        for df in f.files:
            if not _STAGED_FILE.match(df.path):
                raise BadRequest(f"data file {df.path!r} is not a staged file name")
            if must_exist and not storage.exists(paths.data_file_path(root, df.path)):
                raise NotFound(f"staged data file {df.path!r} does not exist")
    return frags


@action("cache_stats", "Search-cache hits, misses, entries and bytes; decoded pages in 'pages'.")
def cache_stats(server, body: dict) -> dict:
    _check_keys(body, set())
    return {**server.cache.stats(), "pages": server.cache.pages.stats()}


@action("health", "Liveness: status, datasets, cache, process id.")
def health(server, body: dict) -> dict:
    return {
        "status": "ok",
        "datasets": len(server.catalog.names()),
        "cache": server.cache.stats(),
        "page_cache": server.cache.pages.stats(),
        "pid": os.getpid(),
        "locations": server.locations,
    }
