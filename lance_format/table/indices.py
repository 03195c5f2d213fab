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
