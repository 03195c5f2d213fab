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

import bisect
import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import cachetools
import numpy as np
import pyarrow as pa


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


SEEN_KEYS = 1 << 16  # pages a PageCache remembers having missed, for admission


class PageCache:
    """Decoded pages of hot columns, so repeated reads of a hot dataset skip decoding.

    Entries are what a page decodes to (Arrow arrays plus their validity and offsets),
    keyed by (file identity, column, page, field); the file identity includes what changes
    when a file at the same path is rewritten (size, modification time, column metadata),
    so a reader never gets the pages of another version.  Bounded in bytes (the arrays'
    buffer sizes), least recently used out first: an entry larger than the whole budget is
    never kept; capacity 0 disables the cache.  Thread-safe: decoding happens outside the
    lock, two threads missing the same page both decode it and the second insert wins.

    A page is admitted on its ``admit_after``-th miss (default 2, the second read): a
    one-off scan then costs what it costs without a cache (keeping every page of a cold
    scan means decoding partly read pages whole and faulting in fresh memory for all of
    them, about half as much CPU again), while a page read twice is likely read again.
    Once the cache is full, a page is admitted only if it has been read more often than
    the page it would evict (TinyLFU's rule): repeated scans of more data than the budget
    then keep a stable share of it cached, where plain LRU would evict every page just
    before it is read again and pay the whole-page decode of admission on every scan.
    Read counts halve whenever the memory of missed pages is reset, so old popularity fades.

    *Derived* entries (:meth:`put_derived`) are results made of cached pages, such as a Flight
    server's whole answer to a hot ticket: a slice of a page shares its buffers, so a derived
    entry is charged only for the memory it holds beyond the resident pages, and leaves the
    cache with the first page whose memory it shares (it would otherwise keep that page's
    memory alive, uncounted).  So the bound holds for pages and derived entries together.
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
        self._seen: dict[Hashable, int] = {}  # reads of pages not (yet) admitted
        self._evictions = 0
        self.derived_hits = 0
        self.derived_misses = 0
        self._serial = itertools.count()
        self._new_lru(capacity_bytes)

    def admits(self, key: Hashable) -> bool:
        """Whether a page that just missed should be decoded whole and kept: from its
        ``admit_after``-th miss on, and, when the cache is full, only if it has been read
        more often than the least recently used page.  The count of pages seen is bounded
        (reset when it reaches SEEN_KEYS), so this never grows with the data."""
        if self.admit_after <= 1:
            return True
        with self._lock:
            count = self._seen.get(key, 0) + 1
            admit = count >= self.admit_after
            if admit and self._entries and self._full():
                victim = next(iter(self._entries))
                admit = count > self._reads[victim]
            if admit:
                self._seen.pop(key, None)
                return True
            if len(self._seen) >= SEEN_KEYS:
                self._seen.clear()
                for k in self._reads:  # age: old popularity fades
                    self._reads[k] //= 2
            self._seen[key] = count
            return False

    def _full(self) -> bool:
        """Whether a page of the average size no longer fits."""
        return self._size + self._size // len(self._entries) > self.capacity_bytes

    def _new_lru(self, capacity_bytes: int) -> None:
        self.capacity_bytes = int(capacity_bytes)
        # key -> (value, bytes), least recently used first; reads of each resident page
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._reads: dict[Hashable, int] = {}
        self._size = 0
        # the memory of resident pages, sorted (start, end, serial): what derived entries share
        self._spans: list[tuple[int, int, int]] = []
        self._span_page: dict[int, Hashable] = {}  # serial -> page key
        self._page_spans: dict[Hashable, list[tuple[int, int, int]]] = {}
        self._depends: dict[Hashable, set[Hashable]] = {}  # derived key -> page keys it shares
        self._dependents: dict[Hashable, set[Hashable]] = {}  # page key -> derived keys

    @property
    def enabled(self) -> bool:
        return self.capacity_bytes > 0

    @property
    def currsize(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def holds(self, key: Hashable) -> bool:
        """Whether the page is cached (a look that counts as neither hit nor miss)."""
        with self._lock:
            return key in self._entries

    def get(self, key: Hashable) -> Any | None:
        """The cached page, or None (counted as a miss)."""
        return self._lookup(key, derived=False)

    def put(self, key: Hashable, value: Any) -> None:
        if not self.enabled:
            return
        size = _sizeof(value)
        with self._lock:
            reads = self._drop(key) or self.admit_after
            if size > self.capacity_bytes:
                return  # too large to keep: never leave an older value
            while self._entries and self._size + size > self.capacity_bytes:
                self._drop(next(iter(self._entries)))
                self._evictions += 1
            self._entries[key] = (value, size)
            self._reads[key] = reads
            self._size += size
            spans = []
            for start, end in _merged(_memory_of(value)):
                span = (start, end, next(self._serial))
                bisect.insort(self._spans, span)
                self._span_page[span[2]] = key
                spans.append(span)
            self._page_spans[key] = spans

    def get_derived(self, key: Hashable) -> Any | None:
        """A derived entry (see :meth:`put_derived`), or None; counted apart from pages."""
        return self._lookup(key, derived=True)

    def _lookup(self, key: Hashable, derived: bool) -> Any | None:
        if not self.enabled:
            return None
        with self._lock:
            entry = self._entries.get(key)
            found = entry is not None and (not derived or key in self._depends)
            if derived:
                self.derived_hits += found
                self.derived_misses += not found
            else:
                self.hits += found
                self.misses += not found
            if entry is None or not found:
                return None
            self._entries.move_to_end(key)
            self._reads[key] += 1
            return entry[0]

    def put_derived(self, key: Hashable, value: Any, data: pa.Table) -> bool:
        """Keep ``value``, a result whose Arrow memory is ``data``'s, charged for the buffers
        of ``data`` that no resident page holds (plus a little per array); it is dropped
        with any page it shares memory with.  Returns whether it was kept (not when its own
        memory alone exceeds the budget)."""
        if not self.enabled:
            return False
        buffers = _arrow_memory(data)
        overhead = DERIVED_OVERHEAD * sum(c.num_chunks for c in data.columns)
        with self._lock:
            reads = self._drop(key) or self.admit_after
            while True:
                shared: set[Hashable] = set()
                size = overhead
                for start, end in buffers.items():
                    page = self._page_holding(start, end)
                    if page is None:
                        size += end - start
                    else:
                        shared.add(page)
                if size > self.capacity_bytes:
                    return False
                if self._size + size <= self.capacity_bytes or not self._entries:
                    break
                # evicting may drop a page it shares: then that memory is its own, recount
                self._drop(next(iter(self._entries)))
                self._evictions += 1
            self._entries[key] = (value, size)
            self._reads[key] = reads
            self._size += size
            self._depends[key] = shared
            for page in shared:
                self._dependents.setdefault(page, set()).add(key)
            return True

    def _page_holding(self, start: int, end: int) -> Hashable | None:
        """The resident page whose memory holds [start, end), if any (under the lock)."""
        i = bisect.bisect_right(self._spans, (start, 1 << 64, 0)) - 1
        if i >= 0:
            s, e, serial = self._spans[i]
            if s <= start and end <= e:
                return self._span_page[serial]
        return None

    def _drop(self, key: Hashable) -> int:
        """Remove a resident entry (under the lock); its read count, 0 if it was not kept.
        A page takes the derived entries sharing its memory with it."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return 0
        self._size -= entry[1]
        shared = self._depends.pop(key, None)
        if shared is not None:  # a derived entry
            for page in shared:
                users = self._dependents.get(page)
                if users is not None:
                    users.discard(key)
                    if not users:
                        del self._dependents[page]
        else:
            for span in self._page_spans.pop(key, ()):
                i = bisect.bisect_left(self._spans, span)
                if i < len(self._spans) and self._spans[i] == span:
                    del self._spans[i]
                self._span_page.pop(span[2], None)
            for derived in list(self._dependents.pop(key, ())):
                self._drop(derived)
        return self._reads.pop(key)

    def resize(self, capacity_bytes: int) -> None:
        """Change the budget (0 disables); the cached pages are dropped."""
        if capacity_bytes < 0:
            raise ValueError("capacity_bytes must be >= 0")
        with self._lock:
            self._new_lru(capacity_bytes)

    def clear(self) -> None:
        self.resize(self.capacity_bytes)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "entries": len(self._entries),
                "bytes": self._size,
                "evictions": self._evictions,
                "capacity_bytes": self.capacity_bytes,
                "derived": len(self._depends),
                "derived_hits": self.derived_hits,
                "derived_misses": self.derived_misses,
            }


# bytes charged per array of a derived entry (each column's slice per message: Arrow's
# array data and the references to its buffers)
DERIVED_OVERHEAD = 256


def _arrow_memory(data: pa.Table) -> dict[int, int]:
    """The distinct Arrow buffers a table references: start address -> end address (a
    slice's buffers are its parent's, whole: the memory it keeps alive)."""
    out: dict[int, int] = {}
    for column in data.columns:
        for chunk in column.chunks:
            for buf in chunk.buffers():
                if buf is not None and buf.size:
                    out[buf.address] = max(out.get(buf.address, 0), buf.address + buf.size)
    return out


def _memory_of(value: Any) -> list[tuple[int, int]]:
    """The (start, end) memory ranges of the Arrow and numpy arrays in a cached page
    (its arrays, and the lists, tuples and attributes holding them)."""
    out: list[tuple[int, int]] = []
    pending = [value]
    seen: set[int] = set()
    while pending:
        obj = pending.pop()
        if obj is None or isinstance(obj, (int, float, str, bytes, bool)) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, pa.ChunkedArray):
            pending.extend(obj.chunks)
        elif isinstance(obj, pa.Array):
            for buf in obj.buffers():
                if buf is not None and buf.size:
                    out.append((buf.address, buf.address + buf.size))
        elif isinstance(obj, np.ndarray):
            if obj.nbytes:
                start = obj.__array_interface__["data"][0]
                out.append((start, start + obj.nbytes))
        elif isinstance(obj, (list, tuple)):
            pending.extend(obj)
        elif hasattr(obj, "__dict__"):
            pending.extend(vars(obj).values())
    return out


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping memory ranges joined (an Arrow buffer over a numpy array is one)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


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
