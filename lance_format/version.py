"""Lance file versions as an ordered type, so a check reads "2.2 or later" and not
``version != "2.1"``.

A :class:`LanceFileVersion` is a ``str`` (``"2.2"``), so it equals the name users and the
manifest use, serialises as that name and can be assigned to a protobuf string field; it
orders by ``(major, minor)``, also against a plain version string.  ``"stable"`` and
``"next"`` are aliases, resolved as pylance 14 resolves them (see docs/format/versions.md).
"""

from __future__ import annotations

import enum

from .errors import InvalidArgumentError, UnsupportedError


class LanceFileVersion(enum.StrEnum):
    """One Lance data-file version; compare with ``<``/``>=``, print with ``str()``."""

    LEGACY = "0.1"  # the v1 format (its data-file footer says 0.2)
    V2_0 = "2.0"  # footer (0, 3), manifest data files (2, 0)
    V2_1 = "2.1"
    V2_2 = "2.2"
    V2_3 = "2.3"  # pylance's unstable "next": known by name, neither read nor written here

    @classmethod
    def parse(cls, value: str | LanceFileVersion) -> LanceFileVersion:
        """A version from its name or an alias (``"stable"``, ``"next"``, ``"legacy"``,
        ``"0.3"``), case-insensitively, as ``data_storage_version`` accepts them."""
        if isinstance(value, LanceFileVersion):
            return value
        text = str(value).strip().lower()
        text = _ALIASES.get(text, text)
        try:
            return cls(text)
        except ValueError:
            names = ", ".join([*(v.value for v in cls), *_ALIASES])
            raise InvalidArgumentError(
                f"unknown Lance file version {value!r} (known: {names})"
            ) from None

    @classmethod
    def from_numbers(cls, major: int, minor: int) -> LanceFileVersion:
        """The version a footer's or a manifest data file's ``(major, minor)`` names."""
        found = _BY_NUMBERS.get((major, minor))
        if found is None:
            raise UnsupportedError(f"unsupported Lance file version {major}.{minor}")
        return found

    @property
    def numbers(self) -> tuple[int, int]:
        """``(major, minor)`` as a manifest's data file records it (2.0 is (2, 0))."""
        return _MANIFEST_NUMBERS[self]

    @property
    def footer_numbers(self) -> tuple[int, int]:
        """``(major, minor)`` as the data file's footer records it (2.0 is (0, 3))."""
        return _FOOTER_NUMBERS[self]

    @property
    def is_structural(self) -> bool:
        """2.1 and later: leaf columns with repetition/definition levels and page layouts
        (mini-block, full-zip, constant, blob); 2.0 and the legacy format are not."""
        return self >= LanceFileVersion.V2_1

    # Comparisons run ~90 times in a small append's write: one dict lookup each, keyed
    # by the name (a member hashes and compares as its string, so "2.1" finds V2_1 too);
    # aliases and unknown names go through parse (and its error).

    def __lt__(self, other: str) -> bool:
        found = _RANK.get(other)
        return _RANK[self] < (found if found is not None else _rank(other))

    def __le__(self, other: str) -> bool:
        found = _RANK.get(other)
        return _RANK[self] <= (found if found is not None else _rank(other))

    def __gt__(self, other: str) -> bool:
        found = _RANK.get(other)
        return _RANK[self] > (found if found is not None else _rank(other))

    def __ge__(self, other: str) -> bool:
        found = _RANK.get(other)
        return _RANK[self] >= (found if found is not None else _rank(other))


def _rank(other: str) -> tuple[int, int]:
    return _RANK[LanceFileVersion.parse(other)]


# pylance 14 resolves "stable" to 2.2 and "next" to 2.3
_ALIASES = {"stable": "2.2", "next": "2.3", "legacy": "0.1", "0.3": "2.0"}
_MANIFEST_NUMBERS = {
    LanceFileVersion.LEGACY: (0, 2),
    LanceFileVersion.V2_0: (2, 0),
    LanceFileVersion.V2_1: (2, 1),
    LanceFileVersion.V2_2: (2, 2),
    LanceFileVersion.V2_3: (2, 3),
}
_RANK: dict[str, tuple[int, int]] = {str(v): n for v, n in _MANIFEST_NUMBERS.items()}
_FOOTER_NUMBERS = {**_MANIFEST_NUMBERS, LanceFileVersion.V2_0: (0, 3)}
# (0, 0)..(0, 2) are the legacy format, (0, 3) and (2, 0) both name 2.0
_BY_NUMBERS = {
    (0, 0): LanceFileVersion.LEGACY,
    (0, 1): LanceFileVersion.LEGACY,
    (0, 2): LanceFileVersion.LEGACY,
    (0, 3): LanceFileVersion.V2_0,
    (2, 0): LanceFileVersion.V2_0,
    (2, 1): LanceFileVersion.V2_1,
    (2, 2): LanceFileVersion.V2_2,
    (2, 3): LanceFileVersion.V2_3,
}

# The one list of versions this package writes, and the version a new dataset gets.
WRITABLE_VERSIONS = (LanceFileVersion.V2_0, LanceFileVersion.V2_1, LanceFileVersion.V2_2)
# The versions the v2 container reader opens (the legacy format has its own reader).
READABLE_V2_VERSIONS = WRITABLE_VERSIONS
DEFAULT_VERSION = LanceFileVersion.V2_2


def writable(
    value: str | LanceFileVersion, what: str = "write", *, legacy: bool = False
) -> LanceFileVersion:
    """``value`` parsed, if this package can write it; the one error message otherwise.
    ``what`` names the operation in the message ("append to", "compact", ...).  With
    ``legacy``, the v1 format too (whole data files of new rows have a writer of their own:
    :mod:`lance_format.legacy.writer`)."""
    try:
        version = LanceFileVersion.parse(value)
    except InvalidArgumentError:
        version = None
    if legacy and version == LanceFileVersion.LEGACY:
        return version
    if version not in WRITABLE_VERSIONS:
        shown = (
            f"{value!r}" if version is None or str(value) == version else f"{value!r} ({version})"
        )
        raise UnsupportedError(
            f"cannot {what} Lance file version {shown}: writable versions are "
            "2.0, 2.1, 2.2 and stable (= 2.2)"
        )
    assert version is not None
    return version
