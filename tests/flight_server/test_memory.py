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


def _run(mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHURN, mode],
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
    if "jemalloc" in tuned["done"]:
        assert tuned["pool"] == "jemalloc"
    # ten rounds of 56 MiB: untuned, glibc hands most of it back and faults it in again
    assert plain["faults"] > 5000
    assert tuned["faults"] < plain["faults"] / 10
