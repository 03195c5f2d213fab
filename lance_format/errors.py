"""One exception hierarchy for everything the format layers raise.

Every error can name the file, the column and the problem, so that a user facing a corrupt
file in a dataset of thousands can tell which one it is.  The Flight service maps these
classes onto Flight error kinds, so pick the most specific class that fits.
"""

from __future__ import annotations


class LanceError(Exception):
    """Root of every error raised by :mod:`lance_format`."""

    def __init__(self, message: str, *, path: str | None = None, column: str | None = None):
        self.problem = message
        self.path = path
        self.column = column
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.path is not None:
            where.append(f"file {self.path!r}")
        if self.column is not None:
            where.append(f"column {self.column!r}")
        return f"{', '.join(where)}: {self.problem}" if where else self.problem

    def with_context(self, *, path: str | None = None, column: str | None = None) -> LanceError:
        """Fill in the file or column when a lower layer did not know them."""
        if path is not None and self.path is None:
            self.path = path
        if column is not None and self.column is None:
            self.column = column
        self.args = (self._format(),)
        return self


class LanceIOError(LanceError, OSError):
    """The storage could not be read or written (missing file, permission, short read); an
    OSError too, as pylance raises for these."""


class ObjectNotFoundError(LanceIOError, FileNotFoundError):
    """The file or object does not exist (a FileNotFoundError too, as callers expect)."""


class DatasetNotFoundError(ObjectNotFoundError, ValueError):
    """No dataset at the path (no committed version).  pylance raises ValueError here, so
    this is one as well as a FileNotFoundError."""


class CorruptFileError(LanceError):
    """The bytes do not form a valid Lance structure: truncated, bad magic, bad protobuf,
    out-of-range offsets, inconsistent sizes."""


class UnsupportedError(LanceError):
    """Valid but not supported here: unknown version, encoding or feature flag."""


class NotSupportedError(UnsupportedError, OSError):
    """A request pylance's API refuses as "Not supported" (an ``OSError`` there), e.g. a
    batch commit of anything but appends."""


class InvalidArgumentError(LanceError, ValueError):
    """The caller asked for something impossible: unknown column, row out of range."""


class DeletedRowTakeError(InvalidArgumentError, NotImplementedError):
    """A take by row address that names a deleted row (pylance raises
    NotImplementedError there)."""


class DatasetExistsError(InvalidArgumentError, OSError):
    """A create found the dataset already there (or lost the race to create it); pylance
    raises OSError."""


class InvalidDataError(InvalidArgumentError, OSError):
    """Data that cannot be written as given: nulls in a non-nullable field, an invalid Arrow
    array (offsets that go backwards, bad UTF-8, dictionary keys out of range), a shape Lance
    cannot store.  pylance raises ``OSError`` for most of these and ``ValueError`` for the
    rest, so this is both."""


class SchemaError(LanceError, ValueError):
    """A schema cannot be mapped between Lance and Arrow, or does not match the data (an
    unknown column, a clash).  pylance raises ValueError for most of these."""


class SchemaMismatchError(SchemaError, OSError):
    """Data whose schema differs from the dataset's it is written to (pylance raises
    OSError for an append with a different schema)."""


class FileMissingError(ObjectNotFoundError, ValueError):
    """A data file to open is not there: pylance's file reader raises ValueError, callers
    expecting a FileNotFoundError still catch it."""


class TagNotFoundError(InvalidArgumentError, OSError):
    """No tag of that name: pylance raises ValueError when opening a dataset at it and
    deleting it, OSError from ``checkout_version``, so this is both."""


class RowOutOfRangeError(InvalidArgumentError, OSError):
    """Rows asked for by position, id or address that the version does not have (pylance's
    ``take`` raises OSError)."""


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (Arrow appends detail lines, pyarrow's Flight
    errors a traceback), or its class name when it has none: what our messages quote."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def check_size(value: int, limit: int, what: str) -> int:
    """Validate a size read from a file before it is used to allocate or slice."""
    if value < 0 or value > limit:
        raise CorruptFileError(f"{what} is {value}, outside the valid range 0..{limit}")
    return value


class CommitConflictError(LanceError, OSError):
    """A commit lost against a concurrent one that it cannot be rebased over.

    Mirrors pylance's ``CommitConflictError`` (an OSError, as pylance raises): ``retryable`` is False when the two
    transactions are incompatible (re-running ours cannot help, e.g. anything against a
    concurrent overwrite or restore), True when ours was merely preempted and re-running the
    operation against the newer version may succeed (see :class:`RetryableCommitConflictError`).
    ``version`` is the concurrently committed version that caused the conflict, if known.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        version: int | None = None,
        path: str | None = None,
        column: str | None = None,
    ):
        self.version = version
        super().__init__(message, path=path, column=column)


class RetryableCommitConflictError(CommitConflictError):
    """Ours was preempted (e.g. a delete against a compaction of the same fragment): the
    transaction as written cannot be rebased, but re-running the operation against the newer
    version may succeed."""

    retryable = True


class IndexExistsError(LanceError, RuntimeError):
    """An index of that name already exists and ``replace`` was not asked for (pylance
    raises RuntimeError)."""


class IndexNotFoundError(LanceError, RuntimeError):
    """No index of that name in this version (pylance raises RuntimeError)."""
