"""Reading pylance-built IVF vector indexes (``_indices/<uuid>/``) and probing them.

An IVF index is two Lance files.  ``index.idx`` names the index type and metric in its schema
metadata (``lance:index``) and keeps the ``IVF`` protobuf (the partition centroids) in the
global buffer named by ``lance:ivf``.  ``auxiliary.idx`` holds the indexed rows grouped by
partition: ``_rowid`` and the stored vectors (``flat`` for IVF_FLAT), with the partition
lengths in its own ``IVF`` buffer.  A query probes the ``nprobes`` partitions whose centroids
are nearest and ranks only their rows.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field

import numpy as np

from .. import storage
from ..errors import CorruptFileError, UnsupportedError
from ..pb import index_pb2, table_pb2
from ..reader import LanceFileReader
from ..table.conflicts import _fragment_bitmap
from .metrics import exact_distances

_TENSOR_TYPES = {
    index_pb2.Tensor.FLOAT16: "<f2",
    index_pb2.Tensor.FLOAT32: "<f4",
    index_pb2.Tensor.FLOAT64: "<f8",
}
SUPPORTED = ("IVF_FLAT", "IVF_PQ")
# pylance's adaptive initial probe budget for float32 queries: per metric, per k bucket
# (k <= 1, <= 10, <= 100, <= 200, <= 500, <= 1000), (relative margin, floor, cap)
_K_BUCKETS = (1, 10, 100, 200, 500)
_ADAPTIVE = {
    "l2": (
        (0.2175, 5, 19),
        (0.265, 6, 24),
        (0.33, 11, 38),
        (0.375, 15, 56),
        (0.3725, 22, 81),
        (0.4175, 29, 93),
    ),
    "cosine": (
        (0.235, 3, 50),
        (0.2875, 8, 77),
        (0.38, 7, 106),
        (0.415, 18, 156),
        (0.45, 28, 192),
        (0.47, 34, 248),
    ),
    "dot": (
        (0.14, 56, 112),
        (0.055, 144, 432),
        (0.0625, 200, 768),
        (0.0675, 211, 833),
        (0.07, 244, 971),
        (0.0725, 279, 1092),
    ),
}
PQ_CODE = "__pq_code"
INDEX_CACHE_SIZE = 16  # opened indexes kept (centroids, codebook, PQ codes read so far)


def index_uuid(meta: table_pb2.IndexMetadata) -> str:
    """The index's directory name under ``_indices/`` (its UUID, hyphenated)."""
    h = meta.uuid.uuid.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _ivf(reader: LanceFileReader) -> index_pb2.IVF:
    meta = reader.schema.metadata or {}
    try:
        position = int(meta[b"lance:ivf"])
        ivf = index_pb2.IVF()
        ivf.ParseFromString(reader.global_buffer(position))
    except (KeyError, ValueError) as exc:
        raise CorruptFileError(f"no readable IVF metadata: {exc}", path=reader.path) from None
    return ivf


def _centroids(ivf: index_pb2.IVF, path: str) -> np.ndarray:
    t = ivf.centroids_tensor
    if t.data:
        dtype = _TENSOR_TYPES.get(t.data_type)
        if dtype is None or len(t.shape) != 2:
            raise UnsupportedError(f"IVF centroids of type {t.data_type}", path=path)
        rows, dim = t.shape
        if len(t.data) != rows * dim * np.dtype(dtype).itemsize:
            raise CorruptFileError("IVF centroids tensor size does not match its shape", path=path)
        return np.frombuffer(t.data, dtype=dtype).reshape(rows, dim)
    values = np.asarray(ivf.centroids, dtype=np.float32)
    parts = len(ivf.lengths)
    if not parts or len(values) % parts:
        raise CorruptFileError("IVF centroids do not match the partition count", path=path)
    return values.reshape(parts, -1)


@dataclass
class ProductQuantizer:
    """A PQ codebook: ``num_sub_vectors`` sub-spaces of ``2**nbits`` centroids each."""

    codebook: np.ndarray  # (num_sub_vectors, 2**nbits, sub-vector dim)
    transposed: bool  # a partition's codes stored sub-vector-major

    @classmethod
    def read(cls, aux: LanceFileReader) -> ProductQuantizer:
        try:
            (entry,) = json.loads((aux.schema.metadata or {})[b"storage_metadata"])
            info = json.loads(entry)
            nbits, m, dim = int(info["nbits"]), int(info["num_sub_vectors"]), int(info["dimension"])
            position = int(info["codebook_position"])
        except (KeyError, ValueError, TypeError):
            raise CorruptFileError("no readable PQ storage metadata", path=aux.path) from None
        if nbits not in (4, 8):
            raise UnsupportedError(f"{nbits}-bit PQ codes are not read", path=aux.path)
        if m <= 0 or dim % m:
            raise CorruptFileError(f"PQ of {m} sub-vectors over dimension {dim}", path=aux.path)
        tensor = index_pb2.Tensor()
        tensor.ParseFromString(aux.global_buffer(position))
        dtype = _TENSOR_TYPES.get(tensor.data_type)
        size = m * (1 << nbits) * (dim // m)
        if dtype is None or len(tensor.data) != size * np.dtype(dtype).itemsize:
            raise CorruptFileError("the PQ codebook does not match its metadata", path=aux.path)
        codebook = np.frombuffer(tensor.data, dtype=dtype).reshape(m, 1 << nbits, dim // m)
        return cls(codebook.astype(np.float32), bool(info.get("transposed", False)))

    def unpack(self, stored: np.ndarray) -> np.ndarray:
        """(rows, num_sub_vectors) codes from the stored bytes: 4-bit codes come two a byte,
        the even sub-vector in the low nibble."""
        m, size, _ = self.codebook.shape
        if size == 256:
            return stored
        codes = np.empty((len(stored), stored.shape[1] * 2), dtype=np.uint8)
        codes[:, 0::2] = stored & 0x0F
        codes[:, 1::2] = stored >> 4
        return codes[:, :m]

    def distances(self, residual: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """Squared l2 from ``residual`` to each coded row: a per-sub-space distance table,
        summed over the codes (float32, as pylance sums it)."""
        codes = self.unpack(codes)
        m, size, sub = self.codebook.shape
        diff = self.codebook - residual.astype(np.float32).reshape(m, 1, sub)
        table = np.einsum("mks,mks->mk", diff, diff)  # (m, 2**nbits)
        flat = codes.astype(np.intp) + (np.arange(m, dtype=np.intp) * size)[None, :]
        return table.ravel()[flat].sum(axis=1, dtype=np.float32)


def _index_info(root: str, meta: table_pb2.IndexMetadata) -> tuple[LanceFileReader, dict]:
    """``index.idx`` of an index entry and its ``lance:index`` metadata (type, metric)."""
    path = storage.join(root, "_indices", index_uuid(meta), "index.idx")
    index = LanceFileReader(storage.open_file(path))
    try:
        info = json.loads((index.schema.metadata or {})[b"lance:index"])
        if not isinstance(info, dict):
            raise ValueError("not an object")
    except (KeyError, ValueError):
        raise CorruptFileError("no lance:index metadata", path=index.path) from None
    return index, info


def vector_index_type(root: str, meta: table_pb2.IndexMetadata) -> str:
    """The type a vector index's files name (IVF_FLAT, IVF_PQ, IVF_HNSW_SQ, ...)."""
    return str(_index_info(root, meta)[1].get("type", "")).upper()


@dataclass
class IvfIndex:
    """One IVF index segment: centroids, partition row ranges, and its stored rows."""

    name: str
    index_type: str
    metric: str
    centroids: np.ndarray  # (partitions, dim)
    starts: np.ndarray  # first row of each partition in the auxiliary file
    lengths: np.ndarray
    fragments: set[int] | None  # fragment ids the index covers
    rows: LanceFileReader  # auxiliary.idx: the indexed rows, grouped by partition
    pq: ProductQuantizer | None = None
    _codes: dict = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, root: str, meta: table_pb2.IndexMetadata) -> IvfIndex:
        folder = storage.join(root, "_indices", index_uuid(meta))
        index, info = _index_info(root, meta)
        try:
            index_type, metric = str(info["type"]).upper(), str(info["distance_type"]).lower()
        except KeyError:
            raise CorruptFileError("no index type or metric", path=index.path) from None
        if index_type not in SUPPORTED:
            raise UnsupportedError(f"vector index type {index_type} is not read yet")
        rows = LanceFileReader(storage.open_file(storage.join(folder, "auxiliary.idx")))
        centroids = _centroids(_ivf(index), index.path)
        lengths = np.asarray(_ivf(rows).lengths, dtype=np.int64)
        if len(lengths) != len(centroids) or lengths.sum() != rows.num_rows:
            raise CorruptFileError(
                "IVF partition lengths do not match the centroids or the stored rows",
                path=rows.path,
            )
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        return cls(
            meta.name,
            index_type,
            metric,
            centroids,
            starts,
            lengths,
            _fragment_bitmap(meta),
            rows,
            ProductQuantizer.read(rows) if index_type == "IVF_PQ" else None,
        )

    def centroid_order(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Partitions nearest first, with their centroid distances, by the index's metric
        (cosine indexes hold normalised vectors and are probed with l2)."""
        metric = "l2" if self.metric == "cosine" else self.metric
        query = q / np.linalg.norm(q) if self.metric == "cosine" else q
        d = exact_distances(metric, self.centroids, query.astype(self.centroids.dtype))
        order = np.lexsort((np.arange(len(d)), d))
        return order, d[order]

    def probe(self, q: np.ndarray, nprobes: int) -> np.ndarray:
        """The partitions to search: the ``nprobes`` nearest centroids."""
        return self.centroid_order(q)[0][:nprobes]

    def default_nprobes(self, q: np.ndarray, k: int, refine_factor: int | None) -> int:
        """pylance's initial probe budget when ``nprobes`` is not given: for float32 queries
        (k <= 1000, no refine above 1) the partitions whose centroid distance is within a
        per-metric relative margin of the nearest, clamped to a per-k floor and cap; for
        the others, those within a k-dependent multiple of the nearest distance."""
        _, d = self.centroid_order(q)
        if not len(d):
            return 0
        nearest = float(d[0])
        adaptive = (
            self.centroids.dtype == np.float32
            and q.dtype == np.float32
            and k <= 1000
            and (refine_factor or 1) <= 1
            and bool(np.isfinite(q).all())
        )
        if adaptive:
            bucket = int(np.searchsorted(_K_BUCKETS, k))
            margin, floor, cap = _ADAPTIVE[self.metric][bucket]
            if not np.isfinite(nearest):
                selected = len(d)
            else:
                scale = abs(1.0 - nearest) if self.metric == "dot" else nearest
                gap = d.astype(np.float64) - nearest
                selected = int(np.sum(np.isfinite(d) & (gap <= margin * scale)))
            return min(max(selected, floor), cap, len(d))
        factor = 0.6 if k <= 1 else 7.0 if k <= 10 else 81.0
        threshold = np.float32(nearest) * np.float32(factor)
        return min(max(1, int(np.sum(d <= threshold))), len(d))

    def partition(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, stored vectors) of partition ``p``; PQ codes (rows x sub-vectors) for
        IVF_PQ, kept in memory once read (they are a few bytes a row, and index files never
        change: a new index gets a new directory)."""
        if self.pq is None:
            return self._read_partition(p)
        cached = self._codes.get(p)
        if cached is None:
            cached = self._codes[p] = self._read_partition(p)
        return cached

    def _read_partition(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        start, n = int(self.starts[p]), int(self.lengths[p])
        name = PQ_CODE if self.pq is not None else "flat"
        table = self.rows.read_range(start, start + n, ["_rowid", name])
        col = table.column(name).combine_chunks()
        dim = col.type.list_size
        values = col.values.slice(col.offset * dim, len(col) * dim).to_numpy(zero_copy_only=False)
        if self.pq is not None and self.pq.transposed:
            values = values.reshape(dim, n).T
        return table.column("_rowid").to_numpy(), values.reshape(len(col), dim)

    def pq_distances(self, q: np.ndarray, p: int, codes: np.ndarray) -> np.ndarray:
        """PQ distances of partition ``p``'s coded rows: the codes are of the residual to the
        partition centroid (of the normalised vector for cosine indexes, which pylance
        searches with l2)."""
        query = q.astype(np.float32)
        if self.metric == "cosine":
            query = query / np.linalg.norm(query)
        assert self.pq is not None  # an IVF_PQ index
        return self.pq.distances(query - self.centroids[p].astype(np.float32), codes)


def vector_indices(ds, column: str) -> list[table_pb2.IndexMetadata]:
    """The manifest's index entries over ``column`` that are vector indexes."""
    field = next((f for f in ds.lance_schema.fields if f.name == column), None)
    if field is None:
        return []
    return [
        m
        for m in ds.manifest.indices
        if list(m.fields) == [field.id] and m.index_details.type_url.endswith("VectorIndexDetails")
    ]


def usable_index(ds, column: str, metric: str) -> IvfIndex | None:
    """The IVF index this search can use: one segment, a type read here, the query's metric.
    None means an exact search."""
    metas = vector_indices(ds, column)
    if len(metas) != 1:
        return None
    try:
        index = _open_index(ds.uri, metas[0].SerializeToString())
    except UnsupportedError:
        return None
    supported = ("l2", "cosine") if index.pq is not None else ("l2", "dot", "cosine")
    if index.metric != metric or index.metric not in supported:
        return None
    return index


@functools.lru_cache(maxsize=INDEX_CACHE_SIZE)
def _open_index(root: str, meta_bytes: bytes) -> IvfIndex:
    """Opened indexes, by dataset and index entry: an index directory is immutable."""
    meta = table_pb2.IndexMetadata()
    meta.ParseFromString(meta_bytes)
    return IvfIndex.open(root, meta)


def live_addresses(ds, addresses: np.ndarray) -> np.ndarray:
    """Which row addresses name live rows of this version (an index keeps the rows of
    fragments since deleted or compacted away, and rows deleted after it was built)."""
    frag_ids = (addresses >> np.uint64(32)).astype(np.int64)
    offsets = (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)
    live = np.zeros(len(addresses), dtype=bool)
    for frag in ds.get_fragments():
        sel = frag_ids == frag.fragment_id
        if not sel.any():
            continue
        ok = offsets[sel] < frag.physical_rows
        if frag.num_deletions:
            ok &= ~np.isin(offsets[sel], frag.deleted_offsets)
        live[sel] = ok
    return live
