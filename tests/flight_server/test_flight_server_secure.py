"""The server process with auth, TLS and metrics on, through real clients; plus load.

* Basic auth via the handshake gives a bearer every call needs; a read-only user cannot
  write; a token from one worker is accepted by the other (one signing secret).
* TLS with a self-signed certificate made by openssl.
* Prometheus metrics count the calls made.
* 8 readers and 2 writers at once: no errors, every append visible, every read a whole version.
* A server killed (SIGKILL) in the middle of a do_put leaves the dataset readable by pylance.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request

import lance
import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_fixtures import REPO, serve
from tls_util import make_self_signed_cert

from flight_server.auth import hash_password


def _table(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(ids * 2.0)})


def _action(client, kind: str, options=None, **body) -> dict:
    res = list(client.do_action(fl.Action(kind, json.dumps(body).encode()), options=options))
    return json.loads(res[0].body.to_pybytes())


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("secure")
    lance.write_dataset(_table(5000), str(root / "ds"), max_rows_per_file=1000)
    return str(root)


@pytest.fixture(scope="module")
def users(tmp_path_factory):
    path = tmp_path_factory.mktemp("conf") / "users"
    path.write_text(
        f"alice:{hash_password('wonder', iterations=1000)}:write\n"
        f"bob:{hash_password('builder', iterations=1000)}:read\n"
    )
    return str(path)


def test_basic_auth_roles_and_tokens_across_workers(root, users):
    with serve(root, "--auth-users", users, "--workers", "2", "--no-warm") as s:
        workers = s.lines[-1].split()[1:]
        anon = fl.connect(s.location)
        with pytest.raises(fl.FlightUnauthenticatedError):
            list(anon.list_flights())
        with pytest.raises(fl.FlightUnauthenticatedError):
            anon.authenticate_basic_token("alice", "wrong")
        alice = fl.connect(s.location)
        header = alice.authenticate_basic_token("alice", "wonder")
        opts = fl.FlightCallOptions(headers=[header])
        info = alice.get_flight_info(fl.FlightDescriptor.for_path("ds"), opts)
        # the token works on the other worker process too
        other = fl.connect(workers[1])
        tables = [other.do_get(e.ticket, opts).read_all() for e in info.endpoints]
        assert pa.concat_tables(tables).equals(lance.dataset(os.path.join(root, "ds")).to_table())
        with pytest.raises(fl.FlightUnauthenticatedError):
            other.do_get(info.endpoints[0].ticket).read_all()  # no token: refused
        # bob may read but not write
        bob = fl.connect(s.location)
        bob_opts = fl.FlightCallOptions(headers=[bob.authenticate_basic_token("bob", "builder")])
        assert _action(bob, "health", bob_opts)["status"] == "ok"
        with pytest.raises(fl.FlightUnauthorizedError):
            _action(bob, "delete", bob_opts, dataset="ds", filter="id < 10")
        t = _table(10, start=5000)
        with pytest.raises(fl.FlightUnauthorizedError):
            w, r = bob.do_put(fl.FlightDescriptor.for_path("ds"), t.schema, bob_opts)
            w.write_table(t)
            w.close()
        w, r = alice.do_put(fl.FlightDescriptor.for_path("ds"), t.schema, opts)
        w.write_table(t)
        w.done_writing()
        w.close()
        assert lance.dataset(os.path.join(root, "ds")).count_rows() == 5010
        for c in (anon, alice, other, bob):
            c.close()


def test_tls_and_metrics(root, tmp_path):
    cert, key = make_self_signed_cert(tmp_path)
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        metrics_port = sock.getsockname()[1]
    args = ("--tls-cert", str(cert), "--tls-key", str(key), "--metrics-port", str(metrics_port))
    with serve(root, *args) as s:
        assert s.location.startswith("grpc+tls://")
        c = fl.connect(s.location, tls_root_certs=cert.read_bytes())
        info = c.get_flight_info(fl.FlightDescriptor.for_path("ds"))
        table = pa.concat_tables([c.do_get(e.ticket).read_all() for e in info.endpoints])
        assert table.equals(lance.dataset(os.path.join(root, "ds")).to_table())
        with pytest.raises(pa.ArrowKeyError, match=r"^\[NOT_FOUND\]"):
            c.get_flight_info(fl.FlightDescriptor.for_path("missing"))
        plain = fl.connect(s.location.replace("grpc+tls", "grpc"))
        with pytest.raises(fl.FlightError):
            list(plain.list_actions())
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
        c.close()
    lines = [ln for ln in text.splitlines() if ln.startswith("lance_flight_requests_total")]
    counts = {}
    for ln in lines:
        labels, value = ln.rsplit(" ", 1)
        counts[labels] = float(value)
    assert counts.get('lance_flight_requests_total{method="DoGet",status="OK"}') == len(
        info.endpoints
    )
    assert counts.get('lance_flight_requests_total{method="GetFlightInfo",status="OK"}') == 1
    served = [ln for ln in text.splitlines() if ln.startswith("lance_flight_rows_served")]
    assert served and float(served[0].rsplit(" ", 1)[1]) == table.num_rows


def _samples(text: str, prefix: str) -> dict[str, float]:
    out = {}
    for ln in text.splitlines():
        if ln.startswith(prefix):
            labels, value = ln.rsplit(" ", 1)
            out[labels] = float(value)
    return out


def test_metrics_of_all_workers_on_one_endpoint(root, tmp_path):
    """--workers 2: the supervisor's one /metrics sums what both workers served (each
    worker is called directly), and its multiprocess directory is gone after exit."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        metrics_port = sock.getsockname()[1]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    args = ("--workers", "2", "--no-warm", "--metrics-port", str(metrics_port))
    truth = lance.dataset(os.path.join(root, "ds")).to_table()
    with serve(root, *args, env={"TMPDIR": str(tmp)}) as s:
        workers = s.lines[-1].split()[1:]
        assert len(workers) == 2
        assert [p.name.startswith("lance-flight-metrics-") for p in tmp.iterdir()] == [True]
        endpoints = 0
        for location in workers:
            with fl.connect(location) as c:
                info = c.get_flight_info(fl.FlightDescriptor.for_path("ds"))
                got = pa.concat_tables([c.do_get(e.ticket).read_all() for e in info.endpoints])
                assert got.equals(truth)
                endpoints += len(info.endpoints)
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        text = urllib.request.urlopen(url).read().decode()
    requests = _samples(text, "lance_flight_requests_total")
    assert requests['lance_flight_requests_total{method="GetFlightInfo",status="OK"}'] == 2
    assert requests['lance_flight_requests_total{method="DoGet",status="OK"}'] == endpoints
    served = _samples(text, "lance_flight_rows_served_total")
    assert served == {"lance_flight_rows_served_total": 2 * truth.num_rows}
    assert list(tmp.iterdir()) == []  # the supervisor removed its metrics directory


def test_readers_and_writers_concurrently(tmp_path):
    work = tmp_path / "load"
    uri = str(work / "ds")
    lance.write_dataset(_table(5000), uri, max_rows_per_file=1000)
    duration = float(os.environ.get("LANCE_FLIGHT_LOAD_SECONDS", "30"))
    errors: list[BaseException] = []
    appended: list[int] = []
    stop = time.monotonic() + duration

    with serve(str(work), "--no-warm") as s:

        def reader() -> None:
            c = fl.connect(s.location)
            try:
                while time.monotonic() < stop:
                    info = c.get_flight_info(fl.FlightDescriptor.for_path("ds"))
                    t = pa.concat_tables([c.do_get(e.ticket).read_all() for e in info.endpoints])
                    ids = t.column("id").to_numpy()
                    # a whole version: ids are the base rows plus whole appended batches
                    assert t.num_rows == info.total_records
                    assert len(np.unique(ids)) == len(ids) and (ids[:5000] == np.arange(5000)).all()
                    assert (t.num_rows - 5000) % 100 == 0
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)
            finally:
                c.close()

        def writer(w: int) -> None:
            c = fl.connect(s.location)
            try:
                i = 0
                while time.monotonic() < stop:
                    start = 1_000_000 * (w + 1) + 100 * i
                    t = _table(100, start=start)
                    wr, rd = c.do_put(fl.FlightDescriptor.for_path("ds"), t.schema)
                    wr.write_table(t)
                    wr.done_writing()
                    json.loads(rd.read().to_pybytes())
                    wr.close()
                    appended.append(start)
                    i += 1
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
            finally:
                c.close()

        threads = [threading.Thread(target=reader) for _ in range(8)]
        threads += [threading.Thread(target=writer, args=(w,)) for w in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[:3]
    assert appended
    ids = set(lance.dataset(uri).to_table(columns=["id"]).column("id").to_pylist())
    for start in appended:
        assert start in ids and start + 99 in ids
    assert lance.dataset(uri).count_rows() == 5000 + 100 * len(appended)


_SLOW_PUT = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np, pyarrow as pa, pyarrow.flight as fl
    c = fl.connect(sys.argv[1])
    t = pa.table({"id": pa.array(np.arange(1000), pa.int64()), "v": pa.array(np.zeros(1000))})
    d = fl.FlightDescriptor.for_command(json.dumps({"dataset": "ds", "max_rows_per_file": 5000}).encode())
    w, r = c.do_put(d, t.schema)
    for i in range(100000):
        w.write_table(t)
        if i == 30:
            print("sent", flush=True)
        time.sleep(0.005)
    """
)


def test_server_killed_mid_put_leaves_last_version(root, tmp_path):
    import shutil

    work = tmp_path / "kill"
    shutil.copytree(root, work)
    uri = str(work / "ds")
    before = lance.dataset(uri).to_table()
    with serve(str(work), "--no-warm") as s:
        client = subprocess.Popen(
            [sys.executable, "-c", _SLOW_PUT, s.location], stdout=subprocess.PIPE, text=True
        )
        assert client.stdout.readline().strip() == "sent"
        s.stop(signal.SIGKILL)
        client.kill()
        client.wait()
    assert lance.dataset(uri).to_table().equals(before)  # readable at its last version
    assert REPO
