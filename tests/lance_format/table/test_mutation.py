"""update and merge_insert against pylance 14: the same change applied by both to the same
data gives the same rows, the same kind of commit, and a dataset the other reads."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import lance_format as lf
from lance_format.table import dataset as lds
from lance_format.table import transaction

BASE = pa.table(
    {
        "id": pa.array(range(12), pa.int64()),
        "v": pa.array([float(i) for i in range(12)]),
        "s": pa.array([f"r{i}" for i in range(12)]),
    }
)


def _pair(tmp_path, stable: bool = False):
    ours = lance.write_dataset(
        BASE, str(tmp_path / "ours"), max_rows_per_file=5, enable_stable_row_ids=stable
    )
    theirs = lance.write_dataset(
        BASE, str(tmp_path / "theirs"), max_rows_per_file=5, enable_stable_row_ids=stable
    )
    del ours
    return lds.dataset(str(tmp_path / "ours")), theirs


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by("id")


def _txn(uri: str, version: int) -> transaction.Transaction:
    ds = lds.dataset(uri, version)
    return transaction.read_transaction_file(uri, ds.manifest.pb.transaction_file)


@pytest.mark.parametrize("stable", [False, True])
def test_update_matches_pylance(tmp_path, stable):
    ours, theirs = _pair(tmp_path, stable)
    before = ours.version
    got = ours.update({"v": "v * 10", "s": "concat(s, '!')"}, where="id > 3 AND id < 8")
    want = theirs.update({"v": "v * 10", "s": "concat(s, '!')"}, where="id > 3 AND id < 8")
    assert got == want == {"num_rows_updated": 4}
    assert ours.version == theirs.version == before + 1  # in place, as pylance
    assert _sorted(ours.to_table()) == _sorted(theirs.to_table())
    read_back = lance.dataset(ours.uri)
    assert _sorted(read_back.to_table()) == _sorted(theirs.to_table())
    ot, tt = _txn(ours.uri, ours.version), _txn(theirs.uri, theirs.version)
    assert ot.operation.KIND == tt.operation.KIND == "update"
    assert sorted(f.id for f in ot.operation.updated_fragments) == sorted(
        f.id for f in tt.operation.updated_fragments
    )
    assert ot.operation.removed_fragment_ids == tt.operation.removed_fragment_ids
    assert ot.operation.fields_for_preserving_frag_bitmap == sorted(
        tt.operation.fields_for_preserving_frag_bitmap
    )
    if stable:  # moved rows keep their row ids
        a = read_back.to_table(with_row_id=True).sort_by("id")
        b = theirs.to_table(with_row_id=True).sort_by("id")
        assert a.column("_rowid") == b.column("_rowid")


def test_update_all_rows_and_no_rows(tmp_path):
    ours, theirs = _pair(tmp_path)
    assert ours.update({"v": "0"}, where="id > 100") == {"num_rows_updated": 0}
    assert theirs.update({"v": "0"}, where="id > 100") == {"num_rows_updated": 0}
    assert ours.version == theirs.version
    assert ours.update({"v": "-v"}) == theirs.update({"v": "-v"}) == {"num_rows_updated": 12}
    assert _sorted(ours.to_table()) == _sorted(theirs.to_table())
    # every old fragment lost every row: they leave the manifest
    assert _txn(ours.uri, ours.version).operation.removed_fragment_ids == [0, 1, 2]
    assert lance.dataset(ours.uri).count_rows() == 12


def test_update_rejects_unknown_column(tmp_path):
    ours, theirs = _pair(tmp_path)
    with pytest.raises(ValueError):
        theirs.update({"nope": "1"})
    with pytest.raises(lf.LanceError):
        ours.update({"nope": "1"})


SOURCE = pa.table(
    {
        "id": pa.array([2, 7, 11, 20, 21], pa.int64()),
        "v": pa.array([200.0, 1.0, 1100.0, 2000.0, 2100.0]),
        "s": pa.array(["x2", "x7", "x11", "x20", "x21"]),
    }
)


def _merge(ds, clauses, source=SOURCE):
    b = ds.merge_insert("id")
    for name, arg in clauses:
        b = getattr(b, name)(*arg)
    return b.execute(source)


@pytest.mark.parametrize(
    "clauses",
    [
        [("when_matched_update_all", ()), ("when_not_matched_insert_all", ())],
        [("when_not_matched_insert_all", ())],
        [("when_matched_update_all", ())],
        [("when_matched_update_all", ("target.v < source.v",))],
        [("when_matched_update_all", ()), ("when_not_matched_by_source_delete", ())],
        [("when_not_matched_insert_all", ()), ("when_not_matched_by_source_delete", ("id < 5",))],
    ],
)
@pytest.mark.parametrize("stable", [False, True])
def test_merge_insert_matches_pylance(tmp_path, clauses, stable):
    ours, theirs = _pair(tmp_path, stable)
    got = _merge(ours, clauses)
    want = _merge(theirs, clauses)
    assert {k: got[k] for k in got} == {k: want[k] for k in got}
    assert ours.version == theirs.version
    assert _sorted(ours.to_table()) == _sorted(theirs.to_table())
    assert _sorted(lance.dataset(ours.uri).to_table()) == _sorted(theirs.to_table())
    if ours.version > 1:
        assert _txn(ours.uri, ours.version).operation.KIND == "update"
        assert _txn(theirs.uri, theirs.version).operation.KIND == "update"
    if stable:
        a = lance.dataset(ours.uri).to_table(with_row_id=True).sort_by("id")
        b = theirs.to_table(with_row_id=True).sort_by("id")
        assert a.column("_rowid") == b.column("_rowid")


def test_merge_insert_duplicate_source_keys_refused(tmp_path):
    ours, theirs = _pair(tmp_path)
    dup = pa.concat_tables([SOURCE, SOURCE.slice(0, 1)])
    with pytest.raises(OSError, match="(?i)ambiguous"):
        theirs.merge_insert("id").when_matched_update_all().execute(dup)
    with pytest.raises(OSError, match="(?i)ambiguous"):
        ours.merge_insert("id").when_matched_update_all().execute(dup)
    # duplicates that only get inserted are not ambiguous
    fresh = pa.table({"id": [50, 50], "v": [1.0, 2.0], "s": ["a", "b"]})
    got = ours.merge_insert("id").when_not_matched_insert_all().execute(fresh)
    want = theirs.merge_insert("id").when_not_matched_insert_all().execute(fresh)
    assert got == want
    assert ours.version == theirs.version == 2  # the refused merge committed nothing
    assert _sorted(ours.to_table()) == _sorted(theirs.to_table())


@pytest.mark.parametrize("concurrent", ["append", "delete_other_row", "delete_same_row"])
def test_update_over_concurrent_commit_as_pylance(tmp_path, concurrent):
    """An update based on a stale version, after a concurrent append or delete: rebased
    (deletion vectors merged) or refused exactly where pylance's own update is."""
    outcomes = []
    for who in ("ours", "theirs"):
        uri = str(tmp_path / who)
        lance.write_dataset(BASE, uri, max_rows_per_file=5)
        stale = lds.dataset(uri, 1) if who == "ours" else lance.dataset(uri, version=1)
        other = lance.dataset(uri)
        if concurrent == "append":
            other.insert(BASE.slice(0, 2))
        elif concurrent == "delete_other_row":
            other.delete("id = 1")
        else:
            other.delete("id = 2")
        try:
            stale.update({"v": "v + 100"}, where="id = 2")
        except Exception as exc:  # noqa: BLE001 - the outcome is compared below
            outcomes.append(("error", isinstance(exc, OSError)))
            continue
        outcomes.append(("ok", _sorted(lance.dataset(uri).to_table())))
    assert outcomes[0][0] == outcomes[1][0]
    if outcomes[0][0] == "ok":
        assert outcomes[0][1] == outcomes[1][1]


def test_writes_move_the_object_in_place_as_pylance(tmp_path):
    """The same pylance-style script (no reassignment) run on both objects: after each
    write both read the same new version and return the same value."""
    ours, theirs = _pair(tmp_path)
    steps = [
        ("delete", ("id = 3",), {}),
        ("add_columns", ({"w": "v * 2"},), {}),
        ("add_columns", ({"w2": "id + 1"},), {}),  # a second call on the same object
        ("alter_columns", ({"path": "w2", "name": "w3"},), {}),
        ("drop_columns", (["w"],), {}),
        ("update", ({"v": "0"},), {"where": "id < 2"}),
    ]
    for name, args, kwargs in steps:
        got = getattr(ours, name)(*args, **kwargs)
        want = getattr(theirs, name)(*args, **kwargs)
        assert got == want, name
        assert ours.version == theirs.version, name
        assert ours.schema == theirs.schema, name
        assert _sorted(ours.to_table()) == _sorted(theirs.to_table()), name
    ours, theirs = lds.dataset(ours.uri, 2), lance.dataset(theirs.uri, version=2)
    assert ours.restore() is None and theirs.restore() is None
    assert ours.version == theirs.version == 8
    assert _sorted(ours.to_table()) == _sorted(theirs.to_table())
    before = ours.version
    got = ours.optimize.compact_files()
    want = theirs.optimize.compact_files()
    assert got.fragments_removed == want.fragments_removed > 0
    assert ours.version == theirs.version == before + 2
    assert _sorted(ours.to_table()) == _sorted(theirs.to_table())


def test_flight_update_keeps_cached_versions(tmp_path):
    """A write through the server's catalog never moves a cached, shared Dataset."""
    from flight_server.catalog import Catalog
    from lance_format.cache import SearchCache

    lance.write_dataset(BASE, str(tmp_path / "t"))
    catalog = Catalog(str(tmp_path), SearchCache())
    shared = catalog.open("t")
    catalog.open_to_change("t").delete("id = 1")
    assert shared.version == 1 and shared.count_rows() == 12
    assert catalog.open("t").version == 2


def test_merge_insert_edge_cases_as_pylance(tmp_path):
    """Two key columns, null keys (they match nothing, so they are inserted), an empty
    source deleting every target row, as pylance does on the same data."""
    base = pa.table(
        {
            "a": pa.array([1, 1, 2, 2, None], pa.int64()),
            "b": pa.array(["x", "y", "x", "y", "z"]),
            "v": pa.array([1, 2, 3, 4, 5], pa.int32()),
        }
    )
    source = pa.table(
        {
            "a": pa.array([1, 2, None, 3], pa.int64()),
            "b": pa.array(["y", "z", "z", "x"]),
            "v": pa.array([20, 30, 50, 60], pa.int32()),
        }
    )
    results = []
    for module, name in ((lds, "ours"), (lance, "theirs")):
        uri = str(tmp_path / name)
        lance.write_dataset(base, uri, max_rows_per_file=2)
        ds = module.dataset(uri)
        stats = (
            ds.merge_insert(["a", "b"])
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(source)
        )
        first = ds.to_table().sort_by([("a", "ascending"), ("b", "ascending"), ("v", "ascending")])
        emptied = (
            ds.merge_insert("a").when_not_matched_by_source_delete().execute(source.slice(0, 0))
        )
        results.append((stats, first, emptied, ds.count_rows(), ds.version))
    ours, theirs = results
    assert ours[0] == {k: theirs[0][k] for k in ours[0]}
    assert ours[1] == theirs[1]
    assert ours[2] == {k: theirs[2][k] for k in ours[2]}
    assert ours[3:] == theirs[3:]


def test_merge_insert_source_with_some_columns(tmp_path):
    """A source with the keys and some columns updates those only, as pylance; inserting
    from it is refused."""
    ours, theirs = _pair(tmp_path)
    part = SOURCE.select(["id", "v"])
    got = ours.merge_insert("id").when_matched_update_all().execute(part)
    want = theirs.merge_insert("id").when_matched_update_all().execute(part)
    assert got == {k: want[k] for k in got}
    assert _sorted(ours.to_table()) == _sorted(theirs.to_table())
    with pytest.raises(ValueError):
        ours.merge_insert("id").when_not_matched_insert_all().execute(part)
    with pytest.raises(ValueError):
        ours.merge_insert("id").when_matched_update_all().execute(SOURCE.select(["v", "s"]))
    assert ours.version == 2
