"""Seeded vector datasets written by pylance, shared by the vector search tests."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa


def random_vectors(rng: np.random.Generator, n: int, dim: int, dtype=np.float32) -> pa.Array:
    """``n`` seeded vectors as a fixed_size_list column (uint8: random bytes)."""
    if dtype is np.uint8:
        values = rng.integers(0, 256, n * dim, dtype=np.uint8)
    else:
        values = rng.standard_normal(n * dim).astype(dtype)
    return pa.FixedSizeListArray.from_arrays(pa.array(values), dim)


def write_vector_dataset(
    path, *, n: int, dim: int, seed: int, rows_per_file: int, dtype=np.float32, **kw
) -> str:
    """id, a string label (``r{id % 13}``) and ``vec``, in several fragments."""
    table = pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "label": pa.array([f"r{i % 13}" for i in range(n)]),
            "vec": random_vectors(np.random.default_rng(seed), n, dim, dtype),
        }
    )
    lance.write_dataset(table, str(path), max_rows_per_file=rows_per_file, **kw)
    return str(path)
