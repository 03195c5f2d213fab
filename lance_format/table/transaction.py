"""Transactions: the change that produced a dataset version (``lance.table.Transaction``).

A transaction records *what* a commit did (append these fragments, delete these rows, ...)
rather than the resulting state, so that a writer that lost the race for a version can check
whether the winner's change is compatible with its own (:mod:`.conflicts`) and, if it is,
re-apply its change on top of the new latest manifest.

pylance 14 writes each transaction twice, byte for byte the same (docs/format/table.md):

* ``_transactions/{read_version}-{uuid}.txn`` holds the bare protobuf: no length prefix, no
  footer, no magic;
* the manifest file embeds the same bytes (``Manifest`` field 23 points at them).

``read_version`` is the version the change was based on (0, i.e. absent on the wire, for the
creating write); fragments that the commit creates carry id 0 until the
manifest builder assigns ids from ``max_fragment_id``.  Creating a tag writes no
transaction; compaction writes two (ReserveFragments, then Rewrite) with the same read
version.

:class:`Transaction` is the header (read version, uuid, tag, properties) around one
:mod:`.operations` dataclass; it becomes a protobuf only where it is written or read.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from .. import storage
from ..errors import CorruptFileError, InvalidArgumentError, ObjectNotFoundError
from ..pb import transaction_pb2
from .operations import (  # re-exported: a transaction's operations are part of its API
    OPERATIONS,
    Append,
    Clone,
    CreateIndex,
    DataFile,
    DataFragment,
    DataOverlay,
    DataReplacement,
    DataReplacementGroup,
    Delete,
    Field,
    IndexMetadata,
    Merge,
    Operation,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    RewriteGroup,
    UnknownOperation,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMap,
    UpdateMemWalState,
)

TXN_DIR = "_transactions"
TXN_SUFFIX = ".txn"
OPERATION_FIELD_MIN = 100
"""Operation oneof members are numbered from 100 (``Append = 100`` ... ``DataOverlay = 115``);
an unknown field from 100 up on a transaction without a known operation is a newer operation."""

_TXN_NAME = re.compile(r"^(\d+)-([^/\\]+)\.txn$")

PbTransaction = transaction_pb2.Transaction


# -- the transaction ----------------------------------------------------------------------


def new_uuid() -> str:
    """A fresh hyphenated UUIDv4, the form pylance uses in transaction file names."""
    return str(uuidlib.uuid4())


@dataclass
class Transaction:
    """One transaction.  ``unknown_fields`` carries (as wire bytes) any header field a newer
    writer added, so that re-writing a transaction keeps it (a field unknown to us *inside*
    an operation message is kept only where that message is held as a protobuf)."""

    read_version: int
    operation: Operation
    uuid: str = field(default_factory=new_uuid)
    tag: str | None = None
    transaction_properties: dict[str, str] = field(default_factory=dict)
    unknown_fields: bytes = b""

    @property
    def kind(self) -> str:
        """The proto oneof member name (``"append"``, ``"delete"``, ...; ``"unknown"``)."""
        return self.operation.KIND

    @property
    def file_name(self) -> str:
        """``{read_version}-{uuid}.txn``, the name under ``_transactions/`` (and the value of
        ``Manifest.transaction_file``)."""
        return f"{self.read_version}-{self.uuid}{TXN_SUFFIX}"

    # -- protobuf -------------------------------------------------------------------------

    def to_pb(self) -> PbTransaction:
        msg = PbTransaction(read_version=self.read_version, uuid=self.uuid, tag=self.tag or "")
        msg.transaction_properties.update(self.transaction_properties)
        if isinstance(self.operation, UnknownOperation):
            msg.MergeFromString(self.operation.raw)
        else:
            self.operation.fill_pb(getattr(msg, self.operation.KIND))
        if self.unknown_fields:
            msg.MergeFromString(self.unknown_fields)
        return msg

    def to_bytes(self) -> bytes:
        return self.to_pb().SerializeToString()

    @classmethod
    def from_pb(cls, msg: PbTransaction, *, path: str | None = None) -> Transaction:
        """Decode a ``lance.table.Transaction``.  A transaction with no operation at all is
        corrupt; one whose operation is unknown becomes :class:`UnknownOperation`."""
        unknown: list[tuple[int, bytes]] = []
        if len(UnknownFieldSet(msg)):  # rare: only then re-serialise to find their bytes
            known_numbers = {f.number for f in PbTransaction.DESCRIPTOR.fields}
            unknown = [
                span
                for span in _scan_fields(msg.SerializeToString(), path)
                if span[0] not in known_numbers
            ]
        kind = msg.WhichOneof("operation")
        header_unknown = unknown
        if kind is not None:
            operation: Operation = OPERATIONS[kind].from_pb(getattr(msg, kind))
        else:
            ops = [s for s in unknown if s[0] >= OPERATION_FIELD_MIN]
            if not ops:
                raise CorruptFileError("the transaction has no operation", path=path)
            number = ops[0][0]
            operation = UnknownOperation(
                field_number=number, raw=b"".join(s[1] for s in ops if s[0] == number)
            )
            header_unknown = [s for s in unknown if s[0] != number]
        return cls(
            read_version=msg.read_version,
            operation=operation,
            uuid=msg.uuid,
            tag=msg.tag or None,
            transaction_properties=dict(msg.transaction_properties),
            unknown_fields=b"".join(s[1] for s in header_unknown),
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, path: str | None = None) -> Transaction:
        """Decode the bare protobuf bytes of a ``.txn`` file (or of a manifest's inline
        transaction section); anything that does not parse is a :class:`CorruptFileError`."""
        try:
            msg = PbTransaction.FromString(data)
        except (DecodeError, RuntimeError, ValueError) as e:
            raise CorruptFileError(f"the transaction does not parse: {e}", path=path) from None
        return cls.from_pb(msg, path=path)


def as_transaction(txn: Transaction | PbTransaction) -> Transaction:
    """Accept either form: the dataset layer sometimes holds the raw protobuf."""
    if isinstance(txn, Transaction):
        return txn
    if isinstance(txn, PbTransaction):
        return Transaction.from_pb(txn)
    raise InvalidArgumentError(f"expected a transaction, got {type(txn).__name__}")


def new_transaction(
    read_version: int,
    operation: Operation,
    *,
    tag: str | None = None,
    transaction_properties: Mapping[str, str] | None = None,
) -> Transaction:
    """A transaction with a fresh uuid."""
    if read_version < 0:
        raise InvalidArgumentError(f"read_version must be >= 0, got {read_version}")
    return Transaction(
        read_version=read_version,
        operation=operation,
        tag=tag,
        transaction_properties=dict(transaction_properties or {}),
    )


def _scan_fields(data: bytes, path: str | None) -> list[tuple[int, bytes]]:
    """Split a serialised message into its top-level fields: (field number, wire bytes).

    Only needed to carry fields this library does not know through a round trip; the
    generated parser has already validated the structure, this re-checks it cheaply."""
    out = []
    pos, n = 0, len(data)

    def varint() -> int:
        nonlocal pos
        shift = value = 0
        while True:
            if pos >= n or shift > 63:
                raise CorruptFileError("truncated or overlong varint in transaction", path=path)
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    while pos < n:
        start = pos
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            varint()
        elif wire == 1:
            pos += 8
        elif wire == 2:
            length = varint()
            pos += length
        elif wire == 5:
            pos += 4
        else:  # groups (3/4) are not used by any Lance message
            raise CorruptFileError(f"unexpected wire type {wire} in transaction", path=path)
        if pos > n or number == 0:
            raise CorruptFileError("truncated field in transaction", path=path)
        out.append((number, data[start:pos]))
    return out


# -- files --------------------------------------------------------------------------------


def parse_transaction_file_name(name: str) -> tuple[int, str] | None:
    """``(read_version, uuid)`` of a ``{read_version}-{uuid}.txn`` name, else None."""
    m = _TXN_NAME.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def transaction_path(root: str, name: str) -> str:
    """Where a transaction named in a manifest lives.  The manifest stores the bare file
    name (pylance: ``Manifest.transaction_file``); a leading ``_transactions/`` is tolerated.
    Anything that could escape the directory is refused as corrupt."""
    rel = name[len(TXN_DIR) + 1 :] if name.startswith(TXN_DIR + "/") else name
    if not rel or "/" in rel or "\\" in rel or rel in (".", ".."):
        raise CorruptFileError(f"invalid transaction file name {name!r}")
    return storage.join(root, TXN_DIR, rel)


def write_transaction_file(
    root: str, txn: Transaction | PbTransaction, data: bytes | None = None
) -> str:
    """Write ``_transactions/{read_version}-{uuid}.txn`` (bare protobuf, as pylance) and
    return its name, the value for ``Manifest.transaction_file``.  ``data``: ``txn``'s
    bytes when the caller has them already (a commit also embeds them in the manifest).

    Under a fresh name that only a committed manifest names (written before it), so it is
    written in place: no reader looks at it while it is incomplete."""
    t = as_transaction(txn)
    if not t.uuid or "/" in t.uuid or "\\" in t.uuid:
        raise InvalidArgumentError(f"invalid transaction uuid {t.uuid!r}")
    if data is None:
        data = t.to_bytes()
    name = t.file_name
    # a fresh name, read only through a committed manifest: written in place
    storage.put_new(storage.join(root, TXN_DIR, name), data)
    return name


def read_transaction_file(root: str, name: str) -> Transaction:
    """Read a transaction named in a manifest.  Missing or unreadable -> LanceIOError;
    bytes that do not form a transaction -> CorruptFileError."""
    path = transaction_path(root, name)
    try:
        data = storage.read_bytes(path)
    except ObjectNotFoundError:
        raise ObjectNotFoundError("transaction file not found", path=path) from None
    return Transaction.from_bytes(data, path=path)


__all__ = [
    "Append",
    "Clone",
    "CreateIndex",
    "DataFile",
    "DataFragment",
    "DataOverlay",
    "DataReplacement",
    "DataReplacementGroup",
    "Delete",
    "Field",
    "IndexMetadata",
    "Merge",
    "OPERATIONS",
    "Operation",
    "Overwrite",
    "Project",
    "ReserveFragments",
    "Restore",
    "Rewrite",
    "RewriteGroup",
    "Transaction",
    "UnknownOperation",
    "Update",
    "UpdateBases",
    "UpdateConfig",
    "UpdateMap",
    "UpdateMemWalState",
    "as_transaction",
    "new_transaction",
    "new_uuid",
    "parse_transaction_file_name",
    "read_transaction_file",
    "transaction_path",
    "write_transaction_file",
]
