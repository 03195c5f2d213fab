"""Compiled kernels (``lance_format.jit``): compiled at warm-up, and the declared signatures
are the ones reads and writes call with, so that no request compiles after a server start.

Truth: numba's own record of the compiled specialisations, and pylance reading and writing
the same data.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import lance.file
import numpy as np
import pyarrow as pa
import pytest
from flight_fixtures import serve

from lance_format import jit
from lance_format.reader import LanceFileReader
from lance_format.writer import LanceFileWriter


def _table(n: int = 60_000) -> pa.Table:
    """Columns that exercise every kernel: FSST text, bit-packed integers of several widths
    (with nulls: levels), dictionary-friendly and plain variable-width strings."""
    rng = np.random.default_rng(17)
    words = np.array("quick brown fox jumps over the lazy dog \xff escapes".split())
    text = [" ".join(rng.choice(words, 6)) for _ in range(n)]
    small = rng.integers(0, 1000, n)
    return pa.table(
        {
            "text": pa.array(text),
            "u8": pa.array(rng.integers(0, 200, n).astype(np.uint8)),
            "i16": pa.array(rng.integers(-3000, 3000, n).astype(np.int16)),
            "i32": pa.array(small.astype(np.int32), mask=small % 7 == 0),
            "i64": pa.array(rng.integers(0, 1 << 40, n)),
            "flag": pa.array(rng.choice(["A", "N", "R"], n)),
            "ids": pa.array([f"id-{i:x}" for i in rng.integers(0, 1 << 30, n)]),
        }
    )


def _registered() -> list[tuple[object, tuple[str, ...]]]:
    return [(k, sigs) for k, sigs in jit._REGISTRY if sigs]


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_warm_up_compiles_every_signature_reads_and_writes_call(tmp_path, version):
    assert jit.warm_up() == sum(len(sigs) for _, sigs in _registered())
    for compiled, sigs in _registered():
        assert len(compiled.signatures) >= len(sigs), compiled.py_func.__name__
    before = {id(k): len(k.signatures) for k, _ in jit._REGISTRY}

    table = _table()
    theirs = str(tmp_path / "theirs.lance")
    with lance.file.LanceFileWriter(theirs, table.schema, version=version) as w:
        w.write_batch(table)
    ours = str(tmp_path / "ours.lance")
    with LanceFileWriter(ours, table.schema, version=version) as w:
        w.write_batch(table)
    for path in (theirs, ours):
        got = LanceFileReader(path).read()
        assert got.equals(lance.file.LanceFileReader(path).read_all().to_table())
        assert LanceFileReader(path).take([0, 5, 59_999]).equals(table.take([0, 5, 59_999]))

    # no call compiled a specialisation that warm_up did not
    after = {id(k): len(k.signatures) for k, _ in jit._REGISTRY}
    grown = [k.py_func.__name__ for k, _ in jit._REGISTRY if after[id(k)] != before[id(k)]]
    assert not grown


def test_readonly_views_writable_arrays_and_passes_read_only_ones_through():
    """Kernels declare read-only inputs (``ro``): a writable array is viewed read-only (the
    array itself stays writable), one already read-only is handed over as it is."""
    a = np.arange(4)
    view = jit.readonly(a)
    assert view is not a and not view.flags.writeable and a.flags.writeable
    assert np.shares_memory(view, a)
    assert jit.readonly(view) is view
    data = np.frombuffer(b"abcd", dtype=np.uint8)  # numpy hands out bytes read-only
    assert jit.readonly(data) is data


def test_parse_signature_marks_read_only_arrays():
    sig = jit.parse_signature("i8(ro(u1[::1]), i8[::1])")
    assert not sig.args[0].mutable and sig.args[1].mutable
    view = jit.readonly(np.arange(3))
    assert not view.flags.writeable


def test_server_compiles_the_kernels_before_it_listens(tmp_path):
    """The server logs the compiled kernels before announcing its location (so before any
    request); ``--no-warm`` leaves them to compile on first use."""
    with serve(str(tmp_path)) as server:
        log = server.log()
    ready = re.search(r"(\d+) kernel signatures ready", log)
    assert ready and int(ready.group(1)) >= sum(len(sigs) for _, sigs in _registered())
    with serve(str(tmp_path), "--no-warm") as server:
        assert "kernel signatures ready" not in server.log()


_HELPER = "import numba\n\n\n@numba.njit(cache=True)\ndef helper(x):\n    return x + {n}\n"
_KERNEL = (
    "import numba\n\nfrom .jit import helper\n\n\n"
    "@numba.njit(cache=True)\ndef k(x):\n    return helper(x)\n"
)
_RUN = (
    "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1])\n"
    "from lance_format.jit import drop_stale_caches\n"
    "dropped = drop_stale_caches(Path(sys.argv[1]) / 'pkg', Path(sys.argv[1]) / 'stamp')\n"
    "from pkg.kern import k\n"
    "print(k(1), dropped)\n"
)


def test_a_changed_helper_drops_the_cached_kernels_that_call_it(tmp_path):
    """numba caches a kernel keyed on its own file only: after the helper it calls (in
    another module) changes, the cached machine code must not be loaded again."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "jit.py").write_text(_HELPER.format(n=1))
    (pkg / "kern.py").write_text(_KERNEL)

    def run() -> tuple[int, bool]:
        repo = str(Path(jit.__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": repo}
        out = subprocess.run(
            [sys.executable, "-c", _RUN, str(tmp_path)], capture_output=True, text=True, env=env
        )
        assert out.returncode == 0, out.stderr
        value, dropped = out.stdout.split()
        return int(value), dropped == "True"

    assert run() == (2, True)  # no stamp yet: nothing cached is trusted
    assert list(pkg.glob("__pycache__/kern.k-*.nbi"))  # numba cached the kernel
    assert run() == (2, False)  # unchanged: the cache stays and is used
    (pkg / "jit.py").write_text(_HELPER.format(n=2))
    assert run() == (3, True)  # the helper changed: the kernel calling it is rebuilt
    assert run() == (3, False)
