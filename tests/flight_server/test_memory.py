"""The serving process's allocator settings, measured by the kernel's own page-fault count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

# Decode-like churn: rounds of buffers of a few MiB, all freed before the next round.  Each
# buffer is written whole (as a decoder fills its output), so every page not reused from
# an earlier round is a minor fault the kernel must serve (and zero).
CHURN = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np
    import pyarrow as pa
    if sys.argv[1] == "tuned":
        from flight_server.memory import tune_for_serving
        done = tune_for_serving()
    else:
        done = []

    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    def churn():
        arrays = [np.ones(6 << 20, dtype=np.uint8) for _ in range(8)]
        arrow = [pa.array(np.arange(1 << 20, dtype=np.int64)) for _ in range(4)]
        return sum(a.nbytes for a in arrays) + sum(a.nbytes for a in arrow)

    churn()  # the first round always faults its pages in
    before = faults()
    for _ in range(10):
        churn()
    print(json.dumps({"faults": faults() - before, "done": done,
                      "pool": pa.default_memory_pool().backend_name}))
    """
)


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(mode: str, script: str = CHURN, *more: str) -> dict:
    """What ``script`` prints (JSON), run in a fresh interpreter with arguments ``mode``
    and ``more``."""
    out = subprocess.run(
        [sys.executable, "-c", script, mode, *more],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=REPO,
    )
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc are Linux's")
def test_tuned_allocators_reuse_freed_decode_buffers():
    plain, tuned = _run("plain"), _run("tuned")
    assert "glibc" in tuned["done"] and "numpy" in tuned["done"]
    assert tuned["pool"] == plain["pool"]  # Arrow's allocator is left as it is
    # ten rounds of 56 MiB: untuned, glibc hands most of it back and faults it in again
    assert plain["faults"] > 5000
    assert tuned["faults"] < plain["faults"] / 10


# A first round of decode-like buffers on the decode pool's threads (where decoders allocate
# their output), after the server's start-up with or without warm_heaps.
FIRST_ROUND = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np
    import lance_format.workers
    if len(sys.argv) > 2:  # a machine with this many cores (before the pool exists)
        lance_format.workers.POOL_SIZE = int(sys.argv[2])
    from flight_server.memory import tune_for_serving, warm_heaps
    from lance_format import on_each_thread
    done = tune_for_serving()
    warmed = warm_heaps(None if sys.argv[1] == "default" else int(sys.argv[1]))

    def decode(threads):  # 24 MiB of outputs of 3 MiB, written whole, then freed
        out = [np.ones(3 << 20, dtype=np.uint8) for _ in range(8)]
        return sum(a.nbytes for a in out)

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    made = sum(on_each_thread(decode))  # one task a pool thread
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    print(json.dumps({"faults": faults, "warmed": warmed, "made": made, "done": done,
                      "threads": lance_format.workers.POOL_SIZE}))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc are Linux's")
def test_warmed_heaps_serve_the_first_decode_buffers_without_faults():
    cold, warm = _run("0", FIRST_ROUND), _run(str(64 << 20), FIRST_ROUND)
    assert "glibc" in warm["done"]
    assert cold["warmed"] == 0 and warm["warmed"] == 64 << 20
    # every page of the cold round's outputs is new memory (4 KiB pages: a few thousand)
    pages = cold["made"] // 4096
    assert cold["faults"] > pages // 2
    # the warmed heaps hold those pages already
    assert warm["faults"] < cold["faults"] / 5


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc are Linux's")
@pytest.mark.parametrize("threads", [2, 16])
def test_default_warm_up_is_what_the_heaps_keep(threads):
    """The default: TRIM_THRESHOLD for each heap the decoding threads use, one a thread up
    to ARENA_MAX, so many cores do not multiply it."""
    from flight_server.memory import ARENA_MAX, TRIM_THRESHOLD

    got = _run("default", FIRST_ROUND, str(threads))
    assert got["threads"] == threads
    assert got["warmed"] == TRIM_THRESHOLD * min(threads, ARENA_MAX)
