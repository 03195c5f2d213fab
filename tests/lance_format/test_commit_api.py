"""pylance's low-level commit API (``write_fragments`` / ``LanceFragment.create``, then
``LanceDataset.commit`` with a ``LanceOperation``), run as the same script against pylance
and against lance_format: every version must hold the same rows and fragments, each
implementation must read what the other committed, and stale read versions must fail (or
succeed) alike."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import lance
import lance.fragment
import pyarrow as pa
import pytest

import lance_format
import lance_format.fragment
from lance_format.errors import CommitConflictError, LanceError

IMPLS = {
    "pylance": SimpleNamespace(
        lib=lance,
        write_fragments=lance.fragment.write_fragments,
        create=lance.fragment.LanceFragment.create,
        FragmentMetadata=lance.fragment.FragmentMetadata,
        Op=lance.LanceOperation,
        commit=lance.LanceDataset.commit,
        open=lance.dataset,
    ),
    "ours": SimpleNamespace(
        lib=lance_format,
        write_fragments=lance_format.fragment.write_fragments,
        create=lance_format.fragment.LanceFragment.create,
        FragmentMetadata=lance_format.fragment.FragmentMetadata,
        Op=lance_format.LanceOperation,
        commit=lance_format.LanceDataset.commit,
        open=lance_format.dataset,
    ),
}


def table(start: int, n: int) -> pa.Table:
    a = list(range(start, start + n))
    return pa.table({"a": pa.array(a, pa.int64()), "s": [f"s{i}" for i in a]})


def snapshot(ds) -> dict:
    """What a version looks like, in terms both implementations answer alike."""
    frags = ds.get_fragments()
    return {
        "version": ds.version,
        "rows": ds.to_table().sort_by("a").to_pydict(),
        "fragments": [
            (f.fragment_id, f.physical_rows, f.count_rows(), f.num_deletions) for f in frags
        ],
    }


def run_script(impl, uri: str) -> list[dict]:
    """Overwrite (create), Append, Delete with an updated and a removed fragment, Rewrite
    (compaction of two fragments), Restore and Overwrite again, all through the low-level
    API.  Returns a snapshot per version."""
    out = []
    t1 = table(0, 10)
    frags = impl.write_fragments(t1, uri, max_rows_per_file=4)
    assert [f.id for f in frags] == [0, 0, 0] and all(
        isinstance(f, impl.FragmentMetadata) for f in frags
    )
    ds = impl.commit(uri, impl.Op.Overwrite(t1.schema, frags))
    out.append(snapshot(ds))

    extra = impl.create(uri, table(10, 3))
    assert isinstance(extra, impl.FragmentMetadata) and extra.physical_rows == 3
    ds = impl.commit(uri, impl.Op.Append([extra]), read_version=1)
    out.append(snapshot(ds))

    assert ds.get_fragment(0).delete("a < 4") is None  # every row of fragment 0
    updated = ds.get_fragment(1).delete("a = 5")
    assert updated.deletion_file.num_deleted_rows == 1
    op = impl.Op.Delete([updated], [0], "a < 4 or a = 5")
    ds = impl.commit(uri, op, read_version=2)
    out.append(snapshot(ds))

    old = [ds.get_fragment(1).metadata, ds.get_fragment(2).metadata]
    rows = pa.concat_tables([ds.get_fragment(i).to_table() for i in (1, 2)])
    new = impl.write_fragments(rows, uri)
    group = impl.Op.RewriteGroup(old_fragments=old, new_fragments=new)
    ds = impl.commit(uri, impl.Op.Rewrite(groups=[group], rewritten_indices=[]), read_version=3)
    out.append(snapshot(ds))

    ds = impl.commit(uri, impl.Op.Restore(2))
    out.append(snapshot(ds))

    t2 = table(100, 5)
    ds = impl.commit(uri, impl.Op.Overwrite(t2.schema, impl.write_fragments(t2, uri)))
    out.append(snapshot(ds))
    return out


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    base = tmp_path_factory.mktemp("commit_api")
    return {
        name: (run_script(impl, str(base / name)), str(base / name)) for name, impl in IMPLS.items()
    }


def test_same_script_same_versions(scripted):
    theirs, _ = scripted["pylance"]
    ours, _ = scripted["ours"]
    assert ours == theirs
    assert [s["version"] for s in ours] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("writer,reader", [("ours", "pylance"), ("pylance", "ours")])
def test_each_reads_what_the_other_committed(scripted, writer, reader):
    _, uri = scripted[writer]
    expected, _ = scripted[writer]
    for snap in expected:
        ds = IMPLS[reader].open(uri, version=snap["version"])
        assert snapshot(ds) == snap


def test_written_transactions_are_pylance_operations(scripted):
    _, uri = scripted["ours"]
    ds = lance.dataset(uri)
    kinds = [type(ds.read_transaction(v).operation).__name__ for v in range(1, 7)]
    assert kinds == ["Overwrite", "Append", "Delete", "Rewrite", "Restore", "Overwrite"]


def test_fragment_methods_match(tmp_path):
    t = table(0, 12)
    found = {}
    for name, impl in IMPLS.items():
        uri = str(tmp_path / name)
        impl.lib.write_dataset(t, uri, max_rows_per_file=6)
        ds = impl.open(uri)
        ds.delete("a = 7")
        frag = ds.get_fragment(1)
        meta = frag.metadata
        found[name] = {
            "id": frag.fragment_id,
            "physical": frag.physical_rows,
            "deletions": frag.num_deletions,
            "count": frag.count_rows(),
            "count_filter": frag.count_rows("a > 8"),
            "table": frag.to_table(columns=["a"], filter="a >= 8").to_pydict(),
            "scan": frag.scanner(columns=["s"], limit=2).to_table().to_pydict(),
            "take": frag.take([0, 1, 4]).to_pydict(),
            "schema": frag.schema,
            "files": [(f.path.endswith(".lance"), f.fields) for f in frag.data_files()],
            "deletion": frag.deletion_file().startswith("_deletions/1-2-"),
            "json_keys": sorted(meta.to_json()),
            "file_keys": sorted(meta.to_json()["files"][0]),
            "deletion_keys": sorted(meta.to_json()["deletion_file"]),
            "no_rows_left": frag.delete("a >= 0"),
            "nothing_deleted": ds.get_fragment(0).deletion_file(),
        }
    assert found["ours"] == found["pylance"]


def test_metadata_json_travels_between_implementations(tmp_path):
    for src, dst in (("pylance", "ours"), ("ours", "pylance")):
        uri = str(tmp_path / f"{src}_to_{dst}")
        t = table(0, 6)
        IMPLS[dst].lib.write_dataset(t, uri)
        frags = IMPLS[src].write_fragments(table(6, 4), uri)
        text = json.dumps(frags[0].to_json())
        meta = IMPLS[dst].FragmentMetadata.from_json(text)
        ds = IMPLS[dst].commit(uri, IMPLS[dst].Op.Append([meta]), read_version=1)
        assert ds.count_rows() == 10
        assert lance.dataset(uri).to_table().equals(lance_format.dataset(uri).to_table())


def _base(tmp_path, name: str) -> str:
    uri = str(tmp_path / name)
    lance.write_dataset(table(0, 10), uri, max_rows_per_file=5)
    return uri


def test_stale_read_versions_behave_alike(tmp_path):
    """Same outcomes for both: an append over a concurrent append rebases; a delete over a
    concurrent delete of the same fragment is preempted (a low-level commit cannot name its
    rows); anything over a concurrent overwrite is refused."""
    outcomes = {}
    template = _base(tmp_path, "template")
    for name, impl in IMPLS.items():
        got = []
        uri = str(tmp_path / name)
        shutil.copytree(template, uri)
        first = impl.write_fragments(table(10, 2), uri)
        second = impl.write_fragments(table(12, 2), uri)
        impl.commit(uri, impl.Op.Append(first), read_version=1)
        ds = impl.commit(uri, impl.Op.Append(second), read_version=1)  # stale, compatible
        got.append(("append", ds.version, ds.count_rows()))

        base = impl.open(uri, version=3)
        mine = base.get_fragment(0).delete("a = 0")
        theirs = base.get_fragment(0).delete("a = 1")
        impl.commit(uri, impl.Op.Delete([theirs], [], "a = 1"), read_version=3)
        with pytest.raises(OSError) as e:
            impl.commit(uri, impl.Op.Delete([mine], [], "a = 0"), read_version=3)
        got.append(("delete", "etry" in str(e.value), impl.open(uri).count_rows()))

        other = impl.write_fragments(table(50, 1), uri)
        impl.commit(uri, impl.Op.Overwrite(table(0, 1).schema, other))
        late = impl.write_fragments(table(60, 1), uri)
        with pytest.raises(OSError):
            impl.commit(uri, impl.Op.Append(late), read_version=4)
        got.append(("overwritten", impl.open(uri).to_table().to_pydict()))
        outcomes[name] = got
    assert outcomes["ours"] == outcomes["pylance"]
    assert outcomes["ours"][0] == ("append", 3, 14)


def test_argument_errors_match(tmp_path):
    uri = _base(tmp_path, "args")
    for impl in IMPLS.values():
        frags = impl.write_fragments(table(10, 1), uri)
        with pytest.raises(ValueError, match="read_version is required"):
            impl.commit(uri, impl.Op.Append(frags))
        with pytest.raises(TypeError, match="FragmentMetadata"):
            impl.Op.Append(["not a fragment"])
        with pytest.raises(OSError):
            impl.commit(str(tmp_path / "missing"), impl.Op.Append(frags), read_version=1)
        with pytest.raises(OSError):
            impl.commit(uri, impl.Op.Append(frags), read_version=99)


def test_our_errors_are_lance_errors(tmp_path):
    uri = _base(tmp_path, "ours_errors")
    frags = lance_format.fragment.write_fragments(table(10, 1), uri)
    op = lance_format.LanceOperation.Append(frags)
    with pytest.raises(LanceError):
        lance_format.LanceDataset.commit(uri, op)
    other = lance_format.fragment.write_fragments(table(11, 1), uri)
    lance_format.LanceDataset.commit(
        uri, lance_format.LanceOperation.Overwrite(table(0, 1).schema, other)
    )
    with pytest.raises(CommitConflictError):
        lance_format.LanceDataset.commit(uri, op, read_version=1)


def test_commit_message_and_merge_with_a_new_column(tmp_path):
    """A Merge adding an all-null column (no data file, as pylance's add_columns with a
    schema), committed by us, reads the same in both; the commit message lands where
    pylance keeps it."""
    uri = str(tmp_path / "merge")
    lance_format.write_dataset(table(0, 6), uri, max_rows_per_file=3)
    ds = lance_format.dataset(uri)
    schema = pa.schema([*ds.schema, pa.field("b", pa.int64())])
    op = lance_format.LanceOperation.Merge([f.metadata for f in ds.get_fragments()], schema)
    done = lance_format.LanceDataset.commit(uri, op, read_version=1, commit_message="add b")
    expected = {"a": list(range(6)), "s": [f"s{i}" for i in range(6)], "b": [None] * 6}
    assert done.to_table().to_pydict() == expected
    assert lance.dataset(uri).to_table().to_pydict() == expected
    assert lance.dataset(uri).read_transaction(2).transaction_properties == {
        "__lance_commit_message": "add b"
    }


def update_and_replace(impl, uri: str) -> list[dict]:
    """An Update that moves one row to a new fragment (REWRITE_ROWS), then a DataReplacement
    swapping a fragment's only data file for one with new values, both low-level."""
    out = []
    impl.lib.write_dataset(table(0, 6), uri, max_rows_per_file=3)
    ds = impl.open(uri)
    updated = ds.get_fragment(1).delete("a = 4")
    moved = impl.write_fragments(pa.table({"a": pa.array([40], pa.int64()), "s": ["s4!"]}), uri)
    op = impl.Op.Update(
        updated_fragments=[updated], new_fragments=moved, update_mode="rewrite_rows"
    )
    out.append(snapshot(impl.commit(uri, op, read_version=1)))

    (new,) = impl.write_fragments(table(100, 3), uri)
    group = impl.Op.DataReplacementGroup(fragment_id=0, new_file=new.files[0])
    ds = impl.commit(uri, impl.Op.DataReplacement([group]), read_version=2)
    out.append(snapshot(ds))
    return out


def test_update_and_data_replacement_match(tmp_path):
    got = {name: update_and_replace(impl, str(tmp_path / name)) for name, impl in IMPLS.items()}
    assert got["ours"] == got["pylance"]
    assert got["ours"][0]["rows"]["a"] == [0, 1, 2, 3, 5, 40]
    for name in IMPLS:  # and each reads the other's result
        other = "pylance" if name == "ours" else "ours"
        assert snapshot(IMPLS[other].open(str(tmp_path / name))) == got[name][-1]


def test_read_transaction_and_commit_a_transaction(scripted, tmp_path):
    """Our read_transaction gives pylance's operations for what either implementation
    committed; a Transaction read from one dataset commits the same change elsewhere."""
    for name in IMPLS:
        _, uri = scripted[name]
        for v in range(1, 7):
            ours = lance_format.dataset(uri).read_transaction(v)
            theirs = lance.dataset(uri).read_transaction(v)
            assert type(ours.operation).__name__ == type(theirs.operation).__name__
            assert (ours.read_version, ours.uuid) == (theirs.read_version, theirs.uuid)
            assert ours.transaction_properties == (theirs.transaction_properties or {})
        delete = lance_format.dataset(uri).read_transaction(3).operation
        assert [f.id for f in delete.updated_fragments] == [1] and delete.deleted_fragment_ids == [
            0
        ]

    for impl in IMPLS.values():  # replay one implementation's append with either
        _, src = scripted["ours"]
        uri = str(tmp_path / f"replay_{impl.lib.__name__}")
        shutil.copytree(src, uri)
        appended = impl.open(uri).read_transaction(2)
        replayed = impl.commit(
            uri, impl.lib.Transaction(read_version=6, operation=appended.operation)
        )
        assert replayed.version == 7 and replayed.count_rows() == 5 + 3
    mine = lance_format.dataset(uri).read_transaction(2)
    with pytest.raises(ValueError, match="commit_message"):
        lance_format.LanceDataset.commit(uri, mine, commit_message="x")


def test_write_fragments_can_return_the_transaction(tmp_path):
    got = {}
    for name, impl in IMPLS.items():
        uri = str(tmp_path / name)
        create = impl.write_fragments(table(0, 4), uri, return_transaction=True)
        ds = impl.commit(uri, create)
        append = impl.write_fragments(table(4, 2), uri, return_transaction=True)
        ds = impl.commit(uri, append)
        got[name] = (type(create.operation).__name__, type(append.operation).__name__)
        got[name] += (append.read_version, snapshot(ds)["rows"])
    assert got["ours"] == got["pylance"]
    assert got["ours"][:3] == ("Overwrite", "Append", 1)


def test_commit_batch_merges_appends(tmp_path):
    got = {}
    for name, impl in IMPLS.items():
        uri = str(tmp_path / name)
        impl.lib.write_dataset(table(0, 2), uri)
        txns = [impl.write_fragments(table(s, 2), uri, return_transaction=True) for s in (2, 4)]
        out = impl.lib.LanceDataset.commit_batch(uri, txns)
        merged = out["merged"]
        got[name] = (out["dataset"].version, merged.read_version, len(merged.operation.fragments))
        got[name] += (snapshot(out["dataset"]),)
        delete = impl.Op.Delete([out["dataset"].get_fragment(0).delete("a = 0")], [], "a = 0")
        with pytest.raises(LanceError if name == "ours" else OSError, match="(?i)only append"):
            impl.lib.LanceDataset.commit_batch(uri, [txns[0], impl.lib.Transaction(2, delete)])
    assert got["ours"] == got["pylance"]
    assert got["ours"][:3] == (2, 1, 2)
