"""Building IVF_FLAT and IVF_PQ indexes in pylance's layout (``_indices/<uuid>/``).

``index.idx`` has no rows: its schema metadata names the type and metric (``lance:index``)
and the global buffer of the ``IVF`` protobuf with the centroids (``lance:ivf``).
``auxiliary.idx`` holds the rows grouped by partition (``_rowid`` and the vector, or its PQ
codes stored sub-vector-major per partition), the partition offsets and lengths in its own
``IVF`` buffer and, for PQ, the codebook in the buffer its ``storage_metadata`` names.
Training is k-means in numpy (seeded, BLAS distances) on a sample, as pylance samples.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from threadpoolctl import threadpool_limits

from .. import storage
from ..errors import InvalidArgumentError
from ..jit import kernel
from ..pb import index_pb2
from ..version import LanceFileVersion
from ..writer import LanceFileWriter

SAMPLE_RATE = 256  # training rows per centroid, as pylance samples
MAX_ITERS = 50
PQ_BITS = (4, 8)  # code widths pylance builds and reads
TOLERANCE = 1e-4  # relative improvement of the k-means loss below which training stops
CHUNK_ROWS = 65536  # rows assigned at a time (bounds the distance matrix)
CACHE_FLOATS = 1 << 16  # distance-matrix chunk (256 KiB of float32): stays in cache
_METRIC_CODES = {"l2": 0, "cosine": 1, "dot": 2}
METRICS = {"IVF_FLAT": ("l2", "cosine", "dot"), "IVF_PQ": ("l2", "cosine", "dot")}
# pylance's default partition count: the rows over a per-type target partition size
TARGET_PARTITION_SIZE = {"IVF_FLAT": 4096, "IVF_PQ": 8192}
MAX_DEFAULT_PARTITIONS = 4096


def default_partitions(index_type: str, rows: int) -> int:
    """pylance 14's ``num_partitions`` when none is given."""
    return min(max(1, rows // TARGET_PARTITION_SIZE.get(index_type, 8192)), MAX_DEFAULT_PARTITIONS)


@dataclass
class BuiltIndex:
    """The files written for one index and the sizes the manifest records."""

    files: dict[str, int]  # file name -> size in bytes
    details: bytes  # VectorIndexDetails as pylance serialises it


def _nearest(data: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid (l2) of each row and its squared distance: ``|c|^2 - 2 x.c`` by BLAS
    in chunks small enough to stay in cache, ``|x|^2`` added back only for the winners."""
    c_norm = np.einsum("ij,ij->i", centroids, centroids)
    scaled = np.ascontiguousarray(-2.0 * centroids.T, dtype=np.float32)
    labels = np.empty(len(data), dtype=np.int64)
    dists = np.empty(len(data), dtype=np.float32)
    x_norm = np.einsum("ij,ij->i", data, data)
    step = max(256, CACHE_FLOATS // max(1, len(centroids)))
    for s in range(0, len(data), step):
        d = data[s : s + step] @ scaled
        d += c_norm
        lab = d.argmin(axis=1)
        labels[s : s + len(d)] = lab
        dists[s : s + len(d)] = d[np.arange(len(d)), lab]
    np.maximum(dists + x_norm, 0, out=dists)
    return labels, dists


def kmeans(
    data: np.ndarray, k: int, rng: np.random.Generator, max_iters: int = MAX_ITERS
) -> tuple[np.ndarray, float]:
    """Lloyd's k-means (l2) from k distinct random rows; empty clusters are re-seeded with
    the farthest rows.  Returns (centroids float32, loss)."""
    data = np.ascontiguousarray(data, dtype=np.float32)
    centroids = data[rng.choice(len(data), size=k, replace=False)].copy()
    previous = np.inf
    loss = np.inf
    for _ in range(max_iters):
        labels, dists = _nearest(data, centroids)
        loss = float(dists.sum(dtype=np.float64))
        counts = np.bincount(labels, minlength=k)
        sums = _cluster_sums(labels, data, k)
        nonempty = counts > 0
        centroids[nonempty] = (sums[nonempty] / counts[nonempty, None]).astype(np.float32)
        empty = np.flatnonzero(~nonempty)
        if len(empty):
            centroids[empty] = data[np.argsort(dists)[::-1][: len(empty)]]
        if previous - loss <= TOLERANCE * max(loss, 1e-30):
            break
        previous = loss
    return centroids, loss


def _cluster_sums(labels: np.ndarray, data: np.ndarray, k: int) -> np.ndarray:
    """Per-cluster sums of rows (float64), one compiled pass over the rows."""
    out = np.zeros((k, data.shape[1]), dtype=np.float64)
    _add_rows(
        np.ascontiguousarray(labels, dtype=np.int64),
        np.ascontiguousarray(data, dtype=np.float32),
        out,
    )
    return out


@kernel("void(int64[::1], float32[:, ::1], float64[:, ::1])")
def _add_rows(labels, data, out):  # pragma: no cover - compiled
    for i in range(data.shape[0]):
        row = labels[i]
        for j in range(data.shape[1]):
            out[row, j] += data[i, j]


def _sample(n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    return np.sort(rng.choice(n, size=size, replace=False)) if n > size else np.arange(n)


def _tensor(values: np.ndarray, shape: tuple[int, ...]) -> index_pb2.Tensor:
    return index_pb2.Tensor(
        data_type=index_pb2.Tensor.FLOAT32,
        shape=list(shape),
        data=np.ascontiguousarray(values, dtype="<f4").tobytes(),
    )


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _details(index_type: str, metric: str, num_sub_vectors: int, num_bits: int) -> bytes:
    """VectorIndexDetails as pylance writes them: the metric (field 1, l2 = 0 left out),
    then an empty flat marker (field 8) or the PQ bits and sub-vectors (field 4).  pylance
    uses an index for a query only when this metric is the query's."""
    out = b"\x08" + _varint(_METRIC_CODES[metric]) if _METRIC_CODES[metric] else b""
    if index_type == "IVF_FLAT":
        return out + b"B\x00"
    pq = b"\x08" + _varint(num_bits) + b"\x10" + _varint(num_sub_vectors)
    return out + b'"' + _varint(len(pq)) + pq


def validate(
    index_type: str,
    metric: str,
    dim: int,
    rows: int,
    partitions: int,
    subs: int | None,
    num_bits: int = 8,
):
    """Refuse parameters pylance refuses, before reading any data."""
    if index_type not in METRICS:
        raise InvalidArgumentError(f"index type {index_type!r} is not built (IVF_FLAT, IVF_PQ)")
    if metric not in METRICS[index_type]:
        raise InvalidArgumentError(f"{index_type} does not support the {metric!r} metric")
    if partitions <= 0 or partitions > rows:
        raise InvalidArgumentError(
            f"num_partitions must be between 1 and the {rows} indexed rows, got {partitions}"
        )
    if index_type == "IVF_PQ":
        if subs is None:
            raise InvalidArgumentError("num_partitions and num_sub_vectors are required for IVF_PQ")
        if subs <= 0 or dim % subs:
            raise InvalidArgumentError(
                f"num_sub_vectors ({subs}) must divide the vector dimension ({dim})"
            )
        if num_bits not in PQ_BITS:
            raise InvalidArgumentError(f"num_bits must be 4 or 8, got {num_bits!r}")
        if num_bits == 4 and subs % 2:
            raise InvalidArgumentError(
                f"4-bit PQ packs two codes a byte: num_sub_vectors ({subs}) must be even"
            )
        if rows < 1 << num_bits:
            raise InvalidArgumentError(
                f"IVF_PQ needs at least {1 << num_bits} rows to train its codebook, got {rows}"
            )


@threadpool_limits.wrap(limits=1, user_api="blas")
def build_ivf(
    folder: str,
    row_ids: np.ndarray,
    vectors: np.ndarray,
    *,
    index_type: str,
    metric: str,
    num_partitions: int,
    num_sub_vectors: int,
    num_bits: int = 8,
    seed: int = 42,
    centroids: np.ndarray | None = None,
    codebook: np.ndarray | None = None,
) -> BuiltIndex:
    """Train and write one IVF index over ``vectors`` (rows x dim float32) into ``folder``
    (BLAS on one thread: k-means makes many small products, which threads only slow).  Rows
    with NaN or infinite values are left out, as pylance leaves them out.  PQ codes are of
    the residual to the partition centroid (of the normalised vector for cosine), except
    for dot, whose codes are of the vector itself, as pylance quantizes.  Given the
    ``centroids`` (and PQ ``codebook``) of an existing index, nothing is trained: the rows
    are assigned to its partitions and coded with its codebook (how new data joins an
    index without retraining)."""
    finite = np.isfinite(vectors).all(axis=1)
    if not finite.all():
        row_ids, vectors = row_ids[finite], vectors[finite]
    if centroids is None and len(vectors) < num_partitions:
        raise InvalidArgumentError(
            f"{len(vectors)} finite vectors cannot train {num_partitions} partitions"
        )
    rng = np.random.default_rng(seed)
    data = np.ascontiguousarray(vectors, dtype=np.float32)
    if metric == "cosine":
        norms = np.linalg.norm(data, axis=1, keepdims=True)
        data = np.divide(data, np.where(norms == 0, 1, norms), dtype=np.float32)
    n, dim = data.shape
    if centroids is None:
        train = data[_sample(n, num_partitions * SAMPLE_RATE, rng)]
        centroids, loss = kmeans(train, num_partitions, rng)
    else:
        centroids = np.ascontiguousarray(centroids, dtype=np.float32)
        num_partitions, loss = len(centroids), 0.0
    if metric == "dot":  # pylance assigns dot indexes by the largest inner product
        labels = np.concatenate([np.argmax(c @ centroids.T, axis=1) for c in _chunks(data)]).astype(
            np.int64
        )
    else:
        labels = _nearest(data, centroids)[0]
    order = np.argsort(labels, kind="stable")
    lengths = np.bincount(labels, minlength=num_partitions).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    stored = data if metric == "cosine" else np.ascontiguousarray(vectors, dtype=np.float32)

    ivf_index = index_pb2.IVF(
        offsets=[0] * num_partitions,
        lengths=[0] * num_partitions,
        centroids_tensor=_tensor(centroids, centroids.shape),
        loss=loss,
    )
    files = {}
    index_md = {
        "lance:index": json.dumps(
            {"type": index_type, "distance_type": metric}, separators=(",", ":")
        ),
        "lance:ivf": "1",
        "lance:flat": json.dumps([""] * num_partitions, separators=(",", ":")),
    }
    schema = pa.schema([pa.field("__flat_marker", pa.uint64(), nullable=False)], metadata=index_md)
    files["index.idx"] = _write(
        storage.join(folder, "index.idx"), schema.empty_table(), [ivf_index.SerializeToString()]
    )

    ivf_aux = index_pb2.IVF(offsets=offsets.tolist(), lengths=lengths.tolist())
    aux_md = {"lance:ivf": "1", "distance_type": metric}
    buffers = [ivf_aux.SerializeToString()]
    ids = pa.array(row_ids[order], pa.uint64())
    if index_type == "IVF_FLAT":
        aux_md["storage_metadata"] = json.dumps([json.dumps({"dim": dim}, separators=(",", ":"))])
        item = pa.field("item", pa.float32())
        column = pa.FixedSizeListArray.from_arrays(pa.array(stored[order].ravel()), dim)
        field = pa.field("flat", pa.list_(item, dim), nullable=False)
    else:
        residual = data if metric == "dot" else data - centroids[labels]
        if codebook is None:
            codebook = train_pq(residual, num_sub_vectors, rng, num_bits)
        codes = encode_pq(residual[order], codebook)
        if num_bits == 4:  # two codes a byte, the even sub-vector in the low nibble
            codes = codes[:, 0::2] | (codes[:, 1::2] << 4)
        # per partition, sub-vector-major (pylance's "transposed" storage)
        parts = [
            codes[s : s + c].T.ravel()
            for s, c in zip(offsets.tolist(), lengths.tolist(), strict=True)
        ]
        flat_codes = np.concatenate(parts) if parts else np.empty(0, np.uint8)
        info = {
            "codebook_position": 2,
            "nbits": num_bits,
            "num_sub_vectors": num_sub_vectors,
            "dimension": dim,
            "codebook_tensor": [],
            "transposed": True,
        }
        aux_md["storage_metadata"] = json.dumps([json.dumps(info, separators=(",", ":"))])
        buffers.append(_tensor(codebook, (1 << num_bits, dim)).SerializeToString())
        width = codes.shape[1]
        column = pa.FixedSizeListArray.from_arrays(pa.array(flat_codes, pa.uint8()), width)
        field = pa.field("__pq_code", pa.list_(pa.field("item", pa.uint8()), width))
    aux_schema = pa.schema([pa.field("_rowid", pa.uint64()), field], metadata=aux_md)
    table = pa.table([ids, column.cast(field.type)], schema=aux_schema)
    files["auxiliary.idx"] = _write(storage.join(folder, "auxiliary.idx"), table, buffers)
    return BuiltIndex(files, _details(index_type, metric, num_sub_vectors, num_bits))


def _chunks(data: np.ndarray):
    for s in range(0, len(data), CHUNK_ROWS):
        yield data[s : s + CHUNK_ROWS]


def train_pq(
    residual: np.ndarray, m: int, rng: np.random.Generator, num_bits: int = 8
) -> np.ndarray:
    """One ``2**num_bits``-centroid k-means per sub-vector over a sample: (m, 2**bits,
    dim / m)."""
    k = 1 << num_bits
    sample = residual[_sample(len(residual), k * SAMPLE_RATE, rng)]
    sub = residual.shape[1] // m
    return np.stack([kmeans(sample[:, j * sub : (j + 1) * sub], k, rng)[0] for j in range(m)])


def encode_pq(residual: np.ndarray, codebook: np.ndarray) -> np.ndarray:
    """The nearest codeword of each sub-vector: (rows, m) uint8."""
    m, _, sub = codebook.shape
    codes = np.empty((len(residual), m), dtype=np.uint8)
    for j in range(m):
        codes[:, j] = _nearest(
            np.ascontiguousarray(residual[:, j * sub : (j + 1) * sub]), codebook[j]
        )[0]
    return codes


def _write(path: str, table: pa.Table, buffers: list[bytes]) -> int:
    """Write one index file (Lance 2.2) with its global buffers; returns its size."""
    writer = LanceFileWriter(path, table.schema, version=LanceFileVersion.V2_2)
    for buf in buffers:
        writer.add_global_buffer(buf)
    if table.num_rows:
        writer.write_table(table)
    return writer.close().num_bytes
