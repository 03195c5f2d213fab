"""pylance's ``lance.progress`` module: hooks told when a fragment's data file is begun and
when the fragment is complete, so that a distributed writer can find (and clean up, or
commit) the fragments a crashed worker left behind."""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from . import storage

if TYPE_CHECKING:
    from .table.fragment_metadata import FragmentMetadata


class FragmentWriteProgress(ABC):
    """Subclass and pass as ``progress=`` to ``write_fragments`` / ``LanceFragment.create``:
    ``begin`` runs before a fragment's data file is created (the fragment already names
    it), ``complete`` once the fragment is written."""

    @abstractmethod
    def begin(self, fragment: FragmentMetadata, **kwargs: Any) -> None:
        """A fragment is about to be written (its row count is not known yet)."""

    @abstractmethod
    def complete(self, fragment: FragmentMetadata, **kwargs: Any) -> None:
        """A fragment is written (not yet committed)."""


class NoopFragmentWriteProgress(FragmentWriteProgress):
    """Does nothing (the default)."""

    def begin(self, fragment: FragmentMetadata, **kwargs: Any) -> None:
        pass

    def complete(self, fragment: FragmentMetadata, **kwargs: Any) -> None:
        pass


class FileSystemFragmentWriteProgress(FragmentWriteProgress):
    """Records each fragment under ``base_uri``: ``fragment_<id>.json`` (its metadata, from
    ``begin``) and ``fragment_<id>.in_progress`` (its id and ``metadata``, removed by
    ``complete``) -- what is left of the second after a crash names the fragments to
    clean up."""

    PROGRESS_EXT: str = ".in_progress"

    def __init__(self, base_uri: str | os.PathLike[str], metadata: dict[str, str] | None = None):
        self._base = storage.register(base_uri)
        self._metadata = dict(metadata or {})

    def _in_progress_path(self, fragment: FragmentMetadata) -> str:
        return storage.join(self._base, f"fragment_{fragment.id}{self.PROGRESS_EXT}")

    def _fragment_file(self, fragment: FragmentMetadata) -> str:
        return storage.join(self._base, f"fragment_{fragment.id}.json")

    def begin(self, fragment: FragmentMetadata, **kwargs: Any) -> None:
        state = {"fragment_id": fragment.id, "metadata": self._metadata}
        storage.put(self._in_progress_path(fragment), json.dumps(state).encode())
        storage.put(self._fragment_file(fragment), json.dumps(fragment.to_json()).encode())

    def complete(self, fragment: FragmentMetadata, **kwargs: Any) -> None:
        storage.delete(self._in_progress_path(fragment), missing_ok=True)


__all__ = [
    "FileSystemFragmentWriteProgress",
    "FragmentWriteProgress",
    "NoopFragmentWriteProgress",
]
