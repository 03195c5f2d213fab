#!/usr/bin/env bash
# The main job: build the demo root (nycflights13 and TPC-H as Lance datasets, written by this
# project) on first run, then inspect one data file with our own reader.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python scripts/make_demo.py --out demo
.venv/bin/lance-flight inspect demo/files/flights.lance --head 5
