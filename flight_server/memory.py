"""Allocator settings for a serving process, and giving memory back after refused calls.

Serving a scan decodes every page into fresh buffers that live for a moment (until gRPC
has sent them): about a gigabyte per TPC-H SF1 read.  With the allocators' defaults each of
those buffers was new memory the kernel had to fault in and zero (a profile of a cold read
spent a tenth of the server's CPU in ``clear_page``), because glibc returned big freed
blocks to the system, numpy asked for transparent huge pages (2 MiB zeroed per fault) for
every array of 4 MiB or more, and Arrow's mimalloc purged freed pages within milliseconds.
:func:`tune_for_serving` makes freed decode buffers reusable instead; memory idle for a few
seconds still goes back (jemalloc's decay, glibc's trim threshold, and the
:class:`Reclaimer`).


A refused call may have brought a large message: gRPC held it whole, and once the call ends
glibc keeps most of the freed memory in its heaps (a 256 MiB ticket left the process 330 MiB
larger; ``malloc_trim`` brings it back to where it was in well under 100 ms).  A
:class:`Reclaimer` trims on a background thread shortly after such calls, at most once per
``interval`` seconds, so a stream of refused calls cannot leave the server holding what they
brought.  Where glibc is not the allocator, it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow.flight as flight

log = logging.getLogger("lance_flight")


# glibc ``mallopt`` parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# blocks up to this size come from the heap, so a freed decode buffer is reused by the next
# one; glibc's dynamic threshold reaches it only after a block this large has been freed
MMAP_THRESHOLD = 32 << 20
# free memory a heap keeps at its top before returning it: a few decoded ranges' worth
TRIM_THRESHOLD = 256 << 20
# how long jemalloc keeps freed pages for reuse before returning them to the system
ARROW_DECAY_MS = 5000


def tune_for_serving() -> list[str]:
    """Set this process's allocators for serving (see the module notes); what was set.
    Each setting is skipped where its allocator is absent (another libc, a pyarrow built
    without jemalloc, a numpy without the huge-page switch)."""
    done = []
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is not None:
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(
            _M_TRIM_THRESHOLD, TRIM_THRESHOLD
        ):
            done.append("glibc")
    try:
        from numpy._core import multiarray

        multiarray._set_madvise_hugepage(False)  # type: ignore[attr-defined]
        done.append("numpy")
    except (ImportError, AttributeError):
        pass
    import pyarrow as pa

    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:
        return done
    pa.set_memory_pool(pool)
    pa.jemalloc_set_decay_ms(ARROW_DECAY_MS)
    done.append("jemalloc")
    return done


def _glibc_trim() -> Callable[[], None] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


class Reclaimer:
    """Trims the allocator's free memory ``delay`` seconds after :meth:`request` (when the
    refused call has ended and released its message), at most once per ``interval``."""

    def __init__(self, delay: float = 0.5, interval: float = 2.0):
        self._trim = _glibc_trim()
        self._delay = delay
        self._interval = interval
        self._wanted = threading.Event()
        self._closed = threading.Event()
        self.trims = 0
        self._thread: threading.Thread | None = None
        if self._trim is not None:
            self._thread = threading.Thread(target=self._run, name="reclaimer", daemon=True)
            self._thread.start()

    def request(self) -> None:
        self._wanted.set()

    def close(self) -> None:
        self._closed.set()
        self._wanted.set()

    def _run(self) -> None:
        trim = self._trim
        assert trim is not None  # the thread is started only when there is malloc_trim
        while self._wanted.wait() and not self._closed.is_set():
            if self._closed.wait(self._delay):
                return
            self._wanted.clear()
            try:
                trim()
                self.trims += 1
            except Exception:  # never let this thread take anything down
                log.exception("malloc_trim failed")
                return
            if self._closed.wait(self._interval):
                return


class ReclaimOnRefusal(flight.ServerMiddlewareFactory):
    """Middleware that asks for a trim after every call the auth middleware refused (see
    :class:`.auth.AuthObserver`); it makes no middleware of its own."""

    def __init__(self, reclaimer: Reclaimer):
        self.reclaimer = reclaimer

    def start_call(self, info: flight.CallInfo, headers: Mapping[str, list[Any]]) -> None:
        return None

    def auth_outcome(self, info, headers, user, error) -> None:
        if error is not None:
            self.reclaimer.request()
