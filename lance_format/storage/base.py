"""The object-store interface every byte of a dataset goes through.

Modelled on pyiceberg's ``FileIO`` and Lance's ``ObjectStore``: a store addresses objects by
a key (a ``/``-separated string), reads byte ranges, writes whole objects atomically, creates
objects only if they do not exist (the commit primitive), lists by prefix, deletes, copies
and renames.  A backend is one subclass in one module; every request is counted in
``stats`` so tests and benchmarks can prove how many round trips an operation costs.
"""

from __future__ import annotations

import builtins
import threading
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import CorruptFileError, LanceIOError, ObjectNotFoundError
from ..io import IOStats


@dataclass(frozen=True)
class ObjectMeta:
    """One listed object: its key, size in bytes and modification time (epoch seconds)."""

    key: str
    size: int
    mtime: float
    e_tag: str | None = None  # as the store reports it (clients compare it between lists)


class ObjectWriter(ABC):
    """A streamed upload that becomes visible, whole, only on :meth:`commit`."""

    @abstractmethod
    def write(self, data: bytes | memoryview) -> None: ...

    def finish(self) -> None:
        """No more bytes will come; resources may be released before :meth:`commit`."""
        return None

    @abstractmethod
    def commit(self) -> None:
        """Make the object visible under its key (replacing any object there)."""

    @abstractmethod
    def abort(self) -> None:
        """Discard everything written; nothing appears under the key."""


def coalesce(ranges: list[tuple[int, int]], gap: int) -> list[tuple[int, int, list[int]]]:
    """Group ``(offset, length)`` ranges closer than ``gap`` bytes into single requests:
    ``(start, end, indices)`` per request, in offset order."""
    order = sorted(range(len(ranges)), key=ranges.__getitem__)  # by offset (then length)
    groups: list[tuple[int, int, list[int]]] = []
    for i in order:
        off, ln = ranges[i]
        if groups and off <= groups[-1][1] + gap:
            start, end, members = groups[-1]
            members.append(i)  # in place: copying would make many ranges quadratic
            groups[-1] = (start, max(end, off + ln), members)
        else:
            groups.append((off, off + ln, [i]))
    return groups


def split_groups(
    ranges: list[tuple[int, int]], groups: list[tuple[int, int, list[int]]], blobs: list[bytes]
) -> list[bytes]:
    """The bytes of every range, cut out of the coalesced request results."""
    out: list[bytes] = [b""] * len(ranges)
    for (start, _end, members), blob in zip(groups, blobs, strict=True):
        if len(members) == 1 and ranges[members[0]][1] == len(blob):
            out[members[0]] = bytes(blob)  # the common case: no slicing
            continue
        view = memoryview(blob)
        for i in members:
            off, ln = ranges[i]
            out[i] = bytes(view[off - start : off - start + ln])
    return out


_IO_POOL: ThreadPoolExecutor | None = None
_IO_POOL_LOCK = threading.Lock()
IO_THREADS = 32


def io_pool() -> ThreadPoolExecutor:
    """Threads for waiting on remote stores: requests of independent columns overlap, so a
    ``take`` costs the round trips of one column, not of all of them (CPU-bound decoding
    keeps its own, core-sized pool)."""
    global _IO_POOL
    with _IO_POOL_LOCK:
        if _IO_POOL is None:
            _IO_POOL = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="lance-io")
        return _IO_POOL


class ObjectStore(ABC):
    """One storage backend.  Keys never start with ``/`` except on the local file system,
    where the key is the absolute path."""

    #: requests cost a network round trip: worth issuing concurrently
    remote: bool = False

    #: the URI scheme this store serves (``file``, ``memory``, ``s3``)
    scheme: str = ""
    #: ranges closer than this are fetched with one request
    coalesce_gap: int = 4096
    #: how many ranged requests of one read_ranges call run at the same time
    max_concurrency: int = 1

    def __init__(self) -> None:
        self.stats = IOStats()
        self._stats_lock = threading.Lock()

    def count(self, requests: int = 1, read: int = 0, written: int = 0) -> None:
        """Record requests made and bytes moved (thread-safe)."""
        with self._stats_lock:
            self.stats.requests += requests
            self.stats.bytes_read += read
            self.stats.bytes_written += written

    # -- reads -----------------------------------------------------------------------------

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The whole object; LanceIOError if it does not exist."""

    @abstractmethod
    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (one request)."""

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Several ranges: nearby ones merged, the resulting requests run concurrently."""
        if not ranges:
            return []
        groups = coalesce(ranges, self.coalesce_gap)
        spans = [(start, end - start) for start, end, _ in groups]
        if len(spans) == 1 or self.max_concurrency <= 1:
            blobs = [self.get_range(key, off, ln) for off, ln in spans]
        else:
            with ThreadPoolExecutor(min(self.max_concurrency, len(spans))) as pool:
                blobs = list(pool.map(lambda s: self.get_range(key, *s), spans))
        return split_groups(ranges, groups, blobs)

    @abstractmethod
    def head(self, key: str) -> ObjectMeta | None:
        """Size and time of the object, or None if it does not exist."""

    def size(self, key: str) -> int:
        meta = self.head(key)
        if meta is None:
            raise ObjectNotFoundError("file not found", path=self.uri(key))
        return meta.size

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    @abstractmethod
    def list(self, prefix: str) -> list[ObjectMeta]:
        """Every object under the directory ``prefix`` (recursive; keys are full keys)."""

    def list_names(self, prefix: str) -> builtins.list[str]:
        """Names directly under the directory ``prefix`` (objects and sub-directories)."""
        base = prefix.rstrip("/") + "/"
        names = {m.key[len(base) :].split("/", 1)[0] for m in self.list(prefix)}
        return sorted(names)

    def list_dir(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        """(object names, sub-directory names) directly under ``prefix``."""
        base = prefix.rstrip("/") + "/" if prefix else ""
        files: set[str] = set()
        dirs: set[str] = set()
        for m in self.list(prefix):
            head, sep, _ = m.key[len(base) :].partition("/")
            (dirs if sep else files).add(head)
        return sorted(files), sorted(dirs)

    def is_dir(self, prefix: str) -> bool:
        """Whether any object lives under ``prefix``."""
        return bool(self.list(prefix))

    # -- writes ----------------------------------------------------------------------------

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write (or replace) the object atomically: readers see old or new bytes."""

    @abstractmethod
    def put_if_not_exists(self, key: str, data: bytes) -> bool:
        """Create the object atomically; False, and nothing written, if the key exists."""

    @abstractmethod
    def create(self, key: str) -> ObjectWriter:
        """A streamed upload for large objects (data files)."""

    # An object under a fresh unique name that nothing reads before a committed manifest
    # names it (a dataset's data and transaction files) need not appear whole: a store may
    # write it in place.  A writer that stops half-way leaves an unreferenced object, as it
    # leaves an unreferenced whole one when it stops before its commit; cleanup removes
    # both.  By default these are the atomic writes above.

    def put_new(self, key: str, data: bytes) -> None:
        """:meth:`put` of an object under a fresh name (see above); an object already
        there (the name was not fresh after all) is replaced atomically, as by :meth:`put`."""
        self.put(key, data)

    def create_new(self, key: str) -> ObjectWriter:
        """:meth:`create` of an object under a fresh name (see above; one already there
        is replaced on commit, as by :meth:`create`)."""
        return self.create(key)

    @abstractmethod
    def delete(self, key: str, *, missing_ok: bool = False) -> None: ...

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; the bytes freed."""
        freed = 0
        for meta in self.list(prefix):
            self.delete(meta.key, missing_ok=True)
            freed += meta.size
        return freed

    @abstractmethod
    def copy(self, src: str, dst: str) -> None:
        """Copy an object (replacing ``dst``)."""

    def rename(self, src: str, dst: str) -> None:
        """Move an object (replacing ``dst``); a copy then a delete where there is no
        native rename."""
        self.copy(src, dst)
        self.delete(src, missing_ok=True)

    # -- naming ----------------------------------------------------------------------------

    @abstractmethod
    def uri(self, key: str) -> str:
        """The full URI of ``key`` (what users and error messages see)."""


def check_range(path: str, size: int, offset: int, length: int) -> None:
    """Refuse a read outside the object before any request is made."""
    if offset < 0 or length < 0 or offset + length > size:
        raise CorruptFileError(
            f"read of {length} bytes at offset {offset} is outside the file ({size} bytes)",
            path=path,
        )


class StoreFile:
    """A :class:`~lance_format.io.RandomAccessFile` over one object of a store.

    The size is known up front (from the manifest or one HEAD), so a read costs exactly
    the requests it needs."""

    def __init__(
        self, store: ObjectStore, key: str, stats: IOStats | None = None, size: int | None = None
    ):
        self.store = store
        self.key = key
        self.remote = store.remote
        self.path = store.uri(key)
        self.size = store.size(key) if size is None else size
        self.stats = stats if stats is not None else IOStats()
        self._lock = threading.Lock()

    def _count(self, requests: int, nbytes: int) -> None:
        with self._lock:
            self.stats.requests += requests
            self.stats.bytes_read += nbytes

    def read_at(self, offset: int, length: int) -> bytes:
        check_range(self.path, self.size, offset, length)
        if length == 0:
            return b""
        data = self.store.get_range(self.key, offset, length)
        if len(data) != length:
            raise LanceIOError(
                f"short read: wanted {length} bytes at {offset}, got {len(data)}", path=self.path
            )
        self._count(1, length)
        return data

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Nearby ranges merged into one request; the requests issued concurrently."""
        if not ranges:
            return []
        for off, ln in ranges:
            check_range(self.path, self.size, off, ln)
        out = self.store.get_ranges(self.key, ranges)
        groups = coalesce(ranges, self.store.coalesce_gap)
        self._count(len(groups), sum(end - start for start, end, _ in groups))
        return out

    def close(self) -> None:
        pass

    def __enter__(self) -> StoreFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
