"""One shared thread pool for decoding and encoding columns in parallel.

numpy, pyarrow, zstandard and lz4 release the GIL in their inner loops, so decoding or
encoding independent columns on threads uses more than one core; one pool sized to the
machine is shared by every reader and writer of the process so they never oversubscribe it.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
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


_DONE = object()


def prefetch(items: Iterator[T], depth: int = 1) -> Iterator[T]:
    """``items`` produced on a background thread, up to ``depth`` ahead of the consumer.

    A streaming reader alternates decoding (mostly GIL-free numpy) with handing batches
    to a consumer (gRPC serialising and sending, GIL-free too): producing the next batch
    while the consumer works on this one overlaps the two.  Memory stays bounded by
    ``depth + 2`` items; an exception in the producer is re-raised in the consumer; a
    consumer that stops early (``close()``) stops the producer at its next item.
    """
    slots: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(entry: tuple) -> bool:
        """Queue ``entry`` once there is room; False if the consumer stopped meanwhile."""
        while not stop.is_set():
            try:
                slots.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer((item, None)):
                    return
            offer((_DONE, None))
        except BaseException as exc:  # handed to the consumer, raised there
            offer((_DONE, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="lance-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item, exc = slots.get()
            if item is _DONE:
                if exc is not None:
                    raise exc
                return
            yield item
    finally:
        stop.set()  # the producer notices within 0.1 s or at its next item
