#!/usr/bin/env bash
# Set up and run the checks CI runs: lint, format, protobuf freshness and the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -q -n 2 "$@"
