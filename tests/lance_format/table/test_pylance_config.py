"""Dataset config and metadata as pylance 14 changes them (``update_config``,
``update_metadata``, ``update_schema_metadata``, ``update_field_metadata``,
``delete_config_keys``), checked against the versions pylance commits.

For every call pylance makes, the test checks that our reading of the new version gives
pylance's answers, that :func:`update_config_operation` builds the operation pylance
wrote for the same call, and that :func:`apply_update_config` turns the previous manifest
into the one pylance wrote.
"""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import lance_format
from lance_format.table import transaction
from lance_format.table.config import apply_update_config, update_config_operation

DATA = pa.table({"a": [1, 2], "s": pa.array([{"x": 1}, {"x": 2}])})

CALLS = [
    ("update_config", ({"k1": "v1", "k2": "v2"},), {}),
    ("update_config", ({"k1": None, "k3": "v3"},), {}),
    ("update_config", ({"only": "this", "gone": None},), {"replace": True}),
    ("delete_config_keys", (["only", "missing"],), {}),
    ("update_metadata", ({"author": "me", "x": "1"},), {}),
    ("update_metadata", ({"x": None},), {}),
    ("update_schema_metadata", ({"encoding": "utf-8", "by": "lance"},), {}),
    ("update_schema_metadata", ({"encoding": None},), {}),
    ("update_schema_metadata", ({"fresh": "1"},), {"replace": True}),
    ("update_field_metadata", ({"a": {"description": "A"}, "s.x": {"unit": "m"}},), {}),
    ("update_field_metadata", ({"a": {"description": None, "other": "o"}},), {}),
    ("update_field_metadata", ({"s.x": {"only": "1"}},), {"replace": True}),
]


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """pylance's dataset after each call (version 1 is the write)."""
    uri = str(tmp_path_factory.mktemp("config") / "ds")
    ds = lance.write_dataset(DATA, uri)
    answers = []
    for name, args, kwargs in CALLS:
        result = getattr(ds, name)(*args, **kwargs)
        answers.append(
            (
                result,
                ds.version,
                ds.config(),
                ds.metadata,
                ds.schema_metadata,
                [ds.schema.field("a").metadata, ds.schema.field("s").type.field("x").metadata],
            )
        )
    return uri, answers


def _canonical(op) -> list:
    """An UpdateConfig's maps with their entries sorted (pylance's order is a hash map's)."""
    op = op.normalized()
    maps = [op.config_updates, op.table_metadata_updates, op.schema_metadata_updates]
    maps += [op.field_metadata_updates[k] for k in sorted(op.field_metadata_updates)]
    keys = sorted(op.field_metadata_updates)
    return [keys] + [None if m is None else (sorted(m.entries, key=str), m.replace) for m in maps]


def _field_metadata(ds) -> list:
    return [ds.schema.field("a").metadata, ds.schema.field("s").type.field("x").metadata]


def test_reading_pylances_config_and_metadata(history):
    uri, answers = history
    for _, version, cfg, md, smd, fmd in answers:
        ours = lance_format.dataset(uri, version)
        assert ours.config() == cfg
        assert ours.metadata == md
        assert ours.schema_metadata == smd
        assert _field_metadata(ours) == fmd


@pytest.mark.parametrize("step", range(len(CALLS)))
def test_operation_and_manifest_change_match_pylance(history, step):
    uri, answers = history
    name, args, kwargs = CALLS[step]
    version = answers[step][1]
    before = lance_format.dataset(uri, version - 1)
    after = lance_format.dataset(uri, version)
    theirs = transaction.read_transaction_file(uri, after.manifest.pb.transaction_file)
    # the operation we would write for the same call is pylance's
    key = {
        "update_config": "config",
        "delete_config_keys": "config",
        "update_metadata": "table_metadata",
        "update_schema_metadata": "schema_metadata",
        "update_field_metadata": "field_metadata",
    }[name]
    values = dict.fromkeys(args[0]) if name == "delete_config_keys" else args[0]
    ours = update_config_operation(**{key: values}, schema=before.lance_schema, **kwargs)
    assert _canonical(ours) == _canonical(theirs.operation)
    # applied to the previous manifest, it gives pylance's next manifest
    m = type(before.manifest.pb)()
    m.CopyFrom(before.manifest.pb)
    apply_update_config(m, theirs.operation)
    for part in ("config", "table_metadata", "schema_metadata"):
        assert dict(getattr(m, part)) == dict(getattr(after.manifest.pb, part)), part
    assert list(m.fields) == list(after.manifest.pb.fields)


def test_the_same_calls_through_our_datasets(history, tmp_path):
    """Every call run through ``lance_format``'s Dataset commits the manifest pylance's
    commit gives (read back by pylance), and returns what pylance's returns."""
    _, answers = history
    uri = str(tmp_path / "ours")
    ds = lance_format.write_dataset(DATA, uri)
    for (name, args, kwargs), (result, version, cfg, md, smd, fmd) in zip(
        CALLS, answers, strict=True
    ):
        got = getattr(ds, name)(*args, **kwargs)
        assert got == result, name
        theirs = lance.dataset(uri)  # pylance reads what we committed
        assert ds.version == theirs.version == version
        assert (theirs.config(), theirs.metadata, theirs.schema_metadata) == (cfg, md, smd)
        assert _field_metadata(theirs) == _field_metadata(ds) == fmd
        assert (ds.config(), ds.metadata, ds.schema_metadata) == (cfg, md, smd)
