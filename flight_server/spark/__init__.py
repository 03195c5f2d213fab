"""Spark over Flight: the ``lance_flight`` PySpark data source (needs ``pyspark>=4.1``, the
``spark`` extra, and Java 17 for Spark itself).

``register(spark)`` makes ``spark.read.format("lance_flight")`` and
``df.write.format("lance_flight")`` available; :mod:`.source` holds the data source.  It
pushes no filters to the server (Spark 4.x reuses a pushed filter across reads of one
DataFrame); a ``filter`` option runs on the server instead.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from typing import Any

__all__ = ["python_problem", "register", "worker_python_problem"]

log = logging.getLogger(__name__)


def register(spark: Any) -> None:
    """Register the ``lance_flight`` data source with a SparkSession, warning when Spark's
    local Python workers could not import this package."""
    from .source import register as _register  # imports pyspark only when used

    problem = worker_python_problem(spark)
    if problem:
        log.warning("lance_flight: %s", problem)
    _register(spark)


def worker_python_problem(spark: Any) -> str | None:
    """Why Spark's local Python workers cannot run the data source, or None.

    Spark starts its Python workers with ``PYSPARK_PYTHON`` as it was when the session
    started, else ``python3`` from ``PATH``: outside an activated virtualenv that interpreter
    lacks this package, and the first read fails in a worker with an obscure error."""
    try:
        context = spark.sparkContext
        executable, master = context.pythonExec, context.master
    except Exception:  # Spark Connect sessions have no local context
        return None
    return python_problem(executable, master)


def python_problem(executable: str, master: str) -> str | None:
    """Why ``executable`` cannot serve as the Python worker of a Spark ``master``, or None.
    Checked in local mode only (a cluster's executors have interpreters of their own)."""
    if not str(master).startswith("local") or executable == sys.executable:
        return None
    path = shutil.which(executable)
    if path is None:
        return f"Spark's Python workers run {executable!r}, which is not on PATH"
    check = subprocess.run(
        [path, "-c", "import flight_server.spark.source"],
        capture_output=True,
        timeout=120,
        env=os.environ.copy(),
    )
    if check.returncode == 0:
        return None
    return (
        f"Spark's Python workers run {path}, which cannot import flight_server; set "
        f"os.environ['PYSPARK_PYTHON'] = sys.executable ({sys.executable}) before the "
        "SparkSession starts"
    )
