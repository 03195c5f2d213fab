"""Nearest-neighbour search over Flight: the JSON command's ``nearest`` key, one endpoint,
results equal to pylance's search on the same dataset."""

from __future__ import annotations

import base64
import os

import lance
import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_fixtures import cmd, read_info, serve
from vector_helpers import write_vector_dataset

from flight_server.errors import error_kind

DIM = 16


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("vroot")
    path = write_vector_dataset(root / "docs", n=3000, dim=DIM, seed=11, rows_per_file=800)
    lance.dataset(path).delete("id % 9 = 4")
    return str(root)


@pytest.fixture(scope="module")
def client(root):
    with serve(root) as s:
        c = fl.connect(s.location)
        yield c
        c.close()


def _query(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
@pytest.mark.parametrize("form", ["list", "base64"])
def test_one_endpoint_equal_to_pylance(client, root, metric, form):
    q = _query(1)
    sent = q.tolist() if form == "list" else base64.b64encode(q.astype("<f4").tobytes()).decode()
    info = client.get_flight_info(
        cmd(
            dataset="docs",
            columns=["id", "label"],
            nearest={"column": "vec", "q": sent, "k": 20, "metric": metric},
        )
    )
    assert len(info.endpoints) == 1
    got = read_info(client, info)
    want = lance.dataset(os.path.join(root, "docs")).to_table(
        columns=["id", "label"], nearest={"column": "vec", "q": q, "k": 20, "metric": metric}
    )
    assert got.schema == want.schema == info.schema
    assert got["id"].to_pylist() == want["id"].to_pylist()
    np.testing.assert_allclose(got["_distance"].to_numpy(), want["_distance"].to_numpy(), rtol=2e-5)


@pytest.mark.parametrize("prefilter", [True, False])
def test_filters_row_ids_and_batches(client, root, prefilter):
    qs = np.stack([_query(2), _query(3)])
    nearest = {"column": "vec", "q": qs.tolist(), "k": 8}
    info = client.get_flight_info(
        cmd(
            dataset="docs",
            filter="label = 'r2'",
            prefilter=prefilter,
            with_row_id=True,
            nearest=nearest,
        )
    )
    got = read_info(client, info)
    want = lance.dataset(os.path.join(root, "docs")).to_table(
        filter="label = 'r2'", prefilter=prefilter, with_row_id=True, nearest={**nearest, "q": qs}
    )
    assert got.schema == want.schema
    for name in ("query_index", "id", "_rowid"):
        assert got[name].to_pylist() == want[name].to_pylist()
    assert client.get_schema(cmd(dataset="docs", nearest=nearest)).schema.names[0] == "query_index"


@pytest.mark.parametrize(
    "nearest, message",
    [
        ({"column": "vec", "q": [1.0] * 3}, "does not match"),
        ({"column": "vec", "q": [1.0] * DIM, "k": 0}, "must be > 0"),
        ({"column": "id", "q": [1.0] * DIM}, "must be a vector"),
        ({"column": "nope", "q": [1.0] * DIM}, "not in the dataset"),
        ({"column": "vec", "q": [1.0] * DIM, "metric": "hamming"}, "does not support"),
        ({"column": "vec", "q": [1.0] * DIM, "metric": "cityblock"}, "unknown metric"),
        ({"column": "vec", "q": ["x"] * DIM}, "'q'"),
        ({"column": "vec"}, "'q'"),
        ([1, 2], "JSON object"),
    ],
)
def test_bad_nearest_is_invalid_argument(client, nearest, message):
    with pytest.raises(pa.ArrowInvalid, match=message) as info:
        client.get_flight_info(cmd(dataset="docs", nearest=nearest))
    assert error_kind(info.value) == "INVALID_ARGUMENT"
    assert "Traceback" not in str(info.value)


def _act(client, kind: str, **body) -> dict:
    import json

    results = client.do_action(fl.Action(kind, json.dumps(body).encode()))
    return json.loads(next(iter(results)).body.to_pybytes())


def test_index_actions_as_pylance(client, root):
    """create_index, list_indices, describe_indices and drop_index over Flight: pylance
    lists and uses the index the action built, and searches through it find what
    pylance's search through it finds."""
    path = write_vector_dataset(
        os.path.join(root, "indexed"), n=2000, dim=DIM, seed=21, rows_per_file=1000
    )
    out = _act(
        client,
        "create_index",
        dataset="indexed",
        column="vec",
        index_type="IVF_PQ",
        metric="cosine",
        num_partitions=4,
        num_sub_vectors=4,
    )
    assert out == {"dataset": "indexed", "version": 2, "index": "vec_idx"}
    theirs = lance.dataset(path)
    listed = _act(client, "list_indices", dataset="indexed")["indices"]
    want = theirs.list_indices()
    for entry in want:
        entry["fragment_ids"] = sorted(entry["fragment_ids"])
    assert listed == want
    (described,) = _act(client, "describe_indices", dataset="indexed")["indices"]
    (their_description,) = theirs.describe_indices()
    assert (described["name"], described["index_type"], described["num_rows_indexed"]) == (
        their_description.name,
        their_description.index_type,
        their_description.num_rows_indexed,
    )
    q = _query(5)
    nearest = {"column": "vec", "q": q, "k": 10, "metric": "cosine", "nprobes": 2}
    assert "ANN" in theirs.scanner(nearest=nearest).explain_plan()
    got = read_info(
        client,
        client.get_flight_info(
            cmd(dataset="indexed", columns=["id"], nearest={**nearest, "q": q.tolist()})
        ),
    )
    assert (
        got["id"].to_pylist() == theirs.to_table(columns=["id"], nearest=nearest)["id"].to_pylist()
    )
    # refusals leave the data alone
    for kind, body, error in (
        ("create_index", {"column": "vec", "index_type": "IVF_PQ"}, "ALREADY_EXISTS"),
        (
            "create_index",
            {"column": "vec", "index_type": "IVF_PQ", "name": "x"},
            "INVALID_ARGUMENT",
        ),
        (
            "create_index",
            {"column": "id", "index_type": "IVF_FLAT", "name": "x"},
            "INVALID_ARGUMENT",
        ),
        ("create_index", {"column": "vec"}, "INVALID_ARGUMENT"),
        ("drop_index", {"name": "nope"}, "NOT_FOUND"),
    ):
        with pytest.raises((fl.FlightError, pa.ArrowException)) as info:
            _act(client, kind, dataset="indexed", **body)
        assert error_kind(info.value) == error, (kind, body, str(info.value))
    assert lance.dataset(path).version == 2
    dropped = _act(client, "drop_index", dataset="indexed", name="vec_idx")
    assert dropped["version"] == 3
    assert lance.dataset(path).list_indices() == []
    assert _act(client, "list_indices", dataset="indexed", version=2)["indices"] == listed
