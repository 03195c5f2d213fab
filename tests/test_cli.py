"""The ``lance-flight inspect`` command on a file written by pylance."""

from __future__ import annotations

import lance.file
import pyarrow as pa

from flight_server.cli import main


def test_inspect_prints_version_rows_schema_and_encodings(tmp_path, capsys):
    path = str(tmp_path / "t.lance")
    table = pa.table({"a": pa.array(range(5000), pa.int32()), "s": ["x", None] * 2500})
    with lance.file.LanceFileWriter(path, table.schema, version="2.1") as writer:
        writer.write_batch(table)
    assert main(["inspect", path, "--head", "2"]) == 0
    out = capsys.readouterr().out
    assert "version:  2.1" in out and "rows:     5000" in out
    assert "a: int32" in out and "s: string" in out
    # encodings are described from the real page layouts
    assert "MiniBlockLayout" in out and "InlineBitpacking" in out


def test_inspect_reports_lance_errors_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.lance"
    bad.write_bytes(b"not a lance file at all" * 4)
    assert main(["inspect", str(bad)]) == 2
    assert "error:" in capsys.readouterr().err
