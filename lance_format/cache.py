"""The search cache: per-page metadata needed for random access, kept in an LRU.

Seed 003 ("Search Cache"): to read one value with at most two IOPs, the reader must already
know where chunks start, what the repetition index says and what the dictionary holds.  That
metadata is loaded once (eagerly by ``warm()``, the seed's initialization phase, or on first
use) and kept here, bounded by bytes.  Full scans may bypass the cache: they read whole pages
anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

import cachetools


class SearchCache:
    """A thread-safe LRU keyed by (file, column, page); capacity and size in bytes."""

    def __init__(self, capacity_bytes: int = 256 * 1024 * 1024):
        if capacity_bytes < 0:
            raise ValueError("capacity_bytes must be >= 0")
        self.capacity_bytes = capacity_bytes
        self._lru: cachetools.LRUCache = cachetools.LRUCache(
            maxsize=capacity_bytes, getsizeof=_sizeof
        )
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def currsize(self) -> int:
        return int(self._lru.currsize)

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._lru

    def get_or_load(self, key: Hashable, loader: Callable[[], Any]) -> Any:
        with self._lock:
            try:
                value = self._lru[key]
            except KeyError:
                pass
            else:
                self.hits += 1
                return value
            self.misses += 1
        value = loader()
        self.put(key, value)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        if _sizeof(value) > self.capacity_bytes:
            return  # too large to keep; the caller still gets it
        with self._lock:
            self._lru[key] = value

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()

    def stats(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "entries": len(self._lru),
            "bytes": self.currsize,
            "capacity_bytes": self.capacity_bytes,
        }


def _sizeof(value: Any) -> int:
    return int(getattr(value, "nbytes", 64))
