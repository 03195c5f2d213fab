"""``do_put`` with ``"mode": "merge"``: the stream is the source of a ``merge_insert``.

The put command names the key columns and the clauses, as pylance's builder does::

    {"dataset": "t", "mode": "merge", "on": ["id"],
     "when_matched_update_all": true,            # or an SQL condition over target./source.
     "when_not_matched_insert_all": true,
     "when_not_matched_by_source_delete": false} # or true, or an SQL condition

At least one clause is needed.  A merge reads its whole source before matching (as
pylance's does), within the server's put limits; it commits once, with pylance's Update
transaction and conflict retries (see :mod:`lance_format.table.mutation`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from lance_format.validation import check_arrays

from . import permissions
from .catalog import Catalog
from .errors import NotFound
from .wire import PutCommand


@dataclass(frozen=True)
class MergeOptions:
    on: list[str]
    update: bool | str = False
    insert: bool = False
    delete: bool | str = False


def merge_options(cmd: PutCommand) -> MergeOptions:
    """The merge of a put command (:class:`.wire.PutCommand` has checked its clauses)."""
    update, delete = cmd.when_matched_update_all, cmd.when_not_matched_by_source_delete
    return MergeOptions(
        on=cmd.merge_keys,
        update=False if update is None else update,
        insert=cmd.when_not_matched_insert_all is True,
        delete=False if delete is None else delete,
    )


def merge_put(
    catalog: Catalog,
    name: str,
    opts: MergeOptions,
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
    on_rows: Callable[[int, int], None] | None = None,
) -> dict:
    """Run the merge with the stream as its source; returns the put's result JSON."""
    permissions.check_write(name)
    if not catalog.exists(name):
        raise NotFound(f"no dataset named {name!r} to merge into")
    rows = 0

    def counting() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        for b in batches:
            rows += b.num_rows
            if on_rows is not None:
                on_rows(b.num_rows, b.nbytes)
            check_arrays(b)
            yield b

    ds = catalog.open_to_change(name)
    builder = ds.merge_insert(opts.on)
    if opts.update is not False:
        builder.when_matched_update_all(None if opts.update is True else opts.update)
    if opts.insert:
        builder.when_not_matched_insert_all()
    if opts.delete is not False:
        builder.when_not_matched_by_source_delete(None if opts.delete is True else opts.delete)
    stats = builder.execute(pa.RecordBatchReader.from_batches(schema, counting()))
    return {
        "version": ds.version,
        "rows_written": rows,
        "inserted": stats["num_inserted_rows"],
        "updated": stats["num_updated_rows"],
        "deleted": stats["num_deleted_rows"],
    }
