"""Tags: names for versions, stored as pylance 14 stores them.

``_refs/tags/<name>.json`` holds pretty-printed JSON (2-space indent, no trailing newline)::

    {
      "branch": null,
      "version": 3,
      "createdAt": "2026-01-01T00:00:00.000000000Z",
      "updatedAt": "2026-01-01T00:00:00.000000000Z",
      "manifestSize": 621,
      "metadata": {}
    }

``manifestSize`` is the size of the tagged manifest file (readers may use it to read the
manifest in one request).  A tag whose ``branch`` is set names a version of that branch;
branches are not supported here, so such tags are listed but cannot be resolved.
"""

from __future__ import annotations

import builtins
import datetime as dt
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import storage
from ..errors import CorruptFileError, InvalidArgumentError, TagNotFoundError, UnsupportedError
from . import paths

_TS = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)\Z")


@dataclass
class TagContents:
    """One tag file's contents."""

    name: str
    version: int
    branch: str | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None
    manifest_size: int = 0
    metadata: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """The form pylance's ``ds.tags.list()`` returns for one tag."""
        return {
            "branch": self.branch,
            "version": self.version,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "manifest_size": self.manifest_size,
            "metadata": dict(self.metadata),
        }


def check_valid_tag(name: str) -> None:
    """Upstream's rule: non-empty; alphanumeric, '.', '-', '_' only; no leading or trailing
    dot, no '..', not ending in '.lock'.  Keeps a tag name a plain file name."""
    problem = None
    if not isinstance(name, str) or not name:
        problem = "a tag name cannot be empty"
    elif not all(c.isalnum() or c in "._-" for c in name):
        problem = "tag names may only contain letters, digits, '.', '-' and '_'"
    elif name.startswith(".") or name.endswith("."):
        problem = "a tag name cannot begin or end with a dot"
    elif ".." in name:
        problem = "a tag name cannot contain '..'"
    elif name.endswith(".lock"):
        problem = "a tag name cannot end with '.lock'"
    if problem is not None:
        raise InvalidArgumentError(f"invalid tag name {name!r}: {problem}")


# -- timestamps (RFC 3339 with nanoseconds, as chrono writes them) ---------------------------


def _format_ts(ns: int) -> str:
    seconds, nanos = divmod(ns, 1_000_000_000)
    base = dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{nanos:09d}Z"


def _parse_ts(text, path: str) -> dt.datetime | None:
    if text is None:
        return None
    m = _TS.match(text) if isinstance(text, str) else None
    if m is None:
        raise CorruptFileError(f"bad timestamp {text!r}", path=path)
    year, month, day, hh, mm, ss = (int(g) for g in m.groups()[:6])
    micros = int((m.group(7) or "0").ljust(9, "0")[:6])
    zone = m.group(8)
    if zone == "Z":
        tz = dt.UTC
    else:
        sign = 1 if zone[0] == "+" else -1
        tz = dt.timezone(sign * dt.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    try:
        return dt.datetime(year, month, day, hh, mm, ss, micros, tzinfo=tz)
    except ValueError as exc:
        raise CorruptFileError(f"bad timestamp {text!r}: {exc}", path=path) from exc


# -- files ----------------------------------------------------------------------------------


def _encode(contents: Mapping) -> bytes:
    return json.dumps(contents, indent=2, ensure_ascii=False).encode()


def read_tag(root: str, name: str) -> TagContents:
    """The tag ``name``; InvalidArgumentError if there is none."""
    check_valid_tag(name)
    path = paths.tag_path(root, name)
    if not paths.exists(path):
        raise TagNotFoundError(f"tag {name!r} does not exist in {root}")
    return _decode(name, paths.read_bytes(path), path)


def _decode(name: str, data: bytes, path: str) -> TagContents:
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise CorruptFileError(f"tag file is not JSON: {exc}", path=path) from exc
    if not isinstance(obj, dict):
        raise CorruptFileError("tag file does not hold a JSON object", path=path)
    version = obj.get("version")
    size = obj.get("manifestSize", 0)
    branch = obj.get("branch")
    metadata = obj.get("metadata") or {}
    ok = (
        isinstance(version, int)
        and not isinstance(version, bool)
        and version >= 0
        and isinstance(size, int)
        and (branch is None or isinstance(branch, str))
        and isinstance(metadata, dict)
    )
    if not ok:
        raise CorruptFileError(
            "tag file needs an integer version, integer manifestSize, string or null branch "
            "and an object of metadata",
            path=path,
        )
    assert isinstance(version, int)  # checked just above
    return TagContents(
        name=name,
        version=version,
        branch=branch,
        created_at=_parse_ts(obj.get("createdAt"), path),
        updated_at=_parse_ts(obj.get("updatedAt"), path),
        manifest_size=size,
        metadata={str(k): str(v) for k, v in metadata.items()},
    )


def read_all_tags(root: str) -> dict[str, TagContents]:
    """Every tag, including tags on branches."""
    directory = paths.tags_dir(root)
    out = {}
    for fname in sorted(paths.list_names(directory)):
        if not fname.endswith(".json") or fname.startswith("."):
            continue
        name = fname[: -len(".json")]
        path = storage.join(directory, fname)
        out[name] = _decode(name, paths.read_bytes(path), path)
    return out


def _on_main(t: TagContents) -> bool:
    return t.branch is None or t.branch == "main"


def list_tags(root: str) -> dict[str, int]:
    """``{name: version}`` for tags of the main version history (branch tags left out,
    since their numbers are versions of another history)."""
    return {n: t.version for n, t in read_all_tags(root).items() if _on_main(t)}


def _manifest_size(root: str, version: int) -> int:
    entry = paths.find_version(root, int(version))
    return paths.file_size(entry.path)


def create_tag(
    root: str, name: str, version: int, *, metadata: Mapping[str, str] | None = None
) -> TagContents:
    """Tag ``version``.  InvalidArgumentError for a bad name, an existing tag or a version
    that does not exist.  The file is created with put-if-not-exists, so two writers
    racing for one name cannot both succeed."""
    check_valid_tag(name)
    path = paths.tag_path(root, name)
    if paths.exists(path):
        raise InvalidArgumentError(f"tag {name!r} already exists in {root}")
    size = _manifest_size(root, version)
    now = time.time_ns()
    contents = {
        "branch": None,
        "version": int(version),
        "createdAt": _format_ts(now),
        "updatedAt": _format_ts(now),
        "manifestSize": size,
        "metadata": dict(metadata or {}),
    }
    if not paths.put_if_not_exists(path, _encode(contents)):
        raise InvalidArgumentError(f"tag {name!r} already exists in {root}")
    return _decode(name, _encode(contents), path)


def update_tag(root: str, name: str, version: int) -> TagContents:
    """Point an existing tag at ``version`` (creation time and metadata kept)."""
    old = read_tag(root, name)
    if not _on_main(old):
        raise UnsupportedError(
            f"tag {name!r} is on branch {old.branch!r}; branches are not supported"
        )
    size = _manifest_size(root, version)
    created = old.created_at
    contents = {
        "branch": None,
        "version": int(version),
        "createdAt": _format_ts(_to_ns(created)) if created else _format_ts(time.time_ns()),
        "updatedAt": _format_ts(time.time_ns()),
        "manifestSize": size,
        "metadata": old.metadata,
    }
    path = paths.tag_path(root, name)
    paths.write_atomic(path, _encode(contents))
    return _decode(name, _encode(contents), path)


def replace_tag_metadata(root: str, name: str, metadata: Mapping[str, str]) -> TagContents:
    """Replace a tag's whole metadata map; its reference and ``updatedAt`` stay, as pylance
    keeps them."""
    read_tag(root, name)  # TagNotFoundError when missing, CorruptFileError when unreadable
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise InvalidArgumentError("tag metadata must be a dict of str to str")
    path = paths.tag_path(root, name)
    contents = json.loads(paths.read_bytes(path))
    contents["metadata"] = dict(metadata)
    paths.write_atomic(path, _encode(contents))
    return _decode(name, _encode(contents), path)


def _to_ns(t: dt.datetime) -> int:
    delta = t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def delete_tag(root: str, name: str) -> None:
    check_valid_tag(name)
    path = paths.tag_path(root, name)
    if not paths.exists(path):
        raise TagNotFoundError(f"tag {name!r} does not exist in {root}")
    paths.remove(path)


def resolve_tag(root: str, name: str) -> int:
    """The main-history version a tag names."""
    tag = read_tag(root, name)
    if not _on_main(tag):
        raise UnsupportedError(
            f"tag {name!r} names version {tag.version} of branch {tag.branch!r}; branches are "
            "not supported"
        )
    return tag.version


class Tags:
    """``Dataset.tags``: pylance's tag manager API over :mod:`tags` functions."""

    def __init__(self, root: str):
        self.root = root

    def _resolve_reference(self, reference) -> int:
        if reference is None:
            latest = paths.latest_version(self.root)
            if latest is None:
                raise InvalidArgumentError(f"{self.root} has no version to tag")
            return latest.version
        if isinstance(reference, bool):
            raise InvalidArgumentError(f"bad tag reference {reference!r}")
        if isinstance(reference, int):
            return reference
        if isinstance(reference, str):
            return resolve_tag(self.root, reference)
        if isinstance(reference, tuple) and len(reference) == 2:
            branch, version = reference
            if branch not in (None, "main"):
                raise UnsupportedError(f"branch {branch!r}: branches are not supported")
            return self._resolve_reference(version)
        raise InvalidArgumentError(f"bad tag reference {reference!r}")

    def list(self) -> dict[str, dict]:
        return {n: t.as_dict() for n, t in read_all_tags(self.root).items()}

    def list_ordered(self, order: str | None = None) -> builtins.list[tuple[str, dict]]:
        """By version, newest first (``order="asc"`` for oldest first), then by name."""
        if order not in (None, "asc", "desc"):
            raise InvalidArgumentError(f"order must be 'asc' or 'desc', not {order!r}")
        tags = list(read_all_tags(self.root).values())
        sign = 1 if order == "asc" else -1
        tags.sort(key=lambda t: (sign * t.version, t.name))
        return [(t.name, t.as_dict()) for t in tags]

    def get_version(self, tag: str) -> int:
        return resolve_tag(self.root, tag)

    def create(self, tag: str, reference=None) -> None:
        create_tag(self.root, tag, self._resolve_reference(reference))

    def update(self, tag: str, reference=None) -> None:
        update_tag(self.root, tag, self._resolve_reference(reference))

    def delete(self, tag: str) -> None:
        delete_tag(self.root, tag)

    def replace_metadata(self, tag: str, metadata: dict[str, str]) -> None:
        """The tag's metadata becomes ``metadata`` (not merged); nothing else changes."""
        replace_tag_metadata(self.root, tag, metadata)
