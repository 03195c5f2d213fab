#!/usr/bin/env python
"""Memory benchmark: server RSS while a client streams TPC-H ``lineitem`` (--scale, default
10) through do_get, ours against the pylance-wrapping server, in one run.

Data (generated once into --data-dir, then reused; shared with bench_sql.py): lineitem at
--scale as Parquet with ``tpchgen-cli``, written as a Lance dataset with pylance.

Servers (each its own process on 127.0.0.1, started fresh):
* ``ours``: ``lance-flight serve`` with a decoded-page cache of --page-cache-bytes;
* ``pylance``: the pyarrow.flight server of bench_flight.py that wraps pylance (one endpoint
  per fragment, ``fragment.to_batches()`` streamed).

One client reads every endpoint in order, --passes times (the first pass is cold; a page is
admitted to our cache on its second read, so the second pass fills it to its bound).
Printed per pass: seconds, GB/s of Arrow data received, the server's RSS sampled every
20 ms (peak above the RSS at start, and absolute), and for ours the page cache's bytes
against its capacity (from the ``cache_stats`` action).  The issue's target: our peak RSS
under 1 GB, the page cache never above its capacity.

Example (smoke):  python scripts/bench_memory.py --scale 0.1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import pyarrow.flight as fl

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "scripts"))

from bench_flight import read_all  # noqa: E402  (every endpoint in order, bytes received)

NAME = "tpch/lineitem"  # the dataset's name under bench_sql's root


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory (``VmRSS``) or its peak (``VmHWM``), in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Sampler:
    """The highest RSS of a process seen while running, polled every ``interval`` s."""

    def __init__(self, pid: int, interval: float = 0.02):
        self.pid, self.interval = pid, interval
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb(self.pid))


def start(kind: str, root: str, page_cache: str) -> tuple[subprocess.Popen, str]:
    if kind == "ours":
        cmd = [sys.executable, "-m", "flight_server.cli", "serve", root, "--port", "0"]
        cmd += ["--log-level", "WARNING", "--page-cache-bytes", page_cache]
    else:
        bench = os.path.join(REPO, "scripts", "bench_flight.py")
        cmd = [sys.executable, bench, "--serve", "pylance", "--root", root, "--names", NAME]
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO, env=env)
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"{kind} server did not start")
    return proc, line.split()[-1]


def page_cache_stats(location: str) -> dict:
    c = fl.connect(location)
    (result,) = list(c.do_action(fl.Action("cache_stats", b"")))
    c.close()
    return json.loads(result.body.to_pybytes())["pages"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--scale", type=float, default=10.0)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--page-cache-bytes", default="256M", help="our decoded-page cache")
    p.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "bench-data"))
    args = p.parse_args()

    import lance
    from bench_sql import prepare

    root = prepare(args.data_dir, args.scale)
    rows = lance.dataset(os.path.join(root, NAME)).count_rows()
    print(f"lineitem SF{args.scale:g}: {rows:,} rows; our page cache {args.page_cache_bytes}")
    header = (
        f"{'server':8} {'pass':>4} {'s':>7} {'GB/s':>6} {'RSS start':>10} {'peak':>8} "
        f"{'peak-start':>11}  page cache"
    )
    print(header)
    print("-" * len(header))
    peaks = {}
    for kind in ("ours", "pylance"):
        proc, loc = start(kind, root, args.page_cache_bytes)
        try:
            base = rss_mb(proc.pid)
            for i in range(args.passes):
                with Sampler(proc.pid) as s:
                    t0 = time.perf_counter()
                    nbytes = read_all(loc, NAME)
                    dt = time.perf_counter() - t0
                cache = ""
                if kind == "ours":
                    st = page_cache_stats(loc)
                    cache = f"{st['bytes'] / 2**20:.0f} of {st['capacity_bytes'] / 2**20:.0f} MB"
                peaks[kind] = max(peaks.get(kind, 0.0), s.peak)
                print(
                    f"{kind:8} {i + 1:4} {dt:7.1f} {nbytes / dt / 1e9:6.3f} {base:8.0f}MB "
                    f"{s.peak:6.0f}MB {s.peak - base:9.0f}MB  {cache}",
                    flush=True,
                )
            print(f"{kind:8} peak RSS (VmHWM) {rss_mb(proc.pid, 'VmHWM'):.0f} MB", flush=True)
        finally:
            proc.terminate()
            proc.wait()
    print(f"peak RSS ours/pylance: {peaks['ours'] / peaks['pylance']:.2f}x")


if __name__ == "__main__":
    main()
