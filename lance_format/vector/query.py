"""The ``nearest={...}`` argument: parsed and checked before anything is read.

Keys are pylance's: ``column``, ``q``, ``k`` (default 10), ``metric`` (default: the metric of
the column's vector index when the search may use it, else l2, hamming for uint8 vectors), ``nprobes``, ``refine_factor``, ``use_index``.  ``q`` is one vector or
a 2-D batch of them (one row per query); it is cast to the column's element type, as
pylance does, so a float16 column is searched with the float16-rounded query.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import InvalidArgumentError
from .metrics import FLOAT_METRICS, normalise_metric

DEFAULT_K = 10
MAX_K = 1 << 20
# every query keeps up to about 2k candidates with their vectors in memory
MAX_CANDIDATE_BYTES = 2 << 30
KEYS = {"column", "q", "k", "metric", "nprobes", "refine_factor", "use_index"}
_ELEMENT_TYPES = {
    pa.float16(): np.float16,
    pa.float32(): np.float32,
    pa.float64(): np.float64,
    pa.uint8(): np.uint8,
}


@dataclass
class NearestQuery:
    column: str
    queries: np.ndarray  # (m, dim), in the column's element type
    k: int
    metric: str
    batched: bool  # q was 2-D: the output carries ``query_index``
    nprobes: int | None = None
    refine_factor: int | None = None
    use_index: bool = True
    metric_given: bool = True  # False: the default, which the column's index may override

    @property
    def dim(self) -> int:
        return self.queries.shape[1]


def _positive_int(nearest: dict, key: str, default: int | None) -> int | None:
    value = nearest.get(key)
    if value is None:
        return default
    if isinstance(value, (bool, float)) or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentError(f"nearest {key!r} must be an integer, got {value!r}")
    if value <= 0:
        raise InvalidArgumentError(f"nearest {key!r} must be > 0, got {value}")
    return int(value)


def query_array(q: object) -> np.ndarray:
    """The query as a numeric numpy array: a list, numpy array, Arrow array, or base64 of
    little-endian float32 (how a JSON client sends it compactly)."""
    if isinstance(q, str):
        try:
            raw = base64.b64decode(q, validate=True)
        except ValueError:
            raise InvalidArgumentError(
                "nearest 'q' as a string must be base64 of little-endian float32"
            ) from None
        if len(raw) % 4:
            raise InvalidArgumentError(f"nearest 'q' decodes to {len(raw)} bytes, not float32s")
        return np.frombuffer(raw, dtype="<f4")
    if isinstance(q, (pa.Array, pa.ChunkedArray)):
        q = q.to_numpy(zero_copy_only=False)
    try:
        arr = np.asarray(q)
    except (ValueError, TypeError):
        raise InvalidArgumentError("nearest 'q' must be a vector of numbers") from None
    if arr.dtype == object and arr.ndim == 1 and len(arr) and isinstance(arr[0], np.ndarray):
        arr = np.stack(list(arr))
    if arr.dtype.kind not in "fiub" or arr.dtype.kind == "b":
        raise InvalidArgumentError(f"nearest 'q' must be a vector of numbers, got {arr.dtype}")
    return arr


def parse_nearest(nearest: object, schema: pa.Schema) -> NearestQuery:
    """Validate ``nearest`` against the dataset's Arrow schema."""
    if not isinstance(nearest, dict):
        raise InvalidArgumentError(f"nearest must be a dict, got {type(nearest).__name__}")
    unknown = sorted(set(nearest) - KEYS)
    if unknown:
        raise InvalidArgumentError(f"unknown nearest key(s) {unknown}; known: {sorted(KEYS)}")
    column = nearest.get("column")
    if not isinstance(column, str):
        raise InvalidArgumentError("nearest needs 'column': the name of the vector column")
    if column not in schema.names:
        raise InvalidArgumentError(f"vector column {column!r} is not in the dataset")
    ctype = schema.field(column).type
    if not pa.types.is_fixed_size_list(ctype) or ctype.value_type not in _ELEMENT_TYPES:
        raise InvalidArgumentError(
            f"column {column!r} must be a vector (fixed_size_list of float16/32/64 or "
            f"uint8), got {ctype}",
            column=column,
        )
    if "q" not in nearest or nearest["q"] is None:
        raise InvalidArgumentError("nearest needs 'q': the query vector")
    arr = query_array(nearest["q"])
    dim = ctype.list_size
    if arr.ndim not in (1, 2) or arr.size == 0:
        raise InvalidArgumentError(
            f"nearest 'q' must be one vector or a 2-D batch, got {arr.shape}"
        )
    if arr.shape[-1] != dim:
        raise InvalidArgumentError(
            f"query vector size {arr.shape[-1]} does not match the column size {dim}",
            column=column,
        )
    element = _ELEMENT_TYPES[ctype.value_type]
    default_metric = "hamming" if element is np.uint8 else "l2"
    metric = normalise_metric(nearest.get("metric") or default_metric)
    if (metric == "hamming") != (element is np.uint8):
        allowed = ["hamming"] if element is np.uint8 else list(FLOAT_METRICS)
        raise InvalidArgumentError(
            f"metric {metric!r} does not support {ctype.value_type} vectors (use {allowed})",
            column=column,
        )
    if element is np.uint8 and (arr.min() < 0 or arr.max() > 255 or arr.dtype.kind == "f"):
        raise InvalidArgumentError("a query for uint8 vectors must hold integers in 0..255")
    use_index = nearest.get("use_index", True)
    if not isinstance(use_index, bool):
        raise InvalidArgumentError(f"nearest 'use_index' must be true or false, got {use_index!r}")
    k = _positive_int(nearest, "k", DEFAULT_K) or DEFAULT_K
    if k > MAX_K:
        raise InvalidArgumentError(f"nearest 'k' must be at most {MAX_K}, got {k}")
    queries = np.ascontiguousarray(arr.reshape(-1, dim).astype(element))
    held = 2 * k * len(queries) * dim * queries.itemsize
    if held > MAX_CANDIDATE_BYTES:
        raise InvalidArgumentError(
            f"k={k} for {len(queries)} quer{'y' if len(queries) == 1 else 'ies'} of dimension "
            f"{dim} would hold about {held >> 20} MiB of candidates (limit "
            f"{MAX_CANDIDATE_BYTES >> 20} MiB): ask for fewer neighbours or queries"
        )
    return NearestQuery(
        column=column,
        queries=queries,
        k=k,
        metric=metric,
        batched=arr.ndim == 2,
        nprobes=_positive_int(nearest, "nprobes", None),
        refine_factor=_positive_int(nearest, "refine_factor", None),
        use_index=use_index,
        metric_given=bool(nearest.get("metric")),
    )
