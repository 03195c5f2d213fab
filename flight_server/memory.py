"""Allocator settings for a serving process, and giving memory back after refused calls.

Serving a scan decodes every page into fresh buffers that live for a moment (until gRPC
has sent them): about a gigabyte per TPC-H SF1 read.  With the allocators' defaults each of
those buffers was new memory the kernel had to fault in and zero (a profile of a cold read
spent a tenth of the server's CPU in ``clear_page``), because glibc returned big freed
blocks to the system and numpy asked for transparent huge pages (2 MiB zeroed per fault)
for every array of 4 MiB or more.  :func:`tune_for_serving` makes freed decode buffers
reusable instead; free memory beyond a bound still goes back (glibc's trim threshold, and
the :class:`Reclaimer`).  Arrow's own allocator stays mimalloc: jemalloc, which pyarrow also
offers, measured 7x slower on large allocations (a take of 6M decimals: 52 ms against 7 ms).


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
_M_ARENA_MAX = -8
# blocks up to this size come from the heap, so a freed decode buffer is reused by the next
# one; glibc's dynamic threshold reaches it only after a block this large has been freed
MMAP_THRESHOLD = 32 << 20
# free memory a heap keeps at its top before returning it: a few decoded ranges' worth
TRIM_THRESHOLD = 64 << 20
# heaps glibc may create for threads (its default, 8 per core, lets each of the decoding,
# prefetch and gRPC threads keep its own free memory)
ARENA_MAX = 4
WARM_BLOCK_BYTES = 4 << 20  # under MMAP_THRESHOLD: from the heaps, kept there when freed


def tune_for_serving() -> list[str]:
    """Set this process's allocators for serving (see the module notes); what was set.
    Each setting is skipped where its allocator is absent (another libc, a numpy without
    the huge-page switch)."""
    done = []
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is not None:
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        if (
            mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
            and mallopt(_M_ARENA_MAX, ARENA_MAX)
        ):
            done.append("glibc")
    try:
        from numpy._core import multiarray

        multiarray._set_madvise_hugepage(False)  # type: ignore[attr-defined]
        done.append("numpy")
    except (ImportError, AttributeError):
        pass
    return done


def warm_heaps(total_bytes: int | None = None) -> int:
    """Fault in about ``total_bytes`` of heap memory, shared over the decode pool's
    threads, then free it; the bytes touched.  The default (None) is TRIM_THRESHOLD for
    each heap those threads use, one a thread up to ARENA_MAX (128 MiB on 2 cores, 256 MiB
    from 4 whatever the number of cores).  Call after :func:`tune_for_serving` (which
    keeps freed memory in the heaps), at start.

    A page's first touch costs the process a fault (the kernel maps and zeroes it: 2-4 us
    each on the 2-core machines measured), and a new server's first scan used to fault in
    every decode buffer it allocated: 61,000 faults for a TPC-H SF1 read, about 8% of its
    CPU, where the next reads, reusing freed memory, took 7,000.  The decode buffers come
    from the pool threads' heaps (glibc gives each thread an arena, at most ARENA_MAX), so
    each pool thread touches its share there, in blocks below MMAP_THRESHOLD, and frees
    them: the first reads reuse those pages.  At the default the process holds from its
    start what its heaps keep after any read anyway."""
    import numpy as np

    from lance_format import on_each_thread

    if total_bytes is not None and total_bytes <= 0:
        return 0

    def touch(threads: int) -> int:
        total = TRIM_THRESHOLD * min(threads, ARENA_MAX) if total_bytes is None else total_bytes
        share = total // threads
        block = max(1, min(share, WARM_BLOCK_BYTES))
        blocks = []
        for _ in range(share // block):
            b = np.empty(block, dtype=np.uint8)
            b.fill(1)  # written, not calloc'ed: every page is really faulted in
            blocks.append(b)
        return sum(b.nbytes for b in blocks)

    return sum(on_each_thread(touch))


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
