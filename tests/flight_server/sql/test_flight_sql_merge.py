"""``MERGE INTO`` over Flight SQL (ADBC), compared with pylance's ``merge_insert`` on a copy
of the same data: the same rows after one commit, the same counts."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest
from flight_sql_helpers import adbc_connect, running_server

TARGET = pa.table(
    {
        "id": pa.array(range(20), pa.int64()),
        "v": [float(i) for i in range(20)],
        "s": [f"s{i}" for i in range(20)],
    }
)
SOURCE = pa.table(
    {
        "id": pa.array(range(15, 25), pa.int64()),
        "v": [100.0 + i for i in range(10)],
        "s": [f"n{i}" for i in range(10)],
    }
)


@pytest.fixture
def env(tmp_path):
    lance.write_dataset(TARGET, tmp_path / "root" / "t", max_rows_per_file=8)
    lance.write_dataset(SOURCE, tmp_path / "root" / "src")
    ref = lance.write_dataset(TARGET, tmp_path / "ref", max_rows_per_file=8)
    with running_server(str(tmp_path / "root")) as server:
        conn = adbc_connect(server)
        cur = conn.cursor()
        yield tmp_path, cur, ref
        cur.close()
        conn.close()


def _rows(path) -> pa.Table:
    return lance.dataset(str(path)).to_table().sort_by("id")


@pytest.mark.parametrize(
    "sql, pylance",
    [
        (
            "MERGE INTO t USING src ON t.id = src.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
            lambda b: b.when_matched_update_all().when_not_matched_insert_all(),
        ),
        (
            "MERGE INTO t AS tt USING src AS ss ON tt.id = ss.id "
            "WHEN MATCHED AND ss.v > 102 THEN UPDATE SET v = ss.v, s = ss.s",
            lambda b: b.when_matched_update_all("source.v > 102"),
        ),
        (
            "MERGE INTO t USING src ON t.id = src.id WHEN NOT MATCHED THEN INSERT (id, v, s) "
            "VALUES (src.id, src.v, src.s) WHEN NOT MATCHED BY SOURCE AND t.id < 5 THEN DELETE",
            lambda b: b.when_not_matched_insert_all().when_not_matched_by_source_delete("id < 5"),
        ),
        (
            "MERGE INTO t USING (SELECT * FROM src WHERE id < 18) AS s2 ON t.id = s2.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED BY SOURCE THEN DELETE",
            lambda b: b.when_matched_update_all().when_not_matched_by_source_delete(),
        ),
    ],
)
def test_merge_into_as_pylance(env, sql, pylance):
    tmp_path, cur, ref = env
    cur.execute(sql)
    source = SOURCE.filter(pa.compute.less(SOURCE["id"], 18)) if "id < 18" in sql else SOURCE
    stats = pylance(ref.merge_insert("id")).execute(source)
    assert cur.rowcount == sum(stats.values())
    assert lance.dataset(str(tmp_path / "root" / "t")).version == 2  # one commit
    assert _rows(tmp_path / "root" / "t").equals(ref.to_table().sort_by("id"))


def test_merge_into_specials(env):
    tmp_path, cur, _ = env
    path = tmp_path / "root" / "t"
    # matched rows deleted, omitted insert columns are NULL
    cur.execute(
        "MERGE INTO t USING (VALUES (1, 'x'), (99, 'y')) AS v(k, name) ON t.id = v.k "
        "WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT (id, s) VALUES (v.k, v.name)"
    )
    assert cur.rowcount == 2
    got = _rows(path)
    assert 1 not in got.column("id").to_pylist()
    assert got.filter(pa.compute.equal(got["id"], 99)).to_pylist() == [
        {"id": 99, "v": None, "s": "y"}
    ]
    # literals of other types (DuckDB's DECIMAL, INTEGER) take the columns' types
    cur.execute(
        "MERGE INTO t AS p USING (VALUES (2, 0.5), (30000, 1.5)) AS s(id, x) ON p.id = s.id "
        "WHEN MATCHED THEN UPDATE SET v = s.x WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.x)"
    )
    assert cur.rowcount == 2
    got = _rows(path)
    assert got.filter(pa.compute.is_in(got["id"], pa.array([2, 30000]))).to_pylist() == [
        {"id": 2, "v": 0.5, "s": "s2"},
        {"id": 30000, "v": 1.5, "s": None},
    ]
    # nothing to do: nothing committed
    version = lance.dataset(str(path)).version
    cur.execute(
        "MERGE INTO t USING src ON t.id = src.id AND src.id > 1000 WHEN MATCHED THEN DELETE"
    )
    assert cur.rowcount == 0 and lance.dataset(str(path)).version == version
    import adbc_driver_flightsql.dbapi as dbapi

    for bad, match in [
        (
            "MERGE INTO t USING (VALUES (2), (2)) AS v(k) ON t.id = v.k WHEN MATCHED THEN DELETE",
            "ambiguous",
        ),
        (
            "MERGE INTO t USING src ON t.id = src.id WHEN MATCHED AND src.v > 1 THEN DELETE "
            "WHEN MATCHED THEN UPDATE SET v = 0",
            "several",
        ),
        (
            "MERGE INTO t USING src ON t.id = src.id WHEN NOT MATCHED BY SOURCE THEN UPDATE SET v = 0",
            "DELETE only",
        ),
        (
            "MERGE INTO t USING src ON t.id = src.id WHEN MATCHED THEN DELETE RETURNING *",
            "RETURNING",
        ),
    ]:
        with pytest.raises(dbapi.Error, match=match):
            cur.execute(bad)
    assert lance.dataset(str(path)).version == version
