"""``Dataset``: one version of a Lance dataset, with pylance's reading API.

``dataset(uri, version=None)`` opens the latest version (found by listing ``_versions/``), a
version number, or a tag.  Everything a version needs is in its manifest.  Reading never
changes a ``Dataset``; a write through it (delete, update, merge_insert, schema changes,
restore, compaction) moves that object to the version it committed, as pylance's do.  A
server that shares opened versions writes through a private copy, so a pinned version stays
pinned.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import os
import warnings
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from .. import storage
from ..blob import DEFAULT_BLOB_BUFFER_SIZE, BlobFile
from ..cache import SearchCache
from ..errors import (
    CorruptFileError,
    DatasetNotFoundError,
    DeletedRowTakeError,
    InvalidArgumentError,
    InvalidDataError,
    RowOutOfRangeError,
    SchemaError,
    SchemaMismatchError,
    UnsupportedError,
)
from ..reader import LanceFileReader
from ..schema import LanceSchema
from ..vector.search import VectorScanner
from ..version import LanceFileVersion
from . import (
    blobs,
    cleanup,
    commit,
    compaction,
    config,
    dataset_write,
    deletion,
    features,
    filters,
    indices,
    lance_operation,
    manifest,
    mutation,
    paths,
    tags,
    udf,
    write,
)
from .fragment import Fragment
from .fragment_metadata import DataFile, FragmentMetadata, as_fragment_pb
from .lance_operation import write_fragments
from .operations import Append, Delete, Merge, Project, Restore
from .scanner import (
    DEFAULT_BATCH_SIZE,
    ROW_ADDRESS,
    ROW_ID,
    ROW_OFFSET,
    SYSTEM_COLUMNS,
    ColumnOrdering,
    Scanner,
    ScanOptions,
)
from .sql import SqlQueryBuilder
from .transaction import new_transaction

DATASET_CACHE_BYTES = 64 << 20  # search cache of a dataset opened without one


def dataset(
    uri: str | os.PathLike[str],
    version: int | str | None = None,
    asof=None,
    block_size: int | None = None,
    commit_lock=None,
    index_cache_size: int | None = None,
    storage_options: dict[str, str] | None = None,
    default_scan_options: dict | None = None,
    metadata_cache_size_bytes: int | None = None,
    index_cache_size_bytes: int | None = None,
    *,
    cache: SearchCache | None = None,
) -> Dataset:
    """Open a dataset at its latest version, a version number or a tag name.

    ``uri`` is a local path (``~`` expands), ``file://``, ``memory://``, ``s3://bucket/path``
    or ``s3+ddb://bucket/path?ddbTableName=T``; ``storage_options`` configure the object
    store with pylance's option names.  As pylance: ``asof`` (a datetime or ISO text) opens
    the latest version committed before it (unless ``version`` is given);
    ``default_scan_options`` are used by every scan of the object; the cache sizes and
    ``block_size`` tune pylance's caches and reads, and change nothing here (``cache``
    is this library's shared cache); a ``commit_lock`` is refused (commits here are
    atomic on the store itself)."""
    if commit_lock is not None:
        raise UnsupportedError("commit_lock is not supported: commits are atomic on the store")
    root = storage.register(uri, storage_options)
    if isinstance(version, str):
        version = tags.resolve_tag(root, version)
    if version is None and asof is not None:
        version = _version_at(root, asof)
    ds = Dataset(root, _resolve(root, version), cache=cache)
    if default_scan_options:
        ds.default_scan_options = dict(default_scan_options)
    return ds


def _version_at(root: str, asof) -> int:
    """The latest version committed before ``asof`` (naive times are local, as pylance's)."""
    import datetime as dt

    when = dt.datetime.fromisoformat(asof) if isinstance(asof, str) else asof
    if hasattr(when, "to_pydatetime"):  # a pandas Timestamp
        when = when.to_pydatetime()
    if not isinstance(when, dt.datetime):
        raise InvalidArgumentError(f"asof must be a datetime or ISO text, got {asof!r}")
    when = when.astimezone()  # a naive time is local
    found = None
    for entry in paths.list_versions(root):
        ts = manifest.read_manifest(entry.path).timestamp
        if ts is not None and ts < when:
            found = entry.version
    if found is None:
        raise InvalidArgumentError(f"{when} is earlier than the first version of {root}")
    return found


def _resolve(root: str, version: int | None) -> manifest.Manifest:
    return _load(find_entry(root, version))


def find_entry(root: str, version: int | None) -> paths.VersionEntry:
    """The manifest of ``version`` (None: the latest), found with one listing.
    DatasetNotFoundError (a LanceIOError) when there is no dataset, InvalidArgumentError when no such version."""
    if version is None:
        entry = paths.latest_version(root)
    else:
        versions = paths.list_versions(root)
        entry = next((v for v in versions if v.version == int(version)), None)
        if entry is None and versions:
            raise InvalidArgumentError(
                f"{root} has no version {version} (versions {versions[0].version}.."
                f"{versions[-1].version})"
            )
    if entry is None:
        raise DatasetNotFoundError(
            f"{root} is not a Lance dataset (no committed version in _versions)"
        )
    return entry


def _load(entry: paths.VersionEntry) -> manifest.Manifest:
    return _readable(manifest.read_manifest(entry.path))


def _readable(m: manifest.Manifest) -> manifest.Manifest:
    features.check_reader_flags(m)
    return m


def open_version(
    root: str, entry: paths.VersionEntry, *, cache: SearchCache | None = None
) -> Dataset:
    """The dataset at a version the caller found by listing ``_versions/`` (a server
    resolving "latest" per request lists once, not twice)."""
    return Dataset(storage.register(root), _load(entry), cache=cache)


def _reopen(uri: str, version: int, default_scan_options: dict | None) -> Dataset:
    return dataset(uri, version, default_scan_options=default_scan_options)


class Dataset:
    """One version of a dataset; writes through it move it to the new version."""

    default_scan_options: dict = {}  # pylance's: the options every scan starts from

    def __init__(self, root: str, m: manifest.Manifest, *, cache: SearchCache | None = None):
        self.uri = root
        self.manifest = m
        # page metadata for random access, kept with the open dataset (a server passes one
        # cache shared by all its datasets): without it every take would re-read it
        self.cache = cache if cache is not None else SearchCache(DATASET_CACHE_BYTES)

    def __reduce__(self):
        # pickled as what reopens it (for multiprocessing workers), not as its caches
        return _reopen, (self.uri, self.version, dict(self.default_scan_options) or None)

    # -- metadata -------------------------------------------------------------------------

    @property
    def version(self) -> int:
        return int(self.manifest.version)

    @property
    def latest_version(self) -> int:
        newest = paths.latest_version(self.uri)
        if newest is None:
            raise DatasetNotFoundError(f"{self.uri} has no committed version any more")
        return newest.version

    @functools.cached_property
    def lance_schema(self) -> LanceSchema:
        return self.manifest.schema

    @functools.cached_property
    def schema(self) -> pa.Schema:
        """The columns a scan gives: the dataset's, and the row id / address columns when
        the default scan options ask for them (as pylance's)."""
        schema = self.lance_schema.to_dataset_arrow()
        for option, name in (("with_row_id", ROW_ID), ("with_row_address", ROW_ADDRESS)):
            if self.default_scan_options.get(option) and name not in schema.names:
                schema = schema.append(pa.field(name, pa.uint64()))
        return schema

    @property
    def data_storage_version(self) -> LanceFileVersion:
        return self.manifest.data_storage_version

    @property
    def stable_row_ids(self) -> bool:
        return features.uses_stable_row_ids(self.manifest)

    has_stable_row_ids = stable_row_ids  # pylance's name

    @property
    def max_field_id(self) -> int:
        return max((f.id for f in self.lance_schema.walk()), default=-1)

    @property
    def stats(self) -> _Stats:
        """pylance's ``ds.stats.dataset_stats()``."""
        return _Stats(self)

    def checkout_latest(self) -> None:
        """Move this object to the latest version (as pylance's, in place)."""
        self._become(dataset(self.uri, cache=self.cache))

    # -- config and metadata (see :mod:`.config`) ------------------------------------------

    def config(self) -> dict[str, str]:
        """The dataset's config (``lance.*`` settings and user keys), as pylance's."""
        return dict(self.manifest.pb.config)

    @property
    def metadata(self) -> dict[str, str]:
        """The table metadata (free key/values of the dataset, not of its schema)."""
        return dict(self.manifest.pb.table_metadata)

    @property
    def schema_metadata(self) -> dict[str, str]:
        return {k: v.decode() for k, v in self.manifest.pb.schema_metadata.items()}

    def update_config(self, values: dict[str, str | None], *, replace: bool = False) -> dict:
        """Set (a value) or remove (None) config keys, or replace the whole config; the
        object moves to the new version; returns the new config."""
        self._commit_config(config.update_config_operation(config=values, replace=replace))
        return self.config()

    def delete_config_keys(self, keys: list[str]) -> None:
        self._commit_config(config.update_config_operation(config=dict.fromkeys(keys)))

    def update_metadata(self, values: dict[str, str | None], *, replace: bool = False) -> dict:
        """Change the table metadata as :meth:`update_config` changes the config."""
        op = config.update_config_operation(table_metadata=values, replace=replace)
        self._commit_config(op)
        return self.metadata

    def update_schema_metadata(
        self, values: dict[str, str | None], *, replace: bool = False
    ) -> dict:
        """Change the schema metadata as :meth:`update_config` changes the config."""
        op = config.update_config_operation(schema_metadata=values, replace=replace)
        self._commit_config(op)
        return self.schema_metadata

    def update_field_metadata(
        self, field_updates: dict[str, dict[str, str | None]], *, replace: bool = False
    ) -> None:
        """Change the metadata of fields given by path (``"a"``, ``"a.b"``)."""
        op = config.update_config_operation(
            field_metadata=field_updates, schema=self.lance_schema, replace=replace
        )
        self._commit_config(op)

    def _commit_config(self, op) -> None:
        """Commit an UpdateConfig, as pylance does for every config or metadata change."""
        committed = commit.commit(self.uri, new_transaction(self.version, op))
        self._become(dataset(self.uri, committed.version, cache=self.cache))

    def versions(self) -> list[dict]:
        """Every version, as pylance gives them: number, naive local commit time, summary."""
        return [
            _version_info(manifest.read_manifest(e.path)) for e in paths.list_versions(self.uri)
        ]

    def migrate_manifest_paths_v2(self) -> None:
        """Rename ``{version}.manifest`` files to pylance's V2 names (``u64::MAX -
        version``, which list newest first), oldest first so the latest stays findable."""
        for entry in paths.list_versions(self.uri):
            if entry.naming is paths.ManifestNaming.V1:
                target = paths.manifest_path(self.uri, entry.version, paths.ManifestNaming.V2)
                storage.rename(entry.path, target)

    def version_refs(self) -> list[dict]:
        """``{"version": n}`` for every version, without reading the manifests."""
        return [{"version": e.version} for e in paths.list_versions(self.uri)]

    def get_version(self) -> dict:
        """The checked-out version as :meth:`versions` lists it (pylance's ``get_version``)."""
        return _version_info(self.manifest)

    def list_indices(self) -> list[dict]:
        """The index segments of this version, as pylance's ``list_indices`` gives them."""
        return indices.list_indices(self)

    def create_index(
        self,
        column: str,
        index_type: str,
        name: str | None = None,
        metric: str = "L2",
        replace: bool = False,
        num_partitions: int | None = None,
        num_sub_vectors: int | None = None,
        *,
        num_bits: int = 8,
    ) -> Dataset:
        """Build an IVF_FLAT or IVF_PQ index over a vector column (see
        :mod:`lance_format.vector.build`) and commit it; in place, as pylance (which
        returns the dataset itself)."""
        version = indices.create_index(
            self,
            column,
            index_type,
            name=name,
            metric=metric,
            replace=replace,
            num_partitions=num_partitions,
            num_sub_vectors=num_sub_vectors,
            num_bits=num_bits,
        )
        self._become(dataset(self.uri, version, cache=self.cache))
        return self

    def drop_index(self, name: str) -> None:
        """Remove the index ``name`` from the next version (in place, as pylance)."""
        self._become(dataset(self.uri, indices.drop_index(self, name), cache=self.cache))

    def describe_indices(self) -> list[dict]:
        """One description per index name, with pylance 14's fields."""
        return indices.describe_indices(self)

    @property
    def tags(self) -> tags.Tags:
        return tags.Tags(self.uri)

    def checkout_version(self, version: int | str) -> Dataset:
        return dataset(self.uri, version, cache=self.cache)

    # -- fragments ------------------------------------------------------------------------

    @functools.cached_property
    def _fragments(self) -> list[Fragment]:
        return [
            Fragment(self.uri, pb, self.lance_schema, self.cache, dataset=self)
            for pb in self.manifest.fragments
        ]

    def get_fragments(self) -> list[Fragment]:
        return list(self._fragments)

    def get_fragment(self, fragment_id: int) -> Fragment | None:
        for f in self._fragments:
            if f.fragment_id == fragment_id:
                return f
        return None

    def validate(self) -> None:
        """Check this version's manifest is consistent (pylance's ``validate``): fragment
        ids unique, every data-file field id in the schema, deletions fewer than the fragment's rows; raises CorruptFileError otherwise."""
        ids = {f.id for f in self.lance_schema.walk()}
        seen: set[int] = set()
        for frag in self.manifest.fragments:
            if frag.id in seen:
                raise CorruptFileError(f"fragment id {frag.id} appears twice", path=self.uri)
            seen.add(frag.id)
            for df in frag.files:
                live = [i for i in df.fields if i >= 0]
                if set(live) - ids:
                    raise CorruptFileError(
                        f"fragment {frag.id}: data file {df.path} has field ids "
                        f"{sorted(set(live) - ids)} the schema lacks",
                        path=self.uri,
                    )
            if frag.deletion_file.num_deleted_rows > frag.physical_rows:
                raise CorruptFileError(
                    f"fragment {frag.id} deletes more rows than it has", path=self.uri
                )

    # -- changing (each returns the new version) -----------------------------------------

    def _become(self, new: Dataset) -> None:
        """Move this object to ``new``'s version in place, as pylance's writes do (its
        cached fragments and schema go with it)."""
        if new is not self:
            defaults = self.__dict__.get("default_scan_options")
            self.__dict__.clear()
            self.__dict__.update(new.__dict__)
            if defaults is not None:
                self.default_scan_options = defaults

    def update(
        self,
        updates: dict[str, str],
        where: str | None = None,
        conflict_retries: int = mutation.DEFAULT_CONFLICT_RETRIES,
        retry_timeout: dt.timedelta | None = None,
    ) -> dict[str, int]:
        """Set columns to SQL expressions on the rows matching ``where`` (all rows when
        None), as pylance: the object moves to the new version, re-run against a newer one
        up to ``conflict_retries`` times when a concurrent commit preempts it; returns
        ``{"num_rows_updated": n}``.  (``retry_timeout`` is accepted, as pylance's; the
        retries here are bounded by count.)"""
        new, count = mutation.update(self, updates, where, conflict_retries=conflict_retries)
        self._become(new)
        return {"num_rows_updated": count}

    @staticmethod
    def drop(
        base_uri: str | os.PathLike[str],
        storage_options: dict[str, str] | None = None,
        ignore_not_found: bool = False,
    ) -> None:
        """pylance's ``LanceDataset.drop``: delete the dataset at ``base_uri``, every
        version and file; a missing dataset is an error unless ``ignore_not_found``."""
        root = storage.register(base_uri, storage_options)
        if not _exists(root):
            if ignore_not_found:
                return
            raise DatasetNotFoundError(f"no dataset at {root}", path=root)
        storage.delete_prefix(root)

    def get_transactions(
        self, recent_transactions: int = 10
    ) -> list[lance_operation.Transaction | None]:
        """The transactions of this version and the ones before it, newest first (None for
        a version whose transaction is gone), at most ``recent_transactions``."""
        out = []
        for version in range(self.version, max(self.version - recent_transactions, 0), -1):
            try:
                out.append(lance_operation.read_transaction(self.uri, version))
            except InvalidArgumentError:  # that version was cleaned up
                out.append(None)
        return out

    def insert(self, data, *, mode: str = "append", **kwargs) -> None:
        """Write ``data`` into this dataset (``append`` by default, or ``overwrite``) with
        :func:`write_dataset`'s options; the object moves to the new version, as pylance's."""
        new = write_dataset(data, self, mode=mode, **kwargs)
        new.cache = self.cache
        self._become(new)

    def merge_insert(self, on: str | list[str]) -> mutation.MergeInsertBuilder:
        """pylance's upsert builder over key columns ``on``; its ``execute`` commits and
        moves this object to the new version."""
        return mutation.MergeInsertBuilder(self, on)

    def delete(self, predicate: str | pc.Expression) -> dict[str, int]:
        """Delete the rows matching ``predicate`` (SQL string or Arrow expression); the
        object moves to the new version and, as pylance, returns ``{"num_deleted_rows": n}``."""
        new, count = _delete(self, predicate)
        self._become(new)
        return {"num_deleted_rows": count}

    def drop_columns(self, columns: list[str]) -> None:
        """Move to a new version without ``columns`` (data files are untouched: the fields
        simply leave the schema, as pylance's Project does)."""
        names = [f.name for f in self.lance_schema.fields]
        missing = [c for c in columns if c not in names]
        if missing:
            raise SchemaError(f"cannot drop unknown columns {missing} (has {names})")
        kept = [f for f in self.lance_schema.fields if f.name not in set(columns)]
        if not kept:
            raise InvalidArgumentError("cannot drop every column of a dataset")
        schema = LanceSchema(kept, dict(self.lance_schema.metadata))
        op = Project(schema=schema.to_protos(), preserves_nullability=True)
        committed = commit.commit(self.uri, new_transaction(self.version, op))
        self._become(dataset(self.uri, committed.version, cache=self.cache))

    def alter_columns(self, *alterations: dict) -> None:
        """Rename columns, change their nullability or their type, as pylance's
        ``alter_columns``: each alteration is ``{"path": "a" or "a.b", "name": new name,
        "nullable": bool, "data_type": pyarrow type}``.  Without a type change only the
        schema changes (a Project, no data rewritten); making a column non-nullable checks
        that it holds no null.  A type change rewrites the column into new data files
        (a Merge; see :mod:`.cast` for the casts allowed)."""
        self._become(_alter_columns(self, alterations))

    def add_columns(
        self,
        transforms,
        read_columns: list[str] | None = None,
        reader_schema: pa.Schema | None = None,
        batch_size: int | None = None,
    ) -> None:
        """New columns: ``{"name": "SQL expression over existing columns"}`` computes them
        into one new data file per fragment; a field, list of fields or schema adds all-null
        columns with no data file at all (as pylance does); a :func:`batch_udf` (or any
        function of a batch) computes them from ``read_columns`` (``_rowid``/``_rowaddr``
        allowed), ``batch_size`` rows at a time; anything else is read as the new columns'
        values, row for row (``reader_schema`` for an iterable of batches).  Committed as a
        Merge."""
        self._become(_add_columns(self, transforms, read_columns, reader_schema, batch_size))

    def merge(self, data_obj, left_on: str, right_on: str | None = None, schema=None) -> None:
        """pylance's ``merge``: the columns of ``data_obj`` (but its key) joined on
        ``left_on == right_on`` as new columns, null where no row matches; committed as a
        Merge, in place."""
        if not isinstance(data_obj, pa.Table):  # read once: every fragment joins with it
            data_obj = write.to_reader(data_obj, schema).read_all()
        new, merged = [], None
        try:
            for frag in self.get_fragments():
                meta, merged = merge_fragment_columns(frag, data_obj, left_on, right_on)
                new.append(meta)
        except BaseException:  # nothing is committed: remove the files this call wrote
            for meta in new:
                paths.remove(paths.data_file_path(self.uri, meta.files[-1].path), missing_ok=True)
            raise
        if merged is None:
            raise InvalidArgumentError("cannot merge into a dataset without fragments")
        op = Merge(
            fragments=[m.to_pb() for m in new],
            schema=merged.to_protos(),
            preserves_nullability=True,
        )
        committed = commit.commit(self.uri, new_transaction(self.version, op))
        self._become(dataset(self.uri, committed.version, cache=self.cache))

    @property
    def optimize(self) -> _Optimize:
        """pylance's spelling: ``ds.optimize.compact_files(...)``."""
        return _Optimize(self)

    def compact_files(self, **options) -> compaction.CompactionMetrics:
        """Rewrite small or heavily deleted fragments (see :mod:`.compaction`); options as
        pylance's ``target_rows_per_fragment``, ``materialize_deletions(_threshold)``."""
        metrics, version = compaction.compact_files(self, **options)
        if version is not None:
            self._become(dataset(self.uri, version, cache=self.cache))
        return metrics

    def sql(self, sql: str) -> SqlQueryBuilder:
        """pylance's SQL over this version (``FROM dataset``, or the name given to the
        builder's ``table_name``), run by DuckDB (see :mod:`.sql`)."""
        return SqlQueryBuilder(self, sql)

    def optimize_indices(
        self,
        *,
        num_indices_to_merge: int | None = None,
        index_names: list[str] | None = None,
        retrain: bool = False,
        **_hints,
    ) -> None:
        """Add the rows of fragments no index segment covers to the vector indexes (see
        :func:`.indices.optimize_indices`); in place, as pylance.  Other keyword arguments
        (pylance's index-specific tuning) are accepted and change nothing, as pylance
        ignores the ones an index type does not use."""
        version = indices.optimize_indices(
            self,
            num_indices_to_merge=num_indices_to_merge,
            index_names=index_names,
            retrain=retrain,
        )
        if version is not None:
            self._become(dataset(self.uri, version, cache=self.cache))

    def cleanup_old_versions(
        self,
        older_than=cleanup.DEFAULT_OLDER_THAN,
        *,
        delete_unverified: bool = False,
        error_if_tagged_old_versions: bool = True,
    ) -> cleanup.CleanupStats:
        """Remove versions older than ``older_than`` (not the latest, not tagged ones) and
        the files nothing kept references (see :mod:`.cleanup`)."""
        return cleanup.cleanup_old_versions(
            self.uri,
            older_than,
            delete_unverified=delete_unverified,
            error_if_tagged_old_versions=error_if_tagged_old_versions,
        )

    def restore(self, version: int | str | None = None) -> None:
        """Make ``version`` (default: this dataset's version) the latest again, as a new
        version with that version's fragments and schema; the object moves to it."""
        target = self if version is None else self.checkout_version(version)
        latest = self.latest_version
        committed = commit.commit(self.uri, new_transaction(latest, Restore(target.version)))
        self._become(dataset(self.uri, committed.version, cache=self.cache))

    @staticmethod
    def commit(base_uri, operation, read_version: int | None = None, *args, **kwargs) -> Dataset:
        """pylance's ``LanceDataset.commit`` (see :func:`.lance_operation.commit`): the new
        version."""
        root, version = lance_operation.commit(base_uri, operation, read_version, *args, **kwargs)
        return dataset(root, version)

    @staticmethod
    def commit_batch(dest, transactions, *args, **kwargs) -> dict:
        """pylance's ``LanceDataset.commit_batch``: ``{"dataset": ..., "merged": ...}``."""
        root, version, merged = lance_operation.commit_batch(dest, transactions, *args, **kwargs)
        return {"dataset": dataset(root, version), "merged": merged}

    def read_transaction(self, version: int | None = None) -> lance_operation.Transaction | None:
        """The transaction that made ``version`` (default: this one), with its operation as
        a ``LanceOperation``; None when the version has none."""
        return lance_operation.read_transaction(self.uri, version or self.version)

    def commit_fragments(self, fragments: list) -> Dataset:
        """Commit staged fragments (from :func:`write_fragments`, possibly written by many
        processes; FragmentMetadata or their JSON) in ONE Append transaction against this
        version."""
        frags = [as_fragment_pb(f) for f in fragments]
        committed = commit.commit(self.uri, new_transaction(self.version, Append(frags)))
        return dataset(self.uri, committed.version, cache=self.cache)

    # -- reading --------------------------------------------------------------------------

    def scanner(
        self,
        columns: list[str] | dict[str, str] | None = None,
        filter: str | pc.Expression | None = None,
        limit: int | None = None,
        offset: int | None = None,
        nearest: dict | None = None,
        batch_size: int | None = None,
        batch_size_bytes: int | None = None,
        batch_readahead: int | None = None,
        fragment_readahead: int | None = None,
        scan_in_order: bool | None = None,
        fragments: Sequence[Fragment] | None = None,
        *,
        prefilter: bool | None = None,
        with_row_id: bool | None = None,
        with_row_address: bool | None = None,
        order_by: Sequence[ColumnOrdering | str] | None = None,
        blob_handling: str | None = None,
        ranges: dict[int, tuple[int, int]] | None = None,
        fast_search: bool | None = None,
        **other,
    ) -> Scanner | VectorScanner:
        """A scan of this version, with pylance's parameters in pylance's order.

        ``columns`` lists names (system columns ``_rowid``, ``_rowaddr``, ``_rowoffset`` and
        nested paths ``"s.x"`` included), or maps output names to SQL expressions
        (``{"b": "upper(s)"}``); ``order_by`` sorts (see :class:`ColumnOrdering`);
        ``nearest`` makes it a nearest-neighbour search (see :mod:`lance_format.vector`),
        where ``fast_search`` searches only what an index covers.
        pylance's tuning hints (read-ahead, batch bytes, late materialization, statistics,
        scan order: rows always come in order) are accepted and change nothing; its other
        options are refused unless left at None, since this scanner does not implement
        them.  ``blob_handling="all_binary"`` returns blob columns as their bytes instead of
        descriptors.  ``ranges`` (ours) scans physical row ranges of some fragments."""
        if self.default_scan_options:  # as pylance: what the call gives wins
            given = dict(
                columns=columns,
                filter=filter,
                limit=limit,
                offset=offset,
                nearest=nearest,
                batch_size=batch_size,
                fragments=fragments,
                prefilter=prefilter,
                with_row_id=with_row_id,
                with_row_address=with_row_address,
                order_by=order_by,
                blob_handling=blob_handling,
                ranges=ranges,
                fast_search=fast_search,
                **other,
            )
            merged = {
                **self.default_scan_options,
                **{k: v for k, v in given.items() if v is not None},
            }
            return Dataset.scanner(_without_defaults(self), **merged)
        if nearest is None and fast_search is not None:
            other["fast_search"] = fast_search
        _refuse_options(other)
        if blob_handling not in _BLOB_HANDLING:
            raise InvalidArgumentError(
                f"blob_handling must be one of {sorted(m for m in _BLOB_HANDLING if m)}"
            )
        opts = ScanOptions(
            columns=columns,
            filter=filter,
            limit=limit,
            offset=offset,
            with_row_id=bool(with_row_id),
            with_row_address=bool(with_row_address),
            batch_size=batch_size or default_batch_size(),
            fragments=fragments,
            ranges=ranges,
            order_by=order_by,
            blob_binary=blob_handling == "all_binary",
        )
        if nearest is not None:
            if order_by:
                raise UnsupportedError("order_by cannot be combined with a nearest search")
            return VectorScanner(self, opts, nearest, bool(prefilter), bool(fast_search))
        return Scanner(self.lance_schema, self._fragments, opts, self.stable_row_ids)

    def to_table(
        self,
        columns=None,
        filter=None,
        limit=None,
        offset=None,
        nearest=None,
        batch_size=None,
        batch_size_bytes=None,
        batch_readahead=None,
        fragment_readahead=None,
        scan_in_order=None,
        **kw,
    ) -> pa.Table:
        """The rows of a scan (see :meth:`scanner`) as one Table."""
        return self.scanner(
            columns=columns,
            filter=filter,
            limit=limit,
            offset=offset,
            nearest=nearest,
            batch_size=batch_size,
            **kw,
        ).to_table()

    def to_batches(
        self,
        columns=None,
        filter=None,
        limit=None,
        offset=None,
        nearest=None,
        batch_size=None,
        batch_size_bytes=None,
        batch_readahead=None,
        fragment_readahead=None,
        scan_in_order=None,
        **kw,
    ) -> Iterator[pa.RecordBatch]:
        """The rows of a scan (see :meth:`scanner`) as a stream of batches: at most
        ``batch_size`` rows each, a fragment's last batch shorter, or with
        ``strict_batch_size`` exactly ``batch_size`` rows but the very last."""
        strict = bool(kw.pop("strict_batch_size", False))
        batches = self.scanner(
            columns=columns,
            filter=filter,
            limit=limit,
            offset=offset,
            nearest=nearest,
            batch_size=batch_size,
            **kw,
        ).to_batches()
        return _exact_batches(batches, batch_size or default_batch_size()) if strict else batches

    def to_pandas(self, columns=None, filter=None, **kw):
        """The rows of a scan as a pandas DataFrame (pylance's ``to_pandas``)."""
        return self.to_table(columns=columns, filter=filter, **kw).to_pandas()

    def slice(self, start: int, end: int, columns=None) -> pa.Table:
        """Rows ``start`` to ``end`` (exclusive) by position, as a scan window."""
        if start < 0:
            raise InvalidArgumentError(f"start must be non-negative, got {start}")
        if end < start:
            raise InvalidArgumentError(f"end ({end}) must be >= start ({start})")
        return self.scanner(offset=start, limit=end - start, columns=columns).to_table()

    def sample(self, num_rows: int, columns=None, randomize_order: bool = True, **kw) -> pa.Table:
        """``num_rows`` rows drawn at random without replacement (in random order unless
        ``randomize_order`` is False)."""
        total = self.count_rows()
        if not 0 <= num_rows <= total:
            raise InvalidArgumentError(f"cannot sample {num_rows} rows of {total}")
        picked = np.random.default_rng().choice(total, num_rows, replace=False)
        if not randomize_order:
            picked = np.sort(picked)
        return self.take(picked, columns, **kw)

    def head(self, num_rows: int, **kw) -> pa.Table:
        """The first ``num_rows`` rows (scanner options allowed), as pylance's."""
        return self.scanner(limit=num_rows, **kw).to_table()

    def __len__(self) -> int:
        return self.count_rows()

    def count_rows(self, filter: str | pc.Expression | None = None, **kw) -> int:
        """Rows matching ``filter``; other options are the scanner's, as in pylance."""
        return self.scanner(filter=filter, columns=[], **kw).count_rows()

    @functools.cached_property
    def _live_counts(self) -> np.ndarray:
        counts = np.array([f.count_rows() for f in self._fragments], dtype=np.int64)
        return np.concatenate([[0], np.cumsum(counts)])

    def take(self, indices, columns: list[str] | None = None) -> pa.Table:
        """Rows by position in the dataset (0 .. count_rows()-1), in the order asked."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        return self._gather(self._index_groups(idx), len(idx), columns)

    def _index_groups(self, idx: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """Rows by position as (fragment number, where in the request, physical offsets)."""
        total = int(self._live_counts[-1])
        if len(idx) and (idx.min() < 0 or idx.max() >= total):
            raise RowOutOfRangeError(f"take indices must be in [0, {total})")
        frag_no = np.searchsorted(self._live_counts, idx, side="right") - 1
        groups = []
        for i in np.unique(frag_no).tolist():
            sel = frag_no == i
            live = self._fragments[i].live_offsets[idx[sel] - self._live_counts[i]]
            groups.append((i, np.flatnonzero(sel), live))
        return groups

    def take_rows(
        self, row_ids, columns: list[str] | None = None, *, skip_deleted: bool = True
    ) -> pa.Table:
        """Rows by row id (stable ids when the dataset has them, else row addresses); ids
        of deleted rows are left out, as pylance does, or refused (``skip_deleted=False``,
        for callers that promised one row per id)."""
        ids = np.asarray(row_ids, dtype=np.uint64).reshape(-1)
        addr = self._row_id_index(ids) if self.stable_row_ids else ids
        if skip_deleted:
            addr = addr[self._not_deleted(addr)]
        return self.take_addresses(addr, columns)

    def _not_deleted(self, addr: np.ndarray) -> np.ndarray:
        """Which addresses are not deleted rows (pylance's take by row id leaves those
        out); addresses outside the version stay, for the take to refuse."""
        keep = np.ones(len(addr), dtype=bool)
        frag_ids = (addr >> np.uint64(32)).astype(np.int64)
        offsets = (addr & np.uint64(0xFFFFFFFF)).astype(np.int64)
        for frag in self._fragments:
            sel = frag_ids == frag.fragment_id
            if sel.any() and len(frag.deleted_offsets):
                keep[sel] = ~np.isin(offsets[sel], frag.deleted_offsets)
        return keep

    _take_rows = take_rows  # pylance's name, which its own tests call

    def take_addresses(self, addresses, columns: list[str] | None = None) -> pa.Table:
        """Rows by row address (fragment id << 32 | offset), in the order asked."""
        addr = np.asarray(addresses, dtype=np.uint64).reshape(-1)
        return self._gather(self._address_groups(addr), len(addr), columns)

    def _address_groups(self, addr: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """Rows by address as (fragment number, where in the request, physical offsets)."""
        frag_ids = (addr >> np.uint64(32)).astype(np.int64)
        offsets = (addr & np.uint64(0xFFFFFFFF)).astype(np.int64)
        by_id = {f.fragment_id: i for i, f in enumerate(self._fragments)}
        addresses = []
        for fid in np.unique(frag_ids).tolist():
            sel = frag_ids == fid
            i = by_id.get(fid)
            frag = self._fragments[i] if i is not None else None
            if i is None or frag is None or (offsets[sel] >= frag.physical_rows).any():
                raise RowOutOfRangeError(f"row ids refer to rows not in version {self.version}")
            dead = np.isin(offsets[sel], frag.deleted_offsets)
            if dead.any():
                raise DeletedRowTakeError(
                    "A take operation that includes row addresses must not target deleted rows"
                )
            addresses.append((i, np.flatnonzero(sel), offsets[sel]))
        return addresses

    def _row_groups(self, ids=None, addresses=None, indices=None):
        """pylance's blob selection: exactly one of row ids, addresses or indices."""
        if sum(v is not None for v in (ids, addresses, indices)) != 1:
            raise InvalidArgumentError(
                "Exactly one of ids, indices, or addresses must be specified"
            )
        if indices is not None:
            idx = np.asarray(indices, dtype=np.int64).reshape(-1)
            return self._index_groups(idx), len(idx)
        if ids is not None:
            ids = np.asarray(ids, dtype=np.uint64).reshape(-1)
            addr = self._row_id_index(ids) if self.stable_row_ids else ids
        else:
            addr = np.asarray(addresses, dtype=np.uint64).reshape(-1)
        return self._address_groups(addr), len(addr)

    def take_blobs(
        self,
        blob_column: str,
        ids=None,
        addresses=None,
        indices=None,
        *,
        buffer_size: int = DEFAULT_BLOB_BUFFER_SIZE,
    ) -> list[BlobFile | None]:
        """One file-like :class:`BlobFile` per selected row (None for a null blob), rows
        chosen by exactly one of row ``ids``, ``addresses`` or ``indices``."""
        groups, n = self._row_groups(ids, addresses, indices)
        return blobs.take_blobs(self, blob_column, groups, n, buffer_size)

    def read_blobs(
        self, blob_column: str, ids=None, addresses=None, indices=None, **options
    ) -> list[tuple[int, bytes | None]]:
        """``(row address, bytes)`` of each selected row, in the order asked (pylance's
        ``io_buffer_size`` / ``preserve_order`` tune its reads and are accepted)."""
        unknown = set(options) - {"io_buffer_size", "preserve_order"}
        if unknown:
            raise InvalidArgumentError(f"unknown read_blobs option(s): {sorted(unknown)}")
        groups, n = self._row_groups(ids, addresses, indices)
        files = blobs.take_blobs(self, blob_column, groups, n, 0)
        where = np.empty(n, dtype=np.uint64)
        for i, pos, offsets in groups:
            where[pos] = self._fragments[i].row_addresses(offsets)
        out = []
        for addr, f in zip(where.tolist(), files, strict=True):
            out.append((addr, None if f is None else f.readall()))
            if f is not None:
                f.close()
        return out

    @functools.cached_property
    def row_id_map(self) -> tuple[np.ndarray, np.ndarray]:
        """(stable row ids ascending, their row addresses) of this version's rows."""
        ids, addrs = [], []
        for f in self._fragments:
            rid = f.row_ids
            if rid is None:
                continue
            ids.append(rid)
            addrs.append(f.row_addresses(np.arange(f.physical_rows)))
        if not ids:
            return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
        ids_all, addrs_all = np.concatenate(ids), np.concatenate(addrs)
        order = np.argsort(ids_all, kind="stable")
        return ids_all[order], addrs_all[order]

    def _row_id_index(self, ids: np.ndarray) -> np.ndarray:
        keys, addrs = self.row_id_map
        pos = np.searchsorted(keys, ids)
        pos = np.minimum(pos, max(len(keys) - 1, 0))
        if not len(keys) or (keys[pos] != ids).any():
            raise RowOutOfRangeError(f"row ids not in version {self.version}")
        return addrs[pos]

    def _take_scanner(self, columns) -> Scanner:
        """The scanner whose projection a take reads: made once per projection of this
        object's version (a point lookup would otherwise spend a tenth of its time planning
        it; :meth:`_become` clears the cache with the rest of the object's state)."""
        named = columns is None or (
            isinstance(columns, list | tuple) and all(isinstance(c, str) for c in columns)
        )
        if not named:
            scanner = self.scanner(columns=columns)
            assert isinstance(scanner, Scanner)  # no nearest: a plain scanner
            return scanner
        key = None if columns is None else tuple(columns)
        cache = self.__dict__.setdefault("_take_scanners", {})
        scanner = cache.get(key)
        if scanner is None:
            scanner = self.scanner(columns=None if columns is None else list(columns))
            assert isinstance(scanner, Scanner)  # no nearest: a plain scanner
            if len(cache) >= 32:
                cache.clear()
            cache[key] = scanner
        return scanner

    def _gather(self, groups, n: int, columns) -> pa.Table:
        scanner = self._take_scanner(columns)
        fields = scanner.fields
        if not groups:
            return scanner.schema.empty_table()

        def read(frag: Fragment, offsets: np.ndarray) -> pa.Table:
            table = frag.read(fields, offsets)
            for meta in scanner.projection_meta:  # system columns asked for by name
                values = pa.array(scanner.meta_column(frag, meta, offsets))
                if table.num_columns:
                    table = table.append_column(meta, values)
                else:
                    table = pa.table({meta: values})
            return table

        parts, positions = [], []
        for i, where, offsets in groups:
            frag = self._fragments[i]
            if len(offsets) < 2 or (offsets[1:] > offsets[:-1]).all():
                # ascending and unique (point lookups, sorted takes): read as asked
                parts.append(read(frag, offsets))
                positions.append(where)
                continue
            order = np.argsort(offsets, kind="stable")
            uniq, inverse = np.unique(offsets[order], return_inverse=True)
            parts.append(read(frag, uniq).take(pa.array(inverse)))
            positions.append(where[order])
        table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        where = positions[0] if len(positions) == 1 else np.concatenate(positions)
        if len(where) >= 2 and not (where[1:] > where[:-1]).all():  # not already in order
            back = np.empty(n, dtype=np.int64)
            back[where] = np.arange(n)
            table = table.take(pa.array(back))
        return table if scanner.projection is None else scanner.projection.apply(table)


__all__ = [
    "ROW_ADDRESS",
    "ROW_ID",
    "ROW_OFFSET",
    "ColumnOrdering",
    "Dataset",
    "dataset",
    "write_dataset",
    "write_fragments",
]

# pylance scanner options that only tune how a scan runs, never what it returns: accepted
_PYLANCE_SCAN_HINTS = frozenset(
    (
        "batch_size_bytes batch_readahead fragment_readahead scan_in_order use_stats "
        "io_buffer_size late_materialization use_scalar_index strict_batch_size "
        "disable_scoring_autoprojection"
    ).split()
)
# pylance scanner options that change what a scan returns, not implemented here (refused
# when set, so that nothing is silently ignored)
_PYLANCE_SCAN_OPTIONS = frozenset(
    (
        "index_segments full_text_query fast_search include_deleted_rows "
        "scan_stats_callback row_addr_allowlist row_addr_blocklist"
    ).split()
)


_BLOB_HANDLING = (None, "blobs_descriptions", "all_descriptions", "all_binary")


def default_batch_size() -> int:
    """Rows per batch when a scan names none: ``LANCE_DEFAULT_BATCH_SIZE`` when set (as
    pylance reads it), else the scanner's default."""
    text = os.environ.get("LANCE_DEFAULT_BATCH_SIZE")
    if text is None:
        return DEFAULT_BATCH_SIZE
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgumentError(f"LANCE_DEFAULT_BATCH_SIZE is not a number: {text!r}") from None
    if value <= 0:
        raise InvalidArgumentError("LANCE_DEFAULT_BATCH_SIZE must be positive")
    return value


def _exact_batches(batches: Iterator[pa.RecordBatch], size: int) -> Iterator[pa.RecordBatch]:
    """``batches`` re-cut into batches of exactly ``size`` rows (the last may be short)."""
    pending: list[pa.RecordBatch] = []
    have = 0
    for batch in batches:
        pending.append(batch)
        have += batch.num_rows
        while have >= size:
            table = pa.Table.from_batches(pending).combine_chunks()
            yield table.slice(0, size).to_batches()[0]
            rest = table.slice(size)
            pending = rest.to_batches() if rest.num_rows else []
            have -= size
    if have:
        yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]


def _refuse_options(options: dict) -> None:
    """Never ignore an argument: pylance's options are refused when set, others unknown."""
    known = _PYLANCE_SCAN_OPTIONS | _PYLANCE_SCAN_HINTS
    unknown = sorted(k for k in options if k not in known)
    if unknown:
        raise InvalidArgumentError(f"unknown scan option(s): {', '.join(unknown)}")
    given = sorted(
        k
        for k, v in options.items()
        if k in _PYLANCE_SCAN_OPTIONS and v is not None and v is not False
    )
    if given:
        raise UnsupportedError(f"scan option(s) not supported here: {', '.join(given)}")


def _without_defaults(ds: Dataset) -> Dataset:
    """A shallow copy of ``ds`` whose scans take no default options (they are applied)."""
    import copy

    plain = copy.copy(ds)
    plain.default_scan_options = {}
    return plain


class _Stats:
    def __init__(self, ds: Dataset):
        self._ds = ds

    def dataset_stats(self, max_rows_per_group: int = 1024) -> dict[str, int]:
        """Deleted rows, fragments, and fragments smaller than ``max_rows_per_group``."""
        frags = self._ds.get_fragments()
        return {
            "num_deleted_rows": sum(f.num_deletions for f in frags),
            "num_fragments": len(frags),
            "num_small_files": sum(f.physical_rows < max_rows_per_group for f in frags),
        }

    def data_stats(self) -> DataStatistics:
        """Bytes each field's columns take in the data files (pylance's ``data_stats``;
        a struct parent stores nothing of its own in 2.1+ files)."""
        totals = {f.id: 0 for f in self._ds.lance_schema.walk()}
        for frag in self._ds.get_fragments():
            for df, reader in zip(frag.pb.files, frag.readers(), strict=True):
                columns = getattr(reader.metadata, "columns", None)
                if columns is None or len(df.column_indices) != len(df.fields):
                    continue  # legacy files keep no per-column sizes
                for fid, col in zip(df.fields, df.column_indices, strict=True):
                    if fid in totals and 0 <= col < len(columns):
                        totals[fid] += columns[col].stored_bytes()
        return DataStatistics([FieldStatistics(i, totals[i]) for i in sorted(totals)])


@dataclasses.dataclass
class FieldStatistics:
    id: int
    bytes_on_disk: int


@dataclasses.dataclass
class DataStatistics:
    fields: list[FieldStatistics]


class _Optimize:
    def __init__(self, ds: Dataset):
        self._ds = ds

    def compact_files(self, **options) -> compaction.CompactionMetrics:
        return self._ds.compact_files(**options)

    def optimize_indices(self, **options) -> None:
        self._ds.optimize_indices(**options)

    def enable_auto_cleanup(self, config: dict) -> None:
        """Clean up old versions every ``config["interval"]`` commits, keeping those younger
        than ``config["older_than_seconds"]`` (pylance's ``AutoCleanupConfig``)."""
        keys = cleanup.auto_cleanup_config(config["interval"], config["older_than_seconds"])
        values: dict[str, str | None] = {**keys}
        self._ds.update_config(values)

    def disable_auto_cleanup(self) -> None:
        self._ds.delete_config_keys(
            [cleanup.AUTO_CLEANUP_INTERVAL, cleanup.AUTO_CLEANUP_OLDER_THAN]
        )


# -- writing ---------------------------------------------------------------------------------


def _exists(root: str) -> bool:
    return paths.latest_version(root) is not None


def write_dataset(
    data,
    uri: str | os.PathLike[str] | Dataset,
    schema: pa.Schema | None = None,
    mode: str = "create",
    *,
    max_rows_per_file: int = write.DEFAULT_MAX_ROWS_PER_FILE,
    max_rows_per_group: int = 1024,
    max_bytes_per_file: int | None = None,
    data_cache_bytes: int | None = None,
    data_storage_version: str | LanceFileVersion | None = None,
    use_legacy_format: bool | None = None,
    enable_stable_row_ids: bool = False,
    enable_v2_manifest_paths: bool = True,
    max_page_bytes: int | None = None,
    storage_options: dict[str, str] | None = None,
    idempotency_key: str | None = None,
    transaction_properties: dict[str, str] | None = None,
    commit_message: str | None = None,
    auto_cleanup_options: dict | None = None,
    progress=None,
) -> Dataset:
    """Write ``data`` (a Table, RecordBatchReader or iterable of batches, streamed) as a new
    dataset (``create``), new fragments (``append``) or a new version replacing the rows
    (``overwrite``), committed with a conflict-checked transaction.

    ``data_storage_version`` ("2.0", "2.1", "2.2" or "stable" = 2.2) defaults to the existing
    dataset's file version, or to "stable" for a new dataset.  ``max_page_bytes`` (not in
    pylance) caps the Arrow bytes per page: smaller pages mean finer page-aligned splits
    and cheaper random access.  A failed write leaves no file behind; a create that loses
    the race to another creator appends to it in ``append`` mode; a write given an
    ``idempotency_key`` that an earlier commit carries commits nothing and returns that
    version (see :mod:`.dataset_write`).

    As pylance: ``data`` may be a Dataset (its rows are copied), ``uri`` a Dataset (written
    at its location); ``max_rows_per_group`` only shapes legacy (0.1) files (written
    with ``data_storage_version="legacy"``, see :mod:`lance_format.legacy.writer`), and
    ``data_cache_bytes`` only sizes pylance's buffers; ``max_bytes_per_file`` rolls to a new data file past that size; binary
    columns marked ``lance-encoding:blob`` and blob-typed ones become blob v2 columns in
    2.2, as pylance writes them.  ``commit_message`` is kept in the transaction's
    properties, ``auto_cleanup_options`` (pylance's ``AutoCleanupConfig``) set the new
    dataset's auto-cleanup config; ``progress`` is told of each fragment written."""
    if isinstance(uri, Dataset):
        uri = uri.uri
    if not isinstance(max_rows_per_group, int) or max_rows_per_group <= 0:
        raise InvalidArgumentError("max_rows_per_group must be a positive integer")
    if use_legacy_format is not None:  # pylance's deprecated spelling
        warnings.warn(
            "use_legacy_format is deprecated, use data_storage_version instead",
            DeprecationWarning,
            stacklevel=2,
        )
        data_storage_version = "legacy" if use_legacy_format else "stable"
    properties = dict(transaction_properties or {})
    if commit_message is not None:
        properties[lance_operation.LANCE_COMMIT_MESSAGE_KEY] = commit_message
    config = None
    if auto_cleanup_options is not None:
        config = cleanup.auto_cleanup_config(
            auto_cleanup_options["interval"], auto_cleanup_options["older_than_seconds"]
        )
    outcome = dataset_write.write_version(
        data,
        uri,
        schema,
        mode,
        max_rows_per_file=max_rows_per_file,
        max_rows_per_group=max_rows_per_group,
        data_storage_version=data_storage_version,
        enable_stable_row_ids=enable_stable_row_ids,
        enable_v2_manifest_paths=enable_v2_manifest_paths,
        max_page_bytes=max_page_bytes,
        storage_options=storage_options,
        idempotency_key=idempotency_key,
        transaction_properties=properties,
        max_bytes_per_file=max_bytes_per_file,
        config=config,
        progress=progress,
    )
    root = storage.register(uri, storage_options)
    if outcome.manifest is not None:  # the commit read it back: no listing again
        return Dataset(root, _readable(outcome.manifest))
    return dataset(root, outcome.version)


def _delete(ds: Dataset, predicate: str | pc.Expression) -> tuple[Dataset, int]:
    """Delete the rows matching ``predicate``: new deletion files, fully deleted fragments
    dropped, committed as a Delete transaction.  The new version and the rows deleted."""
    if predicate is None:
        raise InvalidArgumentError("delete needs a predicate")
    changes = mutation.RowChanges(ds)
    count = 0
    for frag in ds.get_fragments():
        scan = ds.scanner(columns=[], filter=predicate, fragments=[frag], with_row_address=True)
        offsets = mutation.offsets_of(scan.to_table())
        count += len(offsets)
        changes.hide(frag, offsets)
    # a delete that matches nothing still commits (an empty Delete), as pylance's does
    text = predicate if isinstance(predicate, str) else str(predicate)
    op = Delete(
        updated_fragments=changes.updated, deleted_fragment_ids=changes.removed, predicate=text
    )
    committed = commit.commit(ds.uri, new_transaction(ds.version, op))
    return dataset(ds.uri, committed.version, cache=ds.cache), count


ADD_COLUMNS_ROWS = 128 * 1024  # rows evaluated per step (bounded memory)


def _add_columns(
    ds: Dataset, transforms, read_columns=None, reader_schema=None, batch_size=None
) -> Dataset:
    fragments, new_schema = new_column_files(
        ds, ds.get_fragments(), transforms, read_columns, reader_schema, batch_size
    )
    committed = _commit_new_columns(ds, fragments, new_schema)
    if isinstance(transforms, udf.BatchUDF) and transforms.cache is not None:
        transforms.cache.cleanup()  # its results are in the committed files now
    return committed


def new_column_files(
    ds: Dataset, frags, transforms, read_columns=None, reader_schema=None, batch_size=None
):
    """The fragments ``frags`` with the new columns ``transforms`` describes (see
    :meth:`Dataset.add_columns`) and those columns' schema, nothing committed."""
    names = {f.name for f in ds.lance_schema.fields}
    first_id = _next_field_id(ds)
    if isinstance(transforms, pa.Field) or (
        isinstance(transforms, (list, pa.Schema))
        and transforms
        and all(isinstance(f, pa.Field) for f in transforms)
    ):
        pass  # all-null columns, below
    elif not isinstance(transforms, dict):
        return _add_computed_columns(
            ds, frags, transforms, read_columns, reader_schema, batch_size, names, first_id
        )
    if isinstance(transforms, dict):
        arrow_schema = ds.lance_schema.to_dataset_arrow()
        compiled = {}
        for name, sql in transforms.items():
            if name in names:
                raise SchemaError(f"column {name!r} already exists")
            compiled[name] = filters.compile_value(sql, arrow_schema)
        used = sorted({c for cf in compiled.values() for c in cf.top_level_columns})
        source = [f for f in ds.lance_schema.fields if f.name in used]
        probe = _evaluate_columns(ds.scanner(columns=used).schema.empty_table(), compiled)
        new_arrow = _constant_nullability(probe.schema, compiled)
        new_schema = LanceSchema.from_arrow(new_arrow, first_id)
        if all(not cf.paths for cf in compiled.values()) and all(
            f.nullable and not pa.types.is_null(f.type) for f in new_arrow
        ):
            # every new column is a constant NULL: a schema change alone, as pylance does
            fragments = [f.pb for f in frags]
        else:
            fragments = [
                _write_column_file(ds, frag, source, compiled, new_schema) for frag in frags
            ]
    else:
        fields = [transforms] if isinstance(transforms, pa.Field) else list(transforms)
        for f in fields:
            if f.name in names:
                raise SchemaError(f"column {f.name!r} already exists")
            if not f.nullable:
                raise SchemaError(f"an added column without data must be nullable ({f.name!r})")
        new_schema = LanceSchema.from_arrow(pa.schema(fields), first_id=first_id)
        fragments = [f.pb for f in frags]
    return fragments, new_schema


def _add_computed_columns(
    ds, frags, transforms, read_columns, reader_schema, batch_size, names, first_id
):
    """New data files for columns a UDF computes or a reader-like value holds."""
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
        raise InvalidArgumentError("batch_size must be a positive integer")
    finish = None
    if isinstance(transforms, udf.BatchUDF) or callable(transforms):
        schema, values = udf.udf_values(ds, transforms, read_columns, batch_size)
    else:
        schema, values, finish = udf.reader_values(transforms, reader_schema)
    for f in schema:
        if f.name in names:
            raise SchemaError(f"column {f.name!r} already exists")
    new_schema = LanceSchema.from_arrow(schema, first_id)
    rows = batch_size or ADD_COLUMNS_ROWS
    fragments = []
    try:
        for frag in frags:
            fragments.append(udf.write_values_file(ds, frag, new_schema, values, rows))
        if finish is not None:
            finish()
    except BaseException:  # nothing is committed: remove the files this call wrote
        for f in fragments:
            paths.remove(paths.data_file_path(ds.uri, f.files[-1].path), missing_ok=True)
        raise
    return fragments, new_schema


def _commit_new_columns(ds: Dataset, fragments, new_schema: LanceSchema) -> Dataset:
    schema = LanceSchema(
        list(ds.lance_schema.fields) + list(new_schema.fields), dict(ds.lance_schema.metadata)
    )
    return _commit_merge(ds, fragments, schema)


def _commit_merge(ds: Dataset, fragments, schema: LanceSchema) -> Dataset:
    """Commit fragments that gained data files and the schema with their columns."""
    op = Merge(fragments=fragments, schema=schema.to_protos(), preserves_nullability=True)
    committed = commit.commit(ds.uri, new_transaction(ds.version, op))
    return dataset(ds.uri, committed.version, cache=ds.cache)


def _check_castable(ds: Dataset, alterations, casts: dict[int, pa.DataType]) -> None:
    """pylance refuses a cast with a nullability tightening in the same call, and a cast
    of an indexed column (the cast would silently invalidate the index)."""
    if any(alt.get("nullable") is False for alt in alterations):
        raise InvalidDataError(
            "cannot make a column non-nullable and cast columns in the same call: apply "
            "the cast first, then the nullability change"
        )
    indexed = [i["name"] for i in ds.describe_indices() if set(i["fields"]) & set(casts)]
    if indexed:
        raise InvalidDataError(
            f"cannot cast columns with indexes attached: {indexed}; drop the indexes first"
        )


def _alter_columns(ds: Dataset, alterations) -> Dataset:
    from . import cast

    fields = list(ds.lance_schema.fields)
    casts: dict[int, pa.DataType] = {}
    for alt in alterations:
        if not isinstance(alt, dict) or not isinstance(alt.get("path"), str):
            raise InvalidArgumentError("each alteration must be a dict with a 'path'")
        unknown = set(alt) - {"path", "name", "nullable", "data_type"}
        if unknown:
            raise InvalidArgumentError(f"unknown alteration keys {sorted(unknown)}")
        if alt.get("data_type") is not None:
            dst = alt["data_type"]
            if not isinstance(dst, pa.DataType):
                raise InvalidArgumentError("data_type must be a pyarrow.DataType")
            src = ds.lance_schema.field_by_path(alt["path"])
            cast.check_cast(alt["path"], src.to_dataset_arrow().type, dst)
            casts[src.id] = dst
        path = alt["path"].split(".")
        name, nullable = alt.get("name"), alt.get("nullable")
        if name is not None and (not isinstance(name, str) or not name or "." in name):
            raise InvalidArgumentError(f"bad new column name {name!r}")
        if nullable is False and ds.count_rows(filter=_null_filter(path)) > 0:
            raise InvalidArgumentError(
                f"column {alt['path']!r} holds nulls and cannot be made non-nullable"
            )
        fields = _replace_field(fields, path, name, nullable, alt["path"])
    if casts:
        _check_castable(ds, alterations, casts)
        fragments, schema = cast.cast_columns(ds, fields, casts, _next_field_id(ds))
        return _commit_merge(ds, fragments, schema)
    schema = LanceSchema(fields, dict(ds.lance_schema.metadata))
    op = Project(schema=schema.to_protos(), preserves_nullability=False)
    committed = commit.commit(ds.uri, new_transaction(ds.version, op))
    return dataset(ds.uri, committed.version, cache=ds.cache)


def _null_filter(path: list[str]) -> str:
    return ".".join(f"`{p}`" for p in path) + " IS NULL"


def _replace_field(fields, path: list[str], name, nullable, full: str) -> list:
    """``fields`` with the field at ``path`` renamed and/or its nullability set."""
    out, found = [], False
    for f in fields:
        if f.name != path[0]:
            out.append(f)
            continue
        found = True
        if len(path) == 1:
            siblings = {g.name for g in fields if g is not f}
            if name is not None and name in siblings:
                raise SchemaError(f"cannot rename {full!r} to {name!r}: the name is taken")
            changes = {}
            if name is not None:
                changes["name"] = name
            if nullable is not None:
                changes["nullable"] = bool(nullable)
            out.append(dataclasses.replace(f, **changes))
        else:
            kids = _replace_field(f.children, path[1:], name, nullable, full)
            out.append(dataclasses.replace(f, children=kids))
    if not found:
        raise SchemaError(f"no column {full!r} in the dataset")
    return out


def _right_side(data_obj, schema, right_on: str) -> tuple[pa.Table, str]:
    """The other side of a fragment merge or column update, as one table holding the key
    column ``right_on``."""
    right = (
        data_obj if isinstance(data_obj, pa.Table) else write.to_reader(data_obj, schema).read_all()
    )
    if right_on not in right.column_names:
        raise InvalidArgumentError(f"the data has no column {right_on!r} to join on")
    return right, right_on


def merge_fragment_columns(
    frag: Fragment, data_obj, left_on: str, right_on: str | None = None, schema=None
):
    """:meth:`Fragment.merge`: one new data file with ``data_obj``'s columns (all but
    ``right_on``) aligned to ``frag``'s rows on ``left_on`` (a column, ``_rowid`` or
    ``_rowaddr``); the new fragment metadata and the schema with the new columns."""
    ds = frag.dataset
    right, right_on = _right_side(data_obj, schema, right_on or left_on)
    added = [f for f in right.schema if f.name != right_on]
    names = {f.name for f in ds.lance_schema.fields}
    for f in added:
        if f.name in names:
            raise SchemaError(f"column {f.name!r} already exists")
    new_schema = LanceSchema.from_arrow(pa.schema(added), _next_field_id(ds))
    system = {ROW_ID: "with_row_id", ROW_ADDRESS: "with_row_address"}
    if left_on in system:
        keys = frag.to_table(columns=[], **{system[left_on]: True}).column(left_on)
    else:
        keys = frag.to_table(columns=[left_on]).column(left_on)
    right_keys = right.column(right_on).cast(keys.type)
    values_table = right.select([f.name for f in added])
    live = frag.live_offsets

    def values(_frag: Fragment, offsets: np.ndarray) -> pa.Table:
        at = np.searchsorted(live, offsets)
        found = pc.index_in(keys.take(pa.array(at)), value_set=right_keys)
        return values_table.take(found)

    out = udf.write_values_file(ds, frag, new_schema, values, ADD_COLUMNS_ROWS)
    merged = LanceSchema(
        list(ds.lance_schema.fields) + list(new_schema.fields), dict(ds.lance_schema.metadata)
    )
    return FragmentMetadata.from_pb(out), merged


def update_fragment_columns(
    frag: Fragment, data_obj, left_on: str = ROW_ID, right_on: str | None = None, schema=None
) -> tuple[FragmentMetadata, list[int], bytes]:
    """:meth:`Fragment.update_columns`: new values for existing columns of ``frag``'s rows
    whose ``left_on`` matches ``data_obj``'s ``right_on`` (other rows keep theirs), as one
    new data file; the old files keep their bytes, the columns' ids there become
    tombstones (-2).  Returns the uncommitted fragment, the modified field ids and the
    matched physical offsets as a portable roaring bitmap."""
    ds = frag.dataset
    right, right_on = _right_side(data_obj, schema, right_on or left_on)
    names = [n for n in right.column_names if n not in (right_on, left_on)]
    by_name = {f.name: f for f in ds.lance_schema.fields}
    fields = []
    for name in names:
        if name in SYSTEM_COLUMNS:
            raise InvalidArgumentError(
                f"column {name} is a reserved metadata column and cannot be updated"
            )
        if name not in by_name:
            raise InvalidArgumentError(f"column {name} does not exist in the fragment")
        fields.append(by_name[name])
    if not fields:
        raise InvalidArgumentError("the data has no column to update")
    system = {ROW_ID: "with_row_id", ROW_ADDRESS: "with_row_address"}
    if left_on in system:
        keys = frag.to_table(columns=[], **{system[left_on]: True}).column(left_on)
    else:
        keys = frag.to_table(columns=[left_on]).column(left_on)
    found = pc.index_in(keys, value_set=right.column(right_on).cast(keys.type))
    matched = frag.live_offsets[np.flatnonzero(found.is_valid().to_numpy(zero_copy_only=False))]
    new_schema = LanceSchema(fields, {})
    live = frag.live_offsets
    updates = right.select(names).cast(new_schema.to_dataset_arrow())

    def values(_frag: Fragment, offsets: np.ndarray) -> pa.Table:
        at = np.searchsorted(live, offsets)
        current = frag.read(fields, offsets)
        hit = found.take(pa.array(at)).to_numpy(zero_copy_only=False)
        hit = np.where(np.isnan(hit.astype(np.float64)), -1, hit).astype(np.int64)
        both = pa.concat_tables([current.cast(updates.schema), updates])
        rows = np.where(hit >= 0, len(current) + hit, np.arange(len(current)))
        return both.take(pa.array(rows))

    out = udf.write_values_file(ds, frag, new_schema, values, ADD_COLUMNS_ROWS)
    replaced = {f.id for field in fields for f in field.walk()}
    for old in out.files[:-1]:
        old.fields[:] = [-2 if fid in replaced else fid for fid in old.fields]
    modified = list(out.files[-1].fields)
    return FragmentMetadata.from_pb(out), modified, deletion.encode_bitmap_deletions(matched)


def fragment_from_file(filename: str, ds: Dataset, fragment_id: int) -> FragmentMetadata:
    """:meth:`Fragment.create_from_file`: one data file already under ``data/``, written
    with the dataset's schema, as an uncommitted fragment.  Its field list is the whole
    schema's ids, as pylance records it for such a file."""
    path = paths.data_file_path(ds.uri, filename)
    reader = LanceFileReader(storage.open_file(path))
    theirs = [f.name for f in reader.lance_schema.fields]
    ours = [f.name for f in ds.lance_schema.fields]
    if theirs != ours:
        raise SchemaMismatchError(
            f"Append with different schema: the file has columns {theirs}, the dataset {ours}"
        )
    major, minor = reader.version.numbers
    columns = len(reader.metadata.columns)
    file = DataFile(
        path=filename,
        fields=[f.id for f in ds.lance_schema.walk()],
        column_indices=list(range(columns)),
        file_major_version=major,
        file_minor_version=minor,
    )
    return FragmentMetadata(id=int(fragment_id), files=[file], physical_rows=reader.num_rows)


def _next_field_id(ds: Dataset) -> int:
    """Field ids are never reused: after every id in the schema and in any data file."""
    ids = [f.id for f in ds.lance_schema.walk()]
    for frag in ds.manifest.fragments:
        for df in frag.files:
            ids.extend(df.fields)
    return max(ids, default=-1) + 1


def _evaluate_columns(table: pa.Table, compiled: dict) -> pa.Table:
    return pads.dataset(table).to_table(
        columns={name: cf.expression for name, cf in compiled.items()}
    )


def _constant_nullability(schema: pa.Schema, compiled: dict) -> pa.Schema:
    """An expression that reads no column has one value for every row: its column is
    non-nullable unless that value is NULL (pylance's schema says the same)."""
    fields = []
    for f in schema:
        cf = compiled[f.name]
        if not cf.paths:
            value = _evaluate_columns(_rows_without_columns(1), {f.name: cf}).column(0)
            f = f.with_nullable(value.null_count > 0)
        fields.append(f)
    return pa.schema(fields, metadata=schema.metadata)


def _rows_without_columns(n: int) -> pa.Table:
    """``n`` rows to evaluate expressions that read no column over (a table with no
    columns has no rows); the placeholder column is never named by such expressions."""
    return pa.table({"_": pa.nulls(n)})


def _write_column_file(ds: Dataset, frag: Fragment, source, compiled, new_schema: LanceSchema):
    """One new data file holding the computed columns for every physical row of ``frag``."""

    def tables() -> Iterator[pa.Table]:
        for start in range(0, frag.physical_rows, ADD_COLUMNS_ROWS):
            stop = min(start + ADD_COLUMNS_ROWS, frag.physical_rows)
            rows = (
                frag.read(source, (start, stop)) if source else _rows_without_columns(stop - start)
            )
            yield _evaluate_columns(rows, compiled)

    return write.write_column_file(ds.uri, frag.pb, new_schema, ds.data_storage_version, tables())


def _version_info(m: manifest.Manifest) -> dict:
    return {"version": m.version, "timestamp": m.local_timestamp, "metadata": m.summary()}
