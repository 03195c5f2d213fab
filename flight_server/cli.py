"""The ``lance-flight`` command line.

``serve ROOT`` runs the Flight server over every dataset under ROOT (``--workers N``: N
processes, one core each, on consecutive ports; endpoints are spread over all of them).
``inspect`` prints what a Lance data file holds: version, rows, schema and the encoding of
every page.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from lance_format import LanceError, LanceFileReader
from lance_format.container.describe import describe


def _inspect(args: argparse.Namespace) -> int:
    reader = LanceFileReader(args.path)
    meta = reader.metadata
    print(f"file:     {args.path}")
    print(f"version:  {reader.version}")
    print(f"rows:     {reader.num_rows}")
    print(f"columns:  {len(meta.columns)}")
    print("schema:")
    for field in reader.schema:
        print(f"  {field.name}: {field.type}{'' if field.nullable else ' not null'}")
    print("encodings (per column: page count x encoding):")
    for i, col in enumerate(meta.columns):
        kinds = Counter(describe(p.encoding) for p in col.pages)
        for text, count in kinds.most_common(args.max_encodings):
            shown = text if len(text) <= args.width else text[: args.width - 3] + "..."
            print(f"  col {i:3d}: {count} x {shown}")
    if args.head:
        print(
            reader.read_range(0, args.head).to_pandas().to_string()
            if _has_pandas()
            else reader.read_range(0, args.head)
        )
    return 0


def _has_pandas() -> bool:
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lance-flight", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    from .serve import add_serve_arguments, serve

    s = sub.add_parser("serve", help="serve the Lance datasets under ROOT over Arrow Flight")
    add_serve_arguments(s)
    s.set_defaults(func=serve)
    p = sub.add_parser("inspect", help="describe a Lance data file")
    p.add_argument("path")
    p.add_argument("--head", type=int, default=5, help="print the first N rows (0: none)")
    p.add_argument("--width", type=int, default=160, help="truncate encodings to this width")
    p.add_argument("--max-encodings", type=int, default=3)
    p.set_defaults(func=_inspect)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except LanceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
