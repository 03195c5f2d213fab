"""The indexes a dataset version lists in its manifest, described as pylance lists them."""

from __future__ import annotations

import datetime
import time
import uuid as uuidlib

import numpy as np
import pyarrow as pa
import pyroaring

from .. import storage
from ..errors import IndexExistsError, IndexNotFoundError, InvalidArgumentError, UnsupportedError
from ..pb import table_pb2
from ..vector import build
from ..vector.ivf import index_uuid, vector_index_type
from . import commit
from .operations import CreateIndex, fragment_bitmap
from .scanner import ROW_ID
from .transaction import new_transaction

_DETAILS_SUFFIX = "IndexDetails"


def index_type(root: str, meta: table_pb2.IndexMetadata) -> str:
    """pylance's ``type``: a vector index's own type (from its files), else the details
    message's name without ``IndexDetails`` (``BTree``, ``Bitmap``, ``Inverted``...)."""
    name = meta.index_details.type_url.rsplit(".", 1)[-1].rsplit("/", 1)[-1]
    if name == "Vector" + _DETAILS_SUFFIX:
        return vector_index_type(root, meta)
    return name.removesuffix(_DETAILS_SUFFIX) or "Unknown"


def list_indices(ds) -> list[dict]:
    """One dict per index segment: name, type, uuid, field names, the dataset version it
    was built on, the fragment ids it covers and its base id."""
    names = {f.id: f.name for f in ds.lance_schema.walk()}
    out = []
    for meta in ds.manifest.indices:
        out.append(
            {
                "name": meta.name,
                "type": index_type(ds.uri, meta),
                "uuid": index_uuid(meta),
                "fields": [names.get(f, str(f)) for f in meta.fields],
                "version": int(meta.dataset_version),
                "fragment_ids": fragment_bitmap(meta) or set(),
                "base_id": int(meta.base_id) if meta.HasField("base_id") else None,
            }
        )
    return out


def create_index(
    ds,
    column: str,
    index_type: str,
    *,
    name: str | None = None,
    metric: str = "l2",
    replace: bool = False,
    num_partitions: int | None = None,
    num_sub_vectors: int | None = None,
    num_bits: int = 8,
):
    """Train and write an IVF_FLAT / IVF_PQ index over ``column`` and commit it as pylance
    commits a CreateIndex (the index files are written first under a fresh uuid; a failed
    commit leaves only unreferenced files).  Without ``num_partitions``, pylance's default
    (the rows over its target partition size); IVF_PQ needs ``num_sub_vectors``, as in
    pylance, and takes 8- or 4-bit codes."""
    index_type, metric = str(index_type).upper(), str(metric).lower()
    field = next((f for f in ds.lance_schema.fields if f.name == column), None)
    if field is None:
        raise InvalidArgumentError(f"{column!r} is not a fixed-size-list vector column")
    arrow = ds.lance_schema.to_dataset_arrow().field(column)
    if not pa.types.is_fixed_size_list(arrow.type):
        raise InvalidArgumentError(f"{column!r} is not a fixed-size-list vector column")
    if not pa.types.is_floating(arrow.type.value_type):
        raise InvalidArgumentError(f"{column!r} holds {arrow.type.value_type}, not floats")
    if arrow.type.value_type != pa.float32():
        raise UnsupportedError(f"indexes are built over float32 vectors, not {arrow.type}")
    name = name or f"{column}_idx"
    existing = [m for m in ds.manifest.indices if m.name == name]
    if existing and not replace:
        raise IndexExistsError(f"an index named {name!r} already exists (pass replace=True)")
    dim = arrow.type.list_size
    rows = ds.count_rows()
    partitions = (
        num_partitions if num_partitions is not None else build.default_partitions(index_type, rows)
    )
    for key, value in (
        ("num_partitions", partitions),
        ("num_sub_vectors", num_sub_vectors),
        ("num_bits", num_bits),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidArgumentError(f"{key} must be an integer, got {value!r}")
    subs = num_sub_vectors if index_type == "IVF_PQ" else 1
    build.validate(index_type, metric, dim, rows, partitions, subs, num_bits)
    table = ds.to_table(columns=[column], with_row_id=True, filter=f"{column} IS NOT NULL")
    col = table.column(column).combine_chunks()
    values = col.values.slice(col.offset * dim, len(col) * dim).to_numpy(zero_copy_only=False)
    vectors = values.reshape(len(col), dim).astype(np.float32, copy=False)
    row_ids = table.column(ROW_ID).to_numpy()
    uid = uuidlib.uuid4()
    folder = storage.join(ds.uri, "_indices", str(uid))
    built = build.build_ivf(
        folder,
        row_ids,
        vectors,
        index_type=index_type,
        metric=metric,
        num_partitions=partitions,
        num_sub_vectors=subs,
        num_bits=num_bits,
    )
    bitmap = pyroaring.BitMap(f.fragment_id for f in ds.get_fragments())
    bitmap.run_optimize()
    meta = table_pb2.IndexMetadata(
        uuid=table_pb2.UUID(uuid=uid.bytes),
        fields=[field.id],
        name=name,
        dataset_version=ds.version,
        fragment_bitmap=bitmap.serialize(),
        index_version=1,
        created_at=int(time.time() * 1000),
        files=[table_pb2.IndexFile(path=p, size_bytes=s) for p, s in sorted(built.files.items())],
    )
    meta.index_details.type_url = "/lance.index.pb.VectorIndexDetails"
    meta.index_details.value = built.details
    op = CreateIndex(new_indices=[meta], removed_indices=list(existing))
    return commit.commit(ds.uri, new_transaction(ds.version, op)).version


def drop_index(ds, name: str) -> int | None:
    """Remove every segment of index ``name`` (a CreateIndex that only removes, as pylance
    drops); the files stay for cleanup.  Returns the new version."""
    segments = [m for m in ds.manifest.indices if m.name == name]
    if not segments:
        raise IndexNotFoundError(f"index {name!r} not found")
    op = CreateIndex(removed_indices=segments)
    return commit.commit(ds.uri, new_transaction(ds.version, op)).version


def describe_indices(ds) -> list[dict]:
    """One entry per index name, as pylance 14's ``describe_indices`` describes it: the
    details type, rows indexed, fields and segments, and the total size of its files."""
    names = {f.id: f.name for f in ds.lance_schema.walk()}
    groups: dict[str, list[table_pb2.IndexMetadata]] = {}
    for meta in ds.manifest.indices:
        groups.setdefault(meta.name, []).append(meta)
    live = {f.fragment_id: f.count_rows() for f in ds.get_fragments()}
    out = []
    for name, metas in groups.items():
        covered = set().union(*((fragment_bitmap(m) or set()) for m in metas))
        out.append(
            {
                "name": name,
                "index_type": index_type(ds.uri, metas[0]),
                "type_url": metas[0].index_details.type_url,
                "num_rows_indexed": sum(live.get(f, 0) for f in covered),
                "fields": list(metas[0].fields),
                "field_names": [names.get(f, str(f)) for f in metas[0].fields],
                "num_segments": len(metas),
                "total_size_bytes": sum(f.size_bytes for m in metas for f in m.files),
                "segments": [_segment(m) for m in metas],
            }
        )
    return out


def _segment(meta: table_pb2.IndexMetadata) -> dict:
    """One segment as pylance's ``IndexSegmentDescription`` gives it."""
    created = meta.created_at if meta.HasField("created_at") else None
    return {
        "uuid": index_uuid(meta),
        "fragment_ids": fragment_bitmap(meta) or set(),
        "dataset_version_at_last_update": int(meta.dataset_version),
        "index_version": int(meta.index_version) if meta.HasField("index_version") else None,
        "created_at": (
            datetime.datetime.fromtimestamp(created / 1000, datetime.UTC) if created else None
        ),
        "size_bytes": sum(f.size_bytes for f in meta.files),
        "base_id": int(meta.base_id) if meta.HasField("base_id") else None,
        "covering_fields": list(meta.covering_fields),
    }


def optimize_indices(
    ds,
    *,
    num_indices_to_merge: int | None = None,
    index_names: list[str] | None = None,
    retrain: bool = False,
) -> int | None:
    """pylance's ``optimize_indices`` for the vector indexes built here (IVF_FLAT, IVF_PQ):
    the rows of fragments no segment covers join the index without retraining (assigned to
    its partitions, coded with its codebook).  By default they are merged with the newest
    segment into one new segment (``num_indices_to_merge`` = how many of the newest
    segments to merge; 0 = a new delta segment of its own); ``retrain`` trains the index
    again over every row, as one segment.  Indexes with nothing new are left alone, and an
    unknown name is ignored, as in pylance.  One CreateIndex commit for all; returns its
    version (None when there was nothing to do)."""
    if num_indices_to_merge is not None and (
        isinstance(num_indices_to_merge, bool)
        or not isinstance(num_indices_to_merge, int)
        or num_indices_to_merge < 0
    ):
        raise InvalidArgumentError("num_indices_to_merge must be a non-negative integer")
    by_name: dict[str, list[table_pb2.IndexMetadata]] = {}
    for meta in ds.manifest.indices:
        if not meta.name.startswith("__lance"):
            by_name.setdefault(meta.name, []).append(meta)
    live = [f.fragment_id for f in ds.get_fragments()]
    new_indices, removed = [], []
    for name, segments in by_name.items():
        if index_names is not None and name not in index_names:
            continue
        covered: set[int] = set()
        for seg in segments:
            covered |= fragment_bitmap(seg) or set()
        unindexed = [f for f in live if f not in covered]
        if not unindexed and not retrain:
            continue
        if not segments[0].index_details.type_url.endswith("VectorIndexDetails"):
            raise UnsupportedError(
                f"index {name!r} ({index_type(ds.uri, segments[0])}) cannot be updated here: "
                "only IVF_FLAT and IVF_PQ indexes are"
            )
        built = _updated_segment(ds, segments, unindexed, num_indices_to_merge, retrain, live)
        new_indices.append(built[0])
        removed.extend(built[1])
    if not new_indices:
        return None
    op = CreateIndex(new_indices=new_indices, removed_indices=removed)
    return commit.commit(ds.uri, new_transaction(ds.version, op)).version


def _updated_segment(ds, segments, unindexed, num_to_merge, retrain, live):
    """(the new segment, the segments it replaces) for one index."""
    from ..vector.ivf import IvfIndex

    newest = max(segments, key=lambda m: m.dataset_version)
    index = IvfIndex.open(ds.uri, newest)
    if index.index_type not in build.METRICS:
        raise UnsupportedError(f"{index.index_type} indexes cannot be updated here")
    column = next(f.name for f in ds.lance_schema.fields if f.id == newest.fields[0])
    pq = index.pq
    num_bits = 8 if pq is None else int(pq.codebook.shape[1]).bit_length() - 1
    subs = 1 if pq is None else int(pq.codebook.shape[0])
    if retrain:
        merged, frags = list(segments), live
        trained: dict = {}
        bitmap = set(live)
        dataset_version = ds.version
    else:
        n = 1 if num_to_merge is None else num_to_merge
        order = sorted(segments, key=lambda m: m.dataset_version)
        merged = order[len(order) - n :] if n else []
        bitmap = set(unindexed)
        for seg in merged:
            bitmap |= fragment_bitmap(seg) or set()
        frags = [f for f in live if f in bitmap]
        trained = {"centroids": index.centroids, "codebook": None if pq is None else pq.codebook}
        dataset_version = max(m.dataset_version for m in merged) if merged else ds.version
    fragments = [f for f in ds.get_fragments() if f.fragment_id in set(frags)]
    table = ds.scanner(
        columns=[column], with_row_id=True, filter=f"{column} IS NOT NULL", fragments=fragments
    ).to_table()
    dim = ds.schema.field(column).type.list_size
    col = table.column(column).combine_chunks()
    values = col.values.slice(col.offset * dim, len(col) * dim).to_numpy(zero_copy_only=False)
    vectors = values.reshape(len(col), dim).astype(np.float32, copy=False)
    partitions = len(index.centroids)
    if retrain:
        build.validate(index.index_type, index.metric, dim, len(col), partitions, subs, num_bits)
    uid = uuidlib.uuid4()
    built = build.build_ivf(
        storage.join(ds.uri, "_indices", str(uid)),
        table.column(ROW_ID).to_numpy(),
        vectors,
        index_type=index.index_type,
        metric=index.metric,
        num_partitions=partitions,
        num_sub_vectors=subs,
        num_bits=num_bits,
        **trained,
    )
    covered = pyroaring.BitMap(sorted(bitmap))
    covered.run_optimize()
    meta = table_pb2.IndexMetadata(
        uuid=table_pb2.UUID(uuid=uid.bytes),
        fields=list(newest.fields),
        name=newest.name,
        dataset_version=dataset_version,
        fragment_bitmap=covered.serialize(),
        index_version=newest.index_version if newest.HasField("index_version") else 1,
        created_at=int(time.time() * 1000),
        files=[table_pb2.IndexFile(path=p, size_bytes=s) for p, s in sorted(built.files.items())],
    )
    meta.index_details.type_url = newest.index_details.type_url
    meta.index_details.value = built.details
    return meta, merged
