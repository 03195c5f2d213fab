"""Our LanceFileReader against pylance's own reader, on every fixture file.

The truth is always pylance's read of the same file (``LanceFileReader(path).read_all()``),
sliced or taken with pyarrow where pylance's API cannot express the request (unsorted take).
The ``fixture_id`` parameter is supplied by conftest.py: one test per (theme, version).
"""

from __future__ import annotations

import re

import fixtures as fx
import lance
import lance.file
import numpy as np
import pyarrow as pa
import pytest
from fixtures import assert_tables_equal

BATCH = 8192


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _ranges(n: int, page_starts: list[int], rng: np.random.Generator) -> list[tuple[int, int]]:
    """Ranges worth reading: empty ones, edges, and ranges straddling page boundaries."""
    out = {(0, 0), (n, n), (0, n), (n // 2, n // 2)}
    if n:
        out |= {(0, 1), (n - 1, n), (n // 3, (2 * n) // 3)}
    interior = [p for p in page_starts if 0 < p < n]
    if len(interior) > 6:
        interior = [interior[i] for i in rng.choice(len(interior), 6, replace=False)]
    for p in interior:
        out |= {(p - 1, min(n, p + 1)), (p, min(n, p + 1)), (max(0, p - 777), min(n, p + 555))}
    for _ in range(3 if n else 0):
        a = int(rng.integers(0, n))
        out.add((a, int(rng.integers(a, min(n, a + 3000) + 1))))
    return sorted(out)


def _index_sets(n: int, rng: np.random.Generator) -> dict[str, list[int]]:
    if n == 0:
        return {"empty": []}
    k = min(n, 40)
    sorted_unique = sorted(rng.choice(n, k, replace=False).tolist())
    unsorted = rng.permutation(sorted_unique).tolist()
    dups = rng.integers(0, n, k).tolist() + [sorted_unique[0]] * 3
    return {
        "empty": [],
        "first": [0],
        "last": [n - 1],
        "sorted": sorted_unique,
        "unsorted": unsorted,
        "duplicates": dups,
        "first_last": [n - 1, 0, n - 1],
    }


def _struct_paths(schema: pa.Schema, rng: np.random.Generator) -> list[list[str]]:
    """A few nested projections per struct column: its last leaf (deep for nested structs;
    through ``item`` for list<struct>), and two random leaves."""
    out: list[list[str]] = []
    for f in schema:
        paths = fx.struct_leaf_paths(f)
        if not paths:
            continue
        out.append([paths[-1]])
        if len(paths) > 1:
            two = sorted(rng.choice(len(paths), 2, replace=False).tolist())
            out.append([paths[i] for i in two])
    return out


def _pylance_projection(path: str, columns: list[str]) -> pa.Table | None:
    try:
        return fx.pylance_read(path, columns)
    except BaseException as exc:  # pylance raises PanicException (a BaseException) too
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        return None


# --------------------------------------------------------------------------------------------
# Whole-file reads
# --------------------------------------------------------------------------------------------


def test_read_all_matches_pylance(api, lance_file: fx.FixtureFile) -> None:
    r = api.LanceFileReader(lance_file.path)
    expected = lance_file.expected
    assert r.num_rows == expected.num_rows
    assert r.version == lance_file.version
    assert r.schema.equals(expected.schema, check_metadata=True), (
        f"schema differs\nours:\n{r.schema}\npylance:\n{expected.schema}"
    )
    assert_tables_equal(r.read(), expected, lance_file.id)


def test_read_batches_concatenate_to_read(api, lance_file: fx.FixtureFile) -> None:
    r = api.LanceFileReader(lance_file.path)
    expected = lance_file.expected
    batch_size = 977  # deliberately not a power of two: batches straddle chunks and pages
    batches = list(r.read_batches(batch_size=batch_size))
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    assert all(b.num_rows <= batch_size for b in batches)
    assert sum(b.num_rows for b in batches) == expected.num_rows
    assert all(b.schema.equals(expected.schema, check_metadata=True) for b in batches)
    if batches:
        got = pa.Table.from_batches(batches, schema=batches[0].schema)
    else:
        got = expected.schema.empty_table()
    assert_tables_equal(got, expected, lance_file.id)


def test_read_range(api, lance_file: fx.FixtureFile) -> None:
    r = api.LanceFileReader(lance_file.path)
    expected = lance_file.expected
    n = expected.num_rows
    rng = fx.rng_for("ranges", lance_file.id)
    for start, stop in _ranges(n, lance_file.page_starts, rng):
        got = r.read_range(start, stop)
        assert_tables_equal(got, expected.slice(start, stop - start), f"range {start}:{stop}")


def test_read_range_agrees_with_pylance_read_range(api, lance_file: fx.FixtureFile) -> None:
    """The same, with pylance's own read_range as the truth (not a slice of read_all)."""
    n = lance_file.expected.num_rows
    starts = [p for p in lance_file.page_starts if 0 < p < n][:2]
    r = api.LanceFileReader(lance_file.path)
    theirs = lance.file.LanceFileReader(lance_file.path)
    for start in starts or [n // 2]:
        start = max(0, start - 3)
        count = min(n - start, 10)
        exp = theirs.read_range(start, count, batch_size=BATCH).to_table()
        assert_tables_equal(r.read_range(start, start + count), exp, f"range at {start}")


def test_take(api, lance_file: fx.FixtureFile) -> None:
    r = api.LanceFileReader(lance_file.path)
    expected = lance_file.expected
    rng = fx.rng_for("take", lance_file.id)
    for label, idx in _index_sets(expected.num_rows, rng).items():
        got = r.take(idx)
        assert_tables_equal(got, expected.take(pa.array(idx, pa.int64())), f"take {label}")
        got_np = r.take(np.asarray(idx, dtype=np.int64))
        assert_tables_equal(got_np, got, f"take {label} (numpy indices)")


def test_take_sorted_agrees_with_pylance_take(api, lance_file: fx.FixtureFile) -> None:
    n = lance_file.expected.num_rows
    idx = sorted(fx.rng_for("take2", lance_file.id).choice(n, min(n, 25), replace=False).tolist())
    exp = lance.file.LanceFileReader(lance_file.path).take_rows(idx, batch_size=BATCH).to_table()
    assert_tables_equal(api.LanceFileReader(lance_file.path).take(idx), exp, "sorted take")


# --------------------------------------------------------------------------------------------
# Projection
# --------------------------------------------------------------------------------------------


def test_projection_top_level(api, lance_file: fx.FixtureFile) -> None:
    expected = lance_file.expected
    names = expected.column_names
    picks = [[names[0]], list(dict.fromkeys([names[-1], names[0]]))]
    if len(names) > 3:  # three distinct columns, out of schema order
        picks.append(list(dict.fromkeys([names[len(names) // 2], names[1], names[-1]])))
    r = api.LanceFileReader(lance_file.path)
    n = expected.num_rows
    for cols in picks:
        ref = expected.select(cols)
        theirs = _pylance_projection(lance_file.path, cols)
        if theirs is not None:
            assert_tables_equal(theirs, ref, f"pylance columns={cols} vs its full read")
        else:  # known pylance bug: it misreads projections that start at a struct<> column
            assert any(ref.schema.field(c).type == pa.struct([]) for c in cols), (
                f"pylance could not project {cols}"
            )
        assert_tables_equal(r.read(columns=cols), ref, f"read columns={cols}")
        assert_tables_equal(
            r.read_range(n // 4, n // 2, columns=cols), ref.slice(n // 4, n // 2 - n // 4), "range"
        )
        idx = [n - 1, 0, n // 2] if n else []
        assert_tables_equal(r.take(idx, columns=cols), ref.take(pa.array(idx, pa.int64())), "take")
        batches = list(r.read_batches(columns=cols, batch_size=4096))
        got = pa.Table.from_batches(batches, schema=ref.schema) if batches else ref.slice(0, 0)
        assert_tables_equal(got, ref, f"read_batches columns={cols}")


def test_projection_nested(api, fixture_store, nested_fixture_id: tuple[str, str]) -> None:
    lance_file = fixture_store.get(*nested_fixture_id)
    expected = lance_file.expected
    rng = fx.rng_for("nested", lance_file.id)
    projections = _struct_paths(expected.schema, rng)
    assert projections, "conftest only passes themes with struct columns"
    r = api.LanceFileReader(lance_file.path)
    n = expected.num_rows
    for paths in projections:
        ref = fx.prune_to_paths(expected, paths)
        theirs = _pylance_projection(lance_file.path, paths)
        if theirs is not None:  # where pylance can project, it must agree with the reference
            assert_tables_equal(theirs, ref, f"pylance columns={paths} vs pruned full read")
        assert_tables_equal(r.read(columns=paths), ref, f"read columns={paths}")
        idx = [n - 1, 0, n // 3] if n else []
        assert_tables_equal(
            r.take(idx, columns=paths), ref.take(pa.array(idx, pa.int64())), f"take {paths}"
        )


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------

ERROR_FIXTURES = [(t, v) for t in ("primitives", "lists", "empty") for v in fx.VERSIONS]


@pytest.mark.parametrize("theme,version", ERROR_FIXTURES)
def test_unknown_column_is_lance_error(api, fixture_store, theme: str, version: str) -> None:
    f = fixture_store.get(theme, version)
    r = api.LanceFileReader(f.path)
    first = f.expected.column_names[0]
    for bad in (["no_such_column"], [first, "nope"], [f"{first}.not_a_child"], [""]):
        with pytest.raises(api.LanceError):
            r.read(columns=bad)
        with pytest.raises(api.LanceError):
            r.take([0] if f.expected.num_rows else [], columns=bad)
        with pytest.raises(api.LanceError):
            r.read_range(0, 0, columns=bad)
        with pytest.raises(api.LanceError):
            list(r.read_batches(columns=bad))


@pytest.mark.parametrize("theme,version", ERROR_FIXTURES)
def test_out_of_range_is_lance_error(api, fixture_store, theme: str, version: str) -> None:
    f = fixture_store.get(theme, version)
    r = api.LanceFileReader(f.path)
    n = f.expected.num_rows
    for bad in ([n], [0, n + 5] if n else [n + 5], [-1], [2**40]):
        with pytest.raises(api.LanceError):
            r.take(bad)
    for start, stop in ((0, n + 1), (n + 1, n + 2), (-1, 1), (3, 1) if n >= 3 else (1, 0)):
        with pytest.raises(api.LanceError):
            r.read_range(start, stop)


def test_errors_are_the_documented_classes(api) -> None:
    e = api.errors
    for cls in (e.CorruptFileError, e.UnsupportedError, e.InvalidArgumentError, e.SchemaError):
        assert issubclass(cls, api.LanceError)


def test_missing_file_is_lance_error(api, tmp_path) -> None:
    with pytest.raises(api.LanceError):
        api.LanceFileReader(str(tmp_path / "does_not_exist.lance"))


# --------------------------------------------------------------------------------------------
# Blobs
# --------------------------------------------------------------------------------------------


def test_blob_v2_dataset_file_matches_dataset_read(api, blob_v2_file) -> None:
    """2.2 blob v2 (written by write_dataset): pylance's *file* reader cannot read it (see the
    next test), the dataset read returns the descriptor struct; ours must return the same."""
    path, ds_table = blob_v2_file
    r = api.LanceFileReader(path)
    assert r.version == "2.2"
    assert_tables_equal(r.read(), ds_table, "blob v2 descriptors")
    assert_tables_equal(r.take([5, 0, 2]), ds_table.take([5, 0, 2]), "blob v2 take")


def test_pylance_file_reader_still_fails_on_blob_v2(blob_v2_file) -> None:
    """Documents why the oracle above is the dataset read: if pylance learns to read the
    file directly, switch the oracle to it."""
    path, _ = blob_v2_file
    with pytest.raises(ValueError, match="projection specified the column index"):
        lance.file.LanceFileReader(path).read_all().to_table()


def test_blob_v2_descriptors_point_at_the_bytes(blob_v2_file) -> None:
    """Sanity of the blob-v2 fixture: it really holds inline, packed and dedicated blobs."""
    _, ds_table = blob_v2_file
    kinds = [d and d["kind"] for d in ds_table.column("blob").to_pylist()]
    assert {0, 1, 2} <= set(k for k in kinds if k is not None)
    assert None in kinds


# --------------------------------------------------------------------------------------------
# The exclusion list is true (pylance only)
# --------------------------------------------------------------------------------------------

REFUSALS = fx.all_refusals()


@pytest.mark.parametrize(
    "name,version,make,refusal", REFUSALS, ids=[f"{n}-{v}" for n, v, _, _ in REFUSALS]
)
def test_pylance_refuses(tmp_path, name: str, version: str, make, refusal: fx.Refusal) -> None:
    theme_col = name.split(".")
    metadata = None
    if len(theme_col) == 2:
        col = next(c for c in fx.THEMES_BY_NAME[theme_col[0]].columns if c.name == theme_col[1])
        metadata = col.metadata
    arr = make(50, fx.rng_for("refusal", name))
    field = pa.field("x", arr.type, metadata=dict(metadata) if metadata else None)
    table = pa.Table.from_arrays([arr], schema=pa.schema([field]))
    try:
        fx.write_table(str(tmp_path / "refused.lance"), table, version)
        fx.pylance_read(str(tmp_path / "refused.lance"))
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        assert re.search(re.escape(refusal.match), str(exc)), (
            f"pylance failed differently than documented ({refusal.reason}): {exc}"
        )
        return
    pytest.fail(f"pylance now accepts {name} in {version}; documented reason: {refusal.reason}")


def test_pylance_refuses_legacy_in_file_writer(tmp_path) -> None:
    """v1 files can only come from write_dataset (fixtures.write_legacy_file)."""
    t = pa.table({"a": pa.array([1], pa.int32())})
    with pytest.raises(NotImplementedError, match="v1 files must be created"):
        fx.write_table(str(tmp_path / "v1.lance"), t, "legacy")


def test_pylance_cannot_read_zero_column_files(tmp_path) -> None:
    """Why no fixture has zero columns: pylance refuses to read one, so there is no oracle."""
    fx.write_table(str(tmp_path / "nocols.lance"), pa.table({}), "2.2")
    with pytest.raises(ValueError, match="Attempt to read zero columns"):
        fx.pylance_read(str(tmp_path / "nocols.lance"))


# --------------------------------------------------------------------------------------------
# Fixture sanity (pylance only): the files exercise what they claim
# --------------------------------------------------------------------------------------------


def _plain(t: pa.DataType) -> pa.DataType:
    if t == pa.string_view():
        return pa.string()
    if t == pa.binary_view():
        return pa.binary()
    return t


def test_fixture_roundtrips_through_pylance(lance_file: fx.FixtureFile) -> None:
    """pylance reads back what was written (view types come back as string/binary)."""
    src = lance_file.source
    fields = [f.with_type(_plain(f.type)) for f in src.schema]
    src = pa.Table.from_arrays(
        [
            c if c.type == f.type else c.cast(f.type)
            for c, f in zip(src.columns, fields, strict=True)
        ],
        schema=pa.schema(fields, metadata=src.schema.metadata),
    )
    assert_tables_equal(lance_file.expected, src, lance_file.id)


ENCODING_MARKERS_21 = [
    "MiniBlockLayout", "FullZipLayout", "ConstantLayout", "BlobLayout", "InlineBitpacking",
    "OutOfLineBitpacking", "Fsst", "Rle", "ByteStreamSplit", "General", "FixedSizeList",
    "PackedStruct", "dictionary: Some", "has_validity: true", "Lz4", "Zstd", "Variable",
    "NullAndEmptyList", "EmptyableList", "NullableList", "AllValidList",
]  # fmt: skip
ENCODING_MARKERS = {
    "2.0": ["Flat", "Binary", "Dictionary", "List", "FixedSizeList", "SimpleStruct",
            "PackedStruct", "AllNulls", "SomeNulls", "NoNulls"],
    "2.1": ENCODING_MARKERS_21,
    "2.2": ENCODING_MARKERS_21 + ["VariablePackedStruct", "inline_value: Some"],
}  # fmt: skip


@pytest.mark.parametrize("version", fx.VERSIONS)
def test_fixtures_cover_the_encodings(fixture_store, version: str) -> None:
    seen = ""
    for theme, v in fx.FIXTURE_IDS:
        if v != version:
            continue
        meta = lance.file.LanceFileReader(fixture_store.get(theme, v).path).metadata()
        seen += "".join(p.encoding for c in meta.columns for p in c.pages)
    missing = [m for m in ENCODING_MARKERS[version] if m not in seen]
    assert not missing, f"no {version} fixture exercises {missing}"


@pytest.mark.parametrize("version", fx.VERSIONS)
def test_multipage_fixtures_have_pages(fixture_store, version: str) -> None:
    info = fx.inspect_container(fixture_store.get("multipage", version).path)
    assert all(len(p) >= 2 for p in info.pages), [len(p) for p in info.pages]
    starts = fx.page_row_starts(fixture_store.get("multipage", version).path)
    assert len(starts) > 5
    big = fx.inspect_container(fixture_store.get("big", version).path)
    assert max(len(p) for p in big.pages) >= 2
