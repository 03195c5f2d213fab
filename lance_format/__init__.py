"""Lance file and table formats in Python, byte-compatible with the official implementation."""

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
from .table.dataset import Dataset, dataset, write_dataset
from .table.fragment import Fragment as LanceFragment
from .table.fragment_metadata import FragmentMetadata
from .table.lance_operation import LanceOperation, Transaction, write_fragments
from .version import LanceFileVersion
from .writer import LanceFileWriter, WriteResult

LanceDataset = Dataset  # pylance's name for the class

__all__ = [
    "Dataset",
    "FragmentMetadata",
    "LanceDataset",
    "LanceFragment",
    "LanceOperation",
    "CommitConflictError",
    "CorruptFileError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "IOStats",
    "InvalidArgumentError",
    "InvalidDataError",
    "LanceError",
    "LanceFileReader",
    "LanceFileVersion",
    "LanceFileWriter",
    "LanceIOError",
    "ObjectNotFoundError",
    "PageCache",
    "SchemaError",
    "SearchCache",
    "Transaction",
    "UnsupportedError",
    "WriteResult",
    "dataset",
    "write_dataset",
    "write_fragments",
]
