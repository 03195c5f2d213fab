"""How datasets under the root appear as SQL tables, and how SQL names find them again.

Every dataset is a table of type ``TABLE`` in the one catalog ``lance``:

* the **db_schema** is the dataset's parent directory relative to the root (``tpch`` for
  ``tpch/lineitem``, ``a/b`` for ``a/b/c``), or ``main`` for a dataset directly under the root;
* the **table** is the last path component (``lineitem``).

In SQL a table may be written as

* ``lineitem`` (unqualified: the dataset ``lineitem`` at the root, else the only dataset whose
  last component is ``lineitem``; two candidates are an error naming both),
* ``tpch.lineitem`` or ``lance.tpch.lineitem`` (schema-qualified; ``main.x`` is the root),
* ``"tpch/lineitem"`` (the dataset path itself, quoted),

and any of them may pin a version: ``lineitem@5``, ``"lineitem@v5"``, ``lineitem@nightly`` (a
tag), ``"tpch/lineitem@5"``, or DuckDB's time-travel clause ``lineitem AT (VERSION => 5)``
(``VERSION => 'nightly'`` for a tag).  Names match exactly first, then case-insensitively.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from flight_server.catalog import check_name
from lance_format.errors import InvalidArgumentError

from .errors import NotFoundError

__all__ = [
    "CATALOG",
    "ROOT_SCHEMA",
    "TABLE_TYPE",
    "Resolver",
    "TableName",
    "VersionSpec",
    "dataset_for",
    "parse_version",
    "table_name",
]

CATALOG = "lance"
ROOT_SCHEMA = "main"
TABLE_TYPE = "TABLE"

#: A pinned version: a version number, a tag name, or None for the latest version.
VersionSpec = int | str | None

_VERSION = re.compile(r"[vV]?(\d+)")


@dataclass(frozen=True)
class TableName:
    """A dataset's place in the Flight SQL catalog."""

    dataset: str
    catalog: str
    db_schema: str
    table: str


def table_name(dataset: str) -> TableName:
    """``tpch/lineitem`` -> catalog ``lance``, schema ``tpch``, table ``lineitem``."""
    parent, _, last = dataset.rpartition("/")
    return TableName(dataset, CATALOG, parent or ROOT_SCHEMA, last)


def dataset_for(table: str, db_schema: str | None = None, catalog: str | None = None) -> str:
    """The dataset path a (catalog, schema, table) triple names, for tables that may not exist
    yet (ingest): ``(lineitem, tpch)`` -> ``tpch/lineitem``; ``main`` or no schema -> root."""
    if catalog not in (None, "") and catalog.lower() != CATALOG:
        raise NotFoundError(f"unknown catalog {catalog!r}: the only catalog is {CATALOG!r}")
    if not table:
        raise InvalidArgumentError("a table name is required")
    if db_schema in (None, "") or db_schema.lower() == ROOT_SCHEMA:
        name = table
    else:
        name = f"{db_schema}/{table}"
    return check_name(name)


def parse_version(text: str | int) -> VersionSpec:
    """``5`` / ``"5"`` / ``"v5"`` -> version 5; any other text is a tag name."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise InvalidArgumentError(f"a version number cannot be negative ({text})")
        return text
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError(f"a version must be a number or a tag name, not {text!r}")
    m = _VERSION.fullmatch(text)
    return int(m.group(1)) if m else text


class Resolver:
    """Maps the table names of one statement to datasets, given the datasets under the root."""

    def __init__(self, datasets: Iterable[str]):
        self.datasets = sorted(set(datasets))
        self._exact = set(self.datasets)
        self._folded: dict[str, list[str]] = {}
        self._by_last: dict[str, list[str]] = {}
        for name in self.datasets:
            self._folded.setdefault(name.casefold(), []).append(name)
            self._by_last.setdefault(name.rpartition("/")[2], []).append(name)

    def resolve(
        self,
        name: str,
        db_schema: str | None = None,
        catalog: str | None = None,
        version: VersionSpec = None,
    ) -> tuple[str, VersionSpec]:
        """The dataset and pinned version that a (possibly qualified) table name means."""
        shown = ".".join(p for p in (catalog, db_schema, name) if p)
        if catalog and catalog.casefold() != CATALOG:
            raise NotFoundError(f"unknown catalog {catalog!r} in {shown!r}: it is {CATALOG!r}")
        found = self._lookup(name, db_schema)
        if found is None and "@" in name:
            base, _, spec = name.rpartition("@")
            if version is not None:
                raise InvalidArgumentError(f"table {shown!r} pins a version twice")
            found = self._lookup(base, db_schema)
            if found is not None:
                version = parse_version(spec)
        if found is None:
            raise NotFoundError(f"table {shown!r} not found; tables: {self._listing()}")
        return found, version

    def _lookup(self, name: str, db_schema: str | None) -> str | None:
        if not name:
            return None
        if db_schema and db_schema.casefold() != ROOT_SCHEMA:
            return self._match(f"{db_schema}/{name}")
        if "/" in name or db_schema:
            return self._match(name)
        found = self._match(name)
        if found is not None:
            return found
        candidates = self._by_last.get(name) or [
            d
            for last, ds in self._by_last.items()
            if last.casefold() == name.casefold()
            for d in ds
        ]
        if len(candidates) > 1:
            options = ", ".join(
                f"{table_name(c).db_schema}.{table_name(c).table}" for c in candidates
            )
            raise InvalidArgumentError(
                f"table name {name!r} is ambiguous ({options}): qualify it with its schema "
                f'or quote the dataset path, e.g. "{candidates[0]}"'
            )
        return candidates[0] if candidates else None

    def _match(self, path: str) -> str | None:
        if path in self._exact:
            return path
        folded = self._folded.get(path.casefold(), [])
        if len(folded) > 1:
            raise InvalidArgumentError(
                f"table {path!r} matches {folded} case-insensitively: quote the exact name"
            )
        return folded[0] if folded else None

    def _listing(self, limit: int = 20) -> str:
        shown = [f"{table_name(d).db_schema}.{table_name(d).table}" for d in self.datasets[:limit]]
        more = f", ... ({len(self.datasets)} in all)" if len(self.datasets) > limit else ""
        return (", ".join(shown) + more) if shown else "(none)"
