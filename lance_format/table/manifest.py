"""Manifest files: reading, validating and encoding them byte-compatibly with pylance 14.

Framing (docs/format/table.md), each section a u32 little-endian length then the protobuf::

    [ IndexSection ]   only when the dataset has indices; Manifest.index_section -> here
    [ Transaction  ]   the transaction that made this version; Manifest field 23 -> here
    [ Manifest     ]   the footer points at this length prefix
    i64 position | u16 0 | u16 2 | "LANC"     (16-byte footer)

The inline transaction is byte-identical to the ``_transactions/*.txn`` file.  Field 21 (the
snapshot's ``transaction_section``) is never written; it is still honoured on read.
"""

from __future__ import annotations

import datetime as dt
import functools
import struct
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError, Message

from .. import storage
from ..errors import CorruptFileError, InvalidArgumentError, LanceError, UnsupportedError
from ..pb import table_pb2, transaction_pb2
from ..schema import LanceSchema
from ..storage.commit import handler_for
from ..version import LanceFileVersion
from . import features, paths

MAGIC = b"LANC"
FOOTER_SIZE = 16
FOOTER_MAJOR = 0
FOOTER_MINOR = 2
_FOOTER = struct.Struct("<qhh4s")
_U32 = struct.Struct("<I")


@dataclass(frozen=True, eq=False)
class Manifest:
    """One version's manifest as read from (or about to be written to) a file.

    ``pb`` is the raw ``lance.table.Manifest``; the properties are what the dataset layer
    needs.  ``index_section`` and ``transaction_bytes`` are the file's other sections
    (None when absent), kept so a rewrite can carry them over.
    """

    pb: table_pb2.Manifest
    path: str | None = None
    size: int | None = None
    index_section: table_pb2.IndexSection | None = None
    transaction_bytes: bytes | None = field(default=None, repr=False)

    # -- identity -------------------------------------------------------------------------

    @property
    def version(self) -> int:
        return int(self.pb.version)

    @property
    def naming(self) -> paths.ManifestNaming | None:
        """The naming scheme of the file this was read from (None if not from a file)."""
        if self.path is None:
            return None
        parsed = paths.parse_manifest_name(storage.basename(self.path))
        return parsed[1] if parsed else None

    @property
    def timestamp_ns(self) -> int | None:
        if not self.pb.HasField("timestamp"):
            return None
        ts = self.pb.timestamp
        return ts.seconds * 1_000_000_000 + ts.nanos

    @property
    def timestamp(self) -> dt.datetime | None:
        """Commit time, timezone-aware UTC (microsecond precision)."""
        ns = self.timestamp_ns
        if ns is None:
            return None
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        return epoch + dt.timedelta(microseconds=ns // 1000)

    @property
    def local_timestamp(self) -> dt.datetime | None:
        """Commit time as pylance's ``versions()`` gives it: a naive datetime in local time."""
        ns = self.timestamp_ns
        if ns is None:
            return None
        return dt.datetime.fromtimestamp(ns // 1_000_000_000) + dt.timedelta(
            microseconds=(ns % 1_000_000_000) // 1000
        )

    def summary(self) -> dict[str, str]:
        """pylance's version summary (``versions()``/``get_version()`` ``metadata``): counts
        of fragments, files and rows, from the manifest alone."""
        frags = self.pb.fragments
        data_rows = sum(f.physical_rows for f in frags)
        deleted = sum(
            f.deletion_file.num_deleted_rows for f in frags if f.HasField("deletion_file")
        )
        counts = {
            "total_data_file_rows": data_rows,
            "total_data_files": sum(len(f.files) for f in frags),
            "total_deletion_file_rows": deleted,
            "total_deletion_files": sum(1 for f in frags if f.HasField("deletion_file")),
            "total_files_size": sum(d.file_size_bytes for f in frags for d in f.files),
            "total_fragments": len(frags),
            "total_rows": data_rows - deleted,
        }
        return {k: str(v) for k, v in counts.items()}

    @property
    def tag(self) -> str:
        return self.pb.tag

    @property
    def writer_version(self) -> tuple[str, str]:
        """``(library, version)``, e.g. ``("lance", "14.0.2")``."""
        return self.pb.writer_version.library, self.pb.writer_version.version

    # -- schema and fragments -------------------------------------------------------------

    @functools.cached_property
    def schema(self) -> LanceSchema:
        try:
            return LanceSchema.from_protos(self.pb.fields, dict(self.pb.schema_metadata))
        except LanceError as exc:
            raise exc.with_context(path=self.path) from exc

    @property
    def schema_metadata(self) -> dict[str, bytes]:
        return dict(self.pb.schema_metadata)

    @property
    def fragments(self):
        """The ``DataFragment`` messages, in dataset order."""
        return self.pb.fragments

    @property
    def fragment_ids(self) -> list[int]:
        return [int(f.id) for f in self.pb.fragments]

    @property
    def max_fragment_id(self) -> int | None:
        """Highest fragment id ever used; None if no fragment was ever written."""
        return int(self.pb.max_fragment_id) if self.pb.HasField("max_fragment_id") else None

    @property
    def next_row_id(self) -> int:
        return int(self.pb.next_row_id)

    @property
    def data_storage_version(self) -> LanceFileVersion:
        """The data file version, e.g. ``"2.2"`` (``"0.1"`` for legacy files)."""
        if self.pb.HasField("data_format"):
            try:
                return LanceFileVersion.parse(self.pb.data_format.version)
            except InvalidArgumentError:
                raise UnsupportedError(
                    f"the manifest's data storage version {self.pb.data_format.version!r} "
                    "is unknown"
                ) from None
        return _infer_storage_version(self.pb)

    # -- flags, config, transaction -------------------------------------------------------

    @property
    def reader_feature_flags(self) -> int:
        return int(self.pb.reader_feature_flags)

    @property
    def writer_feature_flags(self) -> int:
        return int(self.pb.writer_feature_flags)

    @property
    def stable_row_ids(self) -> bool:
        return features.uses_stable_row_ids(self.pb)

    @property
    def config(self) -> dict[str, str]:
        return dict(self.pb.config)

    @property
    def table_metadata(self) -> dict[str, str]:
        return dict(self.pb.table_metadata)

    @property
    def transaction_file(self) -> str:
        """Name under ``_transactions/`` ("" if none was written)."""
        return self.pb.transaction_file

    @functools.cached_property
    def transaction(self) -> transaction_pb2.Transaction | None:
        """The inline transaction that made this version (None if the file has none)."""
        if self.transaction_bytes is None:
            return None
        txn = transaction_pb2.Transaction()
        try:
            txn.ParseFromString(self.transaction_bytes)
        except DecodeError as exc:
            raise CorruptFileError(
                f"inline transaction does not parse: {exc}", path=self.path
            ) from exc
        return txn

    @property
    def indices(self) -> list[table_pb2.IndexMetadata]:
        return list(self.index_section.indices) if self.index_section is not None else []


def _infer_storage_version(pb: table_pb2.Manifest) -> LanceFileVersion:
    """Old manifests have no ``data_format``: infer it from a data file, as upstream does."""
    for frag in pb.fragments:
        for f in frag.files:
            return LanceFileVersion.from_numbers(f.file_major_version, f.file_minor_version)
    if pb.writer_feature_flags & features.FLAG_USE_V2_FORMAT_DEPRECATED:
        return LanceFileVersion.V2_0
    return LanceFileVersion.LEGACY


# -- reading --------------------------------------------------------------------------------


def _section(data: bytes, offset: int, limit: int, what: str, path: str | None) -> bytes:
    """The protobuf bytes of a u32-length-prefixed section that must end by ``limit``."""
    if offset < 0 or offset + 4 > limit:
        raise CorruptFileError(f"{what} offset {offset} is outside 0..{limit - 4}", path=path)
    (length,) = _U32.unpack_from(data, offset)
    end = offset + 4 + length
    if end > limit:
        raise CorruptFileError(
            f"{what} at {offset} claims {length} bytes, running past {limit}", path=path
        )
    return data[offset + 4 : end]


def decode_manifest(data: bytes, path: str | None = None) -> Manifest:
    """Parse a manifest file's bytes (see the module docstring for the layout)."""
    size = len(data)
    if size < FOOTER_SIZE + 4:
        raise CorruptFileError(f"manifest file is only {size} bytes", path=path)
    pos, _major, _minor, magic = _FOOTER.unpack_from(data, size - FOOTER_SIZE)
    if magic != MAGIC:
        raise CorruptFileError(f"manifest footer magic is {magic!r}, not {MAGIC!r}", path=path)
    body_end = size - FOOTER_SIZE
    body = _section(data, pos, body_end, "manifest", path)
    if pos + 4 + len(body) != body_end:
        raise CorruptFileError(
            f"manifest at {pos} has {len(body)} bytes but {body_end - pos - 4} precede the footer",
            path=path,
        )
    pb = table_pb2.Manifest()
    try:
        pb.ParseFromString(body)
    except DecodeError as exc:
        raise CorruptFileError(f"manifest protobuf does not parse: {exc}", path=path) from exc

    index_section = None
    if pb.HasField("index_section"):
        raw = _section(data, pb.index_section, pos, "index section", path)
        index_section = table_pb2.IndexSection()
        try:
            index_section.ParseFromString(raw)
        except DecodeError as exc:
            raise CorruptFileError(f"index section does not parse: {exc}", path=path) from exc

    txn_bytes = None
    if pb.HasField("transaction_section"):
        txn_bytes = _section(data, pb.transaction_section, pos, "inline transaction", path)
    elif pb.HasField("transaction_section_deprecated"):
        offset = pb.transaction_section_deprecated
        txn_bytes = _section(data, offset, pos, "inline transaction", path)

    _check_row_ids(pb, path)
    return Manifest(pb, path, size, index_section, txn_bytes)


def _check_row_ids(pb: table_pb2.Manifest, path: str | None) -> None:
    if features.uses_stable_row_ids(pb):
        missing = [f.id for f in pb.fragments if not features.has_row_id_sequence(f)]
        if missing:
            raise CorruptFileError(
                f"stable row ids are on but fragments {missing[:10]} have no row-id sequence",
                path=path,
            )


def read_manifest(path: str) -> Manifest:
    """Read and validate one manifest file.

    A file named like a manifest must hold that version; anything truncated, unparsable or
    inconsistent raises CorruptFileError naming the file.
    """
    path = str(path)
    m = decode_manifest(paths.read_bytes(path), path)
    parsed = paths.parse_manifest_name(storage.basename(path))
    if parsed is not None and parsed[0] != m.version:
        raise CorruptFileError(
            f"the file is named for version {parsed[0]} but holds version {m.version}", path=path
        )
    return m


# -- writing --------------------------------------------------------------------------------

_KEEP = object()


def _serialize(msg: Message | bytes | None) -> bytes | None:
    if msg is None or isinstance(msg, bytes):
        return msg
    return msg.SerializeToString()


def encode_manifest(
    manifest: Manifest | table_pb2.Manifest,
    transaction: transaction_pb2.Transaction | bytes | None | object = _KEEP,
    *,
    index_section: table_pb2.IndexSection | bytes | None | object = _KEEP,
    in_place: bool = False,
) -> bytes:
    """The bytes of a manifest file for ``manifest``, framed exactly as pylance 14 does.

    ``transaction`` is embedded inline (Manifest field 23 points at it); pass the same
    bytes as the ``.txn`` file.  ``index_section`` is written first when given.  For a
    :class:`Manifest`, both default to the sections it was read with; for a bare pb they
    default to none, and a pb that still points at an index section is refused then,
    because the offset belongs to another file and silently dropping the indices would
    lose them.  The pb passed in is not modified, unless ``in_place`` says the caller
    built it for this file alone (a commit's new manifest: copying it cost as much as
    serialising it, and grows with the fragments).
    """
    return _encode(manifest, transaction, index_section, in_place)[0]


def _encode(
    manifest: Manifest | table_pb2.Manifest,
    transaction: transaction_pb2.Transaction | bytes | None | object,
    index_section: table_pb2.IndexSection | bytes | None | object,
    in_place: bool,
) -> tuple[bytes, table_pb2.Manifest, bytes | None, bytes | None]:
    """:func:`encode_manifest`, with the body's pb and the index and transaction bytes."""
    if isinstance(manifest, Manifest):
        src = manifest.pb
        if transaction is _KEEP:
            transaction = manifest.transaction_bytes
        if index_section is _KEEP:
            index_section = manifest.index_section
    else:
        src = manifest
        if transaction is _KEEP:
            transaction = None
        if index_section is _KEEP:
            if src.HasField("index_section"):
                raise InvalidArgumentError(
                    "the manifest points at an index section but none was given: pass "
                    "index_section= (e.g. the previous Manifest.index_section) or clear the "
                    "field to drop the indices"
                )
            index_section = None
    if in_place and not isinstance(manifest, Manifest):
        pb = src
    else:
        pb = table_pb2.Manifest()
        pb.CopyFrom(src)
    for name in ("index_section", "transaction_section", "transaction_section_deprecated"):
        pb.ClearField(name)
    for fld in pb.fields:
        if fld.HasField("dictionary") and (fld.dictionary.offset or fld.dictionary.length):
            # Legacy (0.1) manifests keep dictionary values in the manifest file itself.
            raise UnsupportedError(
                f"field {fld.name!r} has legacy (0.1) dictionary values stored in the manifest "
                "file; committing a new version of such a dataset (delete, tags aside) is not "
                "supported: this writer does not carry those values over"
            )

    out = bytearray()
    index_bytes = _serialize(index_section)
    if index_bytes is not None:
        pb.index_section = len(out)
        out += _U32.pack(len(index_bytes)) + index_bytes
    txn_bytes = _serialize(transaction)
    if txn_bytes is not None:
        pb.transaction_section = len(out)
        out += _U32.pack(len(txn_bytes)) + txn_bytes
    body = pb.SerializeToString()
    pos = len(out)
    out += _U32.pack(len(body)) + body
    out += _FOOTER.pack(pos, FOOTER_MAJOR, FOOTER_MINOR, MAGIC)
    return bytes(out), pb, index_bytes, txn_bytes


def write_manifest(
    root: str,
    manifest: Manifest | table_pb2.Manifest,
    naming: paths.ManifestNaming,
    transaction: transaction_pb2.Transaction | bytes | None | object = _KEEP,
    *,
    index_section: table_pb2.IndexSection | bytes | None | object = _KEEP,
    in_place: bool = False,
) -> Manifest | None:
    """Write the manifest of ``manifest.version`` with put-if-not-exists semantics.

    Returns the manifest as written (decoded from the bytes written, not read back), or
    None when that version already exists (another writer won).  The version hint is not
    touched: the committer updates it after a successful write.  ``in_place``: see
    :func:`encode_manifest`.
    """
    version = int((manifest.pb if isinstance(manifest, Manifest) else manifest).version)
    data, pb, index_bytes, txn_bytes = _encode(manifest, transaction, index_section, in_place)
    path = paths.manifest_path(root, version, naming)
    if not handler_for(root).commit_manifest(root, version, path, data):
        return None
    if pb is not manifest:  # a copy was encoded: the file's bytes, decoded
        return decode_manifest(data, path)
    # built for this file alone (in place): it is what was written, with the sections'
    # offsets set; the index section parsed afresh (the caller's may be shared)
    _check_row_ids(pb, path)
    index = None
    if index_bytes is not None:
        index = table_pb2.IndexSection()
        index.ParseFromString(index_bytes)
    return Manifest(pb, path, len(data), index, txn_bytes)
