#!/usr/bin/env bash
# Set up and run the checks CI runs: lint, format, protobuf freshness and the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
# the Spark tests run PySpark in local mode, which needs a Java runtime (17 or newer)
if ! command -v java >/dev/null 2>&1; then
  echo "error: Java (17+) is not installed; the Spark tests need it (apt-get install openjdk-17-jre-headless)" >&2
  exit 1
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# compile the numba kernels once (numba caches them in __pycache__), so that the test servers
# the workers start load them instead of each compiling them at once
.venv/bin/python -c "from flight_server.serve import compile_kernels; compile_kernels()"
.venv/bin/python -m pytest -q -n 2 "$@"
