"""``memory://``: an in-process object store, shared by every dataset of the process (as
pylance's is), so tests and scratch work need no disk and leave nothing behind."""

from __future__ import annotations

import threading
import time

from ..errors import ObjectNotFoundError
from .base import ObjectMeta, ObjectStore, ObjectWriter


class _MemoryWriter(ObjectWriter):
    def __init__(self, store: MemoryStore, key: str):
        self._store = store
        self._key = key
        self._parts: list[bytes] = []

    def write(self, data: bytes | memoryview) -> None:
        self._parts.append(bytes(data))

    def commit(self) -> None:
        self._store.put(self._key, b"".join(self._parts))
        self._parts = []

    def abort(self) -> None:
        self._parts = []


class MemoryStore(ObjectStore):
    scheme = "memory"

    def __init__(self) -> None:
        super().__init__()
        self._objects: dict[str, tuple[bytes, float]] = {}
        self._lock = threading.Lock()

    def _lookup(self, key: str) -> bytes:
        with self._lock:
            found = self._objects.get(key)
        if found is None:
            raise ObjectNotFoundError("file not found", path=self.uri(key))
        return found[0]

    def get(self, key: str) -> bytes:
        data = self._lookup(key)
        self.count(read=len(data))
        return data

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        data = self._lookup(key)[offset : offset + length]
        self.count(read=len(data))
        return data

    def head(self, key: str) -> ObjectMeta | None:
        self.count()
        with self._lock:
            found = self._objects.get(key)
        return None if found is None else ObjectMeta(key, len(found[0]), found[1])

    def list(self, prefix: str) -> list[ObjectMeta]:
        self.count()
        base = prefix.rstrip("/") + "/"
        with self._lock:
            items = list(self._objects.items())
        return [ObjectMeta(k, len(v), t) for k, (v, t) in items if k.startswith(base)]

    def put(self, key: str, data: bytes) -> None:
        self.count(written=len(data))
        with self._lock:
            self._objects[key] = (bytes(data), time.time())

    def put_if_not_exists(self, key: str, data: bytes) -> bool:
        self.count(written=len(data))
        with self._lock:
            if key in self._objects:
                return False
            self._objects[key] = (bytes(data), time.time())
        return True

    def create(self, key: str) -> ObjectWriter:
        return _MemoryWriter(self, key)

    def delete(self, key: str, *, missing_ok: bool = False) -> None:
        self.count()
        with self._lock:
            found = self._objects.pop(key, None)
        if found is None and not missing_ok:
            raise ObjectNotFoundError("file not found", path=self.uri(key))

    def copy(self, src: str, dst: str) -> None:
        self.put(dst, self._lookup(src))

    def uri(self, key: str) -> str:
        return f"memory://{key}"
