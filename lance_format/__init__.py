"""Lance file and table formats in Python, byte-compatible with the official implementation.

pylance's names are here too (``LanceDataset``, ``lance_format.dataset``, ``.file``,
``.arrow``), so that a pylance script runs with ``import lance_format as lance``.

The public API is ``__all__`` plus the modules in :data:`PUBLIC_MODULES`; besides pylance's
names these carry what a service needs and pylance keeps in Rust: the dataset directory
layout (:mod:`.layout`), tags by path (:mod:`.tags`), staged writes (:mod:`.staging`),
versions written safely for concurrent clients (:mod:`.service_write`), and the row id
column names (:data:`ROW_ID`, :data:`ROW_ADDRESS`).  The layers below (``table``,
``container``, ``structural``, ``compression``, ...) may change without notice.
"""

from . import dataset as _dataset_module  # noqa: F401 - ``lance_format.dataset`` the module
from .blob import Blob, BlobArray, BlobColumn, BlobFile, BlobType, blob_array, blob_field
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
from .table.scanner import ROW_ADDRESS, ROW_ID, ColumnOrdering, Scanner
from .table.udf import BatchUDF, batch_udf
from .version import LanceFileVersion
from .workers import close_iterator, on_each_thread, prefetch
from .writer import LanceFileWriter, WriteResult

LanceDataset = Dataset  # pylance's name for the class
LanceScanner = Scanner

# The public modules (with the names in ``__all__``); the Flight service imports nothing
# else from this package (tests/flight_server/test_public_api.py).
PUBLIC_MODULES = (
    "lance_format",
    "lance_format.arrow",
    "lance_format.dataset",
    "lance_format.errors",
    "lance_format.file",
    "lance_format.fragment",
    "lance_format.layout",
    "lance_format.progress",
    "lance_format.schema",
    "lance_format.service_write",
    "lance_format.staging",
    "lance_format.storage",
    "lance_format.tags",
    "lance_format.validation",
    "lance_format.vector",
    "lance_format.version",
)


def compile_kernels() -> int:
    """Compile (or load from numba's on-disk cache) every kernel of the codecs and of vector
    search, so that a server pays for compilation before its first request; returns how
    many signatures are ready."""
    from . import reader, writer  # noqa: F401 - they import the codecs' kernels
    from .jit import warm_up
    from .vector import build, ivf, metrics  # noqa: F401 - vector search kernels

    return warm_up()


def __getattr__(name: str):
    """``lance_format.arrow`` / ``.file`` on first use, as ``lance.arrow`` is reachable after
    ``import lance`` (imported lazily: the arrow module registers an extension type, which
    pylance also does when a process loads both)."""
    if name in ("arrow", "file"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PUBLIC_MODULES",
    "ROW_ADDRESS",
    "ROW_ID",
    "compile_kernels",
    "prefetch",
    "close_iterator",
    "on_each_thread",
    "BatchUDF",
    "Blob",
    "BlobArray",
    "BlobColumn",
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
    "Scanner",
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
