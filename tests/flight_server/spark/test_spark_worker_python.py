"""Spark's Python workers run ``PYSPARK_PYTHON`` (else ``python3`` from PATH); outside the venv
that interpreter lacks pyarrow and this package, and the first read would fail inside a worker.
``register`` warns about it; the check runs the worker interpreter for real."""

from __future__ import annotations

import subprocess
import sys

from flight_server.spark import python_problem


def test_an_interpreter_without_the_package_is_reported(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    executable = str(bare / "bin" / "python")
    problem = python_problem(executable, "local[2]")
    assert problem is not None
    assert executable in problem and "PYSPARK_PYTHON" in problem and sys.executable in problem


def test_this_interpreter_and_cluster_masters_pass():
    assert python_problem(sys.executable, "local[*]") is None
    # a cluster's executors have their own interpreters: not checked from the driver
    assert python_problem("/no/such/python", "spark://cluster:7077") is None


def test_a_missing_interpreter_is_reported():
    problem = python_problem("no-such-python-3.99", "local")
    assert problem is not None and "not on PATH" in problem
