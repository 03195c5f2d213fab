#!/usr/bin/env python
"""Exact vector search benchmark: our ``to_table(nearest=...)`` against pylance's, in one run.

Data: seeded float32 vectors (standard normal), written once by pylance into --data-dir:
200k x 768 and 1M x 128 by default, ``--quick`` for 20k x 768 and 100k x 128.  For each
dataset and metric (l2, cosine, dot), --queries query vectors are searched with k=10,
``use_index=False`` (exact); each side is warmed up once, then timed alternately, best of --repeat per query,
summed over the queries.  The top-k row ids are compared as a sanity check.
With ``--build``, IVF_FLAT and IVF_PQ index builds (the same parameters) are timed on a copy
of each dataset, ours then pylance's (``--build-only`` skips the searches).
With ``--ivf-pq``, an IVF_PQ index (built once by pylance on a copy of each dataset) is also
searched with k=10, nprobes=20 by both sides.
Ratios are ours/pylance latency: below 1 means we are faster.

Example (smoke):  python scripts/bench_vector.py --quick --repeat 1
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

FULL = [(200_000, 768), (1_000_000, 128)]
QUICK = [(20_000, 768), (100_000, 128)]
ROWS_PER_WRITE = 50_000  # generated and written in slices: bounded memory


def make_dataset(data_dir: str, n: int, dim: int) -> str:
    import lance

    path = os.path.join(data_dir, f"vectors_{n}x{dim}.lance")
    if os.path.isdir(path):
        return path
    rng = np.random.default_rng(n * 1000 + dim)
    schema = pa.schema([("id", pa.int64()), ("vec", pa.list_(pa.float32(), dim))])

    def batches():
        for start in range(0, n, ROWS_PER_WRITE):
            rows = min(ROWS_PER_WRITE, n - start)
            values = rng.standard_normal(rows * dim, dtype=np.float32)
            yield pa.record_batch(
                [
                    pa.array(np.arange(start, start + rows, dtype=np.int64)),
                    pa.FixedSizeListArray.from_arrays(pa.array(values), dim),
                ],
                schema=schema,
            )

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    lance.write_dataset(reader, path + ".tmp", schema=schema)
    os.rename(path + ".tmp", path)
    return path


def best(ds, kw: dict, repeat: int) -> tuple[float, pa.Table]:
    """The best time of ``repeat`` searches and the result."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = ds.to_table(**kw)
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20k x 768 and 100k x 128")
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "bench_vector"))
    ap.add_argument("--queries", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--metrics", default="l2,cosine,dot")
    ap.add_argument("--ivf-pq", action="store_true", help="also time an IVF_PQ index search")
    ap.add_argument("--build", action="store_true", help="also time index builds")
    ap.add_argument("--build-only", action="store_true", help="time index builds only")
    ap.add_argument("--sizes", help="datasets as NxDIM,NxDIM (overrides the defaults)")
    args = ap.parse_args()

    import lance

    from lance_format import dataset as open_dataset

    os.makedirs(args.data_dir, exist_ok=True)
    print(f"{'dataset':>16} {'metric':>7} {'ours s':>9} {'pylance s':>10} {'ratio':>7}  same top-k")
    sizes = QUICK if args.quick else FULL
    if args.sizes:
        sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    for n, dim in sizes:
        path = make_dataset(args.data_dir, n, dim)
        if args.build or args.build_only:
            bench_build(path, n, dim)
        if args.build_only:
            continue
        theirs, ours = lance.dataset(path), open_dataset(path)
        queries = np.random.default_rng(dim).standard_normal((args.queries, dim), np.float32)
        warm = {"column": "vec", "q": queries[0], "k": 10, "use_index": False}
        ours.to_table(columns=["id"], nearest=warm)  # both sides start with warm page caches
        theirs.to_table(columns=["id"], nearest=warm)
        for metric in args.metrics.split(","):
            t_ours = t_theirs = 0.0
            same = True
            for q in queries:
                nearest = {"column": "vec", "q": q, "k": 10, "metric": metric, "use_index": False}
                kw = {"columns": ["id"], "nearest": nearest}
                dt, got = best(ours, kw, args.repeat)
                t_ours += dt
                dt, want = best(theirs, kw, args.repeat)
                t_theirs += dt
                same &= got["id"].to_pylist() == want["id"].to_pylist()
            print(
                f"{f'{n}x{dim}':>16} {metric:>7} {t_ours:9.3f} {t_theirs:10.3f} "
                f"{t_ours / t_theirs:7.2f}  {same}"
            )
        if args.ivf_pq:
            bench_ivf_pq(path, n, dim, queries, args.repeat)


def bench_build(path: str, n: int, dim: int) -> None:
    """Index build time, ours and pylance's, on one copy of ``path`` (replacing the index)."""
    import shutil

    import lance

    from lance_format import dataset as open_dataset

    copy = path.replace(".lance", "_build.lance")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(path, copy)
    parts = max(16, int(np.sqrt(n)))
    for index_type, extra in (("IVF_FLAT", {}), ("IVF_PQ", {"num_sub_vectors": dim // 8})):
        kw = {"num_partitions": parts, "replace": True, **extra}
        t0 = time.perf_counter()
        open_dataset(copy).create_index("vec", index_type, **kw)
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        lance.dataset(copy).create_index("vec", index_type, **kw)
        t_theirs = time.perf_counter() - t0
        print(
            f"{f'{n}x{dim}':>16} {index_type.lower():>8} build {t_ours:9.3f} {t_theirs:10.3f} "
            f"{t_ours / t_theirs:7.2f}"
        )
    shutil.rmtree(copy, ignore_errors=True)


def bench_ivf_pq(path: str, n: int, dim: int, queries: np.ndarray, repeat: int) -> None:
    """IVF_PQ search (k=10, nprobes=20) over a pylance-built index on a copy of ``path``."""
    import shutil

    import lance

    from lance_format import dataset as open_dataset

    indexed = path.replace(".lance", "_ivfpq.lance")
    if not os.path.isdir(indexed):
        shutil.copytree(path, indexed + ".tmp")
        t0 = time.perf_counter()
        lance.dataset(indexed + ".tmp").create_index(
            "vec", "IVF_PQ", num_partitions=max(16, int(np.sqrt(n))), num_sub_vectors=dim // 8
        )
        print(f"{f'{n}x{dim}':>16} pylance IVF_PQ build {time.perf_counter() - t0:.1f} s")
        os.rename(indexed + ".tmp", indexed)
    theirs, ours = lance.dataset(indexed), open_dataset(indexed)
    t_ours = t_theirs = 0.0
    agree = total = 0
    for q in queries:
        kw = {"columns": ["id"], "nearest": {"column": "vec", "q": q, "k": 10, "nprobes": 20}}
        ours.to_table(**kw)
        theirs.to_table(**kw)
        dt, got = best(ours, kw, repeat)
        t_ours += dt
        dt, want = best(theirs, kw, repeat)
        t_theirs += dt
        agree += len(set(got["id"].to_pylist()) & set(want["id"].to_pylist()))
        total += len(want)
    print(
        f"{f'{n}x{dim}':>16} {'ivf_pq':>7} {t_ours:9.3f} {t_theirs:10.3f} "
        f"{t_ours / t_theirs:7.2f}  top-k agreement {agree}/{total}"
    )


if __name__ == "__main__":
    main()
