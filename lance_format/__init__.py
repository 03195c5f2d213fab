"""Lance file and table formats in Python, byte-compatible with the official implementation.

pylance's names are here too (``LanceDataset``, ``lance_format.dataset``, ``.file``,
``.arrow``), so that a pylance script runs with ``import lance_format as lance``.
"""

from . import dataset as _dataset_module  # noqa: F401 - ``lance_format.dataset`` the module
from .blob import Blob, BlobArray, BlobFile, BlobType, blob_array, blob_field
from .cache import PageCache, SearchCache
from .errors import (
    CommitConflictError,
    CorruptFileError,
    DatasetExistsError,
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
from .table.fragment import Fragment as LanceFragment
from .table.fragment_metadata import FragmentMetadata
from .table.lance_operation import LanceOperation, Transaction, write_fragments
from .table.mutation import MergeInsertBuilder
from .table.scanner import ColumnOrdering, Scanner
from .table.udf import BatchUDF, batch_udf
from .version import LanceFileVersion
from .writer import LanceFileWriter, WriteResult

LanceDataset = Dataset  # pylance's name for the class
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
    "Blob",
    "BlobArray",
    "BlobFile",
    "BlobType",
    "ColumnOrdering",
    "CommitConflictError",
    "CorruptFileError",
    "Dataset",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "FragmentMetadata",
    "IOStats",
    "InvalidArgumentError",
    "InvalidDataError",
    "LanceDataset",
    "LanceError",
    "LanceFileReader",
    "LanceFileVersion",
    "LanceFileWriter",
    "LanceFragment",
    "LanceIOError",
    "LanceOperation",
    "LanceScanner",
    "MergeInsertBuilder",
    "ObjectNotFoundError",
    "PageCache",
    "SchemaError",
    "SearchCache",
    "Transaction",
    "UnsupportedError",
    "WriteResult",
    "batch_udf",
    "blob_array",
    "blob_field",
    "dataset",
    "write_dataset",
    "write_fragments",
]
