"""The local file system backend: keys are absolute paths.

Atomic writes go through a temporary file in the same directory, then renamed;
put-if-not-exists is ``link(2)`` of the temporary file, which refuses an existing name, so
the bytes appear complete or not at all, to every process, whenever a writer stops.

Durability matches pylance's local store (object_store's ``LocalFileSystem``), which never
fsyncs: a commit survives any crash of the writing process, and the operating system
writes it to disk in its own time.  A store made with ``durable=True`` also fsyncs every
file before it becomes visible (data files, then the manifest that names them), so a
commit survives a power loss too, at one disk flush per file."""

from __future__ import annotations

import builtins
import os
import shutil
import stat
import threading
import uuid
from typing import BinaryIO

from ..errors import LanceIOError, ObjectNotFoundError
from ..io import IOStats
from .base import ObjectMeta, ObjectStore, ObjectWriter, check_range, coalesce


def _error(action: str, exc: OSError, path: str) -> LanceIOError:
    if isinstance(exc, FileNotFoundError):
        return ObjectNotFoundError("file not found", path=path)
    return LanceIOError(f"cannot {action}: {exc.strerror or exc}", path=path)


class LocalFile:
    """A local file read with ``os.pread`` (thread-safe: no shared file position)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        stats: IOStats | None = None,
        store: LocalStore | None = None,
    ):
        self.path = os.fspath(path)
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
            st = os.fstat(self._fd)
            self.size = st.st_size
            # changes when the path is rewritten: caches of decoded pages key on it
            self.version_tag = (st.st_ino, st.st_mtime_ns)
        except OSError as exc:
            raise LanceIOError(f"cannot open: {exc.strerror}", path=self.path) from exc
        self.stats = stats if stats is not None else IOStats()
        self._store = store
        self._lock = threading.Lock()

    def read_at(self, offset: int, length: int) -> bytes:
        check_range(self.path, self.size, offset, length)
        if length == 0:
            return b""
        try:
            data = os.pread(self._fd, length, offset)
        except OSError as exc:
            raise LanceIOError(f"read failed: {exc.strerror}", path=self.path) from exc
        if len(data) != length:
            raise LanceIOError(
                f"short read: wanted {length} bytes at {offset}, got {len(data)}", path=self.path
            )
        with self._lock:
            self.stats.requests += 1
            self.stats.bytes_read += length
        if self._store is not None:
            self._store.count(read=length)
        return data

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Several ranges, merging ones that are close together into one request."""
        if not ranges:
            return []
        gap = LocalStore.coalesce_gap
        groups = coalesce(ranges, gap)
        # the requests in one loop and counted once: a point lookup reads a range a column
        out: list[bytes] = [b""] * len(ranges)
        total = requests = 0
        for start, end, members in groups:
            length = end - start
            if start < 0 or length < 0 or end > self.size:
                check_range(self.path, self.size, start, length)  # raises
            try:
                data = os.pread(self._fd, length, start) if length else b""
            except OSError as exc:
                raise LanceIOError(f"read failed: {exc.strerror}", path=self.path) from exc
            if len(data) != length:
                raise LanceIOError(
                    f"short read: wanted {length} bytes at {start}, got {len(data)}",
                    path=self.path,
                )
            if len(members) == 1:  # one range (its group is exactly its bytes)
                out[members[0]] = data
            else:
                view = memoryview(data)
                for i in members:
                    off, ln = ranges[i]
                    out[i] = bytes(view[off - start : off - start + ln])
            total += length
            requests += length > 0
        with self._lock:
            self.stats.requests += requests
            self.stats.bytes_read += total
        if self._store is not None:
            self._store.count(requests, read=total)
        return out

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> LocalFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _read_whole(path: str) -> bytes:
    """A whole (small) file: plain system calls, no buffered file object."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        parts: list[bytes] = []
        while True:  # to the end, whatever the size said (the file may still grow)
            chunk = os.read(fd, max(size, 1 << 16))
            if not chunk:
                return b"".join(parts) if len(parts) != 1 else parts[0]
            parts.append(chunk)
    finally:
        os.close(fd)


def _temp_name(path: str) -> str:
    return f"{path}.{uuid.uuid4().hex}.partial"


def _create_file(path: str, exclusive: bool = False) -> BinaryIO:
    """A new file at ``path``, its directories made if they are missing (looked for only
    then: a ``makedirs`` before every write was a tenth of a small append's file work);
    ``exclusive``: refused if ``path`` exists."""
    try:
        return open(path, "xb") if exclusive else open(path, "wb")  # noqa: SIM115 - closed by the caller
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return open(path, "xb") if exclusive else open(path, "wb")  # noqa: SIM115


class _LocalWriter(ObjectWriter):
    """Writes to ``<path>.<uuid>.partial``; commit fsyncs and renames it into place.
    ``in_place`` (a fresh name, see :meth:`LocalStore.create_new`): writes ``path`` itself,
    made only if absent, and commit just closes it."""

    def __init__(self, store: LocalStore, path: str, in_place: bool = False):
        self._store = store
        self.path = path
        self._tmp = path if in_place else _temp_name(path)
        try:
            self._f = _create_file(self._tmp, exclusive=in_place)  # closed by commit/abort
        except OSError as exc:
            raise _error("create", exc, path) from exc

    def write(self, data: bytes | memoryview) -> None:
        try:
            self._f.write(data)
        except OSError as exc:
            raise _error("write", exc, self.path) from exc
        self._store.count(requests=0, written=len(data))

    def finish(self) -> None:
        """Flush and close the temporary file (many sidecars stay within fd limits); fsync
        it first on a durable store."""
        if self._f.closed:
            return
        try:
            self._f.flush()
            if self._store.durable:
                os.fsync(self._f.fileno())
            self._f.close()
        except OSError as exc:
            self.abort()
            raise _error("write", exc, self.path) from exc

    def commit(self) -> None:
        self.finish()
        if self._tmp != self.path:
            try:
                os.replace(self._tmp, self.path)
            except OSError as exc:
                self.abort()
                raise _error("write", exc, self.path) from exc
        self._store.count()

    def abort(self) -> None:
        try:
            self._f.close()
        finally:
            try:
                os.unlink(self._tmp)
            except FileNotFoundError:
                pass


class LocalStore(ObjectStore):
    scheme = "file"

    def __init__(self, durable: bool = False):
        super().__init__()
        self.durable = durable  # fsync each file before it becomes visible (module docstring)

    def open(self, key: str, stats: IOStats | None = None) -> LocalFile:
        self.count()
        return LocalFile(key, stats, self)

    def get(self, key: str) -> bytes:
        try:
            data = _read_whole(key)
        except OSError as exc:
            raise _error("read", exc, key) from exc
        self.count(read=len(data))
        return data

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        with LocalFile(key) as f:
            data = f.read_at(offset, length)
        self.count(read=len(data))
        return data

    def head(self, key: str) -> ObjectMeta | None:
        self.count()
        try:
            st = os.stat(key)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _error("stat", exc, key) from exc
        if not os.path.isfile(key):
            return None
        # object_store's local ETag (what pylance reports): inode, mtime in us, size, in hex
        e_tag = f'"{st.st_ino:x}-{st.st_mtime_ns // 1000:x}-{st.st_size:x}"'
        return ObjectMeta(key, st.st_size, st.st_mtime, e_tag)

    def exists(self, key: str) -> bool:
        """:meth:`head` without its metadata (a writer asks it of a few manifests on every
        commit): whether a file is there."""
        self.count()
        try:
            return stat.S_ISREG(os.stat(key).st_mode)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise _error("stat", exc, key) from exc

    def list(self, prefix: str) -> list[ObjectMeta]:
        self.count()
        out = []
        for directory, _dirs, files in os.walk(prefix):
            for name in files:
                path = os.path.join(directory, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue  # removed while listing
                out.append(ObjectMeta(path, st.st_size, st.st_mtime))
        return out

    def list_names(self, prefix: str) -> builtins.list[str]:
        self.count()
        try:
            return sorted(os.listdir(prefix))
        except FileNotFoundError:
            return []
        except NotADirectoryError as exc:
            raise LanceIOError("not a directory", path=prefix) from exc
        except OSError as exc:
            raise _error("list", exc, prefix) from exc

    def is_dir(self, prefix: str) -> bool:
        return os.path.isdir(prefix)

    def _write_temp(self, path: str, data: bytes) -> str:
        """``data`` in a new temporary file beside ``path``; its name."""
        tmp = _temp_name(path)
        self._write_whole(tmp, data, exclusive=False)
        return tmp

    def _write_whole(self, path: str, data: bytes, *, exclusive: bool) -> None:
        """``data`` as the file ``path`` (``exclusive``: only if absent, else
        FileExistsError).  Whole small files (manifests, transactions, hints) take plain
        system calls, no buffered file; a failed write removes what it made."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive else os.O_TRUNC)
        try:
            fd = os.open(path, flags, 0o666)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fd = os.open(path, flags, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if self.durable:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)

    def put(self, key: str, data: bytes) -> None:
        try:
            tmp = self._write_temp(key, data)
            try:
                os.replace(tmp, key)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as exc:
            raise _error("write", exc, key) from exc
        self.count(written=len(data))

    def put_if_not_exists(self, key: str, data: bytes) -> bool:
        try:
            tmp = self._write_temp(key, data)
        except OSError as exc:
            raise _error("write", exc, key) from exc
        try:
            os.link(tmp, key)
        except FileExistsError:
            return False
        except OSError as exc:
            raise _error("create", exc, key) from exc
        finally:
            os.unlink(tmp)
            self.count(written=len(data))
        return True

    def create(self, key: str) -> ObjectWriter:
        return _LocalWriter(self, key)

    # A fresh name nothing reads before a manifest names it is written in place: the
    # temporary file's rename costs ~70 us on ext4, a twentieth of a small append.

    def put_new(self, key: str, data: bytes) -> None:
        try:
            self._write_whole(key, data, exclusive=True)
        except FileExistsError:  # not fresh after all (a commit retried): replaced
            self.put(key, data)
            return
        except OSError as exc:
            raise _error("write", exc, key) from exc
        self.count(written=len(data))

    def create_new(self, key: str) -> ObjectWriter:
        try:
            return _LocalWriter(self, key, in_place=True)
        except LanceIOError:
            if not os.path.exists(key):
                raise
            return _LocalWriter(self, key)  # not fresh after all: replaced on commit

    def delete(self, key: str, *, missing_ok: bool = False) -> None:
        self.count()
        try:
            os.unlink(key)
        except FileNotFoundError as exc:
            if not missing_ok:
                raise ObjectNotFoundError("file not found", path=key) from exc
        except OSError as exc:
            raise _error("remove", exc, key) from exc

    def delete_prefix(self, prefix: str) -> int:
        """Delete the directory tree (the local store has real directories to remove)."""
        freed = super().delete_prefix(prefix)
        shutil.rmtree(prefix, ignore_errors=True)
        return freed

    def copy(self, src: str, dst: str) -> None:
        self.count()
        try:
            os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
            tmp = _temp_name(dst)
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
        except OSError as exc:
            raise _error("copy", exc, src) from exc

    def rename(self, src: str, dst: str) -> None:
        self.count()
        try:
            os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
            os.replace(src, dst)
        except OSError as exc:
            raise _error("rename", exc, src) from exc

    def prune(self, prefix: str, subdirs: tuple[str, ...] = (), stop: str | None = None) -> None:
        """Remove empty directories: each of ``subdirs`` under ``prefix``, then ``prefix``
        and its parents while they are empty, stopping below ``stop`` (default: at
        ``prefix`` itself).  Never recursive: another writer may be filling them."""
        for sub in subdirs:
            try:
                os.rmdir(os.path.join(prefix, sub))
            except OSError:
                pass
        path = prefix
        while True:
            try:
                os.rmdir(path)
            except OSError:
                return
            parent = os.path.dirname(path)
            if stop is None or parent == path or not parent.startswith(stop + os.sep):
                return
            path = parent

    def outermost_missing(self, path: str) -> str | None:
        """The outermost directory of ``path`` that does not exist yet (None: it exists)."""
        missing = None
        while path and not os.path.exists(path):  # a relative path ends in "", not "/"
            missing, path = path, os.path.dirname(path)
        return missing

    def list_dir(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        """(file names, directory names) directly under ``prefix``; symlinked directories
        count as files, so a walk never leaves the tree."""
        self.count()
        files: builtins.list[str] = []
        dirs: builtins.list[str] = []
        try:
            with os.scandir(prefix) as it:
                for entry in it:
                    (dirs if entry.is_dir(follow_symlinks=False) else files).append(entry.name)
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as exc:
            raise _error("list", exc, prefix) from exc
        return sorted(files), sorted(dirs)

    def uri(self, key: str) -> str:
        return key
