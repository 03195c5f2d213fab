"""Tags by name under ``_refs/tags``, with the contents pylance's namespace API reports
(``Dataset.tags`` is pylance's ``Tags`` view of the same files).  Public: a service
creates, moves, reads and resolves tags by dataset path without opening the dataset."""

from __future__ import annotations

from .table.tags import (
    TagContents,
    check_valid_tag,
    create_tag,
    delete_tag,
    read_all_tags,
    read_tag,
    resolve_tag,
    update_tag,
)

__all__ = [
    "TagContents",
    "check_valid_tag",
    "create_tag",
    "delete_tag",
    "read_all_tags",
    "read_tag",
    "resolve_tag",
    "update_tag",
]
