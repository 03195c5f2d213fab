"""Row updates: ``update`` and ``merge_insert``, committed as pylance 14 commits them.

Neither rewrites a data file in place.  Every changed row is hidden in its old fragment by a
new (cumulative) deletion file and written again, with its new values, into new fragments;
one ``Update`` transaction (mode REWRITE_ROWS) records the fragments with new deletion
files, the fragments that lost every row and the new fragments.  On a dataset with stable
row ids a moved row keeps its id, so the new fragments that hold moved rows carry those ids
and only inserted rows get fresh ones.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from ..errors import (
    InvalidArgumentError,
    InvalidDataError,
    RetryableCommitConflictError,
    SchemaError,
)
from . import commit, deletion, filters, rowids, write
from .operations import Update
from .scanner import ROW_ADDRESS, ROW_ID
from .transaction import new_transaction

if TYPE_CHECKING:
    from .dataset import Dataset
    from .fragment import Fragment

T = TypeVar("T")
DEFAULT_CONFLICT_RETRIES = 10  # pylance's default for update and merge_insert
_OFFSET_MASK = np.uint64(0xFFFFFFFF)
_TARGET_INDEX, _SOURCE_INDEX = "__lance_target_index", "__lance_source_index"


class RowChanges:
    """Rows hidden per fragment and rows to write again, gathered before one commit."""

    def __init__(self, ds: Dataset):
        self.ds = ds
        self.updated: list = []
        self.removed: list[int] = []
        self.moved: list[pa.Table] = []
        self.moved_ids: list[np.ndarray] = []

    def hide(self, frag: Fragment, offsets: np.ndarray) -> None:
        """Hide the physical ``offsets`` of ``frag`` (merged with its earlier deletions)."""
        if not len(offsets):
            return
        all_deleted = np.union1d(frag.deleted_offsets, offsets)
        if len(all_deleted) == frag.physical_rows:
            self.removed.append(frag.fragment_id)
            return
        new = type(frag.pb)()
        new.CopyFrom(frag.pb)
        new.deletion_file.CopyFrom(
            deletion.write_deletion_file(
                self.ds.uri, frag.fragment_id, self.ds.version, all_deleted
            )
        )
        self.updated.append(new)

    def commit(self, inserted: pa.Table | None, modified_fields: list[int]) -> Dataset:
        """Write the moved and inserted rows and commit the Update; the new version."""
        from .dataset import dataset

        ds = self.ds
        new_fragments = []
        fresh = [inserted] if inserted is not None and inserted.num_rows else []
        if ds.stable_row_ids and self.moved:
            new_fragments = self._write(pa.concat_tables(self.moved))
            ids = np.concatenate(self.moved_ids).astype(np.uint64)
            start = 0
            for f in new_fragments:
                f.inline_row_ids = rowids.encode_row_ids(ids[start : start + f.physical_rows])
                start += f.physical_rows
            if fresh:
                new_fragments.extend(self._write(fresh[0]))
        elif self.moved or fresh:  # moved and inserted rows share files, as pylance writes them
            new_fragments = self._write(pa.concat_tables(self.moved + fresh))
        op = Update(
            removed_fragment_ids=self.removed,
            updated_fragments=self.updated,
            new_fragments=new_fragments,
            fields_for_preserving_frag_bitmap=modified_fields,
            update_mode=Update.REWRITE_ROWS,
        )
        committed = commit.commit(ds.uri, new_transaction(ds.version, op))
        return dataset(ds.uri, committed.version, cache=ds.cache)

    def _write(self, table: pa.Table) -> list:
        ds = self.ds
        return write.write_fragments(
            table,
            ds.uri,
            ds.lance_schema,
            data_storage_version=ds.data_storage_version,
        )


def _scan(ds: Dataset, frag: Fragment, filter) -> pa.Table:
    return ds.scanner(
        filter=filter,
        fragments=[frag],
        with_row_address=True,
        with_row_id=ds.stable_row_ids,
        blob_handling="all_binary",  # rows written again carry their bytes
    ).to_table()


def offsets_of(table: pa.Table) -> np.ndarray:
    """Physical row offsets within their fragment, from a scan's row addresses."""
    return (table.column(ROW_ADDRESS).to_numpy() & _OFFSET_MASK).astype(np.int64)


def _data_columns(ds: Dataset, table: pa.Table) -> pa.Table:
    return table.select(ds.lance_schema.to_dataset_arrow().names)


def _with_retries(
    ds: Dataset, run: Callable[[Dataset], T], retries: int, deadline: float | None = None
) -> T:
    """Run ``run`` against ``ds``, and again against the latest version when a concurrent
    commit preempted it (pylance re-executes an update or merge-insert the same way, up to
    ``conflict_retries`` times, and not past its retry timeout: ``deadline``, a
    ``time.monotonic()`` value)."""
    from .dataset import dataset

    current = ds
    for attempt in range(retries + 1):
        try:
            return run(current)
        except RetryableCommitConflictError:
            if attempt == retries or (deadline is not None and time.monotonic() >= deadline):
                raise
            current = dataset(ds.uri, cache=ds.cache)
    raise AssertionError("unreachable")


def update(
    ds: Dataset,
    values: dict[str, str],
    where: str | None = None,
    *,
    conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
) -> tuple[Dataset, int]:
    """:func:`_update_once`, re-run against the latest version when preempted."""
    return _with_retries(ds, lambda d: _update_once(d, values, where), conflict_retries)


def _update_once(ds: Dataset, values: dict[str, str], where: str | None) -> tuple[Dataset, int]:
    """Set ``values`` (column -> SQL expression over the row's current values) on the rows
    matching ``where`` (all rows when None); returns the new version (committed even when
    no row matched, as pylance does) and the number of rows updated."""
    if not isinstance(values, dict) or not values:
        raise InvalidArgumentError("update needs a non-empty dict of column -> SQL expression")
    schema = ds.lance_schema.to_dataset_arrow()
    unknown = [c for c in values if c not in schema.names]
    if unknown:
        raise SchemaError(f"cannot update unknown columns {unknown} (has {schema.names})")
    compiled = {}
    for name, sql in values.items():
        if not isinstance(sql, str):
            raise InvalidArgumentError(f"the new value of {name!r} must be a SQL expression")
        compiled[name] = filters.compile_value(sql, schema)
    changes = RowChanges(ds)
    count = 0
    for frag in ds.get_fragments():
        rows = _scan(ds, frag, where)
        if not rows.num_rows:
            continue
        computed = pads.dataset(_data_columns(ds, rows)).to_table(
            columns={
                n: compiled[n].expression if n in compiled else pc.field(n) for n in schema.names
            }
        )
        changes.moved.append(computed.cast(schema))
        if ds.stable_row_ids:
            changes.moved_ids.append(rows.column(ROW_ID).to_numpy())
        changes.hide(frag, offsets_of(rows))
        count += rows.num_rows
    ids = {f.name: f.id for f in ds.lance_schema.fields}
    return changes.commit(None, sorted(ids[n] for n in values)), count


def update_rows(
    ds: Dataset,
    values: pa.Table,
    deleted: np.ndarray | None = None,
    inserted: pa.Table | None = None,
) -> tuple[Dataset, int]:
    """Set the rows at the row addresses of ``values``'s ``_rowaddr`` column to its other
    columns (an SQL ``UPDATE`` computes them elsewhere); one Update commit, as
    :func:`update`.  Several new values for one row are refused, as pylance refuses an
    ambiguous merge.  A MERGE also removes the rows at the addresses ``deleted`` and adds
    the rows ``inserted`` in the same commit.  Returns the new version and the rows
    updated, deleted and inserted."""
    if ROW_ADDRESS not in values.column_names:
        raise InvalidArgumentError(f"update_rows needs a {ROW_ADDRESS} column")
    schema = ds.lance_schema.to_dataset_arrow()
    names = [n for n in values.column_names if n != ROW_ADDRESS]
    unknown = [n for n in names if n not in schema.names]
    if unknown or (not names and values.num_rows):
        raise SchemaError(f"cannot update columns {unknown or names} (has {schema.names})")
    addresses = values.column(ROW_ADDRESS).to_numpy().astype(np.uint64)
    if len(np.unique(addresses)) != len(addresses):
        raise InvalidDataError("several new values for one row: the update is ambiguous")
    deleted = np.zeros(0, np.uint64) if deleted is None else np.asarray(deleted, np.uint64)
    renamed = values.rename_columns(
        [_SOURCE_INDEX + n if n != ROW_ADDRESS else n for n in values.column_names]
    )
    changes = RowChanges(ds)
    count = 0
    for frag in ds.get_fragments():
        gone = deleted[(deleted >> np.uint64(32)) == np.uint64(frag.fragment_id)]
        if len(gone):
            count += len(gone)
            gone_offsets = (gone & np.uint64(0xFFFFFFFF)).astype(np.int64)
            changes.hide(frag, np.sort(np.union1d(gone_offsets, _updated_offsets(frag, addresses))))
        mine = addresses[(addresses >> np.uint64(32)) == np.uint64(frag.fragment_id)]
        if not len(mine):
            continue
        rows = _scan(ds, frag, pc.field(ROW_ADDRESS).isin(pa.array(mine, pa.uint64())))
        joined = rows.join(renamed, ROW_ADDRESS, join_type="inner")
        columns = {
            n: joined.column(_SOURCE_INDEX + n) if n in names else joined.column(n)
            for n in schema.names
        }
        changes.moved.append(pa.table(columns).cast(schema))
        if ds.stable_row_ids:
            changes.moved_ids.append(joined.column(ROW_ID).to_numpy())
        if not len(gone):
            changes.hide(frag, np.sort(offsets_of(joined)))
        count += joined.num_rows
    if inserted is not None and inserted.num_rows:
        count += inserted.num_rows
        inserted = inserted.select(schema.names).cast(schema)
    ids = {f.name: f.id for f in ds.lance_schema.fields}
    return changes.commit(inserted, sorted(ids[n] for n in names)), count


def _updated_offsets(frag: Fragment, addresses: np.ndarray) -> np.ndarray:
    """Physical offsets in ``frag`` of the row addresses ``addresses`` (those it holds)."""
    mine = addresses[(addresses >> np.uint64(32)) == np.uint64(frag.fragment_id)]
    return (mine & np.uint64(0xFFFFFFFF)).astype(np.int64)


class MergeInsertBuilder:
    """pylance's ``merge_insert(on)`` builder: match source rows to target rows on key
    columns, then update matched rows, insert unmatched source rows and delete target rows
    the source does not have, as the chosen ``when_*`` clauses say; ``execute`` commits."""

    def __init__(self, ds: Dataset, on: str | Sequence[str]):
        keys = [on] if isinstance(on, str) else list(on)
        if not keys:
            raise InvalidArgumentError("merge_insert needs at least one key column")
        unknown = [k for k in keys if k not in ds.lance_schema.to_dataset_arrow().names]
        if unknown:
            raise SchemaError(f"merge_insert key columns {unknown} are not in the dataset")
        self._ds = ds
        self._on = keys
        self._update: str | bool = False
        self._insert = False
        self._delete: str | bool = False
        self._fail = False
        self._retries = DEFAULT_CONFLICT_RETRIES
        self._timeout: float | None = None

    def when_matched_update_all(self, condition: str | None = None) -> MergeInsertBuilder:
        """Replace matched target rows by their source rows (only where ``condition``, an
        SQL expression over ``target.col`` and ``source.col``, holds)."""
        self._update = condition if condition is not None else True
        return self

    def when_matched_fail(self) -> MergeInsertBuilder:
        """Refuse the whole merge (nothing committed) if any source row matches a target
        row: an insert-only merge that must not meet existing keys."""
        self._fail = True
        return self

    def when_not_matched_insert_all(self) -> MergeInsertBuilder:
        """Insert source rows whose key no target row has."""
        self._insert = True
        return self

    def when_not_matched_by_source_delete(self, condition: str | None = None) -> MergeInsertBuilder:
        """Delete target rows whose key the source lacks (only where ``condition``, an SQL
        expression over the target's columns, holds)."""
        self._delete = condition if condition is not None else True
        return self

    def conflict_retries(self, max_retries: int) -> MergeInsertBuilder:
        """How often to re-run against the latest version when a concurrent commit
        preempted this one (pylance's default: 10)."""
        if not isinstance(max_retries, int) or max_retries < 0:
            raise InvalidArgumentError("conflict_retries must be a non-negative integer")
        self._retries = max_retries
        return self

    def retry_timeout(self, timeout: datetime.timedelta) -> MergeInsertBuilder:
        """Stop re-running after conflicts once this much time has passed since
        ``execute`` began (pylance's ``retry_timeout``)."""
        if not isinstance(timeout, datetime.timedelta) or timeout.total_seconds() < 0:
            raise InvalidArgumentError("retry_timeout must be a non-negative timedelta")
        self._timeout = timeout.total_seconds()
        return self

    def execute(self, data, *, schema: pa.Schema | None = None) -> dict[str, int]:
        """Apply the clauses with ``data`` as source, moving the dataset object to the new
        version; pylance's statistics dict."""
        if self._update is False and not self._insert and self._delete is False and not self._fail:
            raise InvalidArgumentError(
                "merge_insert does nothing: call when_matched_update_all, "
                "when_not_matched_insert_all or when_not_matched_by_source_delete"
            )
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        source = write.to_reader(data, schema).read_all()
        new, stats = _with_retries(
            self._ds, lambda d: self._execute_once(d, source), self._retries, deadline
        )
        self._ds._become(new)
        return stats

    def _execute_once(self, ds: Dataset, source: pa.Table) -> tuple[Dataset, dict[str, int]]:
        target_schema = ds.lance_schema.to_dataset_arrow()
        missing = [n for n in target_schema.names if n not in source.column_names]
        extra = [n for n in source.column_names if n not in target_schema.names]
        if extra or set(missing) & set(self._on) or (missing and self._insert):
            raise SchemaError(
                f"merge_insert source must have the dataset's columns (a subset with the keys "
                f"only to update): missing {missing}, unexpected {extra}"
            )
        for n in missing:  # kept from the target row (filled in when a row is moved)
            source = source.append_column(n, pa.nulls(source.num_rows, target_schema.field(n).type))
        source = source.select(target_schema.names).cast(target_schema)
        source_keys = source.select(self._on).append_column(
            _SOURCE_INDEX, pa.array(np.arange(source.num_rows, dtype=np.int64))
        )
        condition = None
        if isinstance(self._update, str):
            condition = filters.compile_filter(self._update, _pair_schema(target_schema))
        changes = RowChanges(ds)
        matched_sources: list[np.ndarray] = []
        updated = deleted = 0
        for frag in ds.get_fragments():
            rows = _scan(ds, frag, None)
            if not rows.num_rows:
                continue
            keys = rows.select(self._on).append_column(
                _TARGET_INDEX, pa.array(np.arange(rows.num_rows, dtype=np.int64))
            )
            joined = keys.join(source_keys, self._on, join_type="inner")
            t_idx = joined.column(_TARGET_INDEX).to_numpy()
            s_idx = joined.column(_SOURCE_INDEX).to_numpy()
            matched_sources.append(s_idx)
            if self._fail and len(t_idx):
                raise InvalidDataError(
                    f"merge_insert with when_matched_fail: {len(t_idx)} source rows match "
                    f"existing rows on {self._on}"
                )
            if self._update is not False and len(np.unique(t_idx)) != len(t_idx):
                raise InvalidDataError(
                    "ambiguous merge insert: several source rows match the same target row "
                    f"on {self._on}; each target row may match at most one source row"
                )
            hidden = []
            if self._update is not False and len(t_idx):
                if condition is not None:
                    pair = _pair(rows.take(t_idx), source.take(s_idx), target_schema)
                    mask = _mask(pair, condition.expression)
                    t_upd, s_upd = t_idx[mask], s_idx[mask]
                else:
                    t_upd, s_upd = t_idx, s_idx
                if len(t_upd):
                    moved = source.take(s_upd)
                    for n in missing:
                        i = target_schema.get_field_index(n)
                        moved = moved.set_column(i, n, rows.column(n).take(t_upd))
                    changes.moved.append(moved)
                    if ds.stable_row_ids:
                        changes.moved_ids.append(rows.column(ROW_ID).to_numpy()[t_upd])
                    hidden.append(t_upd)
                    updated += len(t_upd)
            if self._delete is not False:
                unmatched = np.setdiff1d(np.arange(rows.num_rows), t_idx)
                if len(unmatched) and isinstance(self._delete, str):
                    cand = _data_columns(ds, rows.take(unmatched))
                    cf = filters.compile_filter(self._delete, target_schema)
                    assert cf is not None  # a filter string always compiles to one
                    unmatched = unmatched[_mask(cand, cf.expression)]
                hidden.append(unmatched)
                deleted += len(unmatched)
            if hidden:
                offsets = offsets_of(rows)[np.concatenate(hidden).astype(np.int64)]
                changes.hide(frag, np.sort(offsets))
        inserted = None
        if self._insert:
            seen = np.concatenate(matched_sources) if matched_sources else np.empty(0, np.int64)
            fresh = np.setdiff1d(np.arange(source.num_rows), seen)
            inserted = source.take(fresh)
        stats = {
            "num_inserted_rows": inserted.num_rows if inserted is not None else 0,
            "num_updated_rows": updated,
            "num_deleted_rows": deleted,
        }
        fields = sorted(f.id for f in ds.lance_schema.fields)
        return changes.commit(inserted, fields), stats


def _mask(table: pa.Table, expression: pc.Expression) -> np.ndarray:
    """Where ``expression`` is true over ``table`` (NULL counts as false, as in SQL)."""
    values = pads.dataset(table).to_table(columns={"m": expression}).column("m")
    return pc.fill_null(values, False).to_numpy(zero_copy_only=False).astype(bool)


def _pair_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field("target", pa.struct(schema)), pa.field("source", pa.struct(schema))])


def _pair(target: pa.Table, source: pa.Table, schema: pa.Schema) -> pa.Table:
    """Matched rows side by side as ``target`` and ``source`` structs, so a condition can say
    ``target.x < source.x``."""
    t = target.select(schema.names).combine_chunks()
    s = source.combine_chunks()
    return pa.table(
        {
            "target": pa.StructArray.from_arrays(
                [t.column(n).combine_chunks() for n in schema.names], fields=list(schema)
            ),
            "source": pa.StructArray.from_arrays(
                [s.column(n).combine_chunks() for n in schema.names], fields=list(schema)
            ),
        }
    )
