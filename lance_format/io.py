"""The small IO layer every reader goes through.

Positional reads only (``read_at``), so an object-store backend can be added by implementing
:class:`RandomAccessFile`.  Every request is counted, which lets tests prove that random
access reads only the chunks it needs.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Protocol

from .errors import CorruptFileError, LanceIOError


@dataclass
class IOStats:
    """Requests and bytes read through one file handle (or shared by several)."""

    requests: int = 0
    bytes_read: int = 0

    def reset(self) -> None:
        self.requests = 0
        self.bytes_read = 0


class RandomAccessFile(Protocol):
    path: str
    size: int
    stats: IOStats

    def read_at(self, offset: int, length: int) -> bytes: ...

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]: ...

    def close(self) -> None: ...


class LocalFile:
    """A local file read with ``os.pread`` (thread-safe: no shared file position)."""

    # Ranges closer than this are fetched in one request by read_ranges.
    COALESCE_GAP = 4096

    def __init__(self, path: str | os.PathLike[str], stats: IOStats | None = None):
        self.path = os.fspath(path)
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
            self.size = os.fstat(self._fd).st_size
        except OSError as exc:
            raise LanceIOError(f"cannot open: {exc.strerror}", path=self.path) from exc
        self.stats = stats if stats is not None else IOStats()
        self._lock = threading.Lock()

    def read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise CorruptFileError(
                f"read of {length} bytes at offset {offset} is outside the file "
                f"({self.size} bytes)",
                path=self.path,
            )
        if length == 0:
            return b""
        try:
            data = os.pread(self._fd, length, offset)
        except OSError as exc:
            raise LanceIOError(f"read failed: {exc.strerror}", path=self.path) from exc
        if len(data) != length:
            raise LanceIOError(
                f"short read: wanted {length} bytes at {offset}, got {len(data)}", path=self.path
            )
        with self._lock:
            self.stats.requests += 1
            self.stats.bytes_read += length
        return data

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Read several ranges, merging ones that are close together into one request."""
        if not ranges:
            return []
        order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
        out: list[bytes] = [b""] * len(ranges)
        group: list[int] = []
        g_start = g_end = 0

        def flush() -> None:
            blob = self.read_at(g_start, g_end - g_start)
            if len(group) == 1:  # the common case: no copy
                out[group[0]] = blob
                return
            view = memoryview(blob)
            for i in group:
                off, ln = ranges[i]
                out[i] = bytes(view[off - g_start : off - g_start + ln])

        for i in order:
            off, ln = ranges[i]
            if group and off <= g_end + self.COALESCE_GAP:
                g_end = max(g_end, off + ln)
                group.append(i)
            else:
                if group:
                    flush()
                group, g_start, g_end = [i], off, off + ln
        flush()
        return out

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> LocalFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def open_file(path: str | os.PathLike[str], stats: IOStats | None = None) -> LocalFile:
    """Open a file for positional reads; the single place to add other backends."""
    return LocalFile(path, stats)
