"""Scans that cut a fragment into several steps and parts, against pylance as the oracle.

The scanner reads a filter's columns first, in steps sized by their bytes, then the other
projected columns for the matching rows only (late materialisation), in parts sized by the
projection's bytes; ``to_table`` joins the decoded steps without copying and ``to_batches``
cuts them into ``batch_size`` slices.  Shrinking ``READ_BYTES`` makes a small dataset take
every one of those paths: many steps, many parts, takes and range reads, batches straddling
decoded pages.
"""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

from lance_format.table import scanner as scanner_module
from lance_format.table.dataset import dataset

ROWS = 3000


def _table() -> pa.Table:
    rng = np.random.default_rng(7)
    n = ROWS
    q = rng.integers(0, 50, n)
    q_valid = rng.random(n) > 0.1  # nulls in a filter column
    mode = np.array(["AIR", "RAIL", "SHIP", "TRUCK"])[rng.integers(0, 4, n)]
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "q": pa.array(q, mask=~q_valid),
            "mode": pa.array(mode),
            "comment": pa.array([f"row {i} " + "x" * int(i % 97) for i in range(n)]),
            "s": pa.StructArray.from_arrays(
                [pa.array((np.arange(n) % 13).astype(np.int32)), pa.array(mode)],
                names=["k", "m"],
            ),
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(n * 16, dtype=np.float32)), 16
            ),
        }
    )


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("scan") / "ds.lance")
    lance.write_dataset(_table(), path, max_rows_per_file=1100)
    ds = lance.dataset(path)
    ds.delete("id % 7 = 3 OR (id >= 1500 AND id < 1620)")  # deletions inside every fragment
    return path


@pytest.fixture(params=[None, 200], ids=["default-steps", "tiny-steps"])
def read_bytes(request, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Scan options (for both sides): tiny steps need small batches too, as a step is a
    whole number of batches."""
    if request.param is None:
        return {}
    monkeypatch.setattr(scanner_module, "READ_BYTES", request.param)
    return {"batch_size": 16}


FILTERS = [
    "q < 5 AND mode = 'AIR'",  # selective: the other columns are taken row by row
    "q >= 3",  # nulls never match, most rows do: read as ranges
    "q IS NULL",
    "s.k = 4 OR s.m = 'RAIL'",  # nested fields
    "id > 100000",  # no row
    "comment LIKE 'row 1%' AND q IS NOT NULL",
    "NOT (q > 10)",
]
PROJECTIONS = [None, ["id", "comment"], ["vec", "q"], ["s", "mode"], ["comment"]]


def _sorted(t: pa.Table, key: str = "id") -> pa.Table:
    return t.sort_by(key) if key in t.column_names else t


@pytest.mark.parametrize("flt", FILTERS)
@pytest.mark.parametrize("columns", PROJECTIONS)
def test_filtered_scan_matches_pylance(uri: str, read_bytes, flt: str, columns) -> None:
    ours = dataset(uri).to_table(columns=columns, filter=flt, **read_bytes)
    theirs = lance.dataset(uri).to_table(columns=columns, filter=flt, **read_bytes)
    assert ours.schema == theirs.schema
    assert ours.num_rows == theirs.num_rows
    assert ours.equals(theirs)  # both scan in fragment order


@pytest.mark.parametrize("flt", [None, "q < 20", "mode = 'SHIP'", "id > 100000"])
@pytest.mark.parametrize(("limit", "offset"), [(10, None), (50, 777), (None, 1000), (3000, 5)])
def test_limit_offset_match_pylance(uri: str, read_bytes, flt, limit, offset) -> None:
    cols = ["id", "comment", "q"]
    ours = dataset(uri).to_table(columns=cols, filter=flt, limit=limit, offset=offset, **read_bytes)
    theirs = lance.dataset(uri).to_table(
        columns=cols, filter=flt, limit=limit, offset=offset, **read_bytes
    )
    assert ours.equals(theirs)


@pytest.mark.parametrize("flt", [None, "q < 5", "mode = 'TRUCK' AND q IS NULL"])
def test_row_ids_match_pylance(uri: str, read_bytes, flt) -> None:
    kw = {"columns": ["comment"], "filter": flt, "with_row_id": True, **read_bytes}
    ours = dataset(uri).to_table(**kw)
    theirs = lance.dataset(uri).to_table(**kw)
    assert ours.equals(theirs)
    kw = {"columns": ["id"], "filter": flt, "with_row_address": True, **read_bytes}
    assert dataset(uri).to_table(**kw).equals(lance.dataset(uri).to_table(**kw))


@pytest.mark.parametrize("flt", [None, "q < 30", "q < 2"])
@pytest.mark.parametrize("batch_size", [64, 1000])
def test_batches_are_whole_and_bounded(uri: str, read_bytes, flt, batch_size: int) -> None:
    cols = ["id", "comment", "vec"]
    batches = list(dataset(uri).to_batches(columns=cols, filter=flt, batch_size=batch_size))
    assert all(0 < b.num_rows <= batch_size for b in batches)
    got = pa.Table.from_batches(batches)
    assert got.equals(lance.dataset(uri).to_table(columns=cols, filter=flt))


@pytest.mark.parametrize("flt", [None, "q < 5", "q IS NULL", "id > 100000"])
def test_count_rows_matches_pylance(uri: str, read_bytes, flt) -> None:
    ours = dataset(uri).scanner(filter=flt, **read_bytes).count_rows()
    assert ours == lance.dataset(uri).count_rows(filter=flt)


def test_empty_projection_and_result_types(uri: str, read_bytes) -> None:
    ours = dataset(uri).to_table(columns=["vec", "s"], filter="id < 0", **read_bytes)
    theirs = lance.dataset(uri).to_table(columns=["vec", "s"], filter="id < 0")
    assert ours.num_rows == 0
    assert ours.schema == theirs.schema


def test_tiny_steps_cut_fragments_into_parts(uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The premise of the tiny-steps cases: a filtered scan reads its filter in steps and
    materialises the matches in several parts per step."""
    monkeypatch.setattr(scanner_module, "READ_BYTES", 200)
    calls: list[tuple[int, int]] = []
    real = scanner_module.Scanner._materialise

    def spy(self, frag, offsets, start, stop, known=None):
        calls.append((start, stop))
        return real(self, frag, offsets, start, stop, known)

    monkeypatch.setattr(scanner_module.Scanner, "_materialise", spy)
    scan = dataset(uri).scanner(columns=["comment", "vec"], filter="q >= 3", batch_size=16)
    steps = list(
        scan._steps(
            scan.fragments[0], 0, 1100, scan._step(scan.fragments[0], scan.filter_fields, 200), []
        )
    )
    assert len(steps) > 1
    assert scan.to_table().num_rows == lance.dataset(uri).count_rows(filter="q >= 3")
    assert len(calls) > len(steps) * len(scan.fragments)


def test_stopping_early_leaves_no_step_running(uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer that takes one batch of a many-step scan and stops: the steps decoding
    ahead finish or are cancelled, and the scan's threads are gone."""
    import threading

    monkeypatch.setattr(scanner_module, "READ_BYTES", 200)
    before = set(threading.enumerate())  # other tests' scans are not this one's business
    batches = dataset(uri).to_batches(columns=["id", "comment"], batch_size=16)
    first = next(iter(batches))
    ids = lance.dataset(uri).to_table(columns=["id"]).column("id").to_pylist()
    assert first.column("id").to_pylist() == ids[: first.num_rows]
    batches.close()
    left = set(threading.enumerate()) - before
    assert not [t for t in left if t.name.startswith("lance-scan")]
