"""Distance metrics, defined as pylance 14 computes ``_distance``.

- ``l2`` (alias ``euclidean``): squared Euclidean distance, sum((x - q)^2);
- ``cosine``: 1 - x.q / (|x| |q|);
- ``dot``: 1 - x.q (smaller is nearer, like the others);
- ``hamming``: the number of differing bits, for ``uint8`` vectors only.

Each metric has two forms.  :func:`scores` ranks a whole chunk against all queries with one
BLAS matrix product in float32 (fast, but the expanded l2 form loses a few ulps of the norms);
:func:`exact_distances` recomputes the few surviving candidates directly in float64, so the
reported distances and the tie order match pylance's direct computation.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError
from ..jit import kernel

METRICS = ("l2", "cosine", "dot", "hamming")
_ALIASES = {"euclidean": "l2"}
FLOAT_METRICS = ("l2", "cosine", "dot")
# up to this many queries a chunk is ranked by the compiled scan (one pass over the rows,
# memory-bound); more share one BLAS matrix product
SCAN_MAX_QUERIES = 8
_METRIC_CODES = {"l2": 0, "dot": 1, "cosine": 2}


def normalise_metric(name: object) -> str:
    """A metric's canonical name (pylance accepts any case and ``euclidean`` for l2)."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"metric must be a string, got {name!r}")
    key = name.lower()
    key = _ALIASES.get(key, key)
    if key not in METRICS:
        raise InvalidArgumentError(
            f"unknown metric {name!r}; expected one of {list(METRICS) + list(_ALIASES)}"
        )
    return key


def squared_norms(x: np.ndarray) -> np.ndarray:
    """Per-row squared norms of a float32 chunk (computed once per chunk, shared by the
    scores and the tolerance)."""
    return np.einsum("ij,ij->i", x, x)


def scores(
    metric: str, x: np.ndarray, x_norm2: np.ndarray | None, queries: np.ndarray, q_norms
) -> np.ndarray:
    """(queries, rows) float32 ranking scores of chunk ``x``; monotone in the true distance
    up to float32 rounding (see :func:`tolerance`)."""
    if metric == "hamming":
        return _hamming(x, queries).astype(np.float32)
    dots = queries @ x.T  # one sgemm: (m, d) x (d, n)
    if metric == "dot":
        return 1.0 - dots
    assert x_norm2 is not None  # l2 and cosine need the row norms
    if metric == "l2":
        return x_norm2[None, :] - 2.0 * dots + (q_norms**2)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 - dots / (np.sqrt(x_norm2)[None, :] * q_norms[:, None])


def scan_scores(
    metric: str, x: np.ndarray, queries: np.ndarray, q_norms: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(queries, rows) float32 ranking scores of chunk ``x`` and its rows' squared norms:
    one compiled pass over the rows for a few queries (l2 summed directly, so no norms
    cancel), else the BLAS form of :func:`scores`."""
    if len(queries) > SCAN_MAX_QUERIES:
        x_norm2 = squared_norms(x)
        return scores(metric, x, x_norm2, queries, q_norms), x_norm2
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty((len(queries), len(x)), dtype=np.float32)
    x_norm2 = np.empty(len(x), dtype=np.float32)
    _scan(
        x,
        np.ascontiguousarray(queries, dtype=np.float32),
        np.ascontiguousarray(q_norms, dtype=np.float32),
        _METRIC_CODES[metric],
        out,
        x_norm2,
    )
    return out, x_norm2


@kernel(
    "void(float32[:, ::1], float32[:, ::1], float32[::1], int64, float32[:, ::1], float32[::1])",
    fastmath={"reassoc", "contract"},
    error_model="numpy",
)
def _scan(x, queries, q_norms, metric, out, x_norm2):  # pragma: no cover - compiled
    """Per row: its squared norm, and per query the l2 (0), dot (1) or cosine (2) score."""
    n, d = x.shape
    for i in range(n):
        xx = np.float32(0.0)
        for j in range(d):
            xx += x[i, j] * x[i, j]
        x_norm2[i] = xx
        for k in range(queries.shape[0]):
            acc = np.float32(0.0)
            if metric == 0:
                for j in range(d):
                    diff = x[i, j] - queries[k, j]
                    acc += diff * diff
                out[k, i] = acc
            else:
                for j in range(d):
                    acc += x[i, j] * queries[k, j]
                if metric == 1:
                    out[k, i] = 1.0 - acc
                else:
                    out[k, i] = 1.0 - acc / (np.sqrt(xx) * q_norms[k])


def tolerance(metric: str, x: np.ndarray, x_norm2: np.ndarray | None, q_norm: float) -> float:
    """How far a float32 score may sit from the true distance: candidates within it of the
    k-th score are kept for the exact recomputation, so rounding never drops a true winner."""
    if metric == "hamming" or not len(x):
        return 0.0
    eps = 8 * np.finfo(np.float32).eps * np.sqrt(x.shape[1])
    if metric == "cosine":
        return float(eps)
    assert x_norm2 is not None  # l2 and dot tolerances scale with the row norms
    x_max = float(np.sqrt(np.max(x_norm2)))
    scale = (x_max + q_norm) ** 2 if metric == "l2" else x_max * q_norm + 1.0
    return float(eps * scale)


def exact_distances(metric: str, x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Distances of rows ``x`` to one query ``q``, computed directly in float64 and rounded
    to float32, as pylance reports them."""
    if metric == "hamming":
        return _hamming(x, q[None, :])[0].astype(np.float32)
    x64 = x.astype(np.float64)
    q64 = q.astype(np.float64)
    if metric == "l2":
        diff = x64 - q64
        out = np.einsum("ij,ij->i", diff, diff)
    elif metric == "dot":
        out = 1.0 - x64 @ q64
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            out = 1.0 - (x64 @ q64) / (np.linalg.norm(x64, axis=1) * np.linalg.norm(q64))
    return out.astype(np.float32)


def _hamming(x: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """(queries, rows) counts of differing bits between uint8 vectors."""
    out = np.empty((len(queries), len(x)), dtype=np.int32)
    for i, q in enumerate(queries):
        out[i] = np.bitwise_count(np.bitwise_xor(x, q)).sum(axis=1, dtype=np.int32)
    return out
