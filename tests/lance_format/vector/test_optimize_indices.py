"""``optimize.optimize_indices`` against pylance 14.

The same history (index, append, optimize with the default, with a delta segment, merging
two segments, nothing new, retraining) runs through both libraries: the segments (their
fragment coverage) and the versions must agree, and searches that probe the index must
return the same rows whichever library runs them on either dataset.
"""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_format
from lance_format.errors import UnsupportedError


def _table(n: int, start: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    vec = rng.standard_normal(n * 8).astype("float32")
    return pa.table(
        {
            "id": range(start, start + n),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec), 8),
        }
    )


def _segments(lib, uri: str) -> list:
    out = []
    for d in lib.dataset(uri).describe_indices():
        for s in d["segments"] if isinstance(d, dict) else d.segments:
            ids = s["fragment_ids"] if isinstance(s, dict) else s.fragment_ids
            out.append(sorted(ids))
    return out


def _history(lib, uri: str, index_type: str):
    ds = lib.write_dataset(_table(1500, 0, 1), uri)
    extra = {"num_sub_vectors": 4} if index_type == "IVF_PQ" else {}
    ds.create_index("vec", index_type, num_partitions=4, **extra)
    steps = [
        {},
        {"num_indices_to_merge": 0},
        {"num_indices_to_merge": 2},
    ]
    for i, options in enumerate(steps):
        lib.write_dataset(_table(300, 1500 + 300 * i, 2 + i), uri, mode="append")
        ds = lib.dataset(uri)
        ds.optimize.optimize_indices(**options)
        yield str(options), ds.version
    ds.optimize.optimize_indices()  # nothing new: no commit
    yield "nothing new", ds.version
    lib.write_dataset(_table(300, 2400, 9), uri, mode="append")
    ds = lib.dataset(uri)
    ds.optimize.optimize_indices(retrain=True)
    yield "retrain", ds.version


def _search(lib, uri: str, q: np.ndarray, nprobes: int) -> list:
    nearest = {"column": "vec", "q": q, "k": 5, "nprobes": nprobes}
    return lib.dataset(uri).to_table(nearest=nearest, columns=["id"])["id"].to_pylist()


@pytest.mark.parametrize("index_type", ["IVF_FLAT", "IVF_PQ"])
def test_optimize_indices_matches_pylance(tmp_path, index_type):
    theirs, ours = str(tmp_path / "pylance"), str(tmp_path / "ours")
    q = _table(1, 0, 1)["vec"][0].values.to_numpy()
    for (step, v1), (_, v2) in zip(
        _history(lance, theirs, index_type), _history(lance_format, ours, index_type), strict=True
    ):
        assert v2 == v1, step
        assert _segments(lance, ours) == _segments(lance, theirs), step
        # every partition probed: exact for IVF_FLAT whatever the centroids (PQ codes and
        # retraining depend on each library's training)
        if index_type == "IVF_FLAT" and step != "retrain":
            expected = _search(lance, theirs, q, nprobes=4)
            assert _search(lance_format, ours, q, nprobes=4) == expected, step
            assert _search(lance, ours, q, nprobes=4) == expected, step
        if len(_segments(lance, ours)) == 1:  # (several segments: we search exactly)
            # one probed partition: both libraries search our index the same way
            got = _search(lance_format, ours, q, nprobes=1)
            assert _search(lance, ours, q, nprobes=1) == got, step


def test_optimize_indices_of_an_unknown_name_or_no_index_does_nothing(tmp_path):
    uri = str(tmp_path / "ds")
    ds = lance_format.write_dataset(_table(300, 0, 1), uri)
    ds.optimize.optimize_indices()
    ds.optimize.optimize_indices(index_names=["nope"])
    assert lance_format.dataset(uri).version == 1


def test_a_scalar_index_with_new_rows_is_refused(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(300, 0, 1), uri)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    lance.write_dataset(_table(10, 300, 2), uri, mode="append")
    ds = lance_format.dataset(uri)
    with pytest.raises(UnsupportedError):
        ds.optimize.optimize_indices()
    assert lance_format.dataset(uri).version == 3
