"""Blob v2 (Lance 2.2): a blob column stored as descriptors, its bytes inline or in sidecars.

What ``lance.write_dataset(..., data_storage_version="2.2")`` writes (docs/format/structural.md):
each row of a ``lance-encoding:blob`` binary column becomes a descriptor
``(kind u8, position u64, size u64, blob_id u32, blob_uri string)`` in a full-zip page of
``VariablePackedStruct[Flat8, Flat64, Flat64, Flat32, Variable(Flat32)]``; null rows are a
def level and nothing else.  Where the bytes go depends on the size (pylance 14's defaults,
overridable per field with the same metadata keys pylance reads):

* ``size <= 64 KiB``: kind 0, *inline*: written into the data file, each blob a 64-aligned
  external buffer at an absolute ``position``; an empty blob is ``(0, 0)``.
* ``64 KiB < size <= 4 MiB``: kind 1, *packed*: appended to a shared sidecar file
  ``blob_id`` at offset ``position``; a pack rolls over before it would exceed 1 GiB.
* ``size > 4 MiB``: kind 2, *dedicated*: a sidecar of its own (``position`` 0).

Sidecars live in ``<data file dir>/<data file stem>/`` and are named by the 32-bit binary of
their ``blob_id`` written least-significant bit first, plus ``.blob``.  Blob ids count from
1 in row order per data file, shared by packs and dedicated blobs, as pylance allocates
them.  Sidecars are written under temporary names and renamed by :meth:`commit`, so a
failed write leaves no sidecar a reader could mistake for a real one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .. import storage
from ..compression import compress as cz
from ..compression.blocks import FixedWidthBlock, StructBlock, VariableWidthBlock, gather_ranges
from ..errors import InvalidArgumentError, LanceError, SchemaError, UnsupportedError
from ..storage.base import ObjectWriter
from ..version import LanceFileVersion
from . import constant, fullzip
from .arrow import arrow_to_block
from .page import EncodedPage
from .repdef import Raveled, valid_mask

INLINE_MAX = 64 * 1024
DEDICATED_THRESHOLD = 4 * 1024 * 1024
PACK_FILE_MAX_SIZE = 1024 * 1024 * 1024
INLINE_KEY = "lance-encoding:blob-inline-size-threshold"
DEDICATED_KEY = "lance-encoding:blob-dedicated-size-threshold"
PACK_FILE_KEY = "lance-encoding:blob-pack-file-size-threshold"

KIND_INLINE = 0
KIND_PACKED = 1
KIND_DEDICATED = 2
ALIGN = 64  # inline blobs are external buffers, aligned like every buffer of the file


@dataclass(frozen=True)
class BlobThresholds:
    """Size cut-offs of one blob column (bytes; a blob *larger* than a cut-off moves up)."""

    inline: int = INLINE_MAX
    dedicated: int = DEDICATED_THRESHOLD
    pack_file: int = PACK_FILE_MAX_SIZE

    @classmethod
    def from_metadata(cls, md: Mapping[str, str], column: str) -> BlobThresholds:
        """Read the per-field overrides; like pylance, only the inline cut-off may be 0."""

        def get(key: str, default: int, allow_zero: bool) -> int:
            raw = md.get(key)
            if raw is None:
                return default
            try:
                value = int(str(raw).strip())
            except ValueError:
                value = -1
            if value < 0 or (value == 0 and not allow_zero):
                raise InvalidArgumentError(
                    f"field {column!r}: {key}={raw!r} must be a "
                    f"{'non-negative' if allow_zero else 'positive'} integer"
                )
            return value

        return cls(
            get(INLINE_KEY, INLINE_MAX, True),
            get(DEDICATED_KEY, DEDICATED_THRESHOLD, False),
            get(PACK_FILE_KEY, PACK_FILE_MAX_SIZE, False),
        )


def sidecar_name(blob_id: int) -> str:
    """``1`` -> ``1000…0.blob``: 32 binary digits, least-significant bit first."""
    return format(blob_id, "032b")[::-1] + ".blob"


def sidecar_dir(data_path: str) -> str:
    """Sidecars of ``data/x.lance`` live in ``data/x/``."""
    path = str(data_path)
    return path[: -len(".lance")] if path.endswith(".lance") else path.rsplit(".", 1)[0]


def classify(sizes: np.ndarray, valid: np.ndarray, th: BlobThresholds) -> np.ndarray:
    """Kind of each row (nulls get kind 0 and are never stored)."""
    kind = np.where(sizes > th.inline, KIND_PACKED, KIND_INLINE).astype(np.uint8)
    kind[sizes > th.dedicated] = KIND_DEDICATED
    kind[~valid] = KIND_INLINE
    return kind


@dataclass
class _Pack:
    blob_id: int
    file: ObjectWriter
    size: int
    max_size: int


class BlobV2Writer:
    """The sidecar files and blob ids of one data file, and the blob-v2 page encoder.

    Pages must be encoded one at a time in file order (the writer does so while writing),
    because inline bytes go into the data file at known positions and ids count up."""

    def __init__(self, data_path: str):
        self.data_path = str(data_path)
        self.dir = sidecar_dir(self.data_path)
        self._columns: dict[str, BlobThresholds] = {}
        self._next_id = 1
        self._pack: _Pack | None = None
        self._files: list[tuple[ObjectWriter, str]] = []  # (upload, final path)
        self._committed: list[str] = []

    # -- columns --------------------------------------------------------------------------

    def add_column(self, path: str, arrow_type: pa.DataType, metadata: Mapping[str, str]) -> None:
        """Register a blob column (validates its type and threshold metadata up front)."""
        t = arrow_type.storage_type if isinstance(arrow_type, pa.BaseExtensionType) else arrow_type
        if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
            raise SchemaError(f"blob column {path!r} must be binary or large_binary, not {t}")
        self._columns[path] = BlobThresholds.from_metadata(metadata, path)

    # -- one page -------------------------------------------------------------------------

    def encode_page(
        self, path: str, rav: Raveled, write_external: Callable[[np.ndarray], int]
    ) -> EncodedPage:
        """Store a page's blobs and return its descriptor page.

        ``write_external(bytes)`` writes bytes into the data file (64-aligned) and returns
        their absolute position; it is called at most once per page, for the inline blobs.
        """
        if rav.rep is not None:
            raise UnsupportedError(f"blob column {path!r}: blobs inside lists cannot be written")
        th = self._columns[path]
        values = rav.values
        if values.null_count == len(values):
            return constant.encode_page(
                rav.layers, rav.rep, rav.defs, rav.num_rows, LanceFileVersion.V2_2
            )
        block = arrow_to_block(values)
        if not isinstance(block, VariableWidthBlock):
            raise SchemaError(f"blob column {path!r} must be binary or large_binary")
        n = block.num_values
        starts = np.asarray(block.offsets[:-1], dtype=np.int64)
        sizes = np.diff(np.asarray(block.offsets, dtype=np.int64))
        if rav.defs is not None:
            valid = rav.defs == 0
        else:
            mask = valid_mask(values)
            valid = np.ones(n, dtype=bool) if mask is None else mask
        sizes = np.where(valid, sizes, 0)
        kind = classify(sizes, valid, th)
        position = np.zeros(n, dtype=np.uint64)
        blob_id = np.zeros(n, dtype=np.uint32)
        data = np.asarray(block.data)

        inline = np.flatnonzero(valid & (kind == KIND_INLINE) & (sizes > 0))
        if len(inline):
            buf, rel = _aligned_concat(data, starts[inline], sizes[inline])
            base = write_external(buf)
            position[inline] = (rel + base).astype(np.uint64)

        packed = np.flatnonzero(valid & (kind == KIND_PACKED))
        dedicated = np.flatnonzero(valid & (kind == KIND_DEDICATED))
        opens, pack_of, pack_pos = self._plan_packs(sizes[packed], th.pack_file)
        # ids in row order over new packs and dedicated blobs, as pylance hands them out
        event_rows = np.concatenate([packed[opens], dedicated])
        event_ids = np.empty(len(event_rows), dtype=np.int64)
        event_ids[np.argsort(event_rows, kind="stable")] = self._next_id + np.arange(
            len(event_rows)
        )
        self._next_id += len(event_rows)
        new_pack_ids = event_ids[: len(opens)]
        blob_id[dedicated] = event_ids[len(opens) :].astype(np.uint32)

        if len(packed):
            pack_ids = np.empty(len(opens) + 1, dtype=np.int64)
            pack_ids[0] = self._pack.blob_id if self._pack is not None else 0  # 0: unused
            pack_ids[1:] = new_pack_ids
            blob_id[packed] = pack_ids[pack_of].astype(np.uint32)
            position[packed] = pack_pos.astype(np.uint64)
            self._write_packs(data, starts[packed], sizes[packed], pack_of, new_pack_ids, th)
        for row, bid in zip(dedicated.tolist(), blob_id[dedicated].tolist(), strict=True):
            # one file per blob of 4 MiB or more: the loop is per file, not per value
            self._write_file(int(bid), data[starts[row] : starts[row] + sizes[row]])

        desc = StructBlock(
            [
                FixedWidthBlock(kind, 8, n),
                FixedWidthBlock(position.view(np.uint8), 64, n),
                FixedWidthBlock(sizes.astype(np.uint64).view(np.uint8), 64, n),
                FixedWidthBlock(blob_id.view(np.uint8), 32, n),
                VariableWidthBlock(np.zeros(n + 1, dtype=np.int64), np.zeros(0, np.uint8), 32),
            ],
            n,
        )
        enc, rows = cz.compress_per_value(desc, cz.ColumnOptions())
        return fullzip.encode_page(enc, rows, rav.rep, rav.defs, rav.layers, rav.num_rows)

    # -- packs ----------------------------------------------------------------------------

    def _plan_packs(
        self, sizes: np.ndarray, max_size: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Which packed blobs open a new pack, each blob's pack (0 = the pack already open,
        i = the i-th new one) and its offset there.  Iterates once per pack file."""
        m = len(sizes)
        pack_of = np.zeros(m, dtype=np.int64)
        pos = np.zeros(m, dtype=np.int64)
        opens: list[int] = []
        cur = self._pack
        fill = cur.size if cur is not None and cur.max_size == max_size else None
        i = 0
        while i < m:
            if fill is None:
                opens.append(i)
                fill = 0
            ends = fill + np.cumsum(sizes[i:])
            k = int(np.searchsorted(ends, max_size, side="right"))
            if k == 0:
                if fill == 0:  # a blob bigger than a whole pack gets a pack of its own
                    k = 1
                else:
                    fill = None
                    continue
            pack_of[i : i + k] = len(opens)
            pos[i : i + k] = ends[:k] - sizes[i : i + k]
            fill = int(ends[k - 1])
            i += k
            if i < m:
                fill = None if fill + int(sizes[i]) > max_size else fill
        return np.asarray(opens, dtype=np.int64), pack_of, pos

    def _write_packs(
        self,
        data: np.ndarray,
        starts: np.ndarray,
        sizes: np.ndarray,
        pack_of: np.ndarray,
        new_ids: np.ndarray,
        th: BlobThresholds,
    ) -> None:
        bounds = np.flatnonzero(np.diff(pack_of)) + 1
        for seg in np.split(np.arange(len(pack_of)), bounds):  # one iteration per pack
            p = int(pack_of[seg[0]])
            if p > 0:
                self._open_pack(int(new_ids[p - 1]), th.pack_file)
            chunk = gather_ranges(data, starts[seg], sizes[seg])
            assert self._pack is not None  # opened above (or by an earlier segment)
            self._pack.file.write(np.ascontiguousarray(chunk).data)
            self._pack.size += int(sizes[seg].sum())

    def _open_pack(self, blob_id: int, max_size: int) -> None:
        self._close_pack()
        self._pack = _Pack(blob_id, self._register(blob_id), 0, max_size)

    def _close_pack(self) -> None:
        if self._pack is not None:
            pack, self._pack = self._pack, None
            pack.file.finish()  # made visible by commit() with the others

    def _write_file(self, blob_id: int, data: np.ndarray) -> None:
        upload = self._register(blob_id)
        upload.write(np.ascontiguousarray(data).data)
        upload.finish()

    def _register(self, blob_id: int) -> ObjectWriter:
        final = storage.join(self.dir, sidecar_name(blob_id))
        upload = storage.create(final)
        self._files.append((upload, final))
        return upload

    # -- finishing ------------------------------------------------------------------------

    @property
    def sidecars(self) -> list[str]:
        """Final paths of the sidecars written so far, in blob id order."""
        return [final for _, final in self._files]

    def commit(self) -> list[str]:
        """Close the open pack and make every sidecar visible under its final name."""
        self._close_pack()
        for upload, final in self._files:
            if final not in self._committed:
                upload.commit()
                self._committed.append(final)
        return list(self._committed)

    def abort(self) -> None:
        """Remove every sidecar this writer created (and its directory if it made it)."""
        try:
            self._close_pack()
        except LanceError:
            pass  # its upload is aborted below with the others
        for upload, final in self._files:
            if final in self._committed:
                storage.delete(final, missing_ok=True)
            else:
                upload.abort()
        self._files.clear()
        self._committed.clear()
        storage.prune(self.dir)  # left alone when someone else's files are there too


def _aligned_concat(
    data: np.ndarray, starts: np.ndarray, sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The given byte ranges back to back, each starting on a multiple of 64 (the gaps are
    zero), and the offset of each range in the result."""
    padded = -(-sizes // ALIGN) * ALIGN
    rel = np.cumsum(padded) - padded
    total = int(rel[-1] + sizes[-1])
    out = np.zeros(total, dtype=np.uint8)
    pad = padded - sizes
    pad[-1] = 0
    runs = np.column_stack([sizes, pad]).reshape(-1)
    fill = np.repeat(np.tile(np.array([True, False]), len(sizes)), runs)
    out[fill] = gather_ranges(data, starts, sizes)
    return out, rel


# -- reading ----------------------------------------------------------------------------------

KIND_EXTERNAL = 3  # bytes in a file outside the dataset, named by ``blob_uri``


def blob_location(
    data_path: str, kind: int, position: int, size: int, blob_id: int, uri: str
) -> tuple[str, int, int]:
    """Where a descriptor's bytes are: ``(file path, position, size)``.  Inline bytes sit
    in the data file itself; packed and dedicated ones in the sidecar ``blob_id`` next to
    it; external ones at ``blob_uri`` (size 0 there: the whole file)."""
    if kind == KIND_INLINE:
        return str(data_path), position, size
    if kind in (KIND_PACKED, KIND_DEDICATED):
        return storage.join(sidecar_dir(data_path), sidecar_name(blob_id)), position, size
    if kind == KIND_EXTERNAL and uri:
        path = storage.register(uri)
        if size == 0:
            size = storage.file_size(path) - position
        return path, position, size
    raise UnsupportedError(f"blob descriptor of unknown kind {kind}")
