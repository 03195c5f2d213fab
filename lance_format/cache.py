"""The caches of the read path: page metadata for random access, and decoded pages.

To read one value with at most two read requests (IOPs), the reader must already know where
chunks start, what the repetition index says and what the dictionary holds.  That metadata is
loaded once (eagerly by ``warm()`` when a server starts, or on first use) and kept here,
bounded by bytes.  Full scans may bypass the cache: they read whole pages
anyway.

The page cache keeps what decoding produced (Arrow arrays), so a dashboard re-reading a hot
dataset costs slicing and transport, not decoding.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from typing import Any

import cachetools


class SearchCache:
    """A thread-safe LRU keyed by (file, column, page); capacity and size in bytes.

    ``pages``, when given, is the decoded-page cache of the readers sharing this cache: a
    server or dataset hands both to every reader it opens in one argument."""

    def __init__(self, capacity_bytes: int = 256 * 1024 * 1024, pages: PageCache | None = None):
        if capacity_bytes < 0:
            raise ValueError("capacity_bytes must be >= 0")
        self.capacity_bytes = capacity_bytes
        self.pages = pages
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

    def page_stats(self) -> dict[str, int]:
        """The stats of the page cache carried here (an empty, disabled one's when none)."""
        return (self.pages if self.pages is not None else PageCache(0)).stats()

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


class _CountingLRU(cachetools.LRUCache):
    """An LRU that counts what it evicts to stay under its size."""

    evictions = 0

    def popitem(self):
        item = super().popitem()
        self.evictions += 1
        return item


SEEN_KEYS = 1 << 16  # pages a PageCache remembers having missed, for admission


class PageCache:
    """Decoded pages of hot columns, so repeated reads of a hot dataset skip decoding.

    Entries are what a page decodes to (Arrow arrays plus their validity and offsets),
    keyed by (file identity, column, page, field); the file identity includes what changes
    when a file at the same path is rewritten (size, modification time, column metadata),
    so a reader never gets the pages of another version.  Bounded in bytes (the arrays'
    buffer sizes): an entry larger than the whole budget is never kept; capacity 0 disables
    the cache.  Thread-safe: decoding happens outside the lock, two threads missing the
    same page both decode it and the second insert wins.

    A page is admitted on its ``admit_after``-th miss (default 2, the second read): a
    one-off scan then costs what it costs without a cache (keeping every page of a cold
    scan means decoding partly read pages whole and faulting in fresh memory for all of
    them, about half as much CPU again), while a page read twice is likely read again.
    """

    def __init__(self, capacity_bytes: int = 0, admit_after: int = 2):
        if capacity_bytes < 0:
            raise ValueError("capacity_bytes must be >= 0")
        if admit_after < 1:
            raise ValueError("admit_after must be >= 1")
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.admit_after = admit_after
        self._seen: dict[Hashable, int] = {}  # misses of pages not (yet) admitted
        self._evicted_before = 0  # evictions of LRUs replaced by resize()
        self._new_lru(capacity_bytes)

    def admits(self, key: Hashable) -> bool:
        """Whether a page that just missed should be decoded whole and kept: true from
        its ``admit_after``-th miss on.  The count of pages seen is bounded (reset when
        it reaches SEEN_KEYS), so this never grows with the data."""
        if self.admit_after <= 1:
            return True
        with self._lock:
            count = self._seen.get(key, 0) + 1
            if count >= self.admit_after:
                self._seen.pop(key, None)
                return True
            if len(self._seen) >= SEEN_KEYS:
                self._seen.clear()
            self._seen[key] = count
            return False

    def _new_lru(self, capacity_bytes: int) -> None:
        self.capacity_bytes = int(capacity_bytes)
        self._lru = _CountingLRU(maxsize=max(1, self.capacity_bytes), getsizeof=_sizeof)

    @property
    def enabled(self) -> bool:
        return self.capacity_bytes > 0

    @property
    def currsize(self) -> int:
        return int(self._lru.currsize)

    def __len__(self) -> int:
        return len(self._lru)

    def get(self, key: Hashable) -> Any | None:
        """The cached page, or None (counted as a miss)."""
        if not self.enabled:
            return None
        with self._lock:
            value = self._lru.get(key)
            if value is None:
                self.misses += 1
            else:
                self.hits += 1
            return value

    def put(self, key: Hashable, value: Any) -> None:
        if not self.enabled:
            return
        with self._lock:
            if _sizeof(value) > self.capacity_bytes:
                self._lru.pop(key, None)  # too large to keep: never leave an older value
            else:
                self._lru[key] = value

    def resize(self, capacity_bytes: int) -> None:
        """Change the budget (0 disables); the cached pages are dropped."""
        if capacity_bytes < 0:
            raise ValueError("capacity_bytes must be >= 0")
        with self._lock:
            self._evicted_before += self._lru.evictions
            self._new_lru(capacity_bytes)

    def clear(self) -> None:
        self.resize(self.capacity_bytes)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "entries": len(self._lru),
                "bytes": self.currsize,
                "evictions": self._evicted_before + self._lru.evictions,
                "capacity_bytes": self.capacity_bytes,
            }


PAGE_CACHE_ENV = "LANCE_PAGE_CACHE_BYTES"


def _env_page_cache_bytes() -> int:
    """Off unless asked for: a library should not hold hundreds of MB behind a user's back
    (the server turns its own cache on, see ``--page-cache-bytes``)."""
    raw = os.environ.get(PAGE_CACHE_ENV, "").strip()
    try:
        return max(0, int(raw)) if raw else 0
    except ValueError:
        return 0


_PAGE_CACHE = PageCache(_env_page_cache_bytes())


def page_cache() -> PageCache:
    """The process's decoded-page cache, shared by every reader that is not given its own
    (sized by ``LANCE_PAGE_CACHE_BYTES`` or :func:`set_page_cache_bytes`; off by default)."""
    return _PAGE_CACHE


def set_page_cache_bytes(capacity_bytes: int) -> None:
    """Resize the process's decoded-page cache; 0 turns it off."""
    _PAGE_CACHE.resize(int(capacity_bytes))
