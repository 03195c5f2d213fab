"""The ``lance_flight`` PySpark data source against a real server (Spark ``local[2]``).

One SparkSession for the module (starting one costs seconds) and one ``lance-flight serve``
subprocess on a temporary root.  Datasets are written by pylance (the oracle), with several
fragments and, in one column, several pages per fragment, so that small ``split_rows`` cut
fragments into several endpoints.  What Spark reads is compared with pylance's read of the
same dataset; what Spark writes is read back with pylance; the pipeline's summary is compared
with the same aggregation done by DuckDB on the source CSV.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import re
import sys
from decimal import Decimal
from pathlib import Path

import duckdb
import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pytest
from flight_fixtures import REPO, serve
from tls_util import make_self_signed_cert
from vector_helpers import write_vector_dataset

from flight_server.auth import hash_password

pyspark = pytest.importorskip("pyspark", reason="pyspark is a test dependency (the spark extra)")

N_ROWS = 6000
ROWS_PER_FILE = 2000


def _source_table() -> pa.Table:
    """Every kind of column the source maps, nulls included."""
    rng = np.random.default_rng(11)
    n = N_ROWS
    ids = np.arange(n, dtype=np.int64)
    valid = rng.random(n) > 0.1
    base_ts = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return pa.table(
        {
            "id": pa.array(ids),
            "i32": pa.array((ids % 97).astype(np.int32), mask=~valid),
            "f64": pa.array(rng.normal(size=n), mask=rng.random(n) < 0.05),
            "s": pa.array([f"{'ab'[i % 2]}-{i % 13}" for i in range(n)], pa.string()),
            "flag": pa.array(ids % 3 == 0),
            "d": pa.array((ids % 400).astype(np.int32), pa.int32()).cast(pa.date32()),
            "ts": pa.array(
                [base_ts + dt.timedelta(seconds=int(i) * 37) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "dec": pa.array([Decimal(int(i) % 1000) / 100 for i in ids], pa.decimal128(9, 2)),
            "tags": pa.array(
                [[int(i), int(i) + 1][: int(i) % 3] for i in ids], pa.list_(pa.int64())
            ),
            "pt": pa.array(
                [{"x": float(i), "y": int(i) % 5} for i in ids],
                pa.struct([("x", pa.float64()), ("y", pa.int32())]),
            ),
        }
    )


def _padded_table(n: int = 20_000) -> pa.Table:
    """A wide string column: pylance cuts it into several pages per fragment (about every
    1 MB), so a small ``split_rows`` splits fragments into page-aligned endpoints."""
    rng = np.random.default_rng(5)
    letters = np.frombuffer(rng.integers(97, 123, n * 100, dtype=np.uint8).tobytes(), "S100")
    pad = pa.array([b.decode() for b in letters], pa.string())
    return pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "pad": pad})


def _write_pylance(table: pa.Table, uri: str, rows_per_file: int) -> lance.LanceDataset:
    """Streamed in small batches, as a writer would: pylance then flushes pages as it goes."""
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=500))
    return lance.write_dataset(reader, uri, max_rows_per_file=rows_per_file)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spark_root")
    _write_pylance(_source_table(), str(path / "multi"), ROWS_PER_FILE)
    _write_pylance(_padded_table(), str(path / "split"), 10_000)
    write_vector_dataset(path / "vectors", n=2000, dim=8, seed=3, rows_per_file=600)
    return path


@pytest.fixture(scope="module")
def server(root: Path):
    with serve(str(root), "--no-warm") as running:
        yield running


@pytest.fixture(scope="module")
def spark():
    """ONE local[2] session for the module; its Python workers run this interpreter and can
    import the repository's packages."""
    from pyspark.sql import SparkSession

    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYTHONPATH")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, saved["PYTHONPATH"]) if p)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("test_spark")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from flight_server.spark import register

    register(session)
    try:
        yield session
    finally:
        session.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _reader(spark, server, **options):
    r = spark.read.format("lance_flight").option("uri", server.location)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def _sorted(table: pa.Table, key: str = "id") -> pa.Table:
    return table.sort_by(key)


def _as_spark_types(expected: pa.Table, got: pa.Table) -> pa.Table:
    """pylance's table in the Arrow types Spark hands back (same values, Spark's spelling)."""
    return expected.select(got.column_names).cast(got.schema)


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def _filter_nodes(plan: str) -> list[str]:
    """The plan's Filter operators (``*(1) Filter (...)``, ``+- Filter ...``)."""
    return [line for line in plan.splitlines() if re.match(r"^[\s+\-*:|()\d]*Filter\b", line)]


def _endpoints(server, command: dict) -> list[flight.FlightEndpoint]:
    with flight.FlightClient(server.location) as client:
        desc = flight.FlightDescriptor.for_command(json.dumps(command).encode())
        return client.get_flight_info(desc).endpoints


def _data_files(uri: Path) -> set[str]:
    data = uri / "data"
    return set(os.listdir(data)) if data.exists() else set()


# -- reads -----------------------------------------------------------------------------------


def test_read_matches_pylance(spark, server, root: Path) -> None:
    df = _reader(spark, server).load("multi")
    expected = lance.dataset(str(root / "multi")).to_table()
    assert df.columns == expected.column_names
    got = _sorted(df.toArrow())
    assert got.num_rows == N_ROWS
    assert got.equals(_sorted(_as_spark_types(expected, got)))
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert types["ts"] == "timestamp" and types["dec"] == "decimal(9,2)"
    assert types["tags"] == "array<bigint>" and types["pt"] == "struct<x:double,y:int>"


def test_partitions_are_the_endpoints(spark, server, root: Path) -> None:
    multi = lance.dataset(str(root / "multi"))
    df = _reader(spark, server).load("multi")
    endpoints = _endpoints(server, {"dataset": "multi", "columns": multi.schema.names})
    assert df.rdd.getNumPartitions() == len(endpoints) == N_ROWS // ROWS_PER_FILE

    split = lance.dataset(str(root / "split"))
    df = _reader(spark, server, split_rows=2000).load("split")
    command = {"dataset": "split", "columns": ["id", "pad"], "split_rows": 2000}
    endpoints = _endpoints(server, command)
    # fragments cut at page boundaries: more endpoints than fragments, one task each
    assert len(endpoints) > len(split.get_fragments()) == 2
    assert df.rdd.getNumPartitions() == len(endpoints)
    got = _sorted(df.toArrow())
    assert got.equals(_sorted(_as_spark_types(split.to_table(), got)))


def test_filters_stay_with_spark(spark, server, root: Path) -> None:
    """The source pushes no filter (Spark 4.3 would reuse a pushdown's read plan for the
    other plans of the DataFrame): every filter stays in Spark's plan, whether Spark's
    filter pushdown is on or off, and the rows are pylance's."""
    from pyspark.sql import functions as F

    df = _reader(spark, server).load("multi")
    pushed = df.filter(
        (F.col("id") >= 1000)
        & (F.col("s").startswith("a-1"))
        & F.col("i32").isNotNull()
        & (F.col("d") < F.lit(dt.date(1970, 6, 1)))
        & (F.col("dec") >= F.lit(Decimal("2.50")))
        & F.col("i32").isin(*range(0, 97, 3))
    )
    kept_by_spark = pushed.filter(F.col("id") % 2 == 0)
    (kept,) = _filter_nodes(_plan(pushed))
    for fragment in ("1000", "isnotnull(i32", "StartsWith", "2.50", "1970"):
        assert fragment in kept, kept

    t = lance.dataset(str(root / "multi")).to_table()
    d_limit = pa.scalar(dt.date(1970, 6, 1), pa.date32())
    dec_limit = pa.scalar(Decimal("2.50"), pa.decimal128(9, 2))
    masks = [
        pc.greater_equal(t["id"], 1000),
        pc.starts_with(t["s"], "a-1"),
        pc.is_valid(t["i32"]),
        pc.less(t["d"], d_limit),
        pc.greater_equal(t["dec"], dec_limit),
        pc.is_in(t["i32"], pa.array(range(0, 97, 3), pa.int32())),
    ]
    mask = masks[0]
    for m in masks[1:]:
        mask = pc.and_(mask, m)
    expected = t.filter(mask)
    assert expected.num_rows > 10
    got = sorted(r.id for r in pushed.select("id").collect())
    assert got == sorted(expected["id"].to_pylist())
    even = sorted(r.id for r in kept_by_spark.select("id").collect())
    assert even == [i for i in got if i % 2 == 0] and even
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        assert pushed.count() == len(got) and df.count() == N_ROWS
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def _ids(df) -> list[int]:
    return sorted(r.id for r in df.select("id").collect())


def _truth_ids(root: Path, sql_filter: str | None = None) -> list[int]:
    """pylance's rows (through its own SQL filter): the truth Spark's answers are held to."""
    table = lance.dataset(str(root / "multi")).to_table(columns=["id"], filter=sql_filter)
    return sorted(table["id"].to_pylist())


def test_readme_sequence_filter_then_unfiltered_uses(spark, server, root: Path) -> None:
    """The README's sequence: load, a filtered aggregate, then the SAME DataFrame written to
    a copy and counted: the unfiltered uses see every row, not the filtered plan's rows."""
    df = _reader(spark, server).load("multi")
    grouped = {
        r["flag"]: r["count"] for r in df.filter("i32 < 24").groupBy("flag").count().collect()
    }
    t = lance.dataset(str(root / "multi")).to_table(filter="i32 < 24")
    assert grouped == {flag: pc.sum(pc.equal(t["flag"], flag)).as_py() for flag in (True, False)}
    _writer(df, server, "append").save("readme_copy")
    copy = lance.dataset(str(root / "readme_copy"))
    assert copy.count_rows() == N_ROWS
    assert sorted(copy.to_table(columns=["id"])["id"].to_pylist()) == list(range(N_ROWS))
    assert df.filter("i32 < 24").count() == t.num_rows
    assert df.count() == N_ROWS
    assert _ids(df) == list(range(N_ROWS))
    # the ``filter`` option is part of the DataFrame: the server runs it for every use
    narrowed = _reader(spark, server, filter="id < 3000").load("multi")
    assert _ids(narrowed.filter("s >= 'b'")) == _truth_ids(root, "id < 3000 AND s >= 'b'")
    assert narrowed.count() == 3000


def test_differently_filtered_dataframes_of_one_load(spark, server, root: Path) -> None:
    """Two filtered DataFrames of one loaded DataFrame, used alternately, together in one
    query, and around unfiltered and cached uses: each sees exactly its own rows."""
    df = _reader(spark, server).load("multi")
    low, b_rows = df.filter("id < 1500"), df.filter("s >= 'b'")
    truth_low, truth_b = _truth_ids(root, "id < 1500"), _truth_ids(root, "s >= 'b'")
    assert 0 < len(truth_low) < N_ROWS and 0 < len(truth_b) < N_ROWS
    assert _ids(low) == truth_low
    assert _ids(b_rows) == truth_b
    assert low.count() == len(truth_low)
    assert df.count() == N_ROWS
    assert b_rows.count() == len(truth_b)
    assert _ids(low.unionAll(b_rows)) == sorted(truth_low + truth_b)  # both in one query
    both = low.join(b_rows.select("id"), "id")
    assert _ids(both) == sorted(set(truth_low) & set(truth_b))
    assert _ids(df) == list(range(N_ROWS))
    cached = df.cache()
    try:
        assert cached.filter("id < 1500").count() == len(truth_low)
        assert cached.count() == N_ROWS
        assert _ids(cached.filter("s >= 'b'")) == truth_b
    finally:
        cached.unpersist()
    assert df.filter("id < 1500").count() == len(truth_low) and df.count() == N_ROWS


def test_projection(spark, server, root: Path) -> None:
    expected = _sorted(lance.dataset(str(root / "multi")).to_table(columns=["id", "s", "pt"]))
    by_option = _reader(spark, server, columns="id, s,pt").load("multi")
    assert by_option.columns == ["id", "s", "pt"]
    by_schema = (
        _reader(spark, server).schema("id long, s string, pt struct<x:double,y:int>").load("multi")
    )
    for df in (by_option, by_schema):
        got = _sorted(df.toArrow())
        assert got.equals(_as_spark_types(expected, got))
    picked = _reader(spark, server).load("multi").select("s", "id").filter("id < 5")
    assert [(r.s, r.id) for r in picked.orderBy("id").collect()] == [
        (s, i) for s, i in zip(expected["s"].to_pylist()[:5], range(5), strict=True)
    ]


def test_categorical_columns(spark, server, root: Path) -> None:
    """A pandas categorical (an Arrow dictionary column) reaches Spark as its values: the
    streams carry the dictionaries, one per fragment here, and Spark reads their values."""
    import pandas as pd

    n = 1500
    frame = pd.DataFrame(
        {
            "id": np.arange(n, dtype=np.int64),
            "color": pd.Categorical(np.resize(["red", "green", None, "blue"], n)),
        }
    )
    lance.write_dataset(
        pa.Table.from_pandas(frame, preserve_index=False), str(root / "cats"), max_rows_per_file=500
    )
    df = _reader(spark, server).load("cats")
    assert dict((f.name, f.dataType.simpleString()) for f in df.schema.fields) == {
        "id": "bigint",
        "color": "string",
    }
    expected = lance.dataset(str(root / "cats")).to_table()
    got = [(r.id, r.color) for r in df.orderBy("id").collect()]
    assert got == list(
        zip(
            expected["id"].to_pylist(), expected["color"].cast(pa.string()).to_pylist(), strict=True
        )
    )


def test_version_pinned(spark, server, root: Path) -> None:
    uri = str(root / "versions")
    lance.write_dataset(
        pa.table({"id": pa.array(range(100), pa.int64())}), uri, max_rows_per_file=40
    )
    snapshot = _reader(spark, server).load("versions")  # pinned at load: version 1
    # planned now (pushed filter): get_flight_info pins version 1 in every ticket
    planned = _reader(spark, server).load("versions").filter("id >= 50").rdd
    lance.write_dataset(pa.table({"id": pa.array(range(100, 150), pa.int64())}), uri, mode="append")
    assert lance.dataset(uri).version == 2
    # the planned query runs after the commit, and still reads version 1 in every partition
    assert sorted(planned.map(lambda row: row.id).collect()) == list(range(50, 100))
    assert snapshot.count() == 100  # a DataFrame reads the version latest at its load
    assert _reader(spark, server).load("versions").count() == 150  # loaded again: latest
    assert _reader(spark, server, version=1).load("versions").count() == 100
    lance.dataset(uri).tags.create("first", 1)
    tagged = _reader(spark, server, version="first").load("versions")
    assert sorted(r.id for r in tagged.filter("id > 97").collect()) == [98, 99]


# -- writes ----------------------------------------------------------------------------------


def _frame(spark, start: int, stop: int, parts: int):
    from pyspark.sql import functions as F

    return (
        spark.range(start, stop, 1, parts)
        .withColumn("name", F.concat(F.lit("n"), F.col("id").cast("string")))
        .withColumn("score", (F.col("id") * 0.5).cast("double"))
        .withColumn("day", F.date_add(F.lit(dt.date(2020, 1, 1)), F.col("id").cast("int")))
    )


def _writer(df, server, mode: str):
    return df.write.format("lance_flight").mode(mode).option("uri", server.location)


def test_write_append_and_overwrite(spark, server, root: Path) -> None:
    uri = root / "written"
    _writer(_frame(spark, 0, 1000, 3), server, "append").save("written")  # absent: created
    ds = lance.dataset(str(uri))
    assert ds.version == 1 and ds.count_rows() == 1000
    assert len(ds.get_fragments()) == 3  # one staged put per task, ONE commit
    t = ds.to_table().sort_by("id")
    assert t["id"].to_pylist() == list(range(1000))
    assert t["name"].to_pylist() == [f"n{i}" for i in range(1000)]
    assert t["day"][10].as_py() == dt.date(2020, 1, 11)

    _writer(_frame(spark, 1000, 1600, 2), server, "append").save("written")
    ds = lance.dataset(str(uri))
    assert ds.version == 2
    assert sorted(ds.to_table(columns=["id"])["id"].to_pylist()) == list(range(1600))
    assert ds.schema.field("score").type == pa.float64()

    _writer(_frame(spark, 5000, 5010, 2), server, "overwrite").save("written")
    ds = lance.dataset(str(uri))
    assert ds.version == 3
    assert sorted(ds.to_table(columns=["id"])["id"].to_pylist()) == list(range(5000, 5010))
    assert lance.dataset(str(uri), version=2).count_rows() == 1600


def _failing_job(spark):
    """Two small partitions that stage and succeed, then a big one whose UDF raises after it
    streamed most of its rows (late enough that no other task is still running)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    @F.udf(LongType())
    def explode_late(i: int) -> int:
        if i >= 3900:
            raise ValueError(f"boom at {i}")
        return i

    small, big = _frame(spark, 0, 200, 2), _frame(spark, 200, 4000, 1)
    failing = small.union(big).withColumn("id", explode_late(F.col("id")))
    assert failing.rdd.getNumPartitions() == 3
    return failing


@pytest.fixture
def small_batches(spark):
    """Arrow batches of 100 rows, so the failing task streams several before it fails."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    yield
    spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_failed_job_commits_nothing(spark, server, root: Path, small_batches) -> None:
    """Nothing committed and no staged file left, including the failing task's own stage:
    its writer sees its input end cleanly (the UDF fails in another Python worker), stages,
    and Spark drops its commit message; only the job scope of the staged puts names it."""
    uri = root / "fails"
    _writer(_frame(spark, 0, 100, 1), server, "append").save("fails")
    expected = lance.dataset(str(uri)).to_table().sort_by("id")
    before = _data_files(uri)
    assert before == {f.path for f in lance.dataset(str(uri)).get_fragments()[0].data_files()}
    for mode in ("append", "overwrite"):
        with pytest.raises(Exception, match="boom at"):
            _writer(_failing_job(spark), server, mode).save("fails")
        ds = lance.dataset(str(uri))
        assert ds.version == 1 and ds.to_table().sort_by("id").equals(expected)
        assert _data_files(uri) == before
    with pytest.raises(Exception, match="boom at"):
        _writer(_failing_job(spark), server, "append").save("never_created")
    assert not (root / "never_created" / "_versions").exists()
    assert _data_files(root / "never_created") == set()
    with pytest.raises(ValueError, match="not found"):
        lance.dataset(str(root / "never_created"))


def test_staging_cleanup_paths(server, root: Path) -> None:
    """What the data source removes, driven without Spark: a task whose input raises discards
    its own stage; ``abort`` removes every stage of the job, reported or dropped; a task
    still running after the abort is refused and keeps nothing; ``commit`` removes the
    job's stages it did not commit (a retried or dropped attempt)."""
    from flight_server.spark.source import Connection, LanceFlightWriter

    uri = root / "staging"
    lance.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64())}), str(uri))
    before = _data_files(uri)
    conn = Connection(server.location)
    schema = pa.schema([("id", pa.int64())])
    batch = pa.record_batch([pa.array(range(10), pa.int64())], schema=schema)

    def broken():
        yield batch
        yield batch
        raise RuntimeError("input failed")

    writer = LanceFlightWriter(conn, "staging", schema, "append", 1, {})
    with pytest.raises(RuntimeError, match="input failed"):
        writer.write(broken())
    assert _data_files(uri) == before

    done = [writer.write(iter([batch] * 3)) for _ in range(2)]
    assert [m.rows for m in done] == [30, 30] and all(m.fragments for m in done)
    writer.write(iter([batch]))  # a task whose commit message Spark drops
    assert len(_data_files(uri) - before) == 3  # staged, not committed
    writer.abort([done[0], None, done[1]])
    assert _data_files(uri) == before and lance.dataset(str(uri)).version == 1
    with pytest.raises(flight.FlightServerError, match="FAILED_PRECONDITION"):
        writer.write(iter([batch]))  # a task that starts after the abort
    assert _data_files(uri) == before

    writer = LanceFlightWriter(conn, "staging", schema, "append", 1, {})  # the next job
    commit = [writer.write(iter([batch])) for _ in range(2)]
    writer.write(iter([batch] * 2))  # a failed attempt's stage, retried as commit[1]
    writer.commit(commit)  # ONE transaction for both tasks' fragments
    ds = lance.dataset(str(uri))
    assert ds.version == 2 and ds.count_rows() == 22
    referenced = {df.path for f in ds.get_fragments() for df in f.data_files()}
    assert _data_files(uri) == referenced and len(referenced) == 3


def test_auth_and_tls(spark, root: Path, tmp_path: Path) -> None:
    cert, key = make_self_signed_cert(tmp_path)
    users = tmp_path / "users"
    users.write_text(f"writer:{hash_password('s3cret', iterations=1000)}:write\n")
    args = ("--no-warm", "--tls-cert", str(cert), "--tls-key", str(key), "--auth-users", str(users))
    with serve(str(root), *args) as secured:
        assert secured.location.startswith("grpc+tls://")
        opts = {
            "uri": secured.location,
            "tls_root_certs": str(cert),
            "username": "writer",
            "password": "s3cret",
        }
        df = spark.read.format("lance_flight").options(**opts).load("multi")
        assert df.filter("id < 10").count() == 10
        _frame(spark, 0, 50, 2).write.format("lance_flight").mode("append").options(**opts).save(
            "secured"
        )
        assert lance.dataset(str(root / "secured")).count_rows() == 50
        bad = {**opts, "password": "wrong"}
        with pytest.raises(Exception, match="(?i)unauthenticated|invalid"):
            spark.read.format("lance_flight").options(**bad).load("multi").count()


# -- the pipeline ------------------------------------------------------------------------------


def _pipeline_module():
    spec = importlib.util.spec_from_file_location(
        "pipeline", os.path.join(REPO, "scripts", "pipeline.py")
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["pipeline"] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def test_pipeline_summary_matches_duckdb(spark, server, root: Path, tmp_path: Path) -> None:
    pipeline = _pipeline_module()
    opts = pipeline.Options(server.location, split_rows=50_000)
    result = pipeline.run(spark, opts)
    assert not result.ingest_skipped and result.source_rows == 336_776

    csv = pipeline.extract_flights_csv(str(tmp_path))
    expected = duckdb.sql(
        f"""
        SELECT carrier, month, count(*) AS flights, count(*) - count(dep_delay) AS cancelled,
               avg(dep_delay) AS mean_dep_delay, max(dep_delay) AS max_dep_delay,
               avg(arr_delay) AS mean_arr_delay, max(arr_delay) AS max_arr_delay,
               avg(CASE WHEN arr_delay IS NULL THEN NULL WHEN arr_delay > 15 THEN 1.0 ELSE 0.0 END)
                 AS share_arr_delayed_15
        FROM read_csv('{csv}', header=true, nullstr='NA')
        GROUP BY carrier, month ORDER BY carrier, month
        """
    ).fetchall()
    stored = (
        lance.dataset(str(root / opts.summary))
        .to_table()
        .sort_by([("carrier", "ascending"), ("month", "ascending")])
    )
    assert stored.column_names == list(pipeline.SUMMARY_COLUMNS)
    got = [tuple(r.values()) for r in stored.to_pylist()]
    assert len(got) == len(expected) > 150
    for g, e in zip(got, expected, strict=True):
        assert g[:4] == tuple(e[:4]) and g[5] == e[5] and g[7] == e[7]
        for i in (4, 6, 8):
            assert (
                g[i] == pytest.approx(float(e[i]), rel=1e-12, abs=1e-12)
                if e[i] is not None
                else g[i] is None
            )
    assert [tuple(r) for r in result.summary_rows] == got  # what it printed is what it stored

    flights = lance.dataset(str(root / opts.flights))
    version = flights.version
    assert flights.count_rows() == 336_776
    again = pipeline.ingest(spark, opts, csv, result.source_rows)  # re-run: up to date
    assert again == (True, version) and lance.dataset(str(root / opts.flights)).version == version


def test_nearest_option(spark, server, root: Path) -> None:
    """A ``nearest`` search is one partition with the k rows pylance finds.  A filter Spark
    applies itself runs after the search (pylance's post-filter); the ``filter`` option with
    ``prefilter`` runs before it, so k rows come back."""
    q = np.random.default_rng(9).standard_normal(8).astype(np.float32)
    nearest = {"column": "vec", "q": q.tolist(), "k": 15}
    theirs = lance.dataset(str(root / "vectors"))
    for prefilter in (False, True):
        options = {"columns": "id,label", "nearest": json.dumps(nearest)}
        if prefilter:
            options.update(filter="id % 2 = 0", prefilter="true")
        df = _reader(spark, server, **options).load("vectors")
        assert df.rdd.getNumPartitions() == 1
        got = df.filter("id % 2 = 0").orderBy("_distance", "id").toArrow()
        want = theirs.to_table(
            columns=["id", "label"],
            nearest={**nearest, "q": q},
            filter="id % 2 = 0",
            prefilter=prefilter,
        )
        assert got["id"].to_pylist() == want["id"].to_pylist()
        assert len(want) == 15 if prefilter else len(want) < 15
        np.testing.assert_allclose(
            got["_distance"].to_numpy(), want["_distance"].to_numpy(), rtol=1e-6
        )
    with pytest.raises(Exception, match="nearest"):
        _reader(spark, server, nearest="[1, 2]").load("vectors").count()
