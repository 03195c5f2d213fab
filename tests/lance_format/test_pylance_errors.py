"""Where pylance 14 raises a builtin (ValueError, OSError), our error is that builtin too,
so a pylance user's ``except`` clause catches it; checked by running pylance."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import lance_format as lf

TABLE = pa.table({"id": [1, 2, 3], "v": [1.0, 2.0, 3.0]})

CASES = {
    "open missing": lambda m, p: m.dataset(p + "-nope"),
    "open bad version": lambda m, p: m.dataset(p, version=99),
    "drop unknown": lambda m, p: m.dataset(p).drop_columns(["zz"]),
    "filter unknown column": lambda m, p: m.dataset(p).to_table(filter="zz > 1"),
    "filter syntax": lambda m, p: m.dataset(p).to_table(filter="id >"),
    "columns unknown": lambda m, p: m.dataset(p).to_table(columns=["zz"]),
    "update unknown": lambda m, p: m.dataset(p).update({"zz": "1"}),
    "merge key unknown": lambda m, p: m.dataset(p).merge_insert("zz"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_builtin_as_pylance(tmp_path, case):
    caught = []
    for module, name in ((lance, "theirs"), (lf, "ours")):
        path = str(tmp_path / name)
        lance.write_dataset(TABLE, path)
        with pytest.raises(Exception) as info:  # noqa: PT011 - the class is compared below
            CASES[case](module, path)
        caught.append(info.value)
    theirs, ours = caught
    assert isinstance(ours, lf.LanceError)
    for builtin in (ValueError, OSError, KeyError):
        if isinstance(theirs, builtin):
            assert isinstance(ours, builtin), (case, builtin, type(ours))


def test_commit_conflict_is_an_oserror_as_pylance(tmp_path):
    path = str(tmp_path / "t")
    lance.write_dataset(TABLE, path)
    stale = lf.dataset(path)
    lance.write_dataset(TABLE, path, mode="overwrite")
    with pytest.raises(OSError):
        stale.delete("id = 1")
    with pytest.raises(lf.CommitConflictError):
        lf.dataset(path, version=1).delete("id = 1")
