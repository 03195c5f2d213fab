#!/usr/bin/env bash
# Set up a fresh machine: a virtualenv in .venv with the project and its test extras.
# Everything the project needs is installed from here: system packages (a Java runtime for
# PySpark, openssl for the TLS tests) through apt when they are missing, the rest with pip.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "lance-flight needs Python >= 3.11 (found $("$PY" --version 2>&1))" >&2
  exit 1
fi
missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing system packages: ${missing[*]}" >&2
  $SUDO apt-get update -q && $SUDO apt-get install -y -q "${missing[@]}"
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
