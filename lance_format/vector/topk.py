"""A running top-k per query over streamed chunks, memory-bounded by k.

Chunks are ranked by float32 scores (see :mod:`.metrics`); every candidate within the
rounding tolerance of the k-th score is kept with its vector, and :meth:`RunningTopK.result`
recomputes those exactly.  The final order is (distance, row id), which is how pylance
orders ties.
"""

from __future__ import annotations

import numpy as np

from .metrics import exact_distances

# candidates kept beyond k when many rows sit within rounding of the k-th score
EXTRA_CANDIDATES = 256


class RunningTopK:
    def __init__(self, k: int, metric: str, query: np.ndarray):
        self.k = k
        self.metric = metric
        self.query = query
        self.cap = 2 * k + EXTRA_CANDIDATES
        self.tol = 0.0
        self.scores = np.zeros(0, np.float32)
        self.row_ids = np.zeros(0, np.uint64)
        self.addresses = np.zeros(0, np.uint64)
        self.vectors: np.ndarray | None = None

    def _select(self, scores: np.ndarray, row_ids: np.ndarray) -> np.ndarray:
        """Positions of the candidates to keep: the k best and all within ``tol`` of the
        k-th, at most ``cap`` of them, by (score, row id)."""
        ok = np.flatnonzero(~np.isnan(scores))
        if len(ok) > self.k:
            kth = np.partition(scores[ok], self.k - 1)[self.k - 1]
            ok = ok[scores[ok] <= kth + self.tol]
        if len(ok) > self.cap:
            order = np.lexsort((row_ids[ok], scores[ok]))
            ok = ok[order[: self.cap]]
        return ok

    def add(
        self,
        scores: np.ndarray,
        row_ids: np.ndarray,
        addresses: np.ndarray,
        vectors: np.ndarray,
        tol: float,
    ) -> None:
        self.tol = max(self.tol, tol)
        keep = self._select(scores, row_ids)
        if not len(keep):
            return
        scores = np.concatenate([self.scores, scores[keep]])
        row_ids = np.concatenate([self.row_ids, row_ids[keep]])
        addresses = np.concatenate([self.addresses, addresses[keep]])
        new = vectors[keep]
        vectors = new if self.vectors is None else np.concatenate([self.vectors, new])
        keep = self._select(scores, row_ids)
        self.scores, self.row_ids = scores[keep], row_ids[keep]
        self.addresses, self.vectors = addresses[keep], vectors[keep]

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(distances, row ids, row addresses) of the k nearest, nearest first."""
        if self.vectors is None or not len(self.row_ids):
            return np.zeros(0, np.float32), self.row_ids, self.addresses
        dist = exact_distances(self.metric, self.vectors, self.query)
        ok = np.flatnonzero(~np.isnan(dist))
        order = ok[np.lexsort((self.row_ids[ok], dist[ok]))][: self.k]
        return dist[order], self.row_ids[order], self.addresses[order]
