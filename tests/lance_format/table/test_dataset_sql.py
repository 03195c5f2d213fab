"""``Dataset.sql`` against pylance 14's (DataFusion there, DuckDB here): the same queries
over the same dataset give the same rows; unnamed aggregates are aliased, since the two
engines name them differently."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import lance_format

QUERIES = [
    "SELECT id, s FROM dataset WHERE id > 6",
    "SELECT s, count(*) AS n, sum(v) AS t FROM dataset GROUP BY s ORDER BY s",
    "SELECT * FROM dataset ORDER BY id LIMIT 2",
    "SELECT max(v) AS m FROM dataset WHERE s IN ('a', 'b')",
]


@pytest.fixture
def uri(tmp_path):
    path = str(tmp_path / "ds")
    table = pa.table({"id": range(10), "s": list("abcdeabcde"), "v": [i / 2 for i in range(10)]})
    lance.write_dataset(table, path, max_rows_per_file=4)
    lance.dataset(path).delete("id = 3")
    return path


def _run(builder) -> pa.Table:
    return pa.Table.from_batches(builder.build().to_batch_records())


@pytest.mark.parametrize("sql", QUERIES)
def test_sql_matches_pylance(uri, sql):
    expected = _run(lance.dataset(uri).sql(sql))
    got = _run(lance_format.dataset(uri).sql(sql))
    assert got.to_pylist() == expected.to_pylist()
    assert got.schema.names == expected.schema.names


def test_sql_options_match_pylance(uri):
    sql = "SELECT id, _rowid, _rowaddr FROM t WHERE id < 6 ORDER BY id"
    results = []
    for lib in (lance, lance_format):
        builder = lib.dataset(uri).sql(sql).table_name("t").with_row_id().with_row_addr()
        results.append(_run(builder.batch_size(2)).to_pylist())
        reader = lib.dataset(uri).sql(sql).table_name("t").with_row_id().with_row_addr()
        results.append(reader.build().to_stream_reader().read_all().to_pylist())
    assert results[0] == results[1] == results[2] == results[3]


def test_a_bad_query_is_a_value_error_as_in_pylance(uri):
    for lib in (lance, lance_format):
        with pytest.raises(ValueError):
            _run(lib.dataset(uri).sql("SELECT id FROM no_such_table"))
