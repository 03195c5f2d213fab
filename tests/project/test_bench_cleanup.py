"""A benchmark run leaves nothing behind in the temporary directory: bench_write wrote over a
gigabyte per SF1 run and kept it (33 runs had filled 43 GB of a developer's disk)."""

from __future__ import annotations

import os
import subprocess
import sys

from repo_paths import REPO


def test_bench_write_removes_what_it_wrote(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cmd = [sys.executable, str(REPO / "scripts" / "bench_write.py")]
    cmd += ["--tables", "flights", "--version", "2.2", "--repeat", "1"]
    cmd += ["--data-dir", str(tmp_path / "data")]
    env = {**os.environ, "TMPDIR": str(tmp)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    # it did write and compare both files (their readback line), then removed them
    assert "flights" in out.stdout and "2.2" in out.stdout
    assert "pylance" in out.stdout
    assert list(tmp.iterdir()) == []
