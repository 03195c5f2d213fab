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


def test_inspect_describes_a_dataset_directory_as_pylance_sees_it(tmp_path, capsys):
    import lance

    uri = str(tmp_path / "ds")
    table = pa.table({"id": pa.array(range(3000), pa.int64()), "s": ["a", "b", None] * 1000})
    lance.write_dataset(table, uri, max_rows_per_file=1000)
    lance.write_dataset(table.slice(0, 500), uri, mode="append")
    ds = lance.dataset(uri)
    ds.delete("id < 10")
    ds = lance.dataset(uri)
    ds.tags.create("before-delete", 2)
    assert main(["inspect", uri, "--head", "3"]) == 0
    out = capsys.readouterr().out
    assert f"version:  {ds.version} (latest {ds.latest_version})" in out
    assert "versions: 1-3" in out and "tags:     before-delete=2" in out
    assert f"rows:     {ds.count_rows()}" in out
    assert f"fragments: {len(ds.get_fragments())}" in out
    assert "#0: 990 rows (10 deleted), 1 file(s)" in out
    assert "id: int64" in out and "s: string" in out
    # a tag selects the version, as in pylance
    assert main(["inspect", uri, "--version", "before-delete", "--head", "0"]) == 0
    out = capsys.readouterr().out
    old = lance.dataset(uri, version="before-delete")
    assert f"version:  2 (latest {ds.latest_version})" in out
    assert f"rows:     {old.count_rows()}" in out


def test_inspect_of_a_plain_directory_lists_the_datasets_under_it(tmp_path, capsys):
    import lance

    lance.write_dataset(pa.table({"a": [1]}), str(tmp_path / "x" / "one"))
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not a Lance dataset" in err and "x/one" in err and "Is a directory" not in err


def test_help_shows_defaults_and_no_rest_markup(capsys):
    import pytest

    for argv in (["--help"], ["serve", "--help"], ["inspect", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
        out = capsys.readouterr().out
        assert "``" not in out and "(default: None)" not in out
        if argv[0] == "serve":
            assert "(default: 8815)" in out and "(default: 256M)" in out
            assert "--auth-users FILE" in out and "--auth-tokens FILE" in out


def test_a_bare_auth_flag_names_the_real_flags(capsys):
    import pytest

    with pytest.raises(SystemExit) as exit_:
        main(["serve", ".", "--auth"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--auth-users FILE" in err and "--auth-tokens FILE" in err and "ambiguous" not in err


def test_inspect_reports_a_missing_version_or_tag_and_a_version_on_a_file(tmp_path, capsys):
    import lance

    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"a": [1, 2]}), uri)
    assert main(["inspect", uri, "--version", "7"]) == 2
    assert "no version 7" in capsys.readouterr().err
    assert main(["inspect", uri, "--version", "nightly"]) == 2
    assert "nightly" in capsys.readouterr().err
    path = str(tmp_path / "t.lance")
    with lance.file.LanceFileWriter(path, pa.schema([("a", pa.int64())])) as writer:
        writer.write_batch(pa.table({"a": [1]}))
    assert main(["inspect", path, "--version", "1"]) == 2
    assert "dataset directory" in capsys.readouterr().err
