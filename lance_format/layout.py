"""The directory layout of a Lance dataset, as a service sees it: which versions exist, where
data files and tags live.  Public: a catalog lists and serves versions without opening a
manifest, and these names stay stable while :mod:`lance_format.table` changes."""

from __future__ import annotations

from .table.paths import (
    DATA_DIR,
    VERSIONS_DIR,
    VersionEntry,
    data_file_path,
    find_version,
    latest_version,
    list_versions,
    tag_path,
)

__all__ = [
    "DATA_DIR",
    "VERSIONS_DIR",
    "VersionEntry",
    "data_file_path",
    "find_version",
    "latest_version",
    "list_versions",
    "tag_path",
]
