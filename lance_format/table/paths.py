"""Where a dataset keeps its files, how versions are named, and the few storage calls used.

Layout::

    <root>/_versions/<manifest>            one manifest per version (V1 or V2 names)
    <root>/_versions/latest_version_hint.json   {"version":N}, a hint for other tools
    <root>/data/<name>.lance               data files (the manifest stores the name)
    <root>/_deletions/<frag>-<read_version>-<id>.arrow|.bin
    <root>/_transactions/<read_version>-<uuid>.txn
    <root>/_refs/tags/<tag>.json
    <root>/_indices/<uuid>/...

Paths are strings of any kind :mod:`lance_format.storage` resolves (local paths,
``memory://``, ``s3://``); this module only names things and lists versions.
"""

from __future__ import annotations

import enum
import json
import re
import secrets
import uuid as uuidlib
from typing import NamedTuple

from .. import storage
from ..errors import CorruptFileError, InvalidArgumentError, LanceIOError
from ..storage.commit import handler_for

VERSIONS_DIR = "_versions"
DATA_DIR = "data"
DELETIONS_DIR = "_deletions"
TRANSACTIONS_DIR = "_transactions"
INDICES_DIR = "_indices"
REFS_DIR = "_refs"
TAGS_DIR = f"{REFS_DIR}/tags"
VERSION_HINT_FILE = "latest_version_hint.json"
MANIFEST_SUFFIX = ".manifest"

U64_MAX = (1 << 64) - 1
# Detached versions have the top bit set and live under a "d" prefix; they are not part of
# the version history, so listings skip them.
DETACHED_VERSION_MASK = 1 << 63
_V2_STEM_LEN = 20


class ManifestNaming(enum.Enum):
    """How manifest files are named in ``_versions/``.

    V1 is ``{version}.manifest``.  V2 (pylance's default) is ``{u64::MAX - version:020}``,
    so that the newest version sorts first in a lexical object-store listing.
    """

    V1 = "V1"
    V2 = "V2"


class VersionEntry(NamedTuple):
    """One committed version found by listing ``_versions/``."""

    version: int
    path: str
    naming: ManifestNaming


# -- storage seam ---------------------------------------------------------------------------
# Every byte goes through lance_format.storage, which picks the backend from the path (a
# local path, memory://, s3://).  These names stay for the table layer's convenience.

read_bytes = storage.read_bytes
list_names = storage.list_names
write_atomic = storage.put
remove = storage.delete
exists = storage.exists
file_size = storage.file_size


def put_if_not_exists(path: str, data: bytes) -> bool:
    """Create ``path`` with ``data`` atomically; False (and nothing written) if it exists."""
    return storage.put_if_not_exists(path, data)


# -- manifest names -------------------------------------------------------------------------


def versions_dir(root: str) -> str:
    return storage.join(root, VERSIONS_DIR)


def manifest_name(version: int, naming: ManifestNaming) -> str:
    """The file name of ``version``'s manifest under ``naming``."""
    if not 0 <= version <= U64_MAX:
        raise InvalidArgumentError(f"version {version} is outside 0..2^64-1")
    if version & DETACHED_VERSION_MASK:
        return f"d{version}{MANIFEST_SUFFIX}"
    if naming is ManifestNaming.V1:
        return f"{version}{MANIFEST_SUFFIX}"
    return f"{U64_MAX - version:020d}{MANIFEST_SUFFIX}"


def manifest_path(root: str, version: int, naming: ManifestNaming) -> str:
    return storage.join(versions_dir(root), manifest_name(version, naming))


def parse_manifest_name(name: str) -> tuple[int, ManifestNaming] | None:
    """``(version, naming)`` for an attached manifest's file name, else None.

    A 20-digit stem is V2 (as pylance decides); any other all-digit stem is V1.  Detached
    manifests (``d`` prefix), temporary files and other names give None.
    """
    if not name.endswith(MANIFEST_SUFFIX):
        return None
    stem = name[: -len(MANIFEST_SUFFIX)]
    if not (stem.isascii() and stem.isdigit()):
        return None
    number = int(stem)
    if len(stem) == _V2_STEM_LEN:
        if number > U64_MAX:
            return None
        return U64_MAX - number, ManifestNaming.V2
    return number, ManifestNaming.V1


# the stems of attached manifests' names, matched over the whole listing at once (one name
# a line, ASCII digits only: :func:`parse_manifest_name`'s rules)
_DIGIT_STEMS = re.compile(r"^([0-9]+)\.manifest$", re.M | re.ASCII)
_U64_MAX_STEM = f"{U64_MAX:020d}"


def _manifest_stems(root: str) -> tuple[str, list[str], list[str]]:
    """``(the _versions directory, V2 stems, V1 stems)`` of a listing, matched by two
    regular expressions over the joined names: a dataset that takes many small appends has
    thousands of versions and every commit lists them, so the names are not looked at one
    by one in Python (at 2,000 versions that made an append 4x slower than pylance's)."""
    directory = versions_dir(root)
    handler_for(root).synchronize(root)
    names = list_names(directory)
    joined = "\n".join(names)
    if joined.count("\n") > max(len(names) - 1, 0):  # a name holding a line break: not ours
        joined = "\n".join(n for n in names if "\n" not in n)
    digits = _DIGIT_STEMS.findall(joined)  # one pass; V2 stems are those of 20 digits
    v2 = [stem for stem in digits if len(stem) == _V2_STEM_LEN]
    v1 = [stem for stem in digits if len(stem) != _V2_STEM_LEN] if len(digits) > len(v2) else []
    if v2 and max(v2) > _U64_MAX_STEM:  # 20 digits past u64: no version's name
        v2 = [stem for stem in v2 if stem <= _U64_MAX_STEM]
    if v1 and v2:
        raise CorruptFileError(
            "manifests use both the V1 ({version}.manifest) and the V2 (u64::MAX - version) "
            "naming schemes; migrate or remove one set",
            path=directory,
        )
    return directory, v2, v1


def _listed_versions(root: str) -> tuple[str, dict[int, str], ManifestNaming | None]:
    """``(the _versions directory, version -> manifest file name, naming)`` by listing.
    A directory holding both naming schemes is corrupt (pylance refuses it too): which of
    two manifests of one version is real cannot be told."""
    directory, v2, v1 = _manifest_stems(root)
    return (directory, *_versions_of(directory, v2, v1))


def _versions_of(
    directory: str, v2: list[str], v1: list[str]
) -> tuple[dict[int, str], ManifestNaming | None]:
    """Version -> manifest file name, and the naming, of the stems of a listing."""
    suffix = MANIFEST_SUFFIX
    if v2:  # one name per number: no two manifests of a version
        return {U64_MAX - int(stem): stem + suffix for stem in v2}, ManifestNaming.V2
    if not v1:
        return {}, None
    by_version = {int(stem): stem + suffix for stem in v1}
    if len(by_version) < len(v1):  # "5.manifest" and "05.manifest"
        seen: dict[int, str] = {}
        for stem in v1:
            other = seen.setdefault(int(stem), stem)
            if other is not stem:
                raise CorruptFileError(
                    f"two manifests for version {int(stem)}: {other}{suffix} and {stem}{suffix}",
                    path=directory,
                )
    return by_version, ManifestNaming.V1


def list_versions(root: str) -> list[VersionEntry]:
    """Every committed version, oldest first, found by listing ``_versions/``."""
    directory, names, naming = _listed_versions(root)
    if naming is None:
        return []
    prefix = directory.rstrip("/") + "/"
    return [VersionEntry(v, prefix + names[v], naming) for v in sorted(names)]


def latest_version(root: str, *, hinted: bool = False) -> VersionEntry | None:
    """The newest committed version, or None: by listing (the hint file is not trusted).

    ``hinted`` (a writer's choice; local stores only, where one listing is not one request
    as on an object store): the version hint first, once confirmed by the manifests after
    it (:func:`_confirmed_hint`), a few file lookups where a listing grows with the versions
    (0.2 ms at 300 versions, 2 ms at 2,000: a stream of small appends makes thousands).
    """
    if hinted and not storage.resolve(root)[0].remote:
        handler_for(root).synchronize(root)
        found = _confirmed_hint(root)
        if found is not None:
            return found
    directory, v2, v1 = _manifest_stems(root)
    if v2:  # the newest has the smallest name: found without making a number of each
        stem = min(v2)
        version = U64_MAX - int(stem)
        return VersionEntry(
            version, f"{directory.rstrip('/')}/{stem}{MANIFEST_SUFFIX}", ManifestNaming.V2
        )
    names, naming = _versions_of(directory, v2, v1)
    if naming is None:
        return None
    version = max(names)
    return VersionEntry(version, directory.rstrip("/") + "/" + names[version], naming)


def find_version(root: str, version: int) -> VersionEntry:
    """The manifest of ``version``; InvalidArgumentError if there is none."""
    for entry in list_versions(root):
        if entry.version == version:
            return entry
    raise InvalidArgumentError(f"{root} has no version {version}")


def detect_naming(root: str) -> ManifestNaming | None:
    """The naming scheme in use, or None for a dataset with no version yet."""
    versions = list_versions(root)
    return versions[-1].naming if versions else None


# -- latest_version_hint.json ---------------------------------------------------------------


def version_hint_path(root: str) -> str:
    return storage.join(versions_dir(root), VERSION_HINT_FILE)


def read_version_hint(root: str) -> int | None:
    """The version in ``latest_version_hint.json``; None if it is missing or unreadable
    (it is only a hint, so a bad one is not an error)."""
    try:
        value = json.loads(storage.read_bytes(version_hint_path(root))).get("version")
    except (LanceIOError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# how many versions a hint may lag behind the newest and still spare the listing
HINT_LAG = 4


def _confirmed_hint(root: str) -> VersionEntry | None:
    """The hint's version (V2 naming), if it is the newest: its manifest is there and no
    manifest of a later version is (a hint lagging by up to :data:`HINT_LAG` versions is
    followed forward).  Versions are made one after another (a commit writes version
    ``read_version + 1``, only if it is absent; a cleanup never removes the newest), so
    when version v + 1 has no manifest, no later one has.  None: list instead."""
    hint = read_version_hint(root)
    if hint is None or not 0 < hint < U64_MAX:
        return None
    directory = versions_dir(root).rstrip("/") + "/"
    path = directory + manifest_name(hint, ManifestNaming.V2)
    if not storage.exists(path):
        return None
    for version in range(hint, min(hint + HINT_LAG, U64_MAX - 1) + 1):
        following = directory + manifest_name(version + 1, ManifestNaming.V2)
        if storage.exists(following):
            path = following
            continue
        if storage.exists(directory + manifest_name(version + 1, ManifestNaming.V1)):
            return None  # the other naming scheme beside it: the listing judges
        return VersionEntry(version, path, ManifestNaming.V2)
    return None


def write_version_hint(root: str, version: int) -> None:
    """Write ``{"version":N}`` (compact, no newline, as pylance 14 does), atomically.

    A hint already naming a newer version is left alone, so a slow committer does not
    move it backwards.
    """
    current = read_version_hint(root)
    if current is not None and current > version:
        return
    data = b'{"version":%d}' % int(version)
    write_atomic(version_hint_path(root), data)


# -- data, deletion and transaction file names ----------------------------------------------


def new_data_file_name() -> str:
    """A fresh data file name as pylance 14 makes them (relative to ``data/``).

    The first 3 bytes of a random UUIDv4 as 24 binary digits, then the other 13 bytes as
    26 lowercase hex digits, then ``.lance`` (50 + 6 characters).  The binary prefix
    spreads files over object-store key prefixes.
    """
    raw = uuidlib.uuid4().bytes
    return f"{int.from_bytes(raw[:3], 'big'):024b}{raw[3:].hex()}.lance"


def data_file_path(root: str, relative: str) -> str:
    """Absolute path of a ``DataFile.path`` (stored relative to ``data/``)."""
    return storage.join(root, DATA_DIR, relative)


DELETION_SUFFIXES = {0: "arrow", 1: "bin"}  # DeletionFile.file_type: ARROW_ARRAY, BITMAP


def new_deletion_id() -> int:
    """The random u64 stored in ``DeletionFile.id`` and used in its file name."""
    return secrets.randbits(64)


def deletion_file_name(
    fragment_id: int, read_version: int, deletion_id: int, file_type: int
) -> str:
    """``{fragment_id}-{read_version}-{id}.{arrow|bin}``; ``read_version`` is the version
    the delete was based on.  The manifest stores no path: it is rebuilt from these."""
    suffix = DELETION_SUFFIXES.get(int(file_type))
    if suffix is None:
        raise CorruptFileError(f"unknown deletion file type {file_type}")
    return f"{fragment_id}-{read_version}-{deletion_id}.{suffix}"


def deletion_file_path(root: str, fragment_id: int, deletion_file) -> str:
    """Absolute path of a fragment's ``DeletionFile`` message."""
    name = deletion_file_name(
        fragment_id, deletion_file.read_version, deletion_file.id, deletion_file.file_type
    )
    return storage.join(root, DELETIONS_DIR, name)


def transaction_file_name(read_version: int, txn_uuid: str) -> str:
    """``{read_version}-{uuid}.txn``: the transaction's own uuid (hyphenated) and the version
    it read (0 when it creates the dataset)."""
    return f"{read_version}-{txn_uuid}.txn"


def transaction_file_path(root: str, name: str) -> str:
    """Absolute path of ``Manifest.transaction_file`` (stored relative to
    ``_transactions/``)."""
    return storage.join(root, TRANSACTIONS_DIR, name)


def tags_dir(root: str) -> str:
    return storage.join(root, TAGS_DIR)


def tag_path(root: str, name: str) -> str:
    return storage.join(tags_dir(root), f"{name}.json")
