"""pylance 14's compaction options (``max_source_*``, ``data_storage_version``, the
binary-copy modes, ``lance.compaction.*`` config defaults) against pylance itself.

The same appends run through both libraries, then the same ``compact_files`` call: the
metrics, the fragments (ids, sizes, file versions, order) and the rows must agree.
"""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import lance_format

SIZES = [10, 10, 10, 100, 10, 10, 10]


def _build(lib, uri: str, sizes=SIZES, version: str = "2.1"):
    start = 0
    for i, n in enumerate(sizes):
        ds = lib.write_dataset(
            pa.table({"id": range(start, start + n)}),
            uri,
            mode="append" if i else "create",
            data_storage_version=version,
        )
        start += n
    return ds


def _shape(ds) -> list:
    return [
        (
            f.fragment_id,
            f.metadata.physical_rows,
            [(d.file_major_version, d.file_minor_version) for d in f.metadata.files],
        )
        for f in ds.get_fragments()
    ]


def _metrics(m) -> tuple:
    return (m.fragments_removed, m.fragments_added, m.files_removed, m.files_added)


OPTIONS = [
    {"target_rows_per_fragment": 25},
    {"target_rows_per_fragment": 25, "max_source_fragments": 3},
    {"target_rows_per_fragment": 25, "max_source_fragments": 2},
    {"target_rows_per_fragment": 25, "max_source_rows": 40},
    {"target_rows_per_fragment": 25, "max_source_rows": 20},
    {"target_rows_per_fragment": 25, "max_source_bytes": 2000},
    {"target_rows_per_fragment": 25, "max_source_bytes": 100},
    {"target_rows_per_fragment": 25, "data_storage_version": "2.2"},
    {"target_rows_per_fragment": 25, "compaction_mode": "force_binary_copy"},
    {"target_rows_per_fragment": 25, "compaction_mode": "try_binary_copy"},
    {"target_rows_per_fragment": 25, "max_rows_per_group": 3, "num_threads": 1},
]


@pytest.mark.parametrize("options", OPTIONS, ids=[str(o) for o in OPTIONS])
def test_compaction_options_match_pylance(tmp_path, options):
    theirs = _build(lance, str(tmp_path / "pylance"))
    ours = _build(lance_format, str(tmp_path / "ours"))
    expected = theirs.optimize.compact_files(**options)
    got = ours.optimize.compact_files(**options)
    assert _metrics(got) == _metrics(expected)
    assert _shape(ours) == _shape(lance.dataset(str(tmp_path / "pylance")))
    truth = lance.dataset(str(tmp_path / "pylance")).to_table()
    assert ours.to_table() == truth
    assert lance.dataset(str(tmp_path / "ours")).to_table() == truth
    assert str(ours.data_storage_version) == str(theirs.data_storage_version)


def test_config_defaults_match_pylance(tmp_path):
    shapes = []
    for lib, name in ((lance, "pylance"), (lance_format, "ours")):
        ds = _build(lib, str(tmp_path / name))
        ds.update_config({"lance.compaction.target_rows_per_fragment": "25"})
        m = ds.optimize.compact_files()
        shapes.append((_metrics(m), _shape(lib.dataset(str(tmp_path / name)))))
        # an argument wins over the config
        ds.optimize.compact_files(target_rows_per_fragment=1000)
        shapes.append(_shape(lib.dataset(str(tmp_path / name))))
    assert shapes[:2] == shapes[2:]


def test_force_binary_copy_of_mixed_versions_fails_as_pylance(tmp_path):
    for lib, name in ((lance, "pylance"), (lance_format, "ours")):
        ds = _build(lib, str(tmp_path / name), sizes=[10, 10, 10])
        ds.optimize.compact_files(target_rows_per_fragment=20, data_storage_version="2.2")
        lib.write_dataset(pa.table({"id": range(5)}), str(tmp_path / name), mode="append")
        ds = lib.dataset(str(tmp_path / name))
        with pytest.raises(Exception) as caught:
            ds.optimize.compact_files(compaction_mode="force_binary_copy")
        assert isinstance(caught.value, (OSError, ValueError))
        assert lib.dataset(str(tmp_path / name)).version == ds.version


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"max_source_fragments": 0}, OSError),
        ({"max_source_bytes": 0}, OSError),
        ({"data_storage_version": "legacy"}, OSError),
        ({"io_buffer_size": 1}, TypeError),
    ],
)
def test_refusals_match_pylance(tmp_path, options, error):
    for lib, name in ((lance, "pylance"), (lance_format, "ours")):
        ds = _build(lib, str(tmp_path / name), sizes=[10, 10])
        with pytest.raises(error):
            ds.optimize.compact_files(**options)
        assert lib.dataset(str(tmp_path / name)).version == 2
