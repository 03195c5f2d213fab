"""Namespace and table identifiers over the catalog's root, laid out as pylance's ``dir``
namespace lays out a root.

An identifier is a list of names, written joined by a delimiter (``$`` unless the request
says otherwise; the delimiter alone is the root namespace).  A namespace is a directory (an
object-store prefix) under the root that is not a dataset; CreateNamespace writes an empty
marker object ``<ns>/.lance-namespace`` in it, so an empty namespace exists on object stores,
which have no directories (locally the marker sits in the new directory; directories without
one are namespaces too).  Every listing and check goes through :mod:`lance_format.storage`; the table ``t`` of namespace ``ns`` is the dataset directory
``ns/t.lance`` (what CreateTable makes, and exactly pylance's layout for tables of the root
namespace).  Datasets Flight already serves under names without the suffix
(``nycflights13/flights``) are the tables of their parent directory too, so the REST view
holds every dataset the Flight catalog names: ``nycflights13$flights`` is the Flight
dataset ``nycflights13/flights``, ``ns$t`` created over REST is the Flight dataset
``ns/t.lance``.  Every name goes through :meth:`Catalog.path_of`, so the REST view is
confined to the root by the same rules as Flight.
"""

from __future__ import annotations

from dataclasses import dataclass

from lance_namespace.errors import ErrorCode

from lance_format import layout, storage

from .. import permissions
from ..catalog import Catalog
from ..errors import BadRequest
from .errors import RestError

DEFAULT_DELIMITER = "$"
NAMESPACE_MARKER = ".lance-namespace"  # hidden: never listed as a namespace or a table
TABLE_SUFFIX = ".lance"
MAX_ID_PARTS = 64


def parse_id(raw: str, delimiter: str | None) -> list[str]:
    """The identifier in a route (``a$b``; the delimiter alone is the root: ``[]``)."""
    delim = delimiter or DEFAULT_DELIMITER
    if raw == delim:
        return []
    parts = raw.split(delim)
    if len(parts) > MAX_ID_PARTS or any(not p for p in parts):
        raise RestError(ErrorCode.INVALID_INPUT, f"malformed identifier {raw!r}")
    return parts


def join_id(parts: list[str], delimiter: str | None = None) -> str:
    return (delimiter or DEFAULT_DELIMITER).join(parts) if parts else DEFAULT_DELIMITER


@dataclass(frozen=True)
class TableRef:
    """A table's identifier, its catalog name (``ns/t.lance``) and its directory."""

    id: list[str]
    name: str
    path: str

    @property
    def namespace(self) -> list[str]:
        return self.id[:-1]


class Layout:
    """Namespaces and tables of the catalog's root."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self.root = catalog.root

    # -- names ------------------------------------------------------------------------------

    def _path(self, parts: list[str]) -> str:
        try:
            return self.catalog.path_of("/".join(parts))
        except BadRequest as exc:
            raise RestError(ErrorCode.INVALID_INPUT, exc.problem) from None

    def _check_namespace_parts(self, ns: list[str]) -> None:
        for part in ns:
            if part.endswith(TABLE_SUFFIX):
                raise RestError(
                    ErrorCode.INVALID_INPUT,
                    f"namespace name {part!r} must not end with {TABLE_SUFFIX!r} (table folders do)",
                )

    def namespace_path(self, ns: list[str]) -> str:
        """The directory of namespace ``ns`` (which need not exist)."""
        self._check_namespace_parts(ns)
        return self.root if not ns else self._path(ns)

    def namespace_exists(self, ns: list[str]) -> bool:
        path = self.namespace_path(ns)
        return not ns or _is_namespace(path)  # the root always exists

    def require_namespace(self, ns: list[str]) -> str:
        path = self.namespace_path(ns)
        if ns and not _is_namespace(path):
            raise RestError(
                ErrorCode.NAMESPACE_NOT_FOUND, f"namespace {join_id(ns)!r} does not exist"
            )
        return path

    def table(self, ids: list[str]) -> TableRef:
        """The table ``ids`` names: its existing dataset (``t.lance`` first, then ``t``), or
        where CreateTable puts it (``t.lance``)."""
        if not ids:
            raise RestError(ErrorCode.INVALID_INPUT, "a table identifier cannot be empty")
        ns, leaf = ids[:-1], ids[-1]
        self._check_namespace_parts(ns)
        if leaf.endswith(TABLE_SUFFIX):
            raise RestError(
                ErrorCode.INVALID_INPUT,
                f"table name {leaf!r}: name the table without the {TABLE_SUFFIX!r} suffix",
            )
        candidates = [ns + [leaf + TABLE_SUFFIX], ns + [leaf]]
        for parts in candidates:
            path = self._path(parts)
            if is_dataset(path):
                return TableRef(list(ids), "/".join(parts), path)
        parts = candidates[0]
        return TableRef(list(ids), "/".join(parts), self._path(parts))

    def existing_table(self, ids: list[str]) -> TableRef:
        """The table ``ids`` names; TableNotFound (NamespaceNotFound for a missing
        namespace) if there is none."""
        return self.existing(self.table(ids))

    def existing(self, ref: TableRef) -> TableRef:
        """``ref`` if its dataset exists, else TableNotFound (or NamespaceNotFound)."""
        if not is_dataset(ref.path):
            self.require_namespace(ref.namespace)
            raise RestError(ErrorCode.TABLE_NOT_FOUND, f"table {join_id(ref.id)!r} does not exist")
        return ref

    # -- listing ----------------------------------------------------------------------------

    def child_namespaces(self, ns: list[str]) -> list[str]:
        """The child namespaces of ``ns`` the caller may see (:func:`permissions.visible`)."""
        path = self.require_namespace(ns)
        return sorted(
            name
            for name in children(path)
            if not name.endswith(TABLE_SUFFIX)
            and permissions.visible("/".join([*ns, name]))
            and not is_dataset(storage.join(path, name))
        )

    def tables(self, ns: list[str]) -> list[str]:
        """The tables of ``ns`` the caller may read (``t.lance`` is ``t`` when both exist)."""
        path = self.require_namespace(ns)
        folders: dict[str, str] = {}
        for name in sorted(children(path), key=lambda n: not n.endswith(TABLE_SUFFIX)):
            if is_dataset(storage.join(path, name)):
                folders.setdefault(_table_name(name), name)
        readable = set(permissions.readable("/".join([*ns, f]) for f in folders.values()))
        return sorted(t for t, f in folders.items() if "/".join([*ns, f]) in readable)

    def all_tables(self, delimiter: str | None) -> list[str]:
        """Every table under the root, as full identifiers joined by ``delimiter``."""
        out = set()
        for name in permissions.readable(self.catalog.names()):
            parts = name.split("/")
            if any(p.endswith(TABLE_SUFFIX) for p in parts[:-1]):
                continue
            out.add(join_id(parts[:-1] + [_table_name(parts[-1])], delimiter))
        return sorted(out)


def _table_name(folder: str) -> str:
    return folder[: -len(TABLE_SUFFIX)] if folder.endswith(TABLE_SUFFIX) else folder


def is_dataset(path: str) -> bool:
    """Whether ``path`` holds a dataset (a ``_versions/`` directory or prefix)."""
    return layout.VERSIONS_DIR in storage.list_dir(path)[1]


def _is_namespace(path: str) -> bool:
    """A directory (locally) or a non-empty prefix (a marker at least) that is no dataset."""
    files, dirs = storage.list_dir(path)
    if layout.VERSIONS_DIR in dirs:
        return False
    return bool(files or dirs) or storage.is_dir(path)


def children(path: str) -> list[str]:
    """Sub-directories that can be names (not hidden, not ``_``-prefixed; locally no
    symlinks, which could lead out of the root)."""
    return [d for d in storage.list_dir(path)[1] if not d.startswith((".", "_"))]
