"""pylance's ``vec_to_table``: vectors given as a dict, list or matrix, as the Arrow table
of float32 fixed-size lists that vector search and indexes read."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import InvalidArgumentError


def vec_to_table(
    data: dict | list | np.ndarray,
    names: str | list[str] | None = None,
    ndim: int | None = None,
    check_ndim: bool = True,
) -> pa.Table:
    """A dict becomes ``id`` (its keys) and ``vector`` columns, a list or 2-d array one
    ``vector`` column (``names`` renames them); every vector must have ``ndim`` values
    (default: the first's) unless ``check_ndim`` is False."""
    if isinstance(data, dict):
        cols = ["id", "vector"] if names is None else list(names)
        if len(cols) != 2:
            raise InvalidArgumentError("for a dict, names must be 2 column names")
        values = list(data.values())
        arrays = [pa.array(list(data.keys())), _vectors(values, ndim, check_ndim)]
    elif isinstance(data, (list, np.ndarray)):
        cols = ["vector"] if names is None else [names] if isinstance(names, str) else list(names)
        if len(cols) != 1:
            raise InvalidArgumentError(f"names must be one column name, got {len(cols)}")
        arrays = [_vectors(data, ndim, check_ndim)]
    else:
        raise InvalidArgumentError(f"data must be a dict, list or ndarray, got {type(data)}")
    return pa.Table.from_arrays(arrays, names=cols)


def _vectors(values: Any, ndim: int | None, check: bool) -> pa.FixedSizeListArray:
    if check:
        for v in values:
            if ndim is None:
                ndim = len(v)
            elif len(v) != ndim:
                raise InvalidArgumentError(f"Expected {ndim} dimensions but got {len(v)}")
    if ndim is None:
        ndim = len(next(iter(values)))
    flat = np.asarray(values, dtype=np.float32).ravel()
    return pa.FixedSizeListArray.from_arrays(pa.array(flat), list_size=ndim)
