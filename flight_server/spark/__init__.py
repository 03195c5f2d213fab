"""Spark over Flight: the ``lance_flight`` PySpark data source (needs ``pyspark>=4.1``, the
``spark`` extra, and Java 17 for Spark itself).

``register(spark)`` makes ``spark.read.format("lance_flight")`` and
``df.write.format("lance_flight")`` available; :mod:`.source` holds the data source,
:mod:`.filters` the translation of Spark's pushed filters into the server's SQL predicates.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the ``lance_flight`` data source with a SparkSession."""
    from .source import register as _register  # imports pyspark only when used

    _register(spark)
