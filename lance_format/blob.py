"""pylance's blob API: ``blob_field``, ``blob_array``, ``BlobType`` and ``BlobFile``.

A blob column holds large binary values that a scan does not read: it returns each row's
*descriptor* (where the bytes are), and :class:`BlobFile` opens the bytes as a file only
when asked (``Dataset.take_blobs``).  Writing goes through :mod:`lance_format.structural.blob`
(blob v2, Lance 2.2); this module has the user-facing types and the file object, which
reads through :mod:`lance_format.storage` like every other byte.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from . import storage
from .errors import InvalidArgumentError
from .schema import BLOB_KEY, BLOB_V2_EXT_NAME
from .structural.blob import DEDICATED_KEY, INLINE_KEY, PACK_FILE_KEY

DEFAULT_BLOB_BUFFER_SIZE = 512 * 1024  # read-ahead of sequential reads, as pylance's
_MAX_USIZE = 2**64 - 1


@dataclass(frozen=True)
class Blob:
    """One value to write: inline bytes (external URIs are not written here)."""

    data: bytes | None = None
    uri: str | None = None
    position: int | None = None
    size: int | None = None

    def __post_init__(self) -> None:
        if self.data is not None and self.uri is not None:
            raise ValueError("Blob cannot have both data and uri")
        if self.data is None and self.uri is None:
            raise ValueError("Blob must set `data` or `uri`; use None for a null blob")

    @staticmethod
    def from_bytes(data: bytes | bytearray | memoryview) -> Blob:
        return Blob(data=bytes(data))

    @staticmethod
    def from_uri(uri: str, position: int | None = None, size: int | None = None) -> Blob:
        return Blob(uri=uri, position=position, size=size)

    @staticmethod
    def empty() -> Blob:
        return Blob(data=b"")


def _storage_type() -> pa.DataType:
    return pa.struct(
        [
            pa.field("data", pa.large_binary()),
            pa.field("uri", pa.utf8()),
            pa.field("position", pa.uint64()),
            pa.field("size", pa.uint64()),
        ]
    )


class BlobType(pa.ExtensionType):
    """The logical type users write blob columns with (``lance.blob.v2``)."""

    def __init__(self, storage_type: pa.DataType | None = None) -> None:
        pa.ExtensionType.__init__(self, storage_type or _storage_type(), BLOB_V2_EXT_NAME)

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized) -> BlobType:
        return cls(storage_type)

    def __arrow_ext_class__(self):
        return BlobArray


class BlobArray(pa.ExtensionArray):
    """An array of blob values (see :func:`blob_array`)."""

    @classmethod
    def from_pylist(cls, values: list[Any]) -> BlobArray:
        data, uri, position, size, null = [], [], [], [], []
        for v in values:
            if isinstance(v, (bytes, bytearray, memoryview)):
                v = Blob.from_bytes(v)
            elif isinstance(v, str):
                v = Blob.from_uri(v)
            elif v is not None and not isinstance(v, Blob):
                raise TypeError(
                    f"BlobArray values must be bytes-like, str (URI), Blob, or None; got {type(v)}"
                )
            null.append(v is None)
            data.append(None if v is None else v.data)
            uri.append(None if v is None else v.uri)
            position.append(None if v is None else v.position)
            size.append(None if v is None else v.size)
        storage = pa.StructArray.from_arrays(
            [
                pa.array(data, pa.large_binary()),
                pa.array(uri, pa.utf8()),
                pa.array(position, pa.uint64()),
                pa.array(size, pa.uint64()),
            ],
            names=["data", "uri", "position", "size"],
            mask=pa.array(null, pa.bool_()),
        )
        return pa.ExtensionArray.from_storage(BlobType(), storage)


def blob_array(values: list[Any]) -> BlobArray:
    """Blob values from bytes (inline), ``Blob`` objects or None (null)."""
    return BlobArray.from_pylist(values)


def blob_field(
    name: str,
    *,
    nullable: bool = True,
    inline_size_threshold: int | None = None,
    dedicated_size_threshold: int | None = None,
    pack_file_size_threshold: int | None = None,
) -> pa.Field:
    """A blob column's field; the thresholds (bytes) decide where values are stored, with
    the metadata keys pylance reads."""
    metadata = {}
    for key, value, allow_zero in (
        (INLINE_KEY, inline_size_threshold, True),
        (DEDICATED_KEY, dedicated_size_threshold, False),
        (PACK_FILE_KEY, pack_file_size_threshold, False),
    ):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{key} must be an int, got {type(value).__name__}")
        if value < 0 or (value == 0 and not allow_zero):
            raise ValueError(
                f"{key.split(':')[1]} must be {'non-negative' if allow_zero else 'positive'}"
            )
        if value > _MAX_USIZE:
            raise OverflowError(f"{key} must fit in a Rust usize")
        metadata[key.encode()] = str(value).encode()
    field = pa.field(name, BlobType(), nullable=nullable)
    return field.with_metadata(metadata) if metadata else field


def is_blob_arrow_field(f: pa.Field) -> bool:
    """A column written as a blob: the blob extension type, or binary marked
    ``lance-encoding:blob``."""
    if isinstance(f.type, pa.BaseExtensionType) and f.type.extension_name == BLOB_V2_EXT_NAME:
        return True
    md = f.metadata or {}
    flag = md.get(BLOB_KEY.encode(), b"").lower() in (b"true", b"1")
    return flag and (pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type))


class BlobFile(io.BufferedIOBase):
    """One blob as a read-only, seekable file: ``size`` bytes at ``position`` of the file
    at ``path`` (a data file for inline blobs, a sidecar otherwise)."""

    def __init__(
        self, path: str, position: int, size: int, buffer_size: int = DEFAULT_BLOB_BUFFER_SIZE
    ):
        super().__init__()
        if not isinstance(buffer_size, int) or buffer_size < 0:
            raise ValueError("buffer_size must be a non-negative integer")
        self._path = path
        self._start = int(position)
        self._size = int(size)
        self._pos = 0
        self._file = None
        self._buffer_size = buffer_size
        self._buf = b""
        self._buf_at = 0

    def _source(self):
        if self._file is None:
            self._file = storage.open_file(self._path)
        return self._file

    def size(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        self._check_open()
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence ({whence})")
        target = base + offset
        if target < 0:
            raise ValueError(f"negative seek position {target}")
        self._pos = target
        return self._pos

    def _read_at(self, offset: int, length: int) -> bytes:
        length = max(0, min(length, self._size - offset))
        if not length:
            return b""
        return self._source().read_at(self._start + offset, length)

    def read(self, size: int | None = -1) -> bytes:
        self._check_open()
        if size is None or size < 0:
            size = self._size - self._pos
        end = min(self._pos + size, self._size)
        if end <= self._pos:
            return b""
        if self._buf_at <= self._pos and end <= self._buf_at + len(self._buf):
            out = self._buf[self._pos - self._buf_at : end - self._buf_at]
        elif end - self._pos < self._buffer_size:  # small sequential reads: read ahead
            self._buf_at = self._pos
            self._buf = self._read_at(self._pos, self._buffer_size)
            out = self._buf[: end - self._pos]
        else:
            out = self._read_at(self._pos, end - self._pos)
        self._pos = end
        return out

    def read1(self, size: int = -1) -> bytes:
        return self.read(io.DEFAULT_BUFFER_SIZE if size is None or size < 0 else size)

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, b) -> int:
        view = memoryview(b).cast("B")
        if view.readonly:
            raise TypeError("readinto() argument must be read-write bytes-like object")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def read_range(self, offset: int, length: int) -> bytes:
        """Bytes [offset, offset + length) of the blob; the cursor does not move."""
        self._check_open()
        if offset < 0 or length < 0 or offset + length > self._size:
            raise InvalidArgumentError(
                f"range ({offset}, {length}) is outside a blob of {self._size} bytes"
            )
        return self._read_at(offset, length)

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        return [self.read_range(o, n) for o, n in ranges]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")

    def __repr__(self) -> str:
        return f"<BlobFile size={self._size}>"


class BlobColumn:
    """pylance's ``BlobColumn``: a binary column already in memory, iterated as file-like
    objects (an empty one for a null, as pylance), for APIs that want files, not bytes."""

    def __init__(self, blob_column: pa.Array | pa.ChunkedArray):
        if not isinstance(blob_column, (pa.Array, pa.ChunkedArray)):
            raise InvalidArgumentError(
                f"Expected a pyarrow.Array or pyarrow.ChunkedArray, got {type(blob_column)}"
            )
        if not (pa.types.is_binary(blob_column.type) or pa.types.is_large_binary(blob_column.type)):
            raise InvalidArgumentError(f"Expected a binary array, got {blob_column.type}")
        self.blob_column = blob_column

    def __iter__(self) -> Iterator[io.BytesIO]:
        for value in self.blob_column:
            yield io.BytesIO(value.as_py())


def _register() -> None:
    try:
        pa.register_extension_type(BlobType())
    except pa.ArrowKeyError:
        pass  # pylance (also loaded in this process) registered lance.blob.v2 first


_register()

__all__ = ["Blob", "BlobArray", "BlobColumn", "BlobFile", "BlobType", "blob_array", "blob_field"]
