"""The ``lance-flight`` command line: ``serve`` and ``inspect``."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

from lance_format import LanceError, LanceFileReader, dataset, layout

DESCRIPTION = """\
Serve Lance datasets over Arrow Flight and Flight SQL, or describe a Lance file or dataset.

  lance-flight serve ROOT        every dataset under ROOT, a directory or an object-store URI
  lance-flight inspect PATH      a data file (.lance) or a dataset directory

Run 'lance-flight serve --help' or 'lance-flight inspect --help' for the options."""


class HelpFormatter(argparse.HelpFormatter):
    """A description with line breaks keeps them (others are wrapped); every option with a
    meaningful default shows it (argparse's own defaults formatter also prints "(default:
    None)" for unset options)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "\n".join(indent + line for line in text.splitlines())
        return super()._fill_text(text, width, indent)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text  # the help says it already
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or default == []
            or not action.option_strings
        ):
            return action.help
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


def _inspect(args: argparse.Namespace) -> int:
    if os.path.isdir(args.path):
        return _inspect_dataset(args)
    if args.version is not None:
        print("error: --version applies to a dataset directory, not a file", file=sys.stderr)
        return 2
    return _inspect_file(args)


def _inspect_file(args: argparse.Namespace) -> int:
    reader = LanceFileReader(args.path)
    meta = reader.metadata
    print(f"file:     {args.path}")
    print(f"version:  {reader.version}")
    print(f"rows:     {reader.num_rows}")
    print(f"columns:  {len(meta.columns)}")
    _print_schema(reader.schema)
    print("encodings (per column: page count x encoding):")
    for i, (_, pages) in enumerate(reader.page_encodings()):
        kinds = Counter(pages)
        _print_encodings(f"col {i:3d}", kinds, args)
    if args.head:
        _print_head(reader.read_range(0, min(args.head, reader.num_rows)))
    return 0


def _inspect_dataset(args: argparse.Namespace) -> int:
    from .actions import describe_dataset

    if layout.latest_version(args.path) is None:
        inside = sorted(
            os.path.relpath(d, args.path)
            for d, subdirs, _ in os.walk(args.path)
            if "_versions" in subdirs
        )
        hint = f"; datasets under it: {', '.join(inside[:20])}" if inside else ""
        print(f"error: {args.path} is a directory but not a Lance dataset{hint}", file=sys.stderr)
        return 2
    version = args.version
    if version is not None and version.isdigit():
        version = int(version)
    ds = dataset(args.path, version)
    info = describe_dataset(ds)
    print(f"dataset:  {args.path}")
    print(f"version:  {info['version']} (latest {info['latest_version']})")
    print(f"versions: {_ranges(info['versions'])}")
    tags = ", ".join(f"{name}={t['version']}" for name, t in sorted(info["tags"].items()))
    print(f"tags:     {tags or '(none)'}")
    print(f"format:   {info['data_storage_version']}")
    print(f"rows:     {info['rows']}")
    print(f"bytes:    {info['bytes']}")
    print(f"fragments: {len(info['fragments'])}")
    for frag in info["fragments"][: args.max_fragments]:
        deleted = frag["physical_rows"] - frag["rows"]
        note = f" ({deleted} deleted)" if deleted else ""
        print(f"  #{frag['id']}: {frag['rows']} rows{note}, {len(frag['files'])} file(s)")
    if len(info["fragments"]) > args.max_fragments:
        print(f"  ... {len(info['fragments']) - args.max_fragments} more")
    _print_schema(ds.schema)
    print("encodings (per column: page count x encoding):")
    for name, kinds in info["encodings"].items():
        _print_encodings(name, Counter(kinds), args)
    if args.head:
        _print_head(ds.to_table(limit=args.head) if info["rows"] else ds.schema.empty_table())
    return 0


def _ranges(numbers: list[int]) -> str:
    """``1-4, 7`` for ``[1, 2, 3, 4, 7]``: a long history stays one line."""
    out: list[tuple[int, int]] = []
    for n in sorted(numbers):
        if out and out[-1][1] == n - 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def _print_schema(schema) -> None:
    print("schema:")
    for field in schema:
        print(f"  {field.name}: {field.type}{'' if field.nullable else ' not null'}")


def _print_encodings(label: str, kinds: Counter, args: argparse.Namespace) -> None:
    for text, count in kinds.most_common(args.max_encodings):
        shown = text if len(text) <= args.width else text[: args.width - 3] + "..."
        print(f"  {label}: {count} x {shown}")


def _print_head(table) -> None:
    try:
        import pandas  # noqa: F401
    except ImportError:
        print(table)
        return
    print(table.to_pandas().to_string())


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (the README test checks its examples' flags against it)."""
    from .serve import add_serve_arguments, serve

    parser = argparse.ArgumentParser(
        prog="lance-flight", description=DESCRIPTION, formatter_class=HelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{serve,inspect}")
    s = sub.add_parser(
        "serve",
        help="serve the Lance datasets under ROOT over Arrow Flight and Flight SQL",
        description="Serve every Lance dataset under ROOT (a directory or an object-store URI) "
        "over Arrow Flight and Flight SQL, and with --rest-port the Lance Namespace REST API "
        "(a dataset's name is its path under ROOT, e.g. tpch/lineitem).",
        formatter_class=HelpFormatter,
    )
    add_serve_arguments(s)
    s.set_defaults(func=serve)
    p = sub.add_parser(
        "inspect",
        help="describe a Lance data file or dataset directory",
        description="Describe a Lance data file (version, rows, schema, encoding of every "
        "page) or a dataset directory (versions, tags, rows, fragments, schema, encodings).",
        formatter_class=HelpFormatter,
    )
    p.add_argument("path", help="a .lance data file or a dataset directory")
    p.add_argument("--version", help="dataset version number or tag (default: the latest)")
    p.add_argument("--head", type=int, default=5, help="print the first N rows (0: none)")
    p.add_argument("--width", type=int, default=160, help="truncate encodings to this width")
    p.add_argument(
        "--max-encodings", type=int, default=3, help="encodings shown per column (most used)"
    )
    p.add_argument("--max-fragments", type=int, default=20, help="fragments listed")
    p.set_defaults(func=_inspect)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (LanceError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
