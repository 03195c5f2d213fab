#!/usr/bin/env bash
# Set up a fresh machine: a virtualenv in .venv with the project and its test extras.
# Everything the project needs is installed from here (no system packages are needed yet).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "lance-flight needs Python >= 3.11 (found $("$PY" --version 2>&1))" >&2
  exit 1
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
