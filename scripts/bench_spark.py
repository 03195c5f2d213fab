"""Spark reading TPC-H lineitem through the ``lance_flight`` data source vs from Parquet.

One run: generates (once, cached in ``--data-dir``) TPC-H lineitem as Parquet with
``tpchgen-cli`` and the same rows as a Lance dataset written by this project, starts a
lance-flight server on it, then times in one Spark session (best of ``--repeat``):

* ``count()``: Parquet; lance_flight with every column travelling (Python data sources get
  no projection pushdown); lance_flight narrowed to one column with ``.option("columns")``;
* TPC-H Q6 (revenue of 1994 shipments with a 5-7 % discount and fewer than 24 items):
  Parquet; lance_flight with Q6's filters run by Spark (the source pushes none: all rows
  and columns travel); lance_flight with ``.option("columns")`` naming Q6's 4 columns; the
  same with Q6's predicate also given as the ``filter`` option (run by the server).

Every timed query loads its DataFrame afresh (planning included, as a job would) and the Q6
revenues are checked equal.  Ratios are lance_flight time / Parquet time (lower is better).

    python scripts/bench_spark.py --scale 1          # TPC-H SF1 (6M rows)
    python scripts/bench_spark.py --scale 0.1 --repeat 2
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(SCRIPTS)
for path in (REPO, SCRIPTS):
    if path not in sys.path:
        sys.path.insert(0, path)

from bench_read import lineitem_parquet  # noqa: E402
from pipeline import local_server, spark_session  # noqa: E402

Q6_COLUMNS = "l_shipdate,l_discount,l_quantity,l_extendedprice"
Q6_FILTER = (
    "l_shipdate >= date '1994-01-01' AND l_shipdate < date '1995-01-01' "
    "AND l_discount >= 0.05 AND l_discount <= 0.07 AND l_quantity < 24"
)


def lineitem_dataset(root: str, parquet: str, name: str) -> None:
    """The Parquet rows as a Lance dataset under ``root`` (written once, by this project)."""
    from lance_format import write_dataset

    uri = os.path.join(root, name)
    if os.path.isdir(os.path.join(uri, "_versions")):
        return
    pf = pq.ParquetFile(parquet)
    plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    schema = pa.schema(
        [pa.field(f.name, plain.get(f.type, f.type), f.nullable) for f in pf.schema_arrow]
    )
    batches = (b.cast(schema) for b in pf.iter_batches(batch_size=64 * 1024))
    print(f"  writing the Lance dataset {uri}", flush=True)
    write_dataset(pa.RecordBatchReader.from_batches(schema, batches), uri)


def q6(df):
    from pyspark.sql import functions as F

    shipdate, discount, quantity = F.col("l_shipdate"), F.col("l_discount"), F.col("l_quantity")
    return df.filter(
        (shipdate >= F.lit(dt.date(1994, 1, 1)))
        & (shipdate < F.lit(dt.date(1995, 1, 1)))
        & (discount >= F.lit(Decimal("0.05")))
        & (discount <= F.lit(Decimal("0.07")))
        & (quantity < F.lit(Decimal("24")))
    ).agg(F.sum(F.col("l_extendedprice") * discount).alias("revenue"))


def best_of(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, value = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - started)
    return best, value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (default 1)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per query (best is kept)")
    ap.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    ap.add_argument("--split-rows", type=int, help="rows per Flight endpoint (server default)")
    ap.add_argument(
        "--data-dir",
        default=os.environ.get("LANCE_BENCH_DIR", os.path.join(REPO, "bench-data")),
        help="where the generated Parquet and Lance data are cached",
    )
    args = ap.parse_args(argv)

    parquet = os.path.abspath(lineitem_parquet(args.data_dir, args.scale))
    root = os.path.abspath(os.path.join(args.data_dir, "spark_root"))
    name = f"tpch/lineitem_sf{args.scale:g}"
    lineitem_dataset(root, parquet, name)
    rows = pq.ParquetFile(parquet).metadata.num_rows
    print(f"lineitem SF{args.scale:g}: {rows:,} rows; Parquet {parquet}; Lance {root}/{name}")

    with local_server(root) as uri:
        spark = spark_session(args.master, "lance-flight bench_spark")
        try:
            from flight_server.spark import register

            register(spark)
            extra = {"split_rows": str(args.split_rows)} if args.split_rows else {}

            def flight(**options):
                reader = spark.read.format("lance_flight").option("uri", uri)
                return reader.options(**extra, **options).load(name)

            def parquet_df():
                return spark.read.parquet(parquet)

            partitions = flight().rdd.getNumPartitions()
            print(f"server {uri}; {partitions} Flight endpoints; Spark master {args.master}")
            plan = q6(flight())._jdf.queryExecution().executedPlan().toString()
            kept = [line.strip() for line in plan.splitlines() if " Filter " in f" {line} "]
            print(f"Q6 filters run by Spark: {kept or 'none'}")

            cases = [
                ("count", "parquet", lambda: parquet_df().count()),
                ("count", "lance_flight (all columns)", lambda: flight().count()),
                ("count", "lance_flight (1 column)", lambda: flight(columns="l_orderkey").count()),
                ("q6", "parquet", lambda: q6(parquet_df()).collect()[0][0]),
                ("q6", "lance_flight (all columns)", lambda: q6(flight()).collect()[0][0]),
                (
                    "q6",
                    "lance_flight (4 columns)",
                    lambda: q6(flight(columns=Q6_COLUMNS)).collect()[0][0],
                ),
                (
                    "q6",
                    "lance_flight (4 columns + filter)",
                    lambda: q6(flight(columns=Q6_COLUMNS, filter=Q6_FILTER)).collect()[0][0],
                ),
            ]
            results: list[tuple[str, str, float, object]] = []
            for query, source, fn in cases:
                fn()  # warm-up: JIT, Python workers, server cache
                seconds, value = best_of(fn, args.repeat)
                results.append((query, source, seconds, value))
                print(f"  {query:<6} {source:<34} {seconds:8.3f} s   -> {value}", flush=True)
        finally:
            spark.stop()

    print()
    print(f"{'query':<6} {'source':<34} {'best s':>8} {'x parquet':>10}")
    base = {q: s for q, src, s, _ in results if src == "parquet"}
    for query, source, seconds, _ in results:
        print(f"{query:<6} {source:<34} {seconds:8.3f} {seconds / base[query]:9.2f}x")
    counts = {v for q, _, _, v in results if q == "count"}
    revenues = {v for q, _, _, v in results if q == "q6"}
    ok = counts == {rows} and len(revenues) == 1
    print(f"results agree: {ok} (count {sorted(counts)}, Q6 revenue {sorted(revenues)})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
