"""One storage layer for every byte of a dataset.

Everything in the format library names files by path strings (local paths, ``memory://``,
``s3://bucket/key``) and does its IO through the functions here, which resolve the path
to a backend (:mod:`.local`, :mod:`.memory`, :mod:`.s3`) and call it.  Commits go through a
commit handler (:mod:`.commit`): put-if-not-exists on stores that have it, the external
manifest store (:mod:`.external`) on ``s3+ddb://``.
"""

from __future__ import annotations

import os

from ..errors import ObjectNotFoundError
from ..io import IOStats, RandomAccessFile
from .base import ObjectMeta, ObjectStore, ObjectWriter, StoreFile
from .local import LocalFile, LocalStore
from .registry import key_prefix, normalize, register, resolve, scheme_of

__all__ = [
    "IOStats",
    "LocalFile",
    "LocalStore",
    "ObjectMeta",
    "ObjectStore",
    "ObjectWriter",
    "StoreFile",
    "copy",
    "create",
    "delete",
    "delete_prefix",
    "exists",
    "file_size",
    "head",
    "is_dir",
    "join",
    "list_files",
    "list_dir",
    "list_names",
    "local_durability",
    "move_tree",
    "outermost_missing",
    "prune",
    "realpath",
    "normalize",
    "open_file",
    "put",
    "put_if_not_exists",
    "read_bytes",
    "register",
    "rename",
    "resolve",
    "scheme_of",
    "stats",
]


def local_durability(durable: bool) -> None:
    """Whether local writes fsync each file before it becomes visible (see
    :mod:`.local`): off by default, as pylance's local store; a server that acknowledges
    commits to clients turns it on so an acknowledged commit survives a power loss."""
    from .registry import LOCAL

    LOCAL.durable = bool(durable)


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for any kind of path (object keys always use ``/``)."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p)])


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def dirname(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[0]


def stats(path: str) -> IOStats:
    """The request and byte counters of the store holding ``path``."""
    return resolve(path)[0].stats


def open_file(
    path: str | os.PathLike[str], stats: IOStats | None = None, size: int | None = None
) -> RandomAccessFile:
    """A file for positional reads.  ``size``, when the caller knows it (a manifest
    records data file sizes), saves the HEAD request on object stores."""
    store, key = resolve(path)
    if isinstance(store, LocalStore):
        return store.open(key, stats)
    return StoreFile(store, key, stats, size)


def read_bytes(path: str) -> bytes:
    """The whole object (metadata files are small)."""
    store, key = resolve(path)
    return store.get(key)


def put(path: str, data: bytes) -> None:
    """Write or replace ``path`` atomically: readers see the old or the new bytes."""
    store, key = resolve(path)
    store.put(key, data)


def put_if_not_exists(path: str, data: bytes) -> bool:
    """Create ``path`` with ``data`` atomically; False (and nothing written) if it exists."""
    store, key = resolve(path)
    return store.put_if_not_exists(key, data)


def create(path: str) -> ObjectWriter:
    """A streamed write (temporary file then rename locally, multipart on S3)."""
    store, key = resolve(path)
    return store.create(key)


def put_new(path: str, data: bytes) -> None:
    """Write a new object under a fresh unique name that no reader looks at before a
    committed manifest names it (a transaction file): in place on a local disk."""
    store, key = resolve(path)
    store.put_new(key, data)


def create_new(path: str) -> ObjectWriter:
    """:func:`create` of a new object under a fresh unique name that no reader looks at
    before a committed manifest names it (a data file): in place on a local disk."""
    store, key = resolve(path)
    return store.create_new(key)


def list_names(directory: str) -> list[str]:
    """Names directly under ``directory`` (empty if there is none)."""
    store, key = resolve(directory)
    return store.list_names(key)


def list_files(directory: str) -> list[ObjectMeta]:
    """Every object under ``directory``, recursively, with full paths as keys."""
    store, key = resolve(directory)
    head = key_prefix(directory)
    return [ObjectMeta(head + m.key, m.size, m.mtime) for m in store.list(key)]


def is_dir(path: str) -> bool:
    store, key = resolve(path)
    return store.is_dir(key)


def exists(path: str) -> bool:
    store, key = resolve(path)
    return store.exists(key)


def head(path: str) -> ObjectMeta | None:
    """Size, time and ETag of the object at ``path`` (None if there is none)."""
    store, key = resolve(path)
    return store.head(key)


def file_size(path: str) -> int:
    store, key = resolve(path)
    return store.size(key)


def delete(path: str, *, missing_ok: bool = False) -> None:
    store, key = resolve(path)
    store.delete(key, missing_ok=missing_ok)


def delete_prefix(path: str) -> int:
    """Delete everything under ``path``; the bytes freed."""
    store, key = resolve(path)
    return store.delete_prefix(key)


def list_dir(directory: str) -> tuple[list[str], list[str]]:
    """(file names, sub-directory names) directly under ``directory``."""
    store, key = resolve(directory)
    return store.list_dir(key)


def prune(path: str, subdirs: tuple[str, ...] = (), stop: str | None = None) -> None:
    """Remove empty local directories (``subdirs`` of ``path``, then ``path`` and its
    parents below ``stop``); object stores have no directories, so nothing to do there."""
    store, key = resolve(path)
    if isinstance(store, LocalStore):
        store.prune(key, subdirs, normalize(stop) if stop is not None else None)


def outermost_missing(path: str) -> str | None:
    """The outermost local directory of ``path`` a write would create (None on object
    stores, which have no directories)."""
    store, key = resolve(path)
    return store.outermost_missing(key) if isinstance(store, LocalStore) else None


def realpath(path: str) -> str:
    """Symlinks resolved for local paths; other URIs are already canonical."""
    store, key = resolve(path)
    return os.path.realpath(key) if isinstance(store, LocalStore) else normalize(path)


def copy(src: str, dst: str, *, move: bool = False) -> None:
    """Copy (or, with ``move``, rename) an object, across stores if need be."""
    store, skey = resolve(src)
    dstore, dkey = resolve(dst)
    if dstore is store:
        (store.rename if move else store.copy)(skey, dkey)
        return
    dstore.put(dkey, store.get(skey))
    if move:
        store.delete(skey, missing_ok=True)


def rename(src: str, dst: str) -> None:
    copy(src, dst, move=True)


def move_tree(src: str, dst: str, *, last: str = "") -> None:
    """Move everything under ``src`` to ``dst`` (which must not exist).  Locally one rename
    of the directory (atomic).  On object stores every object is copied, those under
    ``src/last`` after the others (so the copy is whole once they appear), then the sources
    deleted, those under ``last`` first.  ObjectNotFoundError if ``src`` holds nothing."""
    store, skey = resolve(src)
    dstore, dkey = resolve(dst)
    if isinstance(store, LocalStore) and dstore is store:
        store.rename(skey, dkey)
        return
    found = list_files(src)
    if not found:
        raise ObjectNotFoundError("nothing to move", path=src)
    head = normalize(src) + "/"
    tail = f"{head}{last.strip('/')}/" if last else None
    ordered = sorted(found, key=lambda m: tail is not None and m.key.startswith(tail))
    for meta in ordered:
        copy(meta.key, join(dst, meta.key[len(head) :]))
    for meta in reversed(ordered):
        delete(meta.key, missing_ok=True)
