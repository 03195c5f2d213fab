"""Transactions and conflict checks against pylance 14.

* pylance writes a history with every operation its dataset API has; our reader must decode
  each ``.txn`` file to what pylance itself says the transaction was
  (``LanceDataset.read_transaction``), re-encode it byte for byte, and find the same bytes
  inline in the manifest.
* The conflict matrix is a table of synthetic transaction pairs, one row per rule, each
  citing the upstream ``check_<op>_txn`` arm it follows.
* Behaviour: for every pair of 22 kinds of change, pylance commits "theirs" and then tries
  to commit "ours" (made against the same read version) with ``LanceDataset.commit``; it
  succeeds, raises a retryable or an incompatible ``CommitConflictError``, and our
  :func:`conflicts.check` on the two ``.txn`` files must say the same.  The high-level race
  (two ``ds.delete`` on the same fragment) checks the deletion-vector merge.
"""

from __future__ import annotations

import os
import shutil

import lance
import numpy as np
import pyarrow as pa
import pyroaring
import pytest
from lance import LanceOperation

from lance_format.errors import (
    CommitConflictError,
    CorruptFileError,
    LanceError,
    LanceIOError,
    RetryableCommitConflictError,
)
from lance_format.pb import table_pb2, transaction_pb2
from lance_format.table import conflicts, deletion, manifest, operations, paths
from lance_format.table import transaction as tx
from lance_format.table.conflicts import COMPATIBLE, CONFLICT, MERGE_DELETIONS, RETRYABLE

ROWS = 30
PER_FILE = 10


def base_table() -> pa.Table:
    return pa.table({"a": pa.array(range(ROWS), pa.int32()), "s": [str(i) for i in range(ROWS)]})


def make_base(uri: str) -> None:
    """Version 1: three fragments of ten rows (ids 0, 1, 2)."""
    lance.write_dataset(base_table(), uri, max_rows_per_file=PER_FILE)


def txn_file(uri: str, version: int) -> str:
    """The ``.txn`` file of a version, named from pylance's own view of the transaction."""
    t = lance.dataset(uri).read_transaction(version)
    return f"{t.read_version}-{t.uuid}.txn"


def read_ours(uri: str, version: int) -> tx.Transaction:
    return tx.read_transaction_file(uri, txn_file(uri, version))


# -- reading what pylance writes ----------------------------------------------------------


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """Every dataset operation pylance offers, one version each (compaction: two)."""
    uri = str(tmp_path_factory.mktemp("history") / "ds")
    make_base(uri)  # v1 overwrite (create)
    more = pa.table({"a": pa.array(range(ROWS), pa.int32()), "s": [str(i) for i in range(ROWS)]})
    lance.write_dataset(more, uri, mode="append", max_rows_per_file=PER_FILE)  # v2
    ds = lance.dataset(uri)
    ds.delete("a < 3")  # v3: fragments 0 and 3 lose three rows each
    ds.delete("a >= 10 and a < 20")  # v4: fragments 1 and 4 lose every row
    ds.add_columns({"b": "a * 2"})  # v5
    ds.drop_columns(["s"])  # v6
    before_compact = {f.fragment_id: f.count_rows() for f in lance.dataset(uri).get_fragments()}
    lance.dataset(uri).optimize.compact_files()  # v7 reserve, v8 rewrite
    n_txn = len(os.listdir(os.path.join(uri, "_transactions")))
    ds = lance.dataset(uri)
    ds.tags.create("t1", 2)  # no version, no transaction
    tags_txn = len(os.listdir(os.path.join(uri, "_transactions")))
    lance.dataset(uri, version=3).restore()  # v9
    lance.write_dataset(base_table(), uri, mode="overwrite")  # v10
    ds = lance.dataset(uri)
    ds.update({"s": "'z'"}, where="a < 2")  # v11
    ds = lance.dataset(uri)
    ds.update_config({"k": "v"})  # v12
    ds = lance.dataset(uri)
    ds.create_scalar_index("a", "BTREE")  # v13
    return {
        "uri": uri,
        "before_compact": before_compact,
        "txn_files_before_tag": n_txn,
        "txn_files_after_tag": tags_txn,
    }


def frag_paths(fragments) -> list[list[str]]:
    """Data file paths per fragment, for pylance FragmentMetadata or our protobufs."""
    return [[f.path for f in frag.files] for frag in fragments]


def test_every_pylance_transaction_decodes_as_pylance_reads_it(history):
    uri = history["uri"]
    ds = lance.dataset(uri)
    assert ds.version == 13
    kinds = {}
    for v in range(1, 14):
        theirs = ds.read_transaction(v)
        ours = read_ours(uri, v)
        kinds[v] = ours.kind
        assert ours.read_version == theirs.read_version
        assert ours.uuid == theirs.uuid
        assert ours.transaction_properties == (theirs.transaction_properties or {})
        assert ours.operation.NAME == type(theirs.operation).__name__ or ours.kind == (
            "reserve_fragments"
        )
    assert kinds == {
        1: "overwrite",
        2: "append",
        3: "delete",
        4: "delete",
        5: "merge",
        6: "project",
        7: "reserve_fragments",
        8: "rewrite",
        9: "restore",
        10: "overwrite",
        11: "update",
        12: "update_config",
        13: "create_index",
    }


def test_create_and_append_carry_unnumbered_fragments(history):
    uri = history["uri"]
    ds = lance.dataset(uri)
    create = read_ours(uri, 1)
    assert create.read_version == 0  # docs/format/table.md: absent on the wire
    assert isinstance(create.operation, tx.Overwrite)
    assert [f.id for f in create.operation.fragments] == [0, 0, 0]
    assert [f.physical_rows for f in create.operation.fragments] == [10, 10, 10]
    assert [(f.name, f.id) for f in create.operation.schema] == [("a", 0), ("s", 1)]
    assert frag_paths(create.operation.fragments) == frag_paths(
        ds.read_transaction(1).operation.fragments
    )
    append = read_ours(uri, 2)
    assert append.read_version == 1
    assert [f.id for f in append.operation.fragments] == [0, 0, 0]
    # the manifest numbered them 3, 4, 5: the files are the same
    v2 = lance.dataset(uri, version=2)
    assert frag_paths(append.operation.fragments) == frag_paths(
        [f.metadata for f in v2.get_fragments() if f.fragment_id >= 3]
    )


def test_deletes_name_fragments_rows_and_predicate(history):
    uri = history["uri"]
    partial = read_ours(uri, 3).operation
    assert isinstance(partial, tx.Delete)
    assert partial.predicate == "a < 3"
    assert sorted(f.id for f in partial.updated_fragments) == [0, 3]  # any order
    assert partial.deleted_fragment_ids == []
    for f in partial.updated_fragments:
        assert f.deletion_file.num_deleted_rows == 3
        assert f.deletion_file.read_version == 2
        # the deletion file named in the transaction is the one the manifest uses
        rows = deletion.read_deletion_file(uri, f.id, f.deletion_file)
        np.testing.assert_array_equal(rows, [0, 1, 2])
    v3 = {f.fragment_id: f.metadata for f in lance.dataset(uri, version=3).get_fragments()}
    for f in partial.updated_fragments:
        assert v3[f.id].deletion_file.id == f.deletion_file.id
    whole = read_ours(uri, 4).operation
    assert whole.predicate == "a >= 10 and a < 20"
    assert whole.updated_fragments == []
    assert sorted(whole.deleted_fragment_ids) == [1, 4]
    v4_ids = [f.fragment_id for f in lance.dataset(uri, version=4).get_fragments()]
    assert v4_ids == [0, 2, 3, 5]


def test_add_and_drop_columns(history):
    uri = history["uri"]
    merge = read_ours(uri, 5).operation
    assert isinstance(merge, tx.Merge)
    assert merge.preserves_nullability is True  # docs/format/README.md
    assert [f.id for f in merge.fragments] == [0, 2, 3, 5]
    assert all(len(f.files) == 2 for f in merge.fragments)
    assert [(f.name, f.id) for f in merge.schema] == [("a", 0), ("s", 1), ("b", 2)]
    assert all(list(f.files[1].fields) == [2] for f in merge.fragments)
    project = read_ours(uri, 6).operation
    assert isinstance(project, tx.Project)
    assert project.preserves_nullability is True
    assert [f.name for f in project.schema] == ["a", "b"]


def test_compaction_reserves_then_rewrites(history):
    uri = history["uri"]
    reserve = read_ours(uri, 7)
    rewrite = read_ours(uri, 8)
    assert reserve.read_version == rewrite.read_version == 6  # same read version, two files
    assert reserve.operation == tx.ReserveFragments(num_fragments=1)
    (group,) = rewrite.operation.groups
    assert [f.id for f in group.old_fragments] == sorted(history["before_compact"])
    # the new fragment got the reserved id (max_fragment_id was 5) and every live row
    assert [f.id for f in group.new_fragments] == [6]
    assert group.new_fragments[0].physical_rows == sum(history["before_compact"].values())
    assert [f.fragment_id for f in lance.dataset(uri, version=8).get_fragments()] == [6]


def test_tags_write_no_transaction_restore_and_overwrite_do(history):
    uri = history["uri"]
    assert history["txn_files_after_tag"] == history["txn_files_before_tag"]
    restore = read_ours(uri, 9)
    assert restore.operation == tx.Restore(version=3)
    assert restore.read_version == 8
    over = read_ours(uri, 10)
    assert over.read_version == 9
    assert [f.id for f in over.operation.fragments] == [0]  # assigned at commit: 7
    assert [f.fragment_id for f in lance.dataset(uri, version=10).get_fragments()] == [7]


def test_update_config_and_index(history):
    uri = history["uri"]
    upd = read_ours(uri, 11).operation
    assert isinstance(upd, tx.Update)
    assert [f.id for f in upd.updated_fragments] == [7]
    assert upd.updated_fragments[0].deletion_file.num_deleted_rows == 2
    assert [f.physical_rows for f in upd.new_fragments] == [2]
    assert upd.update_mode == tx.Update.REWRITE_ROWS
    cfg = read_ours(uri, 12).operation
    assert cfg == tx.UpdateConfig(config_updates=tx.UpdateMap([("k", "v")]))
    idx = read_ours(uri, 13).operation
    assert isinstance(idx, tx.CreateIndex)
    (new,) = idx.new_indices
    assert (new.name, list(new.fields)) == ("a_idx", [0])
    assert operations.fragment_bitmap(new) == {7, 8}
    assert [i.name for i in lance.dataset(uri).describe_indices()] == ["a_idx"]


def test_txn_bytes_roundtrip_and_match_the_manifest(history):
    uri = history["uri"]
    for v in range(1, 14):
        name = txn_file(uri, v)
        raw = open(os.path.join(uri, "_transactions", name), "rb").read()
        ours = tx.Transaction.from_bytes(raw)
        assert ours.file_name == name
        assert ours.to_bytes() == raw
        assert tx.Transaction.from_pb(ours.to_pb()) == ours
        inline = manifest.read_manifest(paths.find_version(uri, v).path).transaction_bytes
        assert inline == raw  # docs/format/table.md: the same bytes, no framing


# -- round trips, unknown operations, corrupt input ---------------------------------------


def frag(fid: int, *, dv: int | None = None, files=("f.lance",), rows: int = 10):
    f = table_pb2.DataFragment(id=fid, physical_rows=rows)
    for p in files:
        f.files.add(path=f"{p}-{fid}", fields=[0, 1], column_indices=[0, 1])
    if dv is not None:
        f.deletion_file.CopyFrom(
            table_pb2.DeletionFile(file_type=0, read_version=1, id=dv, num_deleted_rows=1)
        )
    return f


def field_pb(name: str, fid: int) -> tx.Field:
    return tx.Field(name=name, id=fid, parent_id=-1, logical_type="int32", nullable=True)


def index(name: str, frags: set[int] | None, fields=(0,)) -> table_pb2.IndexMetadata:
    m = table_pb2.IndexMetadata(name=name, fields=list(fields))
    m.uuid.uuid = os.urandom(16)
    if frags is not None:
        m.fragment_bitmap = pyroaring.BitMap(frags).serialize()
    return m


SCHEMA = [field_pb("a", 0), field_pb("s", 1)]


def one_of_each() -> list[tx.Operation]:
    bitmap = pyroaring.BitMap([1, 5]).serialize()
    key_filter = transaction_pb2.Transaction.KeyExistenceFilter(field_ids=[0])
    key_filter.exact.key_hashes.extend([1, 2])
    overlay = transaction_pb2.Transaction.DataOverlayGroup(fragment_id=3)
    overlay.overlays.add(committed_version=4).data_file.path = "o.lance"
    sstable = table_pb2.CompactedSsTable(generation=2)
    sstable.shard_id.uuid = b"s" * 16
    return [
        tx.Append([frag(0), frag(0, rows=5)]),
        tx.Delete([frag(1, dv=7)], [2, 3], "a < 3"),
        tx.Overwrite(
            [frag(0)], SCHEMA, {"m": b"\x00"}, {"k": "v"}, [table_pb2.BasePath(id=1, path="p")]
        ),
        tx.CreateIndex([index("i", {0, 1})], [index("j", None)]),
        tx.Rewrite([tx.RewriteGroup([frag(1), frag(2)], [frag(9)])], []),
        tx.Merge([frag(1, files=("f", "g"))], SCHEMA, {"x": b"y"}, True),
        tx.Project(SCHEMA[:1], True),
        tx.Restore(3),
        tx.ReserveFragments(4),
        tx.Update(
            removed_fragment_ids=[4],
            updated_fragments=[frag(1, dv=3)],
            new_fragments=[frag(0)],
            fields_modified=[1],
            compacted_sstables=[sstable],
            fields_for_preserving_frag_bitmap=[0],
            update_mode=tx.Update.REWRITE_COLUMNS,
            inserted_rows=key_filter,
            updated_fragment_offsets={1: [0, 4]},
            updated_fragment_offset_bitmaps={1: bitmap},
        ),
        tx.UpdateConfig(
            config_updates=tx.UpdateMap([("k", "v"), ("gone", None)]),
            table_metadata_updates=tx.UpdateMap([], replace=True),
            schema_metadata_updates=tx.UpdateMap([("m", "1")]),
            field_metadata_updates={0: tx.UpdateMap([("f", "1")])},
        ),
        tx.UpdateConfig(
            upsert_values={"k": "v"},
            delete_keys=["d"],
            schema_metadata={"m": "1"},
            field_metadata={3: {"f": "2"}},
        ),
        tx.DataReplacement([tx.DataReplacementGroup(2, table_pb2.DataFile(path="r", fields=[1]))]),
        tx.UpdateMemWalState([sstable]),
        tx.Clone(True, "main", 3, "../src", None),
        tx.UpdateBases([table_pb2.BasePath(id=2, name="b", path="s3://x")]),
        tx.DataOverlay([overlay]),
    ]


def test_proto_and_dataclasses_cover_the_same_operations():
    oneof = transaction_pb2.Transaction.DESCRIPTOR.oneofs_by_name["operation"]
    assert {f.name for f in oneof.fields} == set(tx.OPERATIONS)
    assert {type(op).KIND for op in one_of_each()} == set(tx.OPERATIONS)


@pytest.mark.parametrize("op", one_of_each(), ids=lambda op: op.NAME)
def test_roundtrip_every_operation(op, tmp_path):
    t = tx.Transaction(
        read_version=5,
        operation=op,
        uuid="3f1c1d46-7d7a-4e2b-9d54-0e8d6a0f6c11",
        tag="mytag",
        transaction_properties={"who": "test"},
    )
    pb = t.to_pb()
    assert pb.WhichOneof("operation") == op.KIND
    assert tx.Transaction.from_pb(pb) == t
    assert tx.Transaction.from_bytes(t.to_bytes()) == t
    name = tx.write_transaction_file(str(tmp_path), t)
    assert name == "5-3f1c1d46-7d7a-4e2b-9d54-0e8d6a0f6c11.txn"
    assert tx.parse_transaction_file_name(name) == (5, t.uuid)
    assert tx.read_transaction_file(str(tmp_path), name) == t
    assert open(tmp_path / "_transactions" / name, "rb").read() == pb.SerializeToString()
    assert os.listdir(tmp_path / "_transactions") == [name]  # no temporary left behind


def test_legacy_forms_are_normalised_like_upstream():
    legacy = tx.UpdateConfig(
        upsert_values={"k": "v"}, delete_keys=["d"], schema_metadata={"m": "1"}
    )
    n = legacy.normalized()
    assert n.config_updates == tx.UpdateMap([("k", "v"), ("d", None)])
    assert n.schema_metadata_updates == tx.UpdateMap([("m", "1")], replace=True)
    msg = transaction_pb2.Transaction.Rewrite()
    msg.old_fragments.append(frag(1))
    msg.new_fragments.append(frag(0))
    assert tx.Rewrite.from_pb(msg).groups == [tx.RewriteGroup([frag(1)], [frag(0)])]


def unknown_op_bytes(number: int = 150) -> bytes:
    """A transaction whose operation is field ``number``, unknown to our proto."""
    head = transaction_pb2.Transaction(read_version=4, uuid="u-1").SerializeToString()
    payload = transaction_pb2.Transaction.Restore(version=2).SerializeToString()
    key = (number << 3) | 2
    tag = bytes([(key & 0x7F) | 0x80, key >> 7])
    return head + tag + bytes([len(payload)]) + payload


def test_unknown_operation_is_kept_and_conflicts(tmp_path):
    raw = unknown_op_bytes()
    t = tx.Transaction.from_bytes(raw)
    assert t.kind == "unknown"
    assert t.operation.field_number == 150
    assert t.read_version == 4
    assert t.to_bytes() == raw
    append = tx.new_transaction(3, tx.Append([frag(0)]))
    assert conflicts.check(append, t) is CONFLICT
    assert conflicts.check(t, append) is CONFLICT
    with pytest.raises(CommitConflictError) as e:
        conflicts.plan_rebase(append, [(4, t)])
    assert not e.value.retryable and e.value.version == 4


def test_unknown_header_fields_survive():
    known = tx.new_transaction(1, tx.Append([frag(0)])).to_bytes()
    extra = bytes([(15 << 3) | 0, 7])  # field 15 varint: a newer header field
    t = tx.Transaction.from_bytes(known + extra)
    assert t.kind == "append" and t.unknown_fields == extra
    assert t.to_bytes() == known + extra


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xff\xff",  # not protobuf
        b"",  # no operation
        transaction_pb2.Transaction(read_version=3, uuid="x").SerializeToString(),  # no op
        tx.new_transaction(1, tx.Append([frag(0), frag(0)])).to_bytes()[:-7],  # truncated
    ],
    ids=["not-protobuf", "empty", "no-operation", "truncated"],  # stable ids for xdist
)
def test_corrupt_transactions(tmp_path, data):
    os.makedirs(tmp_path / "_transactions")
    (tmp_path / "_transactions" / "1-x.txn").write_bytes(data)
    with pytest.raises(CorruptFileError) as e:
        tx.read_transaction_file(str(tmp_path), "1-x.txn")
    assert e.value.path.endswith("1-x.txn")


def test_missing_and_malformed_names(tmp_path):
    with pytest.raises(LanceIOError):
        tx.read_transaction_file(str(tmp_path), "1-nope.txn")
    for bad in ("../1-x.txn", "a/b.txn", "", ".."):
        with pytest.raises(CorruptFileError):
            tx.read_transaction_file(str(tmp_path), bad)
    assert tx.parse_transaction_file_name("12-abc.txn") == (12, "abc")
    assert tx.parse_transaction_file_name("x-abc.txn") is None


# -- the conflict matrix -------------------------------------------------------------------

APPEND = tx.Append([frag(0)])
DEL0 = tx.Delete([frag(0, dv=11)], [], "a < 3")  # rows of fragment 0
DEL0_THEIRS = tx.Delete([frag(0, dv=12)], [], "a = 5")  # other rows of fragment 0
DEL1 = tx.Delete([frag(1, dv=13)], [], "a = 15")
DEL_WHOLE0 = tx.Delete([], [0], "a < 10")  # every row of fragment 0
DEL_WHOLE1 = tx.Delete([], [1], "a >= 10 and a < 20")
UPD0_ROWS = tx.Update(
    updated_fragments=[frag(0, dv=14)], new_fragments=[frag(0)], update_mode=tx.Update.REWRITE_ROWS
)
UPD0_COLS = tx.Update(
    updated_fragments=[frag(0, files=("f", "g"))],
    fields_modified=[1],
    update_mode=tx.Update.REWRITE_COLUMNS,
)
OVERWRITE = tx.Overwrite([frag(0)], SCHEMA)
OVERWRITE_K = tx.Overwrite([frag(0)], SCHEMA, config_upsert_values={"k": "1"})
RESTORE = tx.Restore(1)
REWRITE01 = tx.Rewrite([tx.RewriteGroup([frag(0), frag(1)], [frag(0)])])
REWRITE2 = tx.Rewrite([tx.RewriteGroup([frag(2)], [frag(0)])])
RESERVE = tx.ReserveFragments(1)
MERGE = tx.Merge([frag(0, files=("f", "g")), frag(1, files=("f", "g"))], SCHEMA, {}, True)
MERGE_NP = tx.Merge([frag(0, files=("f", "g"))], SCHEMA, {}, False)
PROJECT = tx.Project(SCHEMA[:1], True)
PROJECT_NP = tx.Project(SCHEMA[:1], False)
CFG_K = tx.UpdateConfig(config_updates=tx.UpdateMap([("k", "1")]))
CFG_K2 = tx.UpdateConfig(config_updates=tx.UpdateMap([("k2", "1")]))
CFG_DEL_K = tx.UpdateConfig(config_updates=tx.UpdateMap([("k", None)]))
CFG_LEGACY_K = tx.UpdateConfig(upsert_values={"k": "2"})
TABLE_MD_T = tx.UpdateConfig(table_metadata_updates=tx.UpdateMap([("t", "1")]))
TABLE_MD_U = tx.UpdateConfig(table_metadata_updates=tx.UpdateMap([("u", "1")]))
TABLE_MD_REPLACE = tx.UpdateConfig(table_metadata_updates=tx.UpdateMap([], replace=True))
SCHEMA_MD = tx.UpdateConfig(schema_metadata_updates=tx.UpdateMap([("m", "1")]))
FIELD_MD0 = tx.UpdateConfig(field_metadata_updates={0: tx.UpdateMap([("f", "1")])})
FIELD_MD1 = tx.UpdateConfig(field_metadata_updates={1: tx.UpdateMap([("f", "1")])})
INDEX01 = tx.CreateIndex([index("idx", {0, 1})])
INDEX2 = tx.CreateIndex([index("idx", {2})])
INDEX_OTHER2 = tx.CreateIndex([index("other", {2})])
INDEX_NO_BITMAP = tx.CreateIndex([index("idx", None)])
INDEX_FIELD1 = tx.CreateIndex([index("sidx", {5}, fields=(1,))])
REPL0_F1 = tx.DataReplacement(
    [tx.DataReplacementGroup(0, table_pb2.DataFile(path="r", fields=[1]))]
)
REPL0_F0 = tx.DataReplacement(
    [tx.DataReplacementGroup(0, table_pb2.DataFile(path="r", fields=[0]))]
)
REPL1_F1 = tx.DataReplacement(
    [tx.DataReplacementGroup(1, table_pb2.DataFile(path="r", fields=[1]))]
)
BASES_A = tx.UpdateBases([table_pb2.BasePath(id=1, name="a", path="s3://a")])
BASES_B = tx.UpdateBases([table_pb2.BasePath(id=2, name="b", path="s3://b")])
BASES_A2 = tx.UpdateBases([table_pb2.BasePath(id=3, name="c", path="s3://a")])
CLONE = tx.Clone(True, None, 1, "../src", None)

# (ours, theirs, expected, rule).  Rows marked [pylance] were also observed on pylance 14.0.2
# by test_matches_pylance_commit_outcomes; the others follow the cited upstream arm.
MATRIX = [
    (APPEND, APPEND, COMPATIBLE, "check_append_txn: appends stack [pylance]"),
    (APPEND, DEL0, COMPATIBLE, "check_append_txn: delete [pylance]"),
    (APPEND, REWRITE01, COMPATIBLE, "check_append_txn: rewrite [pylance]"),
    (APPEND, MERGE, COMPATIBLE, "check_append_txn: merge asserting nullability [pylance]"),
    (APPEND, MERGE_NP, RETRYABLE, "preamble: supplies_values vs may_alter_nullability [pylance]"),
    (APPEND, PROJECT_NP, RETRYABLE, "preamble: append vs nullability-changing project [pylance]"),
    (APPEND, OVERWRITE, CONFLICT, "check_append_txn: overwrite replaces the schema [pylance]"),
    (APPEND, RESTORE, CONFLICT, "check_append_txn: restore [pylance]"),
    (APPEND, CFG_K, COMPATIBLE, "check_append_txn: config [pylance]"),
    (APPEND, INDEX01, COMPATIBLE, "check_append_txn: index [pylance]"),
    (APPEND, tx.UpdateMemWalState(), CONFLICT, "check_append_txn: MemWAL state"),
    (DEL0, APPEND, COMPATIBLE, "check_delete_txn: append [pylance]"),
    (DEL0, DEL1, COMPATIBLE, "check_delete_txn: disjoint fragments [pylance]"),
    (DEL0, DEL_WHOLE1, COMPATIBLE, "check_delete_txn: disjoint removed fragment [pylance]"),
    (DEL0, DEL0_THEIRS, MERGE_DELETIONS, "check_delete_txn: same fragment, rows known [pylance]"),
    (DEL0, UPD0_ROWS, MERGE_DELETIONS, "check_delete_txn: update that only deleted rows"),
    (DEL0, UPD0_COLS, RETRYABLE, "check_delete_txn: their data files changed"),
    (DEL0, DEL_WHOLE0, RETRYABLE, "check_delete_txn: they removed our fragment [pylance]"),
    (DEL_WHOLE0, DEL0, RETRYABLE, "try_new: whole-fragment delete has no rows to merge"),
    (DEL0, REWRITE01, RETRYABLE, "check_delete_txn: rewrite of our fragment [pylance]"),
    (DEL0, REWRITE2, COMPATIBLE, "check_delete_txn: rewrite of another fragment [pylance]"),
    (DEL0, MERGE, RETRYABLE, "check_delete_txn: merge [pylance]"),
    (DEL0, PROJECT_NP, COMPATIBLE, "preamble: a delete supplies no values [pylance]"),
    (DEL0, REPL0_F1, RETRYABLE, "check_delete_txn: data replaced in our fragment"),
    (DEL0, REPL1_F1, COMPATIBLE, "check_delete_txn: data replaced elsewhere"),
    (DEL0, OVERWRITE, CONFLICT, "check_delete_txn: overwrite [pylance]"),
    (DEL0, RESTORE, CONFLICT, "check_delete_txn: restore [pylance]"),
    (DEL0, INDEX01, COMPATIBLE, "check_delete_txn: index [pylance]"),
    (UPD0_ROWS, DEL0, MERGE_DELETIONS, "check_update_txn: same arm as delete"),
    (UPD0_COLS, DEL0, RETRYABLE, "check_update_txn: our files changed, no read-version view"),
    (UPD0_ROWS, APPEND, COMPATIBLE, "check_update_txn: append [pylance]"),
    (UPD0_ROWS, PROJECT_NP, RETRYABLE, "preamble: update supplies values [pylance]"),
    (UPD0_ROWS, REWRITE01, RETRYABLE, "check_update_txn: rewrite of our fragment [pylance]"),
    (UPD0_ROWS, OVERWRITE, CONFLICT, "check_update_txn: overwrite [pylance]"),
    (OVERWRITE, OVERWRITE, RETRYABLE, "check_overwrite_txn: preempted (pylance 14) [pylance]"),
    (OVERWRITE_K, OVERWRITE_K, CONFLICT, "check_overwrite_txn: same config key upserted"),
    (OVERWRITE, CFG_K, COMPATIBLE, "check_overwrite_txn: other config [pylance]"),
    (OVERWRITE_K, CFG_K, CONFLICT, "check_overwrite_txn: upsert_key_conflict"),
    (OVERWRITE, DEL0, COMPATIBLE, "check_overwrite_txn: overwrite wins [pylance]"),
    (OVERWRITE, RESTORE, COMPATIBLE, "check_overwrite_txn: restore [pylance]"),
    (OVERWRITE, MERGE_NP, COMPATIBLE, "preamble: overwrite supplies no values [pylance]"),
    (RESTORE, APPEND, COMPATIBLE, "check_restore_txn: restore wins [pylance]"),
    (RESTORE, OVERWRITE, COMPATIBLE, "check_restore_txn [pylance]"),
    (RESTORE, CFG_K, COMPATIBLE, "check_restore_txn: config [pylance]"),
    (RESTORE, TABLE_MD_T, COMPATIBLE, "check_restore_txn: table metadata [pylance]"),
    (RESTORE, SCHEMA_MD, CONFLICT, "observed on pylance 14: restore vs schema metadata [pylance]"),
    (RESTORE, FIELD_MD0, CONFLICT, "observed on pylance 14: restore vs field metadata [pylance]"),
    (SCHEMA_MD, RESTORE, CONFLICT, "observed on pylance 14, the other order [pylance]"),
    (REWRITE01, APPEND, COMPATIBLE, "check_rewrite_txn: append [pylance]"),
    (REWRITE01, DEL0, RETRYABLE, "check_rewrite_txn: delete of our fragment [pylance]"),
    (REWRITE01, DEL_WHOLE0, RETRYABLE, "check_rewrite_txn: removal of our fragment [pylance]"),
    (REWRITE2, DEL0, COMPATIBLE, "check_rewrite_txn: delete elsewhere [pylance]"),
    (REWRITE01, REWRITE2, COMPATIBLE, "check_rewrite_txn: disjoint rewrites [pylance]"),
    (REWRITE01, REWRITE01, RETRYABLE, "check_rewrite_txn: same fragments [pylance]"),
    (REWRITE01, MERGE, RETRYABLE, "check_rewrite_txn: merge [pylance]"),
    (REWRITE01, PROJECT, COMPATIBLE, "check_rewrite_txn: project [pylance]"),
    (REWRITE01, INDEX01, RETRYABLE, "check_rewrite_txn: index covers our fragments [pylance]"),
    (REWRITE01, INDEX2, COMPATIBLE, "check_rewrite_txn: index elsewhere"),
    (REWRITE01, INDEX_NO_BITMAP, RETRYABLE, "check_rewrite_txn: index coverage unknown"),
    (REWRITE01, OVERWRITE, CONFLICT, "check_rewrite_txn: overwrite [pylance]"),
    (REWRITE01, RESERVE, COMPATIBLE, "check_rewrite_txn: reserve (compaction's own) [pylance]"),
    (RESERVE, APPEND, COMPATIBLE, "check_reserve_fragments_txn"),
    (RESERVE, RESTORE, CONFLICT, "check_reserve_fragments_txn: restore"),
    (MERGE, APPEND, RETRYABLE, "check_merge_txn: appended fragments lack the column [pylance]"),
    (MERGE, DEL0, RETRYABLE, "check_merge_txn: delete [pylance]"),
    (MERGE, MERGE, RETRYABLE, "check_merge_txn: merge [pylance]"),
    (MERGE, PROJECT, CONFLICT, "check_merge_txn: project is incompatible [pylance]"),
    (MERGE, CFG_K, COMPATIBLE, "check_merge_txn: config [pylance]"),
    (MERGE, TABLE_MD_T, COMPATIBLE, "check_merge_txn: table metadata [pylance]"),
    (MERGE, SCHEMA_MD, RETRYABLE, "preamble: merge carries the schema [pylance]"),
    (SCHEMA_MD, MERGE, RETRYABLE, "preamble: the other order [pylance]"),
    (MERGE, INDEX01, COMPATIBLE, "check_merge_txn: index [pylance]"),
    (MERGE, OVERWRITE, CONFLICT, "check_merge_txn: overwrite [pylance]"),
    (PROJECT, APPEND, COMPATIBLE, "check_project_txn: append [pylance]"),
    (PROJECT_NP, APPEND, RETRYABLE, "preamble: may_alter_nullability vs append [pylance]"),
    (PROJECT, MERGE, RETRYABLE, "check_project_txn: schema changed [pylance]"),
    (PROJECT, PROJECT, RETRYABLE, "check_project_txn: schema changed [pylance]"),
    (PROJECT, DEL0, COMPATIBLE, "check_project_txn: delete [pylance]"),
    (PROJECT, RESTORE, CONFLICT, "check_project_txn: restore [pylance]"),
    (CFG_K, CFG_K, CONFLICT, "check_update_config_txn: same key [pylance]"),
    (CFG_K, CFG_K2, COMPATIBLE, "check_update_config_txn: other key [pylance]"),
    (CFG_K, CFG_DEL_K, CONFLICT, "upsert_key_conflict: upsert vs delete [pylance]"),
    (CFG_DEL_K, CFG_DEL_K, COMPATIBLE, "upsert_key_conflict: two deletes are fine"),
    (CFG_K, CFG_LEGACY_K, CONFLICT, "legacy upsert_values translated like upstream"),
    (CFG_K, OVERWRITE, COMPATIBLE, "check_update_config_txn: overwrite, config only [pylance]"),
    (SCHEMA_MD, OVERWRITE, CONFLICT, "check_update_config_txn: metadata vs overwrite [pylance]"),
    (FIELD_MD0, OVERWRITE, CONFLICT, "check_update_config_txn: field metadata vs overwrite"),
    (SCHEMA_MD, SCHEMA_MD, CONFLICT, "modifies_same_metadata: schema metadata [pylance]"),
    (FIELD_MD0, FIELD_MD0, CONFLICT, "modifies_same_metadata: same field [pylance]"),
    (FIELD_MD0, FIELD_MD1, COMPATIBLE, "modifies_same_metadata: other field"),
    (TABLE_MD_T, TABLE_MD_T, CONFLICT, "modifies_same_metadata: table key [pylance]"),
    (TABLE_MD_T, TABLE_MD_U, COMPATIBLE, "update_maps_conflict: other table key"),
    (TABLE_MD_T, TABLE_MD_REPLACE, CONFLICT, "update_maps_conflict: a replace"),
    (CFG_K, DEL0, COMPATIBLE, "check_update_config_txn: data ops [pylance]"),
    (INDEX01, APPEND, COMPATIBLE, "check_create_index_txn: append [pylance]"),
    (INDEX01, DEL0, COMPATIBLE, "check_create_index_txn: row ids stay valid [pylance]"),
    (INDEX01, INDEX01, RETRYABLE, "check_create_index_txn: same index name [pylance]"),
    (INDEX01, INDEX_OTHER2, COMPATIBLE, "check_create_index_txn: other index"),
    (INDEX01, REWRITE01, RETRYABLE, "check_create_index_txn: rewrite of indexed [pylance]"),
    (INDEX01, REWRITE2, COMPATIBLE, "check_create_index_txn: rewrite elsewhere"),
    (INDEX_FIELD1, REPL0_F1, RETRYABLE, "check_create_index_txn: indexed column replaced"),
    (INDEX01, REPL0_F1, COMPATIBLE, "check_create_index_txn: other column replaced"),
    (INDEX01, OVERWRITE, CONFLICT, "check_create_index_txn: overwrite [pylance]"),
    (REPL0_F1, REPL0_F1, RETRYABLE, "check_data_replacement_txn: same fragment and field"),
    (REPL0_F1, REPL0_F0, COMPATIBLE, "check_data_replacement_txn: other field"),
    (REPL0_F1, DEL_WHOLE0, CONFLICT, "check_data_replacement_txn: target fragment removed"),
    (REPL0_F1, DEL0, COMPATIBLE, "check_data_replacement_txn: deletions keep positions"),
    (REPL0_F1, PROJECT, CONFLICT, "check_data_replacement_txn: target column dropped"),
    (REPL0_F0, PROJECT, COMPATIBLE, "check_data_replacement_txn: kept column"),
    (REPL0_F1, REWRITE01, RETRYABLE, "check_data_replacement_txn: fragment rewritten"),
    (REPL0_F1, MERGE, RETRYABLE, "check_data_replacement_txn: merge"),
    (BASES_A, BASES_B, COMPATIBLE, "check_add_bases_txn: different bases"),
    (BASES_A, BASES_A2, CONFLICT, "check_add_bases_txn: same path"),
    (CLONE, OVERWRITE, COMPATIBLE, "check_txn: Clone never conflicts"),
]


@pytest.mark.parametrize(
    "ours, theirs, expected, rule",
    MATRIX,
    ids=[f"{i}-{r[3].split(':')[0]}" for i, r in enumerate(MATRIX)],
)
def test_conflict_matrix(ours, theirs, expected, rule):
    got = conflicts.check(tx.new_transaction(1, ours), tx.new_transaction(1, theirs))
    assert got is expected, rule
    # the raw protobuf form is accepted as well and judged the same
    pb = conflicts.check(tx.new_transaction(1, ours).to_pb(), tx.new_transaction(1, theirs).to_pb())
    assert pb is expected


def test_rows_unknown_turns_a_merge_into_a_retry():
    # LanceDataset.commit has no affected rows: pylance's check_delete_txn retries then
    ours, theirs = tx.new_transaction(1, DEL0), tx.new_transaction(1, DEL0_THEIRS)
    assert conflicts.check(ours, theirs, affected_rows_known=False) is RETRYABLE
    assert conflicts.check(ours, tx.new_transaction(1, DEL1), affected_rows_known=False) is (
        COMPATIBLE
    )


def test_initial_fragments_decide_what_changed():
    """With the read version's fragments, an untouched deletion file needs no merge and a
    changed data file is detected even for a column-rewriting update of ours."""
    initial = {0: frag(0, dv=12)}
    ours = tx.new_transaction(1, DEL0)
    assert conflicts.check(ours, tx.new_transaction(1, DEL0_THEIRS), initial_fragments=initial) is (
        COMPATIBLE
    )
    v = conflicts.verdict(ours, tx.new_transaction(1, DEL0_THEIRS))
    assert v.resolution is MERGE_DELETIONS and v.merge_fragment_ids == {0}
    cols = tx.new_transaction(1, UPD0_COLS)
    assert conflicts.check(cols, tx.new_transaction(1, DEL0), initial_fragments={0: frag(0)}) is (
        MERGE_DELETIONS
    )


def test_missing_transaction_conflicts():
    ours = tx.new_transaction(1, APPEND)
    assert conflicts.check(ours, None) is CONFLICT
    with pytest.raises(CommitConflictError) as e:
        conflicts.plan_rebase(ours, [(2, tx.new_transaction(1, APPEND)), (3, None)])
    assert e.value.version == 3 and not e.value.retryable
    assert "missing" in str(e.value)


def test_plan_rebase_outcomes():
    append = tx.new_transaction(4, APPEND)
    plan = conflicts.plan_rebase(
        append, [(6, tx.new_transaction(5, DEL1)), (5, tx.new_transaction(4, APPEND))]
    )
    assert plan.checked_versions == [5, 6]
    assert plan.transaction is append and plan.merge_fragment_ids == frozenset()
    delete = tx.new_transaction(4, DEL0)
    plan = conflicts.plan_rebase(
        delete, [(5, tx.new_transaction(4, DEL0_THEIRS)), (6, tx.new_transaction(5, APPEND))]
    )
    assert plan.merge_fragment_ids == {0}
    assert plan.transaction.read_version == 6  # finish_delete_update moves it to the latest
    assert plan.transaction.uuid == delete.uuid
    older = [(3, tx.new_transaction(2, OVERWRITE))]  # not after our read version: ignored
    assert conflicts.plan_rebase(delete, older).transaction.read_version == 4
    with pytest.raises(RetryableCommitConflictError) as e:
        conflicts.plan_rebase(delete, [(5, tx.new_transaction(4, REWRITE01))])
    assert e.value.retryable and e.value.version == 5
    assert "Delete transaction was preempted by concurrent transaction Rewrite" in str(e.value)
    with pytest.raises(CommitConflictError) as e:
        conflicts.plan_rebase(delete, [(5, tx.new_transaction(4, RESTORE))])
    assert not isinstance(e.value, RetryableCommitConflictError)
    assert isinstance(e.value, LanceError)


def test_merge_deleted_rows():
    np.testing.assert_array_equal(
        conflicts.merge_deleted_rows(np.array([5, 1]), np.array([2, 9]), fragment_id=3),
        [1, 2, 5, 9],
    )
    with pytest.raises(RetryableCommitConflictError, match=str(3 << 32 | 2)):
        conflicts.merge_deleted_rows(np.array([2, 4]), np.array([2]), fragment_id=3, version=7)
    np.testing.assert_array_equal(
        conflicts.affected_rows(np.array([0, 1, 2, 7]), np.array([1])), [0, 2, 7]
    )


# -- behaviour against pylance ---------------------------------------------------------------


def _rewrite(uri: str, ids: set[int]) -> None:
    ds = lance.dataset(uri)
    frags = [f for f in ds.get_fragments() if f.fragment_id in ids]
    new = lance.fragment.write_fragments(pa.concat_tables([f.to_table() for f in frags]), uri)
    group = LanceOperation.RewriteGroup(
        old_fragments=[f.metadata for f in frags], new_fragments=new
    )
    op = LanceOperation.Rewrite(groups=[group], rewritten_indices=[])
    lance.LanceDataset.commit(uri, op, read_version=ds.version)


def _with_nullability_unasserted(uri: str, action) -> None:
    """Run ``action`` in a copy, then commit its Merge/Project here without
    ``preserves_nullability`` (pylance's own add/drop_columns always assert it)."""
    copy = uri + "_np"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(uri, copy)
    action(copy)
    ds = lance.dataset(copy)
    op = ds.read_transaction(ds.version).operation
    _copy_new_files(copy, uri)
    if isinstance(op, LanceOperation.Merge):
        op = LanceOperation.Merge(op.fragments, op.schema, preserves_nullability=False)
    else:
        op = LanceOperation.Project(op.schema, preserves_nullability=False)
    lance.LanceDataset.commit(uri, op, read_version=lance.dataset(uri).version)


def _one_row() -> pa.Table:
    return pa.table({"a": pa.array([100], pa.int32()), "s": ["x"]})


ACTIONS = {
    "append": lambda u: lance.write_dataset(_one_row(), u, mode="append"),
    "delete0": lambda u: lance.dataset(u).delete("a < 3"),
    "delete0b": lambda u: lance.dataset(u).delete("a >= 5 and a < 7"),
    "delete2": lambda u: lance.dataset(u).delete("a >= 25"),
    "delete_frag1": lambda u: lance.dataset(u).delete("a >= 10 and a < 20"),
    "overwrite": lambda u: lance.write_dataset(_one_row(), u, mode="overwrite"),
    "merge": lambda u: lance.dataset(u).add_columns({"b": "a * 2"}),
    "merge_np": lambda u: _with_nullability_unasserted(u, ACTIONS["merge"]),
    "project": lambda u: lance.dataset(u).drop_columns(["s"]),
    "project_np": lambda u: _with_nullability_unasserted(u, ACTIONS["project"]),
    "compact": lambda u: lance.dataset(u).optimize.compact_files(),
    "rewrite12": lambda u: _rewrite(u, {1, 2}),
    "rewrite0": lambda u: _rewrite(u, {0}),
    "restore": lambda u: lance.LanceDataset.commit(u, LanceOperation.Restore(1), read_version=1),
    "config": lambda u: lance.dataset(u).update_config({"k": "v"}),
    "config_k2": lambda u: lance.dataset(u).update_config({"k2": "v"}),
    "del_config": lambda u: lance.dataset(u).delete_config_keys(["k"]),
    "schema_md": lambda u: lance.dataset(u).update_schema_metadata({"m": "1"}),
    "field_md": lambda u: lance.dataset(u).update_field_metadata({"a": {"f": "1"}}),
    "table_md": lambda u: lance.dataset(u).update_metadata({"t": "1"}),
    "update0": lambda u: lance.dataset(u).update({"s": "'z'"}, where="a = 1"),
    "index": lambda u: lance.dataset(u).create_scalar_index("a", "BTREE"),
}


def _copy_new_files(src: str, dst: str) -> None:
    """Data, deletion and index files are uniquely named: bring ours over to theirs."""
    for sub in ("data", "_deletions", "_indices"):
        top = os.path.join(src, sub)
        for root, _dirs, files in os.walk(top):
            rel = os.path.relpath(root, src)
            os.makedirs(os.path.join(dst, rel), exist_ok=True)
            for name in files:
                target = os.path.join(dst, rel, name)
                if not os.path.exists(target):
                    shutil.copy2(os.path.join(root, name), target)


def _pylance_outcome(base: str, work: str, ours_kind: str, theirs_kind: str):
    """pylance commits theirs, then ours (prepared against version 1 in a copy) through
    ``LanceDataset.commit``.  Returns pylance's outcome and both sides' transactions."""
    a, b = os.path.join(work, "A"), os.path.join(work, "B")
    for d in (a, b):
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
    ACTIONS[ours_kind](b)
    ours_version = lance.dataset(b).version
    ours_pylance = lance.dataset(b).read_transaction(ours_version)
    ours = read_ours(b, ours_version)
    ACTIONS[theirs_kind](a)
    theirs = [read_ours(a, v) for v in range(2, lance.dataset(a).version + 1)]
    _copy_new_files(b, a)
    op = ours_pylance.operation
    if isinstance(op, LanceOperation.Rewrite):  # reserved ids in B may be taken in A
        for g in op.groups:
            for f in g.new_fragments:
                f.id = 0
    try:
        lance.LanceDataset.commit(a, op, read_version=1)
        outcome = COMPATIBLE
    except OSError as e:
        retryable = getattr(e, "retryable", None)
        assert retryable is not None, f"not a commit conflict: {e}"
        outcome = RETRYABLE if retryable else CONFLICT
    return outcome, ours, theirs


@pytest.fixture(scope="module")
def base_dataset(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("base") / "ds")
    make_base(uri)
    return uri


@pytest.mark.parametrize("ours_kind", list(ACTIONS))
def test_matches_pylance_commit_outcomes(ours_kind, base_dataset, tmp_path):
    """Our check on pylance's own two .txn files predicts what pylance's commit does, for
    every kind of concurrent change (pylance stops at the first incompatible version)."""
    seen = {}
    mismatches = []
    for theirs_kind in ACTIONS:
        outcome, ours, theirs = _pylance_outcome(
            base_dataset, str(tmp_path), ours_kind, theirs_kind
        )
        predicted = COMPATIBLE
        for t in theirs:
            r = conflicts.check(ours, t, affected_rows_known=False)
            if r is not COMPATIBLE:
                predicted = r
                break
        seen[theirs_kind] = outcome.value
        if predicted is not outcome:
            mismatches.append((theirs_kind, outcome.value, predicted.value))
    assert not mismatches, mismatches
    # pylance's verdicts are varied enough for the comparison to mean something
    if ours_kind in ("append", "delete0", "compact", "merge"):
        assert len(set(seen.values())) == 3, seen


def test_same_fragment_delete_race_merges_like_pylance(base_dataset, tmp_path):
    """Two ``ds.delete`` on disjoint rows of fragment 0 from the same version: pylance merges
    the deletion vectors without re-running the delete (conflict_retries=0 still succeeds).
    We reach the same dataset: MERGE_DELETIONS, the merged vector, committed through
    pylance's low-level API."""
    native = str(tmp_path / "native")
    shutil.copytree(base_dataset, native)
    first, second = lance.dataset(native), lance.dataset(native)
    first.delete("a < 2")
    second.delete("a >= 2 and a < 4", conflict_retries=0)
    expected = lance.dataset(native)
    assert expected.count_rows() == ROWS - 4
    rebased_native = read_ours(native, 3)
    assert rebased_native.read_version == 2  # pylance moved the delete to the latest version

    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    shutil.copytree(base_dataset, a)
    shutil.copytree(base_dataset, b)
    lance.dataset(b).delete("a >= 2 and a < 4")  # ours
    ours = read_ours(b, 2)
    lance.dataset(a).delete("a < 2")  # theirs, committed first
    theirs = read_ours(a, 2)
    _copy_new_files(b, a)

    plan = conflicts.plan_rebase(ours, [(2, theirs)])
    assert plan.merge_fragment_ids == {0}
    initial = {f.fragment_id: f.metadata for f in lance.dataset(a, version=1).get_fragments()}
    latest = {f.fragment_id: f.metadata for f in lance.dataset(a, version=2).get_fragments()}
    rebased = conflicts.merge_concurrent_deletions(
        a,
        plan.transaction,
        plan.merge_fragment_ids,
        initial_fragments={k: _to_pb(v) for k, v in initial.items()},
        latest_fragments={k: _to_pb(v) for k, v in latest.items()},
        latest_version=2,
    )
    assert rebased.read_version == 2
    (frag0,) = rebased.operation.updated_fragments
    assert frag0.deletion_file.file_type == table_pb2.DeletionFile.BITMAP  # as pylance writes
    np.testing.assert_array_equal(
        deletion.read_deletion_file(a, 0, frag0.deletion_file), [0, 1, 2, 3]
    )

    # commit the rebased fragment with pylance and compare with the native race
    meta = latest[0].to_json()
    meta["deletion_file"] = {
        "read_version": frag0.deletion_file.read_version,
        "id": frag0.deletion_file.id,
        "file_type": "bitmap",
        "num_deleted_rows": frag0.deletion_file.num_deleted_rows,
        "base_id": None,
    }
    fragment = type(latest[0]).from_json(_json(meta))
    op = LanceOperation.Delete([fragment], [], rebased.operation.predicate)
    done = lance.LanceDataset.commit(a, op, read_version=2)
    assert done.to_table().equals(expected.to_table())


def test_overlapping_delete_race_is_retryable_for_both(base_dataset, tmp_path):
    native = str(tmp_path / "native")
    shutil.copytree(base_dataset, native)
    first, second = lance.dataset(native), lance.dataset(native)
    first.delete("a < 2")
    with pytest.raises(OSError, match="retries"):  # pylance would have to re-run the delete
        second.delete("a < 4", conflict_retries=0)

    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    shutil.copytree(base_dataset, a)
    shutil.copytree(base_dataset, b)
    lance.dataset(b).delete("a < 4")
    ours = read_ours(b, 2)
    lance.dataset(a).delete("a < 2")
    _copy_new_files(b, a)
    plan = conflicts.plan_rebase(ours, [(2, read_ours(a, 2))])
    latest = {f.fragment_id: _to_pb(f.metadata) for f in lance.dataset(a).get_fragments()}
    initial = {
        f.fragment_id: _to_pb(f.metadata) for f in lance.dataset(a, version=1).get_fragments()
    }
    with pytest.raises(RetryableCommitConflictError):
        conflicts.merge_concurrent_deletions(
            a,
            plan.transaction,
            plan.merge_fragment_ids,
            initial_fragments=initial,
            latest_fragments=latest,
            latest_version=2,
        )


def test_merge_that_empties_a_fragment_removes_it(base_dataset, tmp_path):
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    shutil.copytree(base_dataset, a)
    shutil.copytree(base_dataset, b)
    lance.dataset(b).delete("a >= 5 and a < 10")
    ours = read_ours(b, 2)
    lance.dataset(a).delete("a < 5")
    _copy_new_files(b, a)
    plan = conflicts.plan_rebase(ours, [(2, read_ours(a, 2))])
    rebased = conflicts.merge_concurrent_deletions(
        a,
        plan.transaction,
        plan.merge_fragment_ids,
        initial_fragments={
            f.fragment_id: _to_pb(f.metadata) for f in lance.dataset(a, version=1).get_fragments()
        },
        latest_fragments={
            f.fragment_id: _to_pb(f.metadata) for f in lance.dataset(a).get_fragments()
        },
        latest_version=2,
    )
    assert rebased.operation.updated_fragments == []
    assert rebased.operation.deleted_fragment_ids == [0]


def _json(d: dict) -> str:
    import json

    return json.dumps(d)


def _to_pb(meta) -> table_pb2.DataFragment:
    """pylance FragmentMetadata -> our protobuf, via its JSON (independent of our reader)."""
    d = meta.to_json()
    f = table_pb2.DataFragment(id=d["id"], physical_rows=d["physical_rows"])
    for df in d["files"]:
        f.files.add(
            path=df["path"],
            fields=df["fields"],
            column_indices=df["column_indices"],
            file_major_version=df["file_major_version"],
            file_minor_version=df["file_minor_version"],
            file_size_bytes=df["file_size_bytes"] or 0,
        )
    dv = d.get("deletion_file")
    if dv:
        f.deletion_file.CopyFrom(
            table_pb2.DeletionFile(
                file_type=table_pb2.DeletionFile.BITMAP
                if dv["file_type"] == "bitmap"
                else table_pb2.DeletionFile.ARROW_ARRAY,
                read_version=dv["read_version"],
                id=dv["id"],
                num_deleted_rows=dv["num_deleted_rows"] or 0,
            )
        )
    return f


def test_error_classes():
    e = RetryableCommitConflictError("x", version=3)
    assert isinstance(e, CommitConflictError) and isinstance(e, LanceError)
    assert e.retryable and e.version == 3
    assert CommitConflictError("y").retryable is False


@pytest.mark.parametrize("stable", [False, True])
def test_a_manifest_built_on_the_read_pb_is_the_one_built_on_a_copy(tmp_path, stable):
    """An append's commit turns the manifest it read into the new one instead of copying
    it (``reuse_prev``): the result must be the copy's, fragment ids, row ids, feature
    flags and all, and only the given-over pb may change."""
    root = str(tmp_path / "ds")
    data = pa.table({"a": np.arange(500), "s": [f"v{i % 7}" for i in range(500)]})
    lance.write_dataset(data, root, max_rows_per_file=120, enable_stable_row_ids=stable)
    lance.dataset(root).delete("a < 10")
    read = manifest.read_manifest(paths.latest_version(root).path)
    new = [read.pb.fragments[1], read.pb.fragments[3]]  # any fragments: ids are reassigned
    op = operations.Append(
        fragments=[type(f)(files=f.files, physical_rows=f.physical_rows) for f in new]
    )
    kept, before, count = read.pb.SerializeToString(), read.version, len(read.pb.fragments)
    args = dict(transaction_file="t.txn", writer=("lance-flight", "0"), root=root)
    copied, _ = operations.new_manifest(read.pb, op, **args)
    assert read.pb.SerializeToString() == kept  # copied: untouched
    given, _ = operations.new_manifest(read.pb, op, reuse_prev=True, **args)
    assert given is read.pb
    copied.timestamp.CopyFrom(given.timestamp)
    assert given == copied
    assert [f.id for f in given.fragments][-2:] == [
        given.max_fragment_id - 1,
        given.max_fragment_id,
    ]
    assert given.version == before + 1 and len(given.fragments) == count + len(new)
