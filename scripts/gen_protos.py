"""Generate the Python protobuf modules from protos/*.proto: the format's in lance_format/pb/,
the service's (Flight SQL) in flight_server/sql/.

Uses grpc_tools' bundled protoc so the output does not depend on a system protoc.
protoc emits top-level imports between generated modules (``import file_pb2``); they are
rewritten to package-relative imports so the modules live inside ``lance_format.pb``.

Usage:
    python scripts/gen_protos.py           # regenerate lance_format/pb/
    python scripts/gen_protos.py --check   # exit 1 if the committed modules are stale
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos"
OUT_DIR = ROOT / "lance_format" / "pb"
# the service's wire protocol, not the format's: generated next to the code that speaks it
SERVICE_DIR = ROOT / "flight_server" / "sql"
SERVICE_MODULES = {"flight_sql_pb2"}

INIT_TEXT = '''"""Generated protobuf modules for the Lance file and table formats.

Do not edit the *_pb2 files by hand: change protos/*.proto and run scripts/gen_protos.py.

Modules: file_pb2 (lance.file), file2_pb2 (lance.file.v2), encodings_v2_0_pb2
(lance.encodings), encodings_v2_1_pb2 (lance.encodings21), table_pb2, transaction_pb2 and
rowids_pb2 (lance.table); index_pb2 (lance.index.pb, vector index metadata).
"""
'''

# Modules whose descriptors go into a private pool instead of the default one: Flight SQL's
# message names are shared with other libraries (flightsql-dbapi registers the same names in
# the default pool), and two registrations of one name in a pool are an import error.
PRIVATE_POOL = {"flight_sql_pb2.py"}
_DEFAULT_POOL = "DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile("
_PRIVATE_POOL = "DESCRIPTOR = _descriptor_pool.DescriptorPool().AddSerializedFile("

# `import foo_pb2 as foo__pb2` (.py) and `import foo_pb2 as _foo_pb2` (.pyi), at line start.
_IMPORT_RE = re.compile(r"^import (\w+_pb2)( as \w+)?$", re.MULTILINE)


def _local_modules() -> set[str]:
    return {p.stem + "_pb2" for p in PROTO_DIR.glob("*.proto")}


def _rewrite_imports(text: str, local: set[str]) -> str:
    """Turn imports of our own generated modules into package-relative imports."""

    def repl(m: re.Match[str]) -> str:
        if m.group(1) not in local:
            return m.group(0)
        return f"from . import {m.group(1)}{m.group(2) or ''}"

    return _IMPORT_RE.sub(repl, text)


def _destination(name: str, out_dir: Path, service_dir: Path) -> Path:
    module = name.split(".", 1)[0]
    return service_dir if module in SERVICE_MODULES else out_dir


def generate(out_dir: Path, service_dir: Path = SERVICE_DIR) -> None:
    """Run protoc over every proto in protos/ and write the fixed-up modules to out_dir (the
    service's to service_dir)."""
    import grpc_tools

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(p.name for p in PROTO_DIR.glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files in {PROTO_DIR}")
    with tempfile.TemporaryDirectory() as raw:
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"-I{well_known}",
            f"--python_out={raw}",
            f"--pyi_out={raw}",
            *protos,
        ]
        subprocess.run(cmd, check=True, cwd=PROTO_DIR)
        local = _local_modules()
        out_dir.mkdir(parents=True, exist_ok=True)
        service_dir.mkdir(parents=True, exist_ok=True)
        for src in sorted(Path(raw).iterdir()):
            text = src.read_text(encoding="utf-8")
            if src.name in PRIVATE_POOL:
                text = text.replace(_DEFAULT_POOL, _PRIVATE_POOL)
            target = _destination(src.name, out_dir, service_dir) / src.name
            target.write_text(_rewrite_imports(text, local), encoding="utf-8")
    (out_dir / "__init__.py").write_text(INIT_TEXT, encoding="utf-8")


def _generated_files(directory: Path, service: bool = False) -> set[str]:
    if not directory.is_dir():
        return set()
    if service:  # only our generated modules: the package's own code lives there too
        return {p.name for p in directory.iterdir() if p.name.split(".", 1)[0] in SERVICE_MODULES}
    return {
        p.name
        for p in directory.iterdir()
        if p.is_file() and (p.name == "__init__.py" or p.name.endswith(("_pb2.py", "_pb2.pyi")))
    }


def check(out_dir: Path = OUT_DIR, service_dir: Path = SERVICE_DIR) -> list[str]:
    """Return the names of committed files that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh, fresh_service = Path(tmp) / "pb", Path(tmp) / "sql"
        generate(fresh, fresh_service)
        stale = []
        for new, old, service in ((fresh, out_dir, False), (fresh_service, service_dir, True)):
            want, have = _generated_files(new, service), _generated_files(old, service)
            stale += sorted(want ^ have)
            for name in sorted(want & have):
                if not filecmp.cmp(new / name, old / name, shallow=False):
                    stale.append(name)
        return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale modules")
    args = parser.parse_args(argv)
    if args.check:
        stale = check()
        if stale:
            print("stale generated protobuf modules: " + ", ".join(stale), file=sys.stderr)
            print("run: python scripts/gen_protos.py", file=sys.stderr)
            return 1
        print("generated protobuf modules are up to date")
        return 0
    # Remove old generated files first so a deleted .proto leaves nothing behind.
    if OUT_DIR.is_dir():
        for name in _generated_files(OUT_DIR):
            (OUT_DIR / name).unlink()
        cache = OUT_DIR / "__pycache__"
        if cache.is_dir():
            shutil.rmtree(cache)
    for name in _generated_files(SERVICE_DIR, service=True):
        (SERVICE_DIR / name).unlink()
    generate(OUT_DIR, SERVICE_DIR)
    for directory, service in ((OUT_DIR, False), (SERVICE_DIR, True)):
        count = len(_generated_files(directory, service))
        print(f"wrote {count} files to {directory.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
