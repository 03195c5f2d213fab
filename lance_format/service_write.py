"""Writing one version for many concurrent clients: ``write_dataset``'s modes with cleanup of
failed writes, create races and idempotency keys (see :mod:`lance_format.table.dataset_write`).
Public: what a service offers its writers, so that Python users get the same guarantees."""

from __future__ import annotations

from .table.dataset_write import (
    MODES,
    WriteOutcome,
    find_idempotent,
    remove_created_dirs,
    write_version,
)
from .table.write import DEFAULT_MAX_ROWS_PER_FILE, comparable_type

__all__ = [
    "DEFAULT_MAX_ROWS_PER_FILE",
    "MODES",
    "WriteOutcome",
    "comparable_type",
    "find_idempotent",
    "remove_created_dirs",
    "write_version",
]
