"""One shared thread pool for decoding and encoding columns in parallel.

numpy, pyarrow, zstandard and lz4 release the GIL in their inner loops, so decoding or
encoding independent columns on threads uses more than one core; one pool sized to the
machine is shared by every reader and writer of the process so they never oversubscribe it.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_POOL: ThreadPoolExecutor | None = None
_LOCK = threading.Lock()


def pool() -> ThreadPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="lance")
        return _POOL
