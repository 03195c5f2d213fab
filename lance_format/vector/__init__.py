"""Vector search over a dataset: distance metrics, the ``nearest`` query, exact k-NN.

This package sits beside the table layer: it reads through the table scanner and adds the
nearest-neighbour semantics pylance gives ``to_table(nearest=...)``.
"""

from .ivf import index_metric, vector_details
from .metrics import METRICS, normalise_metric
from .query import NearestQuery, parse_nearest
from .search import VectorScanner
from .tables import vec_to_table

__all__ = [
    "METRICS",
    "NearestQuery",
    "VectorScanner",
    "index_metric",
    "normalise_metric",
    "parse_nearest",
    "vec_to_table",
    "vector_details",
]
