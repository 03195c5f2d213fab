"""A writer finds the newest version from the version hint, confirmed by the manifests
after it, instead of listing ``_versions/`` (which grows with the versions); whatever the
hint says, the answer is the listing's."""

from __future__ import annotations

import os

import lance
import pyarrow as pa
import pytest

import lance_format as lf
from lance_format.table import paths
from lance_format.table.paths import ManifestNaming


def _batch(i: int) -> pa.Table:
    return pa.table({"x": pa.array([i, i + 1, i + 2])})


@pytest.fixture()
def ten_versions(tmp_path) -> str:
    root = str(tmp_path / "ds")
    lance.write_dataset(_batch(0), root)  # pylance writes the hint of version 1
    for i in range(1, 10):
        lf.write_dataset(_batch(i), root, mode="append")
    return root


def _write_hint(root: str, text: str) -> None:
    with open(os.path.join(root, "_versions", "latest_version_hint.json"), "w") as f:
        f.write(text)


@pytest.mark.parametrize(
    "hint",
    [
        None,
        '{"version":10}',
        '{"version":8}',
        '{"version":6}',
        '{"version":2}',
        '{"version":11}',
        '{"version":99}',
        '{"version":0}',
        '{"version":-3}',
        '{"version":"10"}',
        "{",
        "",
    ],
)
def test_hinted_latest_version_is_the_listings(ten_versions: str, hint: str | None) -> None:
    root = ten_versions
    if hint is None:
        os.remove(os.path.join(root, "_versions", "latest_version_hint.json"))
    else:
        _write_hint(root, hint)
    listed = paths.latest_version(root)
    assert listed is not None and listed.version == 10
    assert paths.latest_version(root, hinted=True) == listed
    # and an append through it makes version 11, which pylance reads
    lf.write_dataset(_batch(10), root, mode="append")
    ds = lance.dataset(root)
    assert ds.version == 11 and ds.count_rows() == 33


def test_a_fresh_hint_spares_the_listing(ten_versions: str, monkeypatch) -> None:
    root = ten_versions
    calls = []
    real = paths.list_names
    monkeypatch.setattr(paths, "list_names", lambda d: calls.append(d) or real(d))
    entry = paths.latest_version(root, hinted=True)
    assert entry is not None and entry.version == 10 and calls == []
    assert entry.path == paths.manifest_path(root, 10, ManifestNaming.V2)
    _write_hint(root, '{"version":3}')  # lagging more than HINT_LAG: listed
    assert paths.latest_version(root, hinted=True).version == 10
    assert calls


def test_a_manifest_of_the_other_naming_after_the_hint_is_left_to_the_listing(
    ten_versions: str,
) -> None:
    root = ten_versions
    newest = paths.latest_version(root)
    with open(newest.path, "rb") as f:
        data = f.read()
    with open(paths.manifest_path(root, 11, ManifestNaming.V1), "wb") as f:
        f.write(data)
    with pytest.raises(lf.errors.CorruptFileError, match="both"):
        paths.latest_version(root, hinted=True)


def test_v1_named_datasets_are_listed(tmp_path) -> None:
    root = str(tmp_path / "v1")
    lance.write_dataset(_batch(0), root, enable_v2_manifest_paths=False)
    for i in range(1, 4):
        lf.write_dataset(_batch(i), root, mode="append")
    entry = paths.latest_version(root, hinted=True)
    assert entry == paths.latest_version(root)
    assert entry.version == 4 and entry.naming == ManifestNaming.V1
    assert lance.dataset(root).count_rows() == 12
