"""One shared thread pool for decoding and encoding columns in parallel.

numpy, pyarrow, zstandard and lz4 release the GIL in their inner loops, so decoding or
encoding independent columns on threads uses more than one core; one pool sized to the
machine is shared by every reader and writer of the process so they never oversubscribe it.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_POOL: ThreadPoolExecutor | None = None
_LOCK = threading.Lock()


POOL_SIZE = os.cpu_count() or 2


def pool() -> ThreadPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=POOL_SIZE, thread_name_prefix="lance")
        return _POOL


def on_each_thread(fn: Callable[[int], T], timeout: float = 30.0) -> list[T]:
    """Run ``fn(threads)`` once on each of the shared pool's ``threads`` threads; the
    results.  Per-thread state (such as the heap glibc gives each thread) is what the
    pool's threads will decode with, so a server prepares it here.  Each call waits for the
    others before returning, so no thread runs two of them; if the pool is busy elsewhere
    for ``timeout`` seconds, the calls return without waiting (some thread may then have
    run two)."""
    together = threading.Barrier(POOL_SIZE)

    def one() -> T:
        out = fn(POOL_SIZE)
        try:
            together.wait(timeout=timeout)
        except threading.BrokenBarrierError:
            pass
        return out

    return [f.result() for f in [pool().submit(one) for _ in range(POOL_SIZE)]]


_DONE = object()


def close_iterator(items: object) -> None:
    """Close ``items`` if it can be closed (a generator, a :class:`Prefetched`): its
    ``finally`` blocks run now, not whenever it is collected."""
    close = getattr(items, "close", None)
    if close is not None:
        close()


def prefetch(items: Iterator[T], depth: int = 1, *, started: bool = False) -> Prefetched[T]:
    """``items`` produced on a background thread, up to ``depth`` ahead of the consumer.

    A streaming reader alternates decoding (mostly GIL-free numpy) with handing batches
    to a consumer (gRPC serialising and sending, GIL-free too): producing the next batch
    while the consumer works on this one overlaps the two.  Memory stays bounded by
    ``depth + 2`` items; an exception in the producer is re-raised in the consumer; a
    consumer that stops early (``close()``, or dropping the iterator) stops the producer at
    its next item.  The producer starts at the first ``next()``, or at once with
    ``started`` (a stream decoded ahead of its consumer: then ``close()`` it if unused).
    """
    out = Prefetched(items, depth)
    if started:
        out.start()
    return out


class Prefetched(Iterator[T]):
    """The iterator :func:`prefetch` returns."""

    def __init__(self, items: Iterator[T], depth: int):
        self._items = items
        self._slots: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._done = False

    def start(self) -> None:
        if self._worker is None and not self._stop.is_set():
            self._worker = threading.Thread(
                target=self._produce, name="lance-prefetch", daemon=True
            )
            self._worker.start()

    def _offer(self, entry: tuple) -> bool:
        """Queue ``entry`` once there is room; False if the consumer stopped meanwhile."""
        while not self._stop.is_set():
            try:
                self._slots.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        items = self._items
        try:
            for item in items:
                if not self._offer((item, None)):
                    return
            self._offer((_DONE, None))
        except BaseException as exc:  # handed to the consumer, raised there
            self._offer((_DONE, exc))
        finally:
            close_iterator(items)

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        self.start()
        if self._worker is None:  # closed before it started
            self._done = True
            raise StopIteration
        item, exc = self._slots.get()
        if item is _DONE:
            self.close()
            if exc is not None:
                raise exc
            raise StopIteration
        return item

    def close(self) -> None:
        """Stop the producer (it notices within 0.1 s or at its next item)."""
        self._done = True
        self._stop.set()
        if self._worker is None:  # never started: nothing else will close the source
            close_iterator(self._items)

    def __del__(self) -> None:
        self._stop.set()
