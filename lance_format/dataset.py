"""pylance's ``lance.dataset`` names: ``from lance_format.dataset import LanceDataset``.

The classes live in :mod:`lance_format.table` (one concept per module); this module only
gives them the names and the place pylance users import them from, plus the version-level
calls a service makes that pylance keeps inside its Rust core (``find_entry`` then
``open_version``: list ``_versions/`` once per request; ``update_rows``: an SQL UPDATE or
MERGE as one commit).
"""

from __future__ import annotations

from typing import TypedDict

from .table.dataset import (
    Dataset,
    dataset,
    find_entry,
    open_version,
    write_dataset,
    write_fragments,
)
from .table.lance_operation import (
    LANCE_COMMIT_MESSAGE_KEY,
    Index,
    IndexFile,
    LanceOperation,
    Transaction,
)
from .table.mutation import MergeInsertBuilder, update_rows
from .table.scanner import ColumnOrdering, Scanner
from .table.sql import SqlQuery, SqlQueryBuilder
from .table.udf import BatchUDF, batch_udf

LanceDataset = Dataset
LanceScanner = Scanner


class AutoCleanupConfig(TypedDict):
    """``write_dataset(auto_cleanup_options=...)``: every ``interval`` commits, remove the
    versions older than ``older_than_seconds``."""

    interval: int
    older_than_seconds: int


__all__ = [
    "AutoCleanupConfig",
    "LANCE_COMMIT_MESSAGE_KEY",
    "BatchUDF",
    "batch_udf",
    "ColumnOrdering",
    "Index",
    "IndexFile",
    "LanceDataset",
    "LanceOperation",
    "LanceScanner",
    "MergeInsertBuilder",
    "SqlQuery",
    "SqlQueryBuilder",
    "Transaction",
    "dataset",
    "find_entry",
    "open_version",
    "update_rows",
    "write_dataset",
    "write_fragments",
]
