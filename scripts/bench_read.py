#!/usr/bin/env python
"""Read benchmark: our LanceFileReader against pylance on the same files, in one run.

Datasets (generated once into --data-dir, then reused):
  * TPC-H ``lineitem`` at --scale, generated as parquet with ``tpchgen-cli`` and written to a
    .lance file with pylance for each --version;
  * a table of 768-dim float32 vectors (200k rows at scale >= 1; see --vector-rows).

Workloads per file: full scan, 3-column projection, take of 1 row (p50 over --take-runs random
rows, warm reader) and take of 1,000 random rows.  Printed ratios are ours/pylance: for
throughput > 1 means we are faster, for latency < 1 means we are faster.  Every part is
guarded: a failure prints its error and the run goes on.

Example (smoke):  python scripts/bench_read.py --scale 0.01 --repeat 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

LINEITEM_PROJECTION = ["l_orderkey", "l_extendedprice", "l_shipdate"]
VECTOR_PROJECTION = ["id", "label", "vector"]
VECTOR_DIM = 768


# --------------------------------------------------------------------------------------------
# Data preparation
# --------------------------------------------------------------------------------------------


def _tpchgen() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "tpchgen-cli")
    return exe if os.path.exists(exe) else (shutil.which("tpchgen-cli") or "tpchgen-cli")


def lineitem_parquet(data_dir: str, scale: float) -> str:
    out_dir = os.path.join(data_dir, f"tpch_sf{scale:g}")
    path = os.path.join(out_dir, "lineitem.parquet")
    if not os.path.exists(path):
        os.makedirs(out_dir, exist_ok=True)
        cmd = [_tpchgen(), "parquet", "-s", f"{scale:g}", "--tables=lineitem", "-o", out_dir]
        print(f"  generating: {' '.join(cmd)}", flush=True)
        subprocess.run(cmd, check=True)
    if not os.path.exists(path):
        raise FileNotFoundError(f"tpchgen-cli did not produce {path}")
    return path


def _plain_schema(schema: pa.Schema) -> pa.Schema:
    """Drop parquet field ids and map view types to the types Lance stores."""
    fields = []
    for f in schema:
        t = f.type
        if t == pa.string_view():
            t = pa.string()
        elif t == pa.binary_view():
            t = pa.binary()
        fields.append(pa.field(f.name, t, f.nullable))
    return pa.schema(fields)


def write_lance(path: str, batches: Callable[[], object], schema: pa.Schema, version: str) -> str:
    import lance.file

    if os.path.exists(path):
        return path
    tmp = path + ".tmp"
    with lance.file.LanceFileWriter(tmp, schema, version=version) as w:
        for b in batches():
            w.write_batch(b)
    os.replace(tmp, path)
    return path


def lineitem_lance(data_dir: str, scale: float, version: str) -> str:
    path = os.path.join(data_dir, f"lineitem_sf{scale:g}_v{version}.lance")
    if os.path.exists(path):
        return path
    pf = pq.ParquetFile(lineitem_parquet(data_dir, scale))
    schema = _plain_schema(pf.schema_arrow)

    def batches():
        for b in pf.iter_batches(batch_size=100_000):
            yield pa.RecordBatch.from_arrays(
                [c.cast(f.type) for c, f in zip(b.columns, schema, strict=True)], schema=schema
            )

    print(f"  writing {path}", flush=True)
    return write_lance(path, batches, schema, version)


def vectors_lance(data_dir: str, rows: int, version: str) -> str:
    path = os.path.join(data_dir, f"vectors_{rows}x{VECTOR_DIM}_v{version}.lance")
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("label", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), VECTOR_DIM)),
        ]
    )

    def batches():
        rng = np.random.default_rng(42)
        for start in range(0, rows, 10_000):
            n = min(10_000, rows - start)
            vals = rng.standard_normal(n * VECTOR_DIM, dtype=np.float32)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(np.arange(start, start + n)),
                    pa.array([f"label-{i % 100}" for i in range(start, start + n)]),
                    pa.FixedSizeListArray.from_arrays(pa.array(vals), VECTOR_DIM),
                ],
                schema=schema,
            )

    if not os.path.exists(path):
        print(f"  writing {path}", flush=True)
    return write_lance(path, batches, schema, version)


# --------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------


@dataclass
class Result:
    dataset: str
    workload: str
    ours: float | None  # seconds (best of repeats, or p50 for 1-row take)
    theirs: float | None
    nbytes: int | None = None  # Arrow bytes produced, for throughput
    error: str | None = None


def best_of(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def p50(fn: Callable[[int], object], rows: list[int]) -> float:
    times = []
    for r in rows:
        t0 = time.perf_counter()
        fn(r)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_file(name: str, path: str, projection: list[str], args) -> list[Result]:
    import lance.file

    results: list[Result] = []
    try:
        from lance_format import LanceFileReader, SearchCache
    except Exception as exc:  # report and still time pylance
        LanceFileReader = SearchCache = None  # noqa: N806
        ours_import_error = f"{type(exc).__name__}: {exc}"
    else:
        ours_import_error = None

    theirs_reader = lance.file.LanceFileReader(path)
    n = theirs_reader.num_rows()
    rng = np.random.default_rng(7)

    def run(workload: str, ours_fn, theirs_fn, kind: str = "best") -> None:
        res = Result(name, workload, None, None)
        errors = []
        for side, fn in (("pylance", theirs_fn), ("ours", ours_fn)):
            if side == "ours" and ours_import_error:
                errors.append(f"ours: {ours_import_error}")
                continue
            try:
                if kind == "best":
                    secs, out = best_of(fn, args.repeat)
                    if isinstance(out, pa.Table):
                        res.nbytes = out.nbytes
                else:
                    secs = fn()
                setattr(res, "ours" if side == "ours" else "theirs", secs)
            except Exception as exc:
                errors.append(f"{side}: {type(exc).__name__}: {exc}")
                if args.verbose:
                    traceback.print_exc()
        res.error = "; ".join(errors) or None
        results.append(res)
        print_result(res)

    def ours_reader():
        return LanceFileReader(path, cache=SearchCache(256 << 20))

    run(
        "full scan",
        lambda: ours_reader().read(),
        lambda: lance.file.LanceFileReader(path).read_all(batch_size=8192).to_table(),
    )
    run(
        f"projection {len(projection)} cols",
        lambda: ours_reader().read(columns=projection),
        lambda: (
            lance.file.LanceFileReader(path, columns=projection)
            .read_all(batch_size=8192)
            .to_table()
        ),
    )

    rows1 = rng.integers(0, n, args.take_runs).tolist()

    def ours_take1() -> float:
        r = ours_reader()
        r.warm()
        r.take([rows1[0]])
        return p50(lambda i: r.take([i]), rows1)

    def theirs_take1() -> float:
        theirs_reader.take_rows([rows1[0]]).to_table()
        return p50(lambda i: theirs_reader.take_rows([i]).to_table(), rows1)

    run(f"take 1 row (p50 of {args.take_runs})", ours_take1, theirs_take1, kind="p50")

    rows_k = sorted(rng.choice(n, min(n, 1000), replace=False).tolist())
    ours_warm: dict[str, object] = {}

    def ours_take_k():
        if "r" not in ours_warm:
            ours_warm["r"] = ours_reader()
            ours_warm["r"].warm()
        return ours_warm["r"].take(rows_k)

    run(
        f"take {len(rows_k)} rows",
        ours_take_k,
        lambda: theirs_reader.take_rows(rows_k, batch_size=8192).to_table(),
    )
    return results


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:9.2f} ms" if s < 10 else f"{s:9.2f} s "


def print_result(r: Result) -> None:
    """One line per workload: times, throughput ratio (>1: ours faster) and latency ratio
    (<1: ours faster), plus MB/s of Arrow data produced when known."""
    ratio = ""
    if r.ours and r.theirs:
        ratio = f"throughput x{r.theirs / r.ours:6.3f}  latency x{r.ours / r.theirs:7.2f}"
        if r.nbytes:
            ratio += f"  ({r.nbytes / r.ours / 1e6:7.1f} vs {r.nbytes / r.theirs / 1e6:7.1f} MB/s)"
    print(
        f"  {r.dataset:<22} {r.workload:<24} ours {_fmt_s(r.ours)}  pylance {_fmt_s(r.theirs)}  "
        f"{ratio}",
        flush=True,
    )
    if r.error:
        print(f"      error: {r.error}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (default 1)")
    ap.add_argument(
        "--version",
        default="2.2",
        help="Lance file version(s), comma separated, e.g. 2.2 or 2.1,2.2 (default 2.2)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs per scan/take-k (best is kept)")
    ap.add_argument(
        "--data-dir",
        default=os.environ.get("LANCE_BENCH_DIR", os.path.join(REPO, "bench-data")),
        help="where generated parquet/lance files are cached",
    )
    ap.add_argument(
        "--vector-rows",
        type=int,
        default=None,
        help="rows of the 768-dim vector table (default 200000 x min(scale, 1), at least 1000)",
    )
    ap.add_argument("--take-runs", type=int, default=50, help="random rows for the 1-row p50")
    ap.add_argument("--skip", default="", help="comma list of datasets to skip: lineitem,vectors")
    ap.add_argument("-v", "--verbose", action="store_true", help="print tracebacks")
    args = ap.parse_args(argv)

    os.makedirs(args.data_dir, exist_ok=True)
    versions = [v.strip() for v in args.version.split(",") if v.strip()]
    vector_rows = args.vector_rows or max(1000, int(200_000 * min(args.scale, 1.0)))
    skip = set(filter(None, args.skip.split(",")))
    print(
        f"bench_read: scale={args.scale:g} versions={versions} repeat={args.repeat} "
        f"vector_rows={vector_rows} data_dir={args.data_dir}",
        flush=True,
    )

    all_results: list[Result] = []
    for version in versions:
        datasets: list[tuple[str, Callable[[], str], list[str]]] = []
        if "lineitem" not in skip:
            datasets.append(
                (
                    f"lineitem sf{args.scale:g} v{version}",
                    lambda v=version: lineitem_lance(args.data_dir, args.scale, v),
                    LINEITEM_PROJECTION,
                )
            )
        if "vectors" not in skip:
            datasets.append(
                (
                    f"vectors {vector_rows // 1000}k v{version}",
                    lambda v=version: vectors_lance(args.data_dir, vector_rows, v),
                    VECTOR_PROJECTION,
                )
            )
        for name, prepare, projection in datasets:
            print(f"\n[{name}]", flush=True)
            try:
                path = prepare()
                size = os.path.getsize(path)
                print(f"  file {path} ({size / 1e6:.1f} MB)", flush=True)
                all_results += bench_file(name, path, projection, args)
            except Exception as exc:
                print(f"  FAILED to prepare or run {name}: {type(exc).__name__}: {exc}", flush=True)
                if args.verbose:
                    traceback.print_exc()

    ok = [r for r in all_results if r.ours and r.theirs]
    print(f"\nsummary: {len(ok)}/{len(all_results)} workloads measured on both readers")
    print("ratios are ours/pylance: throughput > 1 and latency < 1 mean ours is faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
