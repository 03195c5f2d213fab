"""Writers running at once on several threads (a server's concurrent do_put calls) write the
same bytes as one writer alone: the encoders share their pool, kept page layouts and codec
contexts, and none of that may leak from one file into another.  The serial files are the
ones the round-trip tests check against pylance; this checks that concurrency changes
nothing in them."""

from __future__ import annotations

import hashlib
import threading

import fixtures as fx

from lance_format import LanceFileWriter
from lance_format.errors import LanceError

VERSIONS = ("2.1", "2.2")
THREADS = 3


def _write(path: str, theme: str, version: str) -> str:
    """The file's digest, or the error our writer refused it with."""
    table = fx.build_table(fx.THEMES_BY_NAME[theme], version)
    try:
        with LanceFileWriter(path, table.schema, version=version) as w:
            w.write_table(table)
    except LanceError as exc:
        return f"refused: {type(exc).__name__}"
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_concurrent_writers_write_what_one_writes(tmp_path):
    cases = [(t.name, v) for t in fx.THEMES for v in VERSIONS if t.columns_for(v)]
    serial = {c: _write(str(tmp_path / f"s-{c[0]}-{c[1]}.lance"), *c) for c in cases}
    assert sum(not d.startswith("refused") for d in serial.values()) >= len(cases) - 2
    mismatches: list[tuple] = []

    def work(k: int) -> None:
        for c in cases[k:] + cases[:k]:  # each thread starts elsewhere: different overlaps
            got = _write(str(tmp_path / f"t{k}-{c[0]}-{c[1]}.lance"), *c)
            if got != serial[c]:
                mismatches.append((k, c, got))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not mismatches, mismatches[:5]
