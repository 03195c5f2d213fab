"""``do_action``: administrative calls, JSON body in, one JSON result out.

Each action is a function ``(context, body) -> result`` (:class:`.context.ServiceContext`) registered with its description (what
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
from typing import Any

import pyarrow as pa
from pydantic import BaseModel

from lance_format import layout, staging, storage
from lance_format.errors import IndexExistsError, IndexNotFoundError, LanceError
from lance_format.schema import LanceSchema
from lance_format.version import DEFAULT_VERSION, LanceFileVersion, writable

from . import permissions, wire
from .context import ServiceContext
from .errors import AlreadyExists, BadRequest, NotFound
from .ingest import check_job_running, staged_schema

log = logging.getLogger("lance_flight")


@dataclass
class Action:
    fn: Callable[[ServiceContext, Any], Any]
    description: str
    mutates: bool = False
    body: type[BaseModel] = wire.NoBody  # the body's model (:data:`.wire.ACTION_BODIES`)


ACTIONS: dict[str, Action] = {}


def action(name: str, description: str, mutates: bool = False):
    def register(fn):
        ACTIONS[name] = Action(fn, description, mutates, wire.ACTION_BODIES[name])
        return fn

    return register


def _schema_json(schema: pa.Schema) -> list[dict]:
    return [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema]


@action("list_datasets", "Names of every dataset under the root (paths relative to it).")
def list_datasets(ctx: ServiceContext, body: wire.NoBody) -> dict:
    return {"datasets": permissions.readable(ctx.catalog.names())}


@action(
    "dataset_info",
    "Schema, version, versions, fragments, rows, bytes and page encodings of a dataset "
    '({"dataset", "version"?}).',
)
def dataset_info(ctx: ServiceContext, body: wire.DatasetVersionBody) -> dict:
    ds = ctx.catalog.open(body.dataset, body.version)
    return {"dataset": body.dataset, **describe_dataset(ds)}


def describe_dataset(ds) -> dict:
    """Everything ``dataset_info`` answers about one version of a dataset (shared with
    ``lance-flight inspect DIR``, so the CLI and the action never disagree)."""
    frags = ds.get_fragments()
    encodings: dict[str, Counter] = {}
    for frag in frags:
        for reader in frag.readers():
            for field, pages in reader.page_encodings():
                if field is not None:
                    encodings.setdefault(field, Counter()).update(pages)
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
                "files": [d.path for d in f.data_files()],
            }
            for f in frags
        ],
        "versions": [v["version"] for v in ds.versions()],
        "tags": ds.tags.list(),
        "encodings": {k: dict(v.most_common(5)) for k, v in encodings.items()},
    }


@action("versions", 'Every version of a dataset with its timestamp ({"dataset"}).')
def versions(ctx: ServiceContext, body: wire.DatasetBody) -> dict:
    ds = ctx.catalog.open(body.dataset)
    out = [
        {"version": v["version"], "timestamp": str(v["timestamp"].astimezone(dt.UTC))}
        for v in ds.versions()  # naive local times, as pylance's: sent as UTC
    ]
    return {"dataset": body.dataset, "latest": ds.version, "versions": out}


@action("create_tag", 'Tag a version ({"dataset", "tag", "version"?: latest}).', mutates=True)
def create_tag(ctx: ServiceContext, body: wire.CreateTagBody) -> dict:
    name, tag = body.dataset, body.tag
    target = ctx.catalog.open(name, body.version)  # NOT_FOUND for a missing one
    if tag in target.tags.list():
        raise AlreadyExists(f"dataset {name!r} already has a tag {tag!r}")
    target.tags.create(tag, target.version)
    return {"dataset": name, "tag": tag, "version": target.tags.get_version(tag)}


@action("delete_tag", 'Delete a tag ({"dataset", "tag"}).', mutates=True)
def delete_tag(ctx: ServiceContext, body: wire.DeleteTagBody) -> dict:
    ds = ctx.catalog.open(body.dataset)
    tag = body.tag
    if not isinstance(tag, str) or tag not in ds.tags.list():
        raise NotFound(f"dataset {body.dataset!r} has no tag {tag!r}")
    ds.tags.delete(tag)
    return {"dataset": body.dataset, "deleted": tag}


@action("restore", 'Make an older version the latest ({"dataset", "version"}).', mutates=True)
def restore(ctx: ServiceContext, body: wire.RestoreBody) -> dict:
    ds = ctx.catalog.open_to_change(body.dataset, body.version)
    restored = ds.version
    ds.restore()
    return {"dataset": body.dataset, "restored": restored, "version": ds.version}


@action("delete", 'Delete the rows matching a SQL filter ({"dataset", "filter"}).', mutates=True)
def delete(ctx: ServiceContext, body: wire.DeleteBody) -> dict:
    ds = ctx.catalog.open_to_change(body.dataset)
    deleted = ds.delete(body.filter)["num_deleted_rows"]
    return {"dataset": body.dataset, "version": ds.version, "deleted": deleted}


@action(
    "update",
    "Set columns to SQL expressions on the rows matching a filter "
    '({"dataset", "values": {"column": "expr"}, "where"?}).',
    mutates=True,
)
def update(ctx: ServiceContext, body: wire.UpdateBody) -> dict:
    ds = ctx.catalog.open_to_change(body.dataset)
    updated = ds.update(dict(body.values), body.where)["num_rows_updated"]
    return {"dataset": body.dataset, "version": ds.version, "updated": updated}


@action(
    "add_columns",
    'Add columns computed by SQL expressions ({"dataset", "columns": {"name": "expr"}}).',
    mutates=True,
)
def add_columns(ctx: ServiceContext, body: wire.AddColumnsBody) -> dict:
    ds = ctx.catalog.open_to_change(body.dataset)
    ds.add_columns(dict(body.columns))
    return {"dataset": body.dataset, "version": ds.version, "schema": _schema_json(ds.schema)}


@action("drop_columns", 'Drop columns ({"dataset", "columns": [...]}).', mutates=True)
def drop_columns(ctx: ServiceContext, body: wire.DropColumnsBody) -> dict:
    ds = ctx.catalog.open_to_change(body.dataset)
    ds.drop_columns(list(body.columns))
    return {"dataset": body.dataset, "version": ds.version, "schema": _schema_json(ds.schema)}


@action(
    "create_index",
    "Train and commit a vector index "
    '({"dataset", "column", "index_type": "IVF_FLAT"|"IVF_PQ", "name"?, '
    '"metric"?: "l2"|"cosine"|"dot", "replace"?: false, "num_partitions"?, '
    '"num_sub_vectors"? (IVF_PQ), "num_bits"?: 8|4}).',
    mutates=True,
)
def create_index(ctx: ServiceContext, body: wire.CreateIndexBody) -> dict:
    sizes = {
        key: getattr(body, key)
        for key in ("num_partitions", "num_sub_vectors", "num_bits")
        if getattr(body, key) is not None
    }
    ds = ctx.catalog.open_to_change(body.dataset)
    try:
        new = ds.create_index(
            body.column,
            body.index_type,
            name=body.name,
            metric=body.metric or "l2",
            replace=body.replace,
            **sizes,
        )
    except IndexExistsError as exc:
        raise AlreadyExists(str(exc)) from None
    return {
        "dataset": body.dataset,
        "version": new.version,
        "index": body.name or f"{body.column}_idx",
    }


@action("drop_index", 'Remove an index from the next version ({"dataset", "name"}).', mutates=True)
def drop_index(ctx: ServiceContext, body: wire.DropIndexBody) -> dict:
    ds = ctx.catalog.open_to_change(body.dataset)
    try:
        ds.drop_index(body.name)  # in place
    except IndexNotFoundError as exc:
        raise NotFound(str(exc)) from None
    return {"dataset": body.dataset, "version": ds.version, "dropped": body.name}


@action(
    "list_indices",
    'Every index segment of a version, as pylance\'s list_indices ({"dataset", "version"?}).',
)
def list_indices(ctx: ServiceContext, body: wire.DatasetVersionBody) -> dict:
    ds = ctx.catalog.open(body.dataset, body.version)
    return {"dataset": body.dataset, "version": ds.version, "indices": _plain(ds.list_indices())}


@action(
    "describe_indices",
    'One description per index name, as pylance\'s describe_indices ({"dataset", "version"?}).',
)
def describe_indices(ctx: ServiceContext, body: wire.DatasetVersionBody) -> dict:
    ds = ctx.catalog.open(body.dataset, body.version)
    return {
        "dataset": body.dataset,
        "version": ds.version,
        "indices": _plain(ds.describe_indices()),
    }


def _plain(value: Any) -> Any:
    """JSON-ready: sets as sorted lists, datetimes as ISO 8601."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value


@action(
    "compact",
    "Rewrite small or heavily deleted fragments "
    '({"dataset", "target_rows_per_fragment"?, "materialize_deletions_threshold"?}).',
    mutates=True,
)
def compact(ctx: ServiceContext, body: wire.CompactBody) -> dict:
    opts: dict[str, Any] = {}
    if body.target_rows_per_fragment:
        opts["target_rows_per_fragment"] = body.target_rows_per_fragment
    if body.materialize_deletions_threshold is not None:
        opts["materialize_deletions_threshold"] = float(body.materialize_deletions_threshold)
    ds = ctx.catalog.open_to_change(body.dataset)
    m = ds.compact_files(**opts)
    latest = ctx.catalog.latest_version(body.dataset)
    return {"dataset": body.dataset, "version": latest, **m.__dict__}


@action(
    "cleanup",
    "Remove old versions and unreferenced files "
    '({"dataset", "older_than_seconds"?: 1209600, "delete_unverified"?: false}).',
    mutates=True,
)
def cleanup(ctx: ServiceContext, body: wire.CleanupBody) -> dict:
    stats = ctx.catalog.open(body.dataset).cleanup_old_versions(
        dt.timedelta(seconds=body.older_than_seconds),
        delete_unverified=body.delete_unverified,
        error_if_tagged_old_versions=False,
    )
    return {"dataset": body.dataset, **stats.__dict__}


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
def commit_staged(ctx: ServiceContext, body: wire.CommitStagedBody) -> dict:
    name, mode = body.dataset, body.mode
    root = ctx.catalog.path_of(name)
    job = _job(body.job, root)
    if job is not None:
        check_job_running(job)  # an aborted job's files are gone; a committed one is done
    frags = _staged_fragments(body.fragments, root)
    exists = ctx.catalog.exists(name)
    read_version = body.read_version
    if read_version is None:
        read_version = ctx.catalog.latest_version(name) if exists else 0
    rows = sum(f.physical_rows for f in frags)
    if mode == "append" and exists and not frags:  # nothing to append: no new version
        result = {"dataset": name, "version": read_version, "rows_written": 0, "fragments": 0}
        return _job_committed(job, result)
    if mode == "append" and exists:
        schema, storage = None, ctx.catalog.open(name).data_storage_version
    else:
        if body.schema_ is None:
            raise BadRequest("creating or overwriting a dataset needs 'schema' from the put")
        schema = staged_schema(body.schema_)
        storage = (
            writable(body.data_storage_version)  # checked by the body's model
            if body.data_storage_version is not None
            else ctx.catalog.open(name).data_storage_version
            if exists
            else DEFAULT_VERSION
        )
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


def _job(job: str | None, root: str) -> staging.StagingJob | None:
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


def _check_file_versions(frags: list, storage: LanceFileVersion) -> None:
    """Staged files must be of the version the commit declares (a manifest saying 2.2 over
    2.1 files would not read)."""
    want = storage.numbers
    for f in frags:
        for df in f.files:
            if (df.file_major_version, df.file_minor_version) != want:
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
def discard_staged(ctx: ServiceContext, body: wire.DiscardStagedBody) -> dict:
    name = body.dataset
    root = ctx.catalog.path_of(name)
    job = _job(body.job, root)
    frags = _staged_fragments(body.fragments, root, must_exist=False) if body.fragments else []
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
        storage.exists(layout.data_file_path(root, df.path)) for f in frags for df in f.files
    )
    staging.remove_fragment_files(root, frags)
    if not ctx.catalog.exists(name):  # staged into a dataset never created
        _remove_empty_dataset_dirs(ctx.catalog.root, root)
    return {**result, "removed": removed}


def _remove_empty_dataset_dirs(catalog_root: str, root: str) -> None:
    """After a discard in a dataset that has no version: its empty ``data/``, then the
    dataset's directory and its parents while empty (a job's marker keeps them)."""
    storage.prune(root, (layout.DATA_DIR,), stop=catalog_root)


_STAGED_FILE = re.compile(r"^[A-Za-z0-9_-]{1,200}\.lance$")


def _staged_fragments(raw: list[str], root: str, *, must_exist: bool = True) -> list:
    """The fragments a staged put returned; each data file must be a plain file name that
    exists in the dataset's ``data/`` (a forged path must not make a manifest point
    elsewhere)."""
    try:
        frags = [staging.fragment_from_json(f) for f in raw]
    except Exception as exc:  # noqa: BLE001 - any parse failure is the client's input
        raise BadRequest(f"a staged fragment does not parse: {exc}") from None
    for f in frags:
        if not f.files or f.physical_rows <= 0 or f.HasField("deletion_file"):
            raise BadRequest("a staged fragment has no data files, no rows, or deletions")
        for df in f.files:
            if not _STAGED_FILE.match(df.path):
                raise BadRequest(f"data file {df.path!r} is not a staged file name")
            if must_exist and not storage.exists(layout.data_file_path(root, df.path)):
                raise NotFound(f"staged data file {df.path!r} does not exist")
    return frags


@action("cache_stats", "Search-cache hits, misses, entries and bytes; decoded pages in 'pages'.")
def cache_stats(ctx: ServiceContext, body: wire.NoBody) -> dict:
    return {**ctx.cache.stats(), "pages": ctx.cache.page_stats()}


@action("health", "Liveness: status, datasets, cache, read-ahead, process id.")
def health(ctx: ServiceContext, body: wire.AnyBody) -> dict:
    out = {
        "status": "ok",
        "datasets": len(ctx.catalog.names()),
        "cache": ctx.cache.stats(),
        "page_cache": ctx.cache.page_stats(),
        "pid": os.getpid(),
        "locations": ctx.locations,
    }
    if ctx.read_ahead_stats is not None:
        out["read_ahead"] = ctx.read_ahead_stats()
    return out
