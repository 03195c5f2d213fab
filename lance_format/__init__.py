"""Lance file and table formats in Python, byte-compatible with the official implementation."""

from .cache import PageCache, SearchCache
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
from .table.dataset import Dataset, dataset, write_dataset
from .version import LanceFileVersion
from .writer import LanceFileWriter, WriteResult

__all__ = [
    "Dataset",
    "CommitConflictError",
    "CorruptFileError",
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
    "UnsupportedError",
    "WriteResult",
    "dataset",
    "write_dataset",
]
