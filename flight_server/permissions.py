"""Per-dataset permissions: a user or token limited to dataset-name prefixes.

A grant is written in the users file (4th ``:`` field) or the tokens file (4th field) as
``read=PREFIX,PREFIX;write=PREFIX`` (either part may be left out):

- ``read=`` limits what the caller may read *and see*: ``list_flights``, ``list_datasets``
  and the Flight SQL metadata commands (GetTables, GetDbSchemas) leave out every other
  dataset; reading one (a descriptor, ticket, SQL statement or action naming it) is
  PERMISSION_DENIED.  Without ``read=`` every dataset may be read; the ``write=`` prefixes
  may always be read.
- ``write=`` limits what the caller may change (put, ingest, DELETE, mutating actions); it
  defaults to the ``read=`` prefixes, and writing still needs the ``write`` role.

A prefix names a subtree of the dataset namespace: ``team`` matches the dataset ``team`` and
everything under ``team/``; a prefix ending in ``/`` (``team/``) only what is under it; ``*``
matches every dataset; an empty list (``write=``) matches none.  Users and tokens without a
grant are unrestricted, as before.

The caller's grant is installed for the duration of each handler (:func:`scope`, from the
auth middleware), so deep code such as the SQL engine checks names with :func:`check_read`
without passing the call context around.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .errors import Forbidden

__all__ = ["Grants", "check_read", "check_visible", "check_write", "readable", "scope", "visible"]

_ALL = "*"


def _matches(prefix: str, name: str) -> bool:
    if prefix == _ALL:
        return True
    if prefix.endswith("/"):
        return name.startswith(prefix)
    return name == prefix or name.startswith(prefix + "/")


@dataclass(frozen=True)
class Grants:
    """Prefixes the caller may read and write; ``None`` means unrestricted."""

    read: tuple[str, ...] | None = None
    write: tuple[str, ...] | None = None

    def can_read(self, name: str) -> bool:
        """Read prefixes, and write prefixes too: whoever may change a dataset may see it."""
        if self.read is None or any(_matches(p, name) for p in self.read):
            return True
        return self.write is not None and any(_matches(p, name) for p in self.write)

    def can_write(self, name: str) -> bool:
        prefixes = self.write if self.write is not None else self.read
        return prefixes is None or any(_matches(p, name) for p in prefixes)

    @classmethod
    def parse(cls, text: str) -> Grants:
        """``read=a,b/;write=b/`` -> Grants; ValueError saying what is wrong."""
        found: dict[str, tuple[str, ...]] = {}
        for part in text.split(";"):
            key, eq, value = part.strip().partition("=")
            if not eq or key not in ("read", "write"):
                raise ValueError(f"bad grant {part!r}: expected read=PREFIX,... or write=...")
            if key in found:
                raise ValueError(f"{key}= appears twice")
            prefixes = tuple(p.strip() for p in value.split(",") if p.strip())
            for p in prefixes:
                _check_prefix(p)
            found[key] = prefixes
        return cls(found.get("read"), found.get("write"))

    def __str__(self) -> str:
        parts = []
        if self.read is not None:
            parts.append("read=" + ",".join(self.read))
        if self.write is not None:
            parts.append("write=" + ",".join(self.write))
        return ";".join(parts)


def _check_prefix(prefix: str) -> None:
    from .catalog import check_name  # the catalog's one definition (it imports this module)

    if prefix == _ALL:
        return
    try:
        check_name(prefix[:-1] if prefix.endswith("/") else prefix)
    except Exception:
        raise ValueError(f"bad prefix {prefix!r}: not a dataset name (or '*')") from None


_current: contextvars.ContextVar[tuple[str, Grants] | None] = contextvars.ContextVar(
    "lance_flight_grants", default=None
)


@contextlib.contextmanager
def scope(user: str | None, grants: Grants | None) -> Iterator[None]:
    """Install the caller's grant for the code of one handler (no grant: unrestricted)."""
    token = _current.set(None if grants is None else (user or "?", grants))
    try:
        yield
    finally:
        _current.reset(token)


def check_read(name: str) -> None:
    """PERMISSION_DENIED unless the current caller may read dataset ``name``."""
    current = _current.get()
    if current is not None and not current[1].can_read(name):
        raise Forbidden(f"user {current[0]!r} may not read dataset {name!r}")


def check_write(name: str) -> None:
    """PERMISSION_DENIED unless the current caller may change dataset ``name``."""
    current = _current.get()
    if current is not None and not current[1].can_write(name):
        raise Forbidden(f"user {current[0]!r} may not change dataset {name!r}")


def readable(names: Iterable[str]) -> list[str]:
    """The names the current caller may see."""
    current = _current.get()
    return [n for n in names if current is None or current[1].can_read(n)]


def visible(prefix: str) -> bool:
    """Whether the current caller may read ``prefix`` or anything under it: a directory (a
    REST namespace) that can hold no readable dataset is hidden like a dataset."""
    current = _current.get()
    if current is None or current[1].can_read(prefix):
        return True
    grants = current[1]
    return any(p.startswith(prefix + "/") for p in (grants.read or ()) + (grants.write or ()))


def check_visible(prefix: str) -> None:
    """PERMISSION_DENIED unless the current caller may see ``prefix`` (:func:`visible`)."""
    current = _current.get()
    if current is not None and not visible(prefix):
        raise Forbidden(f"user {current[0]!r} may not read {prefix!r}")
