"""pylance's ``lance.fragment`` module: fragments and their metadata, for the low-level
write-then-commit API (``write_fragments`` / ``LanceFragment.create``, then
``LanceDataset.commit`` with a ``LanceOperation``)."""

from __future__ import annotations

from .table.fragment import Fragment as LanceFragment
from .table.fragment_metadata import DataFile, DeletionFile, FragmentMetadata
from .table.lance_operation import write_fragments

__all__ = ["DataFile", "DeletionFile", "FragmentMetadata", "LanceFragment", "write_fragments"]
