"""Every pylance-written fixture file read by several threads at once, as a server's clients
read one dataset: each read equals pylance's own read of the file.

Shared state in a codec shows up only here: the threads decode the same columns at the same
time on the decode pool.  (A zstd decompressor shared by all threads made the reads of the
``encodings`` theme's zstd columns corrupt the heap and abort the process.)
"""

from __future__ import annotations

import threading

import fixtures as fx
import numpy as np
from fixtures import assert_tables_equal

THREADS = 4
ROUNDS = 2


def test_concurrent_reads_match_pylance(api, lance_file: fx.FixtureFile) -> None:
    expected = lance_file.expected
    n = expected.num_rows
    failures: list[str] = []

    def work(k: int) -> None:
        rng = np.random.default_rng(k)
        try:
            for _ in range(ROUNDS):
                r = api.LanceFileReader(lance_file.path)  # a reader each, as a request has
                if k % 2 == 0:
                    assert_tables_equal(r.read(), expected, f"{lance_file.id} read")
                elif n:
                    rows = np.sort(rng.choice(n, min(n, 300), replace=False))
                    assert_tables_equal(r.take(rows), expected.take(rows), f"{lance_file.id} take")
                    a = int(rng.integers(0, n))
                    b = min(n, a + 1000)
                    got = r.read_range(a, b)
                    assert_tables_equal(got, expected.slice(a, b - a), f"{lance_file.id} range")
        except Exception as exc:  # reported by the test's thread
            failures.append(f"thread {k}: {type(exc).__name__}: {exc}"[:2000])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, "\n".join(failures)
