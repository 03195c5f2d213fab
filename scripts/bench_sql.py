#!/usr/bin/env python
"""Flight SQL benchmark: TPC-H Q1 and Q6 over lineitem through ADBC against our server, vs DuckDB
scanning the same dataset with pylance in-process, in one run.

Data (generated once into --data-dir, then reused): lineitem at --scale as Parquet with
``tpchgen-cli`` (shared with bench_read.py), written as a Lance dataset with pylance.

Contenders, per query (best and median of --repeat runs after one warm-up):
  * ``ours``: the ADBC Flight SQL driver (dbapi, results fetched as Arrow) against
    ``LanceFlightServer`` with Flight SQL on, in its own process on 127.0.0.1 (search cache
    warmed at start, as the CLI does; decoded-page cache of --page-cache-bytes): DuckDB
    plans, our scanner reads with projection and (selective) filter pushdown;
  * ``duckdb+pylance``: DuckDB in this process scanning ``lance.dataset(path)`` (a pyarrow
    Dataset, so DuckDB pushes projection and filters into pylance's scanner);
  * ``duckdb+to_table``: DuckDB over ``lance.dataset(path).to_table()``, loading included.

Ratios are ours / theirs in seconds (> 1: we are slower).  Results are checked equal.

Example:  python scripts/bench_sql.py --scale 0.1
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "scripts"))

QUERIES = {
    "Q1": """
SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty,
       sum(l_extendedprice) AS sum_base_price,
       sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
       sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge,
       avg(l_quantity) AS avg_qty, avg(l_extendedprice) AS avg_price,
       avg(l_discount) AS avg_disc, count(*) AS count_order
FROM lineitem
WHERE l_shipdate <= date '1998-12-01' - interval '90' day
GROUP BY l_returnflag, l_linestatus
ORDER BY l_returnflag, l_linestatus""",
    "Q6": """
SELECT sum(l_extendedprice * l_discount) AS revenue
FROM lineitem
WHERE l_shipdate >= date '1994-01-01' AND l_shipdate < date '1994-01-01' + interval '1' year
  AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01 AND l_quantity < 24""",
}


# -- server process --------------------------------------------------------------------------


def serve(root: str, threads: int, page_cache: str) -> None:
    """Run the Flight server (Flight SQL on) over ``root`` until stdin closes; print its port
    first."""
    from flight_server.server import LanceFlightServer
    from flight_server.sql.limits import SqlLimits

    limits = SqlLimits(threads=threads)
    server = LanceFlightServer(
        root,
        "grpc://127.0.0.1:0",
        sql=True,
        sql_limits=limits,
        page_cache_bytes=size_bytes(page_cache),
    )
    print(server.port, flush=True)
    sys.stdin.read()  # the parent closes stdin to stop us
    server.shutdown()
    server.sql.close()


def size_bytes(text: str) -> int:
    """``2G``, ``256M``, ``64k`` or a plain number of bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower()
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


# -- data ------------------------------------------------------------------------------------


def prepare(data_dir: str, scale: float) -> str:
    import lance
    import pyarrow.parquet as pq
    from bench_read import _plain_schema, lineitem_parquet

    parquet = lineitem_parquet(data_dir, scale)
    root = os.path.join(data_dir, f"sql_root_sf{scale:g}")
    path = os.path.join(root, "tpch", "lineitem")
    if not os.path.isdir(os.path.join(path, "_versions")):
        print(f"  writing {path} with pylance", flush=True)
        pf = pq.ParquetFile(parquet)
        schema = _plain_schema(pf.schema_arrow)
        batches = (b.cast(schema) for b in pf.iter_batches(batch_size=128 * 1024))
        import pyarrow as pa

        reader = pa.RecordBatchReader.from_batches(schema, batches)
        lance.write_dataset(reader, path, max_rows_per_file=1024 * 1024)
    return root


# -- timing ----------------------------------------------------------------------------------


def timed(fn, repeat: int) -> tuple[float, float, object]:
    result = fn()  # warm-up (caches, connections, page cache)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times), result


def same(a, b) -> bool:
    import math

    rows_a, rows_b = a.to_pylist(), b.to_pylist()
    if len(rows_a) != len(rows_b):
        return False
    for ra, rb in zip(rows_a, rows_b, strict=True):
        for k in ra:
            x, y = ra[k], rb[k]
            if isinstance(x, float) and isinstance(y, float):
                if not math.isclose(x, y, rel_tol=1e-9):
                    return False
            elif x != y:
                return False
    return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="DuckDB threads, both sides")
    p.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "bench-data"))
    p.add_argument(
        "--page-cache-bytes",
        default="2G",
        help="our server's decoded-page cache (as bench_flight.py; repeated queries are "
        "served from it when the columns they read fit; 0: off)",
    )
    p.add_argument("--serve", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve, args.threads, args.page_cache_bytes)
        return

    import adbc_driver_flightsql.dbapi as dbapi
    import duckdb
    import lance

    print(
        f"TPC-H SF{args.scale:g}, {args.repeat} runs after a warm-up, {args.threads} DuckDB "
        f"threads, our page cache {args.page_cache_bytes}"
    )
    root = prepare(args.data_dir, args.scale)
    path = os.path.join(root, "tpch", "lineitem")
    rows = lance.dataset(path).count_rows()
    print(f"lineitem: {rows:,} rows")

    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", root, "--threads", str(args.threads)]
        + ["--page-cache-bytes", args.page_cache_bytes],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(proc.stdout.readline())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            conn = dbapi.connect(f"grpc://127.0.0.1:{port}")
        cur = conn.cursor()

        def ours(sql):
            cur.execute(sql)
            return cur.fetch_arrow_table()

        def pushdown(sql):
            con = duckdb.connect(config={"threads": args.threads})
            con.register("lineitem", lance.dataset(path))
            out = con.sql(sql).to_arrow_table()
            con.close()
            return out

        def to_table(sql):
            con = duckdb.connect(config={"threads": args.threads})
            con.register("lineitem", lance.dataset(path).to_table())
            out = con.sql(sql).to_arrow_table()
            con.close()
            return out

        header = f"{'query':5} {'contender':18} {'best s':>8} {'median s':>9} {'ours/this':>10}"
        print(header)
        print("-" * len(header))
        for name, sql in QUERIES.items():
            best_ours, med_ours, res_ours = timed(lambda sql=sql: ours(sql), args.repeat)
            print(f"{name:5} {'ours (ADBC)':18} {best_ours:8.3f} {med_ours:9.3f} {'':>10}")
            for label, fn in (("duckdb+pylance", pushdown), ("duckdb+to_table", to_table)):
                best, med, res = timed(lambda fn=fn, sql=sql: fn(sql), args.repeat)
                ok = "" if same(res_ours, res) else "  RESULTS DIFFER"
                print(f"{name:5} {label:18} {best:8.3f} {med:9.3f} {best_ours / best:10.2f}{ok}")
        cur.close()
        conn.close()
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
