"""General (zstd) compression used from several threads at once, as the decode pool and the
writer's column jobs use it.

python-zstandard's compressors and decompressors hold one zstd context each and release the
GIL inside it: two threads sharing one misread valid buffers ("Unknown frame descriptor") or
crash the process.  The codec keeps one context per thread; these tests fail (or die) when
threads share one again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import lance
import numpy as np
import pyarrow as pa
import zstandard
from repo_paths import REPO

from lance_format import dataset
from lance_format.compression import general

# Run in a child process: a shared context can crash the interpreter, which must fail this
# test rather than take the test worker down.  Two threads decompress (and compress) 2 MB
# buffers made by the zstd library itself, each result checked against its source.
_HAMMER = """
import sys, threading
import numpy as np, zstandard
from lance_format.compression import general
rng = np.random.default_rng(7)
raw = [rng.integers(0, 50, 2_000_000).astype(np.uint8).tobytes() for _ in range(4)]
framed = [len(r).to_bytes(8, "little") + zstandard.ZstdCompressor(level=3).compress(r)
          for r in raw]
bad = []
def work(k):
    for i in range(60):
        j = (k + i) % 4
        try:
            if general.decompress_buffer(framed[j], "zstd").tobytes() != raw[j]:
                bad.append(("decompress", j))
            if i % 6 == 0:
                back = general.compress_buffer(raw[j], "zstd", 3)
                if zstandard.ZstdDecompressor().decompress(back[8:]) != raw[j]:
                    bad.append(("compress", j))
        except Exception as exc:
            bad.append(repr(exc))
threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
for t in threads: t.start()
for t in threads: t.join()
print("bad", len(bad), bad[:3])
"""


def test_zstd_from_two_threads_at_once():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", _HAMMER], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, f"the child died ({out.returncode}): {out.stderr[-2000:]}"
    assert out.stdout.split()[:2] == ["bad", "0"], out.stdout


def test_pylance_zstd_columns_read_in_parallel(tmp_path):
    """A dataset pylance wrote with zstd-compressed columns (``lance-encoding:compression``),
    read by the decode pool (its columns decode on different threads at once), equals what
    pylance reads, every time."""
    rng = np.random.default_rng(3)
    n = 600_000
    md = {"lance-encoding:compression": "zstd"}
    fields = [pa.field(f"c{i}", pa.int64(), metadata=md) for i in range(4)]
    fields.append(pa.field("s", pa.string(), metadata=md))
    cols = [pa.array(rng.integers(0, 1 << 40, n)) for _ in range(4)]
    cols.append(pa.array([f"row {i % 977} text" for i in range(n)]))
    uri = str(tmp_path / "zstd")
    lance.write_dataset(
        pa.Table.from_arrays(cols, schema=pa.schema(fields)), uri, data_storage_version="2.1"
    )
    expected = lance.dataset(uri).to_table()
    ours = dataset(uri)
    encodings = str(ours.get_fragments()[0].readers()[0].page_encodings())
    assert "General[zstd]" in encodings  # the pages really are zstd-compressed
    for _ in range(8):
        assert ours.to_table().equals(expected)


def test_a_kept_compressor_writes_what_a_new_one_writes():
    """Compressors are kept per thread and level: each buffer's frame is the same as a fresh
    compressor's (the zstd library's one-shot output), whatever came before it."""
    rng = np.random.default_rng(11)
    bufs = [rng.integers(0, k, 5000).astype(np.uint8).tobytes() for k in (2, 40, 256)]
    for level in (None, 1, 3, 9):
        for buf in bufs + bufs[::-1]:
            want = zstandard.ZstdCompressor(level=level if level else 3).compress(buf)
            got = general.compress_buffer(buf, "zstd", level)
            assert got == len(buf).to_bytes(8, "little") + want


def test_each_thread_has_its_own_contexts():
    seen: list[tuple[object, object]] = []  # the contexts themselves: ids could be reused

    def grab() -> None:
        seen.append((general._zstd.decompressor, general._zstd.compressor(3)))

    threads = [threading.Thread(target=grab) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    grab()
    assert len({id(d) for d, _ in seen}) == 3 and len({id(c) for _, c in seen}) == 3
    assert general._zstd.compressor(3) is seen[-1][1]  # kept, not made again
