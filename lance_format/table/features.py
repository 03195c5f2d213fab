"""Reader and writer feature flags (``Manifest.reader_feature_flags`` / ``writer_feature_flags``).

The spec's rule: a reader that sees a reader flag it does not know, or a writer that sees a
writer flag it does not know, must refuse with an "unsupported" error before reading or
writing anything.  Bits 0-5 are in the table format since lance 0.x; the higher bits are
the ones newer lance builds allocate.  Measured on pylance 14.0.2 (a manifest with one bit
set): it reads and writes with bits 0-5, 7 and 11; it refuses 6, 9 and anything from 4096 up
as "not supported"; it wants 8 and 10 set in both words together.  We name bits 6-10 after
newer upstream sources to give a useful error, but support only what we can honour.
"""

from __future__ import annotations

from typing import cast

from ..errors import InvalidArgumentError, UnsupportedError
from ..pb import table_pb2

FLAG_DELETION_FILES = 1 << 0
"""Fragments may have deletion files."""
FLAG_STABLE_ROW_IDS = 1 << 1
"""Row ids are stable across moves; every fragment carries a row-id sequence."""
FLAG_USE_V2_FORMAT_DEPRECATED = 1 << 2
"""Old marker for 2.x data files; no longer written, harmless."""
FLAG_TABLE_CONFIG = 1 << 3
"""``Manifest.config`` is non-empty (writer flag)."""
FLAG_BASE_PATHS = 1 << 4
"""Files may live under other base paths (shallow clones, multi-base datasets)."""
FLAG_DISABLE_TRANSACTION_FILE = 1 << 5
"""Transactions are only inline in the manifest, no ``_transactions/`` file (writer flag)."""
FLAG_DATA_OVERLAY_FILES = 1 << 6
FLAG_COVERED_INDEX_METADATA = 1 << 7
FLAG_MIXED_DATA_FILE_VERSIONS = 1 << 8
FLAG_FRAG_REUSE_WITH_STABLE_ROW_IDS = 1 << 9
FLAG_FRAGMENT_REUSE_INDEX = 1 << 10

FLAG_NAMES: dict[int, str] = {
    FLAG_DELETION_FILES: "deletion files",
    FLAG_STABLE_ROW_IDS: "stable row ids",
    FLAG_USE_V2_FORMAT_DEPRECATED: "v2 format (deprecated)",
    FLAG_TABLE_CONFIG: "table config",
    FLAG_BASE_PATHS: "multiple base paths",
    FLAG_DISABLE_TRANSACTION_FILE: "transaction files disabled",
    FLAG_DATA_OVERLAY_FILES: "data overlay files",
    FLAG_COVERED_INDEX_METADATA: "covering index columns",
    FLAG_MIXED_DATA_FILE_VERSIONS: "mixed data file versions",
    FLAG_FRAG_REUSE_WITH_STABLE_ROW_IDS: "fragment reuse index with stable row ids",
    FLAG_FRAGMENT_REUSE_INDEX: "fragment reuse index",
}

# What this implementation honours.  Table config only asks a writer to respect settings it
# may ignore safely (we keep the map as it is); "transaction files disabled" only means the
# transaction must be read from the manifest, which we do; every data file is read by its
# own version, so mixed versions need nothing more.  Multiple base paths would need
# path resolution through ``Manifest.base_paths``, which we do not have.
SUPPORTED_READER_FLAGS = (
    FLAG_DELETION_FILES
    | FLAG_STABLE_ROW_IDS
    | FLAG_USE_V2_FORMAT_DEPRECATED
    | FLAG_TABLE_CONFIG
    | FLAG_DISABLE_TRANSACTION_FILE
    | FLAG_MIXED_DATA_FILE_VERSIONS
)
SUPPORTED_WRITER_FLAGS = SUPPORTED_READER_FLAGS


def _flags_of(manifest, attr: str) -> int:
    pb = getattr(manifest, "pb", manifest)
    return int(getattr(pb, attr))


def describe_flags(bits: int) -> str:
    """``"64 (data overlay files), 4096 (unknown)"``: each set bit, named where known."""
    parts = []
    bit = 1
    while bit <= bits:
        if bits & bit:
            parts.append(f"{bit} ({FLAG_NAMES.get(bit, 'unknown')})")
        bit <<= 1
    return ", ".join(parts)


def _check(manifest, attr: str, supported: int, action: str) -> None:
    flags = _flags_of(manifest, attr)
    bad = flags & ~supported
    if bad:
        raise UnsupportedError(
            f"cannot {action} this dataset: {attr} {flags} has feature flag bits this "
            f"implementation does not support: {describe_flags(bad)}",
            path=getattr(manifest, "path", None),
        )


def check_reader_flags(manifest) -> None:
    """Raise UnsupportedError if reading needs a feature we lack (a Manifest or its pb)."""
    _check(manifest, "reader_feature_flags", SUPPORTED_READER_FLAGS, "read")


def check_writer_flags(manifest) -> None:
    """Raise UnsupportedError if writing needs a feature we lack (a Manifest or its pb)."""
    _check(manifest, "writer_feature_flags", SUPPORTED_WRITER_FLAGS, "write to")


def uses_stable_row_ids(manifest) -> bool:
    return bool(_flags_of(manifest, "reader_feature_flags") & FLAG_STABLE_ROW_IDS)


def has_row_id_sequence(fragment: table_pb2.DataFragment) -> bool:
    return fragment.WhichOneof("row_id_sequence") is not None


# the flags that follow from the fragments, one by one (set in both reader and writer flags)
FRAGMENT_FLAGS = (
    FLAG_DELETION_FILES | FLAG_STABLE_ROW_IDS | FLAG_DATA_OVERLAY_FILES
    | FLAG_MIXED_DATA_FILE_VERSIONS
)  # fmt: skip


def required_flags(
    manifest: table_pb2.Manifest,
    *,
    stable_row_ids: bool | None = None,
    disable_transaction_file: bool | None = None,
    known: tuple[int, int] = (0, 0),
) -> tuple[int, int]:
    """``(reader_flags, writer_flags)`` that a manifest with these contents needs.

    Follows upstream's rule: deletion files -> bit 0 both; row-id sequences (or the
    dataset being a stable-row-id one, which then requires a sequence on every fragment)
    -> bit 1 both; a non-empty config -> bit 3 writer; base paths -> bit 4 both; overlays
    -> bit 6 both; transaction files disabled -> bit 5 writer.  ``None`` keeps what the
    manifest's current flags say for the last two.  The manifest naming scheme is not a
    flag: readers detect it from the names.

    ``known = (n, flags)``: the first ``n`` fragments are those of a committed manifest
    whose flags were ``flags`` (an append adds fragments after them), so only the others
    are looked at: a dataset taking many small appends has thousands of fragments, and
    walking them all in Python cost more than the rest of a commit.
    """
    # a Manifest wrapper or the protobuf itself
    pb = cast(table_pb2.Manifest, getattr(manifest, "pb", manifest))
    current_r = int(pb.reader_feature_flags)
    current_w = int(pb.writer_feature_flags)
    if stable_row_ids is None:
        stable_row_ids = bool(current_r & FLAG_STABLE_ROW_IDS)
    if disable_transaction_file is None:
        disable_transaction_file = bool(current_w & FLAG_DISABLE_TRANSACTION_FILE)
    skip, known_flags = known
    frags = pb.fragments[skip:] if skip else pb.fragments
    reader = writer = known_flags & FRAGMENT_FLAGS if skip else 0
    if any(f.HasField("deletion_file") for f in frags):
        reader |= FLAG_DELETION_FILES
        writer |= FLAG_DELETION_FILES
    with_ids = [has_row_id_sequence(f) for f in frags]
    if stable_row_ids or any(with_ids):
        if skip and not known_flags & FLAG_STABLE_ROW_IDS:  # the first ones may lack them
            return required_flags(
                pb, stable_row_ids=stable_row_ids, disable_transaction_file=disable_transaction_file
            )
        if not all(with_ids):
            missing = [f.id for f, ok in zip(frags, with_ids, strict=True) if not ok]
            raise InvalidArgumentError(
                "stable row ids need a row-id sequence on every fragment; fragments "
                f"{missing[:10]} have none"
            )
        reader |= FLAG_STABLE_ROW_IDS
        writer |= FLAG_STABLE_ROW_IDS
    if pb.config:
        writer |= FLAG_TABLE_CONFIG
    if pb.base_paths:
        reader |= FLAG_BASE_PATHS
        writer |= FLAG_BASE_PATHS
    if any(len(f.overlays) for f in frags):
        reader |= FLAG_DATA_OVERLAY_FILES
        writer |= FLAG_DATA_OVERLAY_FILES
    if disable_transaction_file:
        writer |= FLAG_DISABLE_TRANSACTION_FILE
    if _mixed_versions(pb, frags):
        reader |= FLAG_MIXED_DATA_FILE_VERSIONS
        writer |= FLAG_MIXED_DATA_FILE_VERSIONS
    return reader, writer


def _mixed_versions(pb: table_pb2.Manifest, fragments) -> bool:
    """A 2.x data file of another version than the dataset's (compaction into another
    version writes them; each file is read by its own version)."""
    try:
        major, minor = (int(x) for x in pb.data_format.version.split("."))
    except ValueError:
        return False
    if major < 2:
        return False
    return any(
        d.file_major_version >= 2 and (d.file_major_version, d.file_minor_version) != (major, minor)
        for f in fragments
        for d in f.files
    )


def apply_feature_flags(
    manifest: table_pb2.Manifest,
    *,
    stable_row_ids: bool | None = None,
    disable_transaction_file: bool | None = None,
    known: tuple[int, int] = (0, 0),
) -> None:
    """Set ``manifest``'s flags to :func:`required_flags` (stale bits such as deletion files
    after an overwrite are cleared, as upstream does on every commit)."""
    reader, writer = required_flags(
        manifest,
        stable_row_ids=stable_row_ids,
        disable_transaction_file=disable_transaction_file,
        known=known,
    )
    manifest.reader_feature_flags = reader
    manifest.writer_feature_flags = writer
