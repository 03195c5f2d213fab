"""The small IO layer every reader goes through.

Positional reads only (``read_at`` / ``read_ranges``); the backends live in
:mod:`lance_format.storage`.  Every request is counted, which lets tests prove that random
access reads only the chunks it needs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol


@dataclass
class IOStats:
    """Requests and bytes moved through one file handle or one store (or shared by several)."""

    requests: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    def reset(self) -> None:
        self.requests = 0
        self.bytes_read = 0
        self.bytes_written = 0


class RandomAccessFile(Protocol):
    path: str
    size: int
    stats: IOStats

    def read_at(self, offset: int, length: int) -> bytes: ...

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]: ...

    def close(self) -> None: ...


def open_file(
    path: str | os.PathLike[str], stats: IOStats | None = None, size: int | None = None
) -> RandomAccessFile:
    """Open a file for positional reads on whichever store holds it (see
    :mod:`lance_format.storage`)."""
    from . import storage  # the storage package builds on this module

    return storage.open_file(path, stats, size)
