#!/usr/bin/env bash
# Set up a fresh machine: a virtualenv in .venv with the project installed from its own files.
#
#   bash scripts/setup.sh serve   # the server and the demo data tools only (runtime + `demo` extra)
#   bash scripts/setup.sh test    # everything the test suite needs (the `test` extra, Java, openssl)
#
# pip runs only when pyproject.toml changed since the last successful run of that mode (or of
# `test`, which installs a superset of `serve`): the stamp .venv/.setup-<mode> holds its hash,
# so a second start costs no network and no time.  The project is installed in editable mode,
# so code changes need no re-install.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-test}
case "$MODE" in
  serve) EXTRAS="demo" ;;
  test) EXTRAS="test" ;;
  *) echo "usage: bash scripts/setup.sh [serve|test]" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "lance-flight needs Python >= 3.11 with venv (found: $("$PY" --version 2>&1 || echo none)); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if [ "$MODE" = test ]; then
  # the Spark tests need a Java runtime, the TLS tests openssl: through apt when missing
  missing=()
  command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "installing system packages: ${missing[*]}" >&2
    $SUDO apt-get update -q && $SUDO apt-get install -y -q "${missing[@]}"
  fi
fi
HASH=$(sha256sum pyproject.toml | cut -d' ' -f1)
for done_mode in "$MODE" test; do
  if [ -x .venv/bin/python ] && [ "$(cat ".venv/.setup-$done_mode" 2>/dev/null)" = "$HASH" ]; then
    exit 0  # already installed from this pyproject.toml
  fi
done
[ -x .venv/bin/python ] || "$PY" -m venv .venv
echo "installing lance-flight[$EXTRAS] into .venv (once; again only when pyproject.toml changes)" >&2
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]"
echo "$HASH" > ".venv/.setup-$MODE"
