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
from dataclasses import dataclass

import numpy as np

from .. import storage
from ..cache import SearchCache
from ..errors import CorruptFileError, UnsupportedError
from ..jit import kernel
from ..pb import index_pb2, table_pb2
from ..reader import LanceFileReader
from ..table.operations import fragment_bitmap

_TENSOR_TYPES = {
    index_pb2.Tensor.FLOAT16: "<f2",
    index_pb2.Tensor.FLOAT32: "<f4",
    index_pb2.Tensor.FLOAT64: "<f8",
}
SUPPORTED = ("IVF_FLAT", "IVF_PQ", "IVF_SQ")
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
SQ_CODE = "__sq_code"
INDEX_CACHE_SIZE = 16  # opened indexes kept (centroids, codebooks)
PARTITION_CACHE_BYTES = 512 << 20  # decoded partitions (row ids, PQ codes or vectors) kept
_PARTITIONS = SearchCache(PARTITION_CACHE_BYTES)


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

    @functools.cached_property
    def codebook_t(self) -> np.ndarray:
        """The codebook as (sub-vectors, sub-vector dim, centroids): the kernel's inner loop
        runs over contiguous centroids."""
        return np.ascontiguousarray(self.codebook.transpose(0, 2, 1))

    def distances(self, residual: np.ndarray, codes: np.ndarray, dot: bool = False) -> np.ndarray:
        """PQ distances from ``residual`` to each coded row: squared l2, or with ``dot``
        1 - the inner product; ``codes`` is (bytes per row, rows), sub-vector-major, two
        4-bit codes a byte (the even sub-vector in the low nibble)."""
        out = np.empty(codes.shape[1], dtype=np.float32)
        _pq_adc(np.ascontiguousarray(residual, dtype=np.float32), self.codebook_t, codes, dot, out)
        return out


@kernel("void(float32[::1], float32[:, :, ::1], uint8[:, ::1], boolean, float32[::1])")
def _pq_adc(residual, codebook_t, codes, dot, out):  # pragma: no cover - compiled
    """Asymmetric PQ distances: the table of distances from each residual sub-vector to
    each of its centroids (squared l2, or 1 - dot), then per row the sum of its codes'
    entries (less m - 1 for dot, so the whole is 1 - the inner product)."""
    m, sub, size = codebook_t.shape
    n = codes.shape[1]
    table = np.zeros((m, size), dtype=np.float32)
    for j in range(m):
        for d in range(sub):
            r = residual[j * sub + d]
            for c in range(size):
                if dot:
                    table[j, c] += r * codebook_t[j, d, c]
                else:
                    diff = r - codebook_t[j, d, c]
                    table[j, c] += diff * diff
        if dot:
            for c in range(size):
                table[j, c] = 1.0 - table[j, c]
    start = np.float32(1 - m) if dot else np.float32(0.0)
    for i in range(n):
        out[i] = 0.0
    if size == 256:
        for j in range(m):
            for i in range(n):
                out[i] += table[j, codes[j, i]]
    else:
        for b in range(codes.shape[0]):
            j = 2 * b
            for i in range(n):
                v = codes[b, i]
                out[i] += table[j, v & 15]
                if j + 1 < m:
                    out[i] += table[j + 1, v >> 4]
    if dot:
        for i in range(n):
            out[i] += start


@dataclass
class ScalarQuantizer:
    """8-bit scalar quantization over one value range for every dimension: a value's code
    is ``floor((v - start) / (end - start) * 255)``."""

    start: float
    end: float

    @classmethod
    def read(cls, aux: LanceFileReader) -> ScalarQuantizer:
        try:
            (entry,) = json.loads((aux.schema.metadata or {})[b"storage_metadata"])
            info = json.loads(entry)
            bits = int(info["num_bits"])
            start, end = float(info["bounds"]["start"]), float(info["bounds"]["end"])
        except (KeyError, ValueError, TypeError):
            raise CorruptFileError("no readable SQ storage metadata", path=aux.path) from None
        if bits != 8:
            raise UnsupportedError(f"{bits}-bit SQ codes are not read", path=aux.path)
        if not end > start:
            raise CorruptFileError("SQ bounds are empty", path=aux.path)
        return cls(start, end)

    def distances(self, query: np.ndarray, codes: np.ndarray, dot: bool = False) -> np.ndarray:
        """Squared l2 between the query's codes and each row's, scaled back to the values'
        units (the query quantized as the rows were, as pylance compares them); for dot,
        1 - the inner product of the query with the rows' dequantized values."""
        width = self.end - self.start
        if dot:
            scale = np.float32(width / 255.0)
            values = np.float32(self.start) + codes.astype(np.float32) * scale
            return (np.float32(1.0) - values @ query.astype(np.float32)).astype(np.float32)
        q = np.clip(np.floor((query.astype(np.float32) - self.start) / width * 255), 0, 255)
        diff = codes.astype(np.int32) - q.astype(np.int32)[None, :]
        total = np.einsum("ij,ij->i", diff, diff)
        return total.astype(np.float32) * np.float32((width / 255.0) ** 2)


@dataclass
class Partition:
    """One decoded partition: its row ids and its stored vectors (rows x dim) or PQ codes
    (bytes per row x rows, sub-vector-major)."""

    row_ids: np.ndarray
    data: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.row_ids.nbytes + self.data.nbytes)


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


_DETAIL_METRICS = ("L2", "COSINE", "DOT", "HAMMING")


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, varint or bytes) of a protobuf message's varint and length-delimited
    fields (the only wire types VectorIndexDetails uses)."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while pos < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, varint()))
        elif wire == 2:
            size = varint()
            out.append((number, data[pos : pos + size]))
            pos += size
        else:
            raise CorruptFileError(f"unexpected wire type {wire} in vector index details")
    return out


def vector_details(meta: table_pb2.IndexMetadata) -> dict:
    """A vector index's details (metric, PQ parameters, runtime hints) as pylance renders
    them in JSON; an empty dict for other indexes."""
    if not meta.index_details.type_url.endswith("VectorIndexDetails"):
        return {}
    try:
        fields = _fields(meta.index_details.value)
    except IndexError:
        raise CorruptFileError("truncated vector index details") from None
    out: dict = {"metric_type": "L2"}
    hints = {}
    for number, value in fields:
        if number == 1 and isinstance(value, int) and value < len(_DETAIL_METRICS):
            out["metric_type"] = _DETAIL_METRICS[value]
        elif number == 4 and isinstance(value, bytes):
            pq = dict(_fields(value))
            out["compression"] = {
                "type": "pq",
                "num_bits": pq.get(1, 8),
                "num_sub_vectors": pq.get(2, 0),
            }
        elif number == 9 and isinstance(value, bytes):
            entry = dict(_fields(value))
            hints[bytes(entry.get(1, b"")).decode()] = bytes(entry.get(2, b"")).decode()
    if hints:
        out["runtime_hints"] = hints
    return out


def index_metric(root: str, meta: table_pb2.IndexMetadata) -> str | None:
    """The metric a vector index was built for, as its files name it (read once per index:
    index files never change)."""
    return _index_metric(root, meta.SerializeToString())


@functools.lru_cache(maxsize=256)
def _index_metric(root: str, meta_bytes: bytes) -> str | None:
    meta = table_pb2.IndexMetadata()
    meta.ParseFromString(meta_bytes)
    metric = _index_info(root, meta)[1].get("distance_type")
    return str(metric).lower() if metric else None


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
    sq: ScalarQuantizer | None = None

    @property
    def quantized(self) -> bool:
        """Partitions hold codes (ranked by their own distances), not the vectors."""
        return self.pq is not None or self.sq is not None

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
            fragment_bitmap(meta),
            rows,
            ProductQuantizer.read(rows) if index_type == "IVF_PQ" else None,
            ScalarQuantizer.read(rows) if index_type == "IVF_SQ" else None,
        )

    @functools.cached_property
    def _centroids64(self) -> tuple[np.ndarray, np.ndarray]:
        c = self.centroids.astype(np.float64)
        return c, np.einsum("ij,ij->i", c, c)

    def centroid_order(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Partitions nearest first, with their centroid distances, by the index's metric
        (cosine indexes hold normalised vectors and are probed with l2); computed in
        float64 by one matrix-vector product."""
        q64 = q.astype(self.centroids.dtype).astype(np.float64)
        c64, c_norm2 = self._centroids64
        dots = np.einsum("ij,j->i", c64, q64)  # no BLAS threads to wake for a small product
        if self.metric == "dot":
            d = 1.0 - dots
        else:
            if self.metric == "cosine":
                norm = np.linalg.norm(q64)
                q64, dots = q64 / norm, dots / norm
            d = np.maximum(c_norm2 - 2.0 * dots + q64 @ q64, 0.0)
        d = d.astype(np.float32)
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

    def partition(self, p: int) -> Partition:
        """Partition ``p``'s row ids and stored data, decoded once and cached."""
        return _PARTITIONS.get_or_load((self.rows.path, p), lambda: self._read_partition(p))

    def _read_partition(self, p: int) -> Partition:
        start, n = int(self.starts[p]), int(self.lengths[p])
        name = PQ_CODE if self.pq is not None else SQ_CODE if self.sq is not None else "flat"
        table = self.rows.read_range(start, start + n, ["_rowid", name])
        col = table.column(name).combine_chunks()
        dim = col.type.list_size
        values = col.values.slice(col.offset * dim, len(col) * dim).to_numpy(zero_copy_only=False)
        row_ids = np.ascontiguousarray(table.column("_rowid").to_numpy(), dtype=np.uint64)
        if self.pq is None:
            return Partition(row_ids, np.ascontiguousarray(values.reshape(len(col), dim)))
        codes = values.reshape(dim, n) if self.pq.transposed else values.reshape(n, dim).T
        return Partition(row_ids, np.ascontiguousarray(codes, dtype=np.uint8))

    def residual(self, q: np.ndarray, p: int) -> np.ndarray:
        """What partition ``p``'s codes quantize: the query's residual to the partition
        centroid (of the normalised query for cosine indexes, which pylance searches with
        l2), in float32; dot indexes quantize the vectors themselves."""
        query = q.astype(np.float32)
        if self.metric == "dot":
            return query
        if self.metric == "cosine":
            query = query / np.linalg.norm(query)
        return query - self.centroids[p].astype(np.float32)

    def code_distances(self, q: np.ndarray, p: int, part: Partition) -> np.ndarray:
        """PQ or SQ distances of partition ``p``'s coded rows to the query (SQ codes are of
        the vectors themselves, normalised for cosine)."""
        if self.sq is not None:
            query = q.astype(np.float32)
            if self.metric == "cosine":
                query = query / np.linalg.norm(query)
            return self.sq.distances(query, part.data, self.metric == "dot")
        assert self.pq is not None  # an IVF_PQ index
        return self.pq.distances(self.residual(q, p), part.data, self.metric == "dot")


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
    if index.metric != metric:
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
