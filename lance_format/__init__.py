"""Lance file and table formats in Python, byte-compatible with the official implementation."""

from .cache import SearchCache
from .errors import (
    CorruptFileError,
    InvalidArgumentError,
    LanceError,
    LanceIOError,
    SchemaError,
    UnsupportedError,
)
from .io import IOStats
from .reader import LanceFileReader
from .writer import LanceFileWriter, WriteResult

__all__ = [
    "CorruptFileError",
    "IOStats",
    "InvalidArgumentError",
    "LanceError",
    "LanceFileReader",
    "LanceFileWriter",
    "LanceIOError",
    "SchemaError",
    "SearchCache",
    "UnsupportedError",
    "WriteResult",
]
