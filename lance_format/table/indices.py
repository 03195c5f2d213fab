"""The indexes a dataset version lists in its manifest, described as pylance lists them."""

from __future__ import annotations

from ..pb import table_pb2
from ..vector.ivf import index_uuid, vector_index_type
from .conflicts import _fragment_bitmap

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
                "fragment_ids": _fragment_bitmap(meta) or set(),
                "base_id": int(meta.base_id) if meta.HasField("base_id") else None,
            }
        )
    return out
