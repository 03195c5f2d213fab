"""Committing fragments that are already written (*staged*): one Append or one Overwrite.

:func:`~lance_format.table.write.write_fragments` writes data files without committing, so a
writer can stream its input first and decide afterwards (a Flight ``do_put`` commits when its
stream ends cleanly; distributed writers stage in many places and commit once).  This module
turns such fragments into the one transaction :func:`~lance_format.table.commit.commit`
checks against concurrent writers.  ``properties`` are stored in the committed transaction
(``Transaction.transaction_properties``), where later writers can find them (e.g. an
idempotency key).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import InvalidArgumentError
from ..pb import table_pb2, transaction_pb2
from ..schema import LanceSchema
from . import commit, manifest

MODES = ("append", "overwrite")


def staged_transaction(
    fragments: Sequence[table_pb2.DataFragment],
    *,
    mode: str,
    read_version: int,
    schema: LanceSchema | None = None,
    schema_metadata: Mapping[str | bytes, bytes] | None = None,
    properties: Mapping[str, str] | None = None,
) -> transaction_pb2.Transaction:
    """The transaction adding ``fragments`` (``append``) or replacing every row with them
    (``overwrite``, which also creates: ``read_version`` 0; it needs ``schema``)."""
    if mode == "append":
        op = {"append": transaction_pb2.Transaction.Append(fragments=list(fragments))}
    elif mode == "overwrite":
        if schema is None:
            raise InvalidArgumentError("an overwrite needs the schema of the new version")
        ow = transaction_pb2.Transaction.Overwrite(
            fragments=list(fragments), schema=schema.to_protos()
        )
        for k, v in (schema_metadata or {}).items():
            ow.schema_metadata[k.decode() if isinstance(k, bytes) else k] = v
        op = {"overwrite": ow}
    else:
        raise InvalidArgumentError(f"mode must be one of {list(MODES)}, not {mode!r}")
    txn = commit.new_transaction(read_version, **op)
    for k, v in (properties or {}).items():
        txn.transaction_properties[k] = v
    return txn


def commit_staged(
    root: str,
    fragments: Sequence[table_pb2.DataFragment],
    *,
    mode: str,
    read_version: int,
    schema: LanceSchema | None = None,
    schema_metadata: Mapping[str | bytes, bytes] | None = None,
    data_storage_version: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> manifest.Manifest:
    """Commit staged ``fragments`` in one conflict-checked transaction against
    ``read_version``; ``data_storage_version`` applies to an overwrite (an append keeps the
    dataset's).  Raises ``CommitConflictError`` when a concurrent commit makes it impossible."""
    txn = staged_transaction(
        fragments,
        mode=mode,
        read_version=read_version,
        schema=schema,
        schema_metadata=schema_metadata,
        properties=properties,
    )
    storage = data_storage_version if mode == "overwrite" else None
    return commit.commit(root, txn, data_storage_version=storage)


__all__ = ["MODES", "commit_staged", "staged_transaction"]
