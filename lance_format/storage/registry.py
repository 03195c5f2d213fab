"""URIs to stores: which backend serves a path, with which options.

Paths stay plain strings everywhere in the format library (a local path, ``memory://...``,
``s3://bucket/key``); this module maps one to ``(store, key)``.  Opening a dataset with
``storage_options`` registers its root, so every path under the root reaches the store
configured for it; paths under no registered root get a store built from the environment
(``AWS_*`` variables), as pylance does."""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass
from urllib.parse import parse_qs

from ..errors import InvalidArgumentError, UnsupportedError
from .base import ObjectStore
from .local import LocalStore
from .memory import MemoryStore

LOCAL = LocalStore()
MEMORY = MemoryStore()

S3_SCHEMES = ("s3", "s3a", "s3+ddb")
# the query parameter pylance reads the DynamoDB table name from
DDB_TABLE_PARAM = "ddbTableName"


@dataclass(frozen=True)
class Mount:
    """A registered dataset root: its store and, for ``s3+ddb://``, the external manifest
    store's table name and options."""

    root: str
    store: ObjectStore
    ddb_table: str | None = None
    options: tuple[tuple[str, str], ...] = ()


_lock = threading.Lock()
_mounts: dict[str, Mount] = {}
_s3_stores: dict[tuple[str, tuple[tuple[str, str], ...]], ObjectStore] = {}


def scheme_of(path: str) -> str:
    """``file`` for local paths, else the URI scheme (lower case)."""
    head, sep, _ = path.partition("://")
    return head.lower() if sep else "file"


def split_query(uri: str) -> tuple[str, dict[str, str]]:
    """``s3+ddb://b/p?ddbTableName=T`` -> (``s3+ddb://b/p``, {"ddbTableName": "T"})."""
    base, _, query = uri.partition("?")
    return base, {k: v[-1] for k, v in parse_qs(query).items()}


def normalize(uri: str | os.PathLike[str]) -> str:
    """The canonical form of a dataset or file URI: ``~`` expanded, ``file://`` stripped,
    no trailing ``/``, query strings removed (see :func:`register`)."""
    text = os.fspath(uri)
    if not isinstance(text, str):
        raise InvalidArgumentError(f"a path must be text, got {type(text).__name__}")
    return _normalize(text)


def _normalize(text: str) -> str:
    """:func:`normalize` of a string; paths with ``~`` are expanded each time (``HOME`` may
    change), others kept, since every storage call resolves its path."""
    return _canonical(text) if "~" in text else _normalize_kept(text)


def _canonical(text: str) -> str:
    scheme = scheme_of(text)
    if scheme == "file":
        local = text.partition("://")[2] if "://" in text else text
        local = os.path.expanduser(local)
        return local.rstrip("/") or "/"
    base = split_query(text)[0]
    raw = base.partition("://")[2]
    rest = raw.strip("/")
    if scheme == "memory":
        return f"memory://{rest}"
    if scheme in S3_SCHEMES:
        if not rest or raw.startswith("/"):
            raise InvalidArgumentError(f"{text!r} names no bucket")
        return f"{scheme}://{rest}"
    raise UnsupportedError(
        f"unsupported storage scheme {scheme}:// (supported: local paths, file://, memory://, "
        "s3://, s3+ddb://)"
    )


_normalize_kept = functools.lru_cache(maxsize=4096)(_canonical)  # errors are not kept


def _frozen(options: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    """Options as a hashable key, values as text (``True`` -> ``"true"``, as pylance takes)."""

    def text(value: object) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    return tuple(sorted((str(k), text(v)) for k, v in (options or {}).items()))


def _s3_store(bucket: str, options: tuple[tuple[str, str], ...]) -> ObjectStore:
    from .s3 import S3Store

    with _lock:
        store = _s3_stores.get((bucket, options))
        if store is None:
            store = _s3_stores[(bucket, options)] = S3Store(bucket, dict(options))
        return store


def register(uri: str | os.PathLike[str], storage_options: dict[str, str] | None = None) -> str:
    """Note the store (and options) for a dataset root; returns the normalized root.

    Local and memory roots need nothing.  An ``s3+ddb://`` root must name its DynamoDB
    table (``?ddbTableName=T``)."""
    if storage_options is not None and not isinstance(storage_options, dict):
        raise InvalidArgumentError("storage_options must be a dict of strings")
    text = os.fspath(uri)
    root = normalize(text)
    scheme = scheme_of(root)
    if scheme not in S3_SCHEMES:
        return root
    options = _frozen(storage_options)
    table = split_query(text)[1].get(DDB_TABLE_PARAM)
    enclosing = mount_of(root)
    same = storage_options is None or (enclosing is not None and options == enclosing.options)
    if enclosing is not None and table is None and same:
        return root  # under a registered root with no other options: the root's store serves
    with _lock:
        known = _mounts.get(root)
    if scheme == "s3+ddb" and table is None:
        if known is not None and known.ddb_table:
            table = known.ddb_table
        else:
            raise InvalidArgumentError(
                f"{text!r}: an s3+ddb:// URI must name its DynamoDB table (?{DDB_TABLE_PARAM}=...)"
            )
    if known is not None and storage_options is None and table == known.ddb_table:
        return root  # re-opened without options: keep the ones it was opened with
    bucket = root.partition("://")[2].split("/", 1)[0]
    mount = Mount(root, _s3_store(bucket, options), table, options)
    with _lock:
        _mounts[root] = mount
    return root


def mount_of(path: str) -> Mount | None:
    """The registered root holding ``path`` (the longest match), if any."""
    with _lock:
        best = None
        for root, mount in _mounts.items():
            if (path == root or path.startswith(root + "/")) and (
                best is None or len(root) > len(best.root)
            ):
                best = mount
        return best


def resolve(path: str | os.PathLike[str]) -> tuple[ObjectStore, str]:
    """The store holding ``path`` and the key of ``path`` in it."""
    text = os.fspath(path)
    scheme = scheme_of(text)
    if scheme == "file":
        return LOCAL, _normalize(text)
    rest = text.partition("://")[2]
    if scheme == "memory":
        return MEMORY, rest.strip("/")
    if scheme in S3_SCHEMES:
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise InvalidArgumentError(f"{text!r} names no bucket")
        mount = mount_of(text)
        store = mount.store if mount is not None else _s3_store(bucket, ())
        return store, key.strip("/")
    normalize(text)  # raises the unsupported-scheme error
    raise AssertionError("unreachable")


def key_prefix(path: str) -> str:
    """What precedes a key in the paths of ``path``'s store: ``""`` for local paths (keys
    are paths), ``memory://``, ``s3://bucket/``."""
    scheme = scheme_of(path)
    if scheme == "file":
        return ""
    rest = path.partition("://")[2]
    if scheme == "memory":
        return "memory://"
    return f"{path.partition('://')[0]}://{rest.partition('/')[0]}/"
