"""Lance file and table formats in Python, byte-compatible with the official implementation.

pylance's names are here too (``LanceDataset``, ``lance_format.dataset``, ``.file``,
``.arrow``), so that a pylance script runs with ``import lance_format as lance``.
"""

from . import dataset as _dataset_module  # noqa: F401 - ``lance_format.dataset`` the module
from .blob import Blob, BlobArray, BlobFile, BlobType, blob_array, blob_field
from .cache import SearchCache
from .errors import (
    CommitConflictError,
    CorruptFileError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidDataError,
    LanceError,
    LanceIOError,
    ObjectNotFoundError,
    SchemaError,
    UnsupportedError,
)
from .io import IOStats
from .reader import LanceFileReader
from .table.dataset import Dataset, write_dataset
from .table.dataset import dataset as dataset  # the function shadows the module, as in pylance
from .table.mutation import MergeInsertBuilder
from .table.scanner import ColumnOrdering, Scanner
from .table.udf import BatchUDF, batch_udf
from .writer import LanceFileWriter, WriteResult

LanceDataset = Dataset
LanceScanner = Scanner


def __getattr__(name: str):
    """``lance_format.arrow`` / ``.file`` on first use, as ``lance.arrow`` is reachable after
    ``import lance`` (imported lazily: the arrow module registers an extension type, which
    pylance also does when a process loads both)."""
    if name in ("arrow", "file"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BatchUDF",
    "batch_udf",
    "Blob",
    "BlobArray",
    "BlobFile",
    "BlobType",
    "blob_array",
    "blob_field",
    "ColumnOrdering",
    "CommitConflictError",
    "CorruptFileError",
    "Dataset",
    "DatasetNotFoundError",
    "IOStats",
    "InvalidArgumentError",
    "InvalidDataError",
    "LanceDataset",
    "LanceError",
    "LanceFileReader",
    "LanceFileWriter",
    "LanceIOError",
    "LanceScanner",
    "MergeInsertBuilder",
    "ObjectNotFoundError",
    "SchemaError",
    "SearchCache",
    "UnsupportedError",
    "WriteResult",
    "dataset",
    "write_dataset",
]
