"""Decoding the next endpoint ahead (flight_server.readahead), through a real pyarrow client."""

from __future__ import annotations

import json
import threading
import time

import lance
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_fixtures import make_table
from test_flight_hardening import SECRET, bearer_options, users_file

from flight_server.auth import Authenticator
from flight_server.server import LanceFlightServer


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("raroot")
    # five fragments: five endpoints, read one after the other
    lance.write_dataset(make_table(50_000, seed=3), str(root / "t"), max_rows_per_file=10_000)
    return root


def _server(root, **kw) -> LanceFlightServer:
    return LanceFlightServer(str(root), "grpc://127.0.0.1:0", warm=False, **kw)


def _wait(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_endpoints_read_in_order_are_decoded_ahead_and_match_pylance(root):
    server = _server(root)
    try:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as c:
            for _ in range(2):  # cold, then from the page cache
                info = c.get_flight_info(fl.FlightDescriptor.for_path("t"))
                assert len(info.endpoints) == 5
                parts = [c.do_get(e.ticket).read_all() for e in info.endpoints]
                assert pa.concat_tables(parts).equals(lance.dataset(str(root / "t")).to_table())
            health = json.loads(next(iter(c.do_action(fl.Action("health", b"")))).body.to_pybytes())
        # every endpoint but each read's first was decoded ahead, and each was claimed
        want = {"started": 8, "claimed": 8, "expired": 0, "parked": 0}
        assert server.readahead.stats() == want and health["read_ahead"] == want
    finally:
        server.shutdown()


def test_parallel_readers_get_their_own_rows(root):
    server = _server(root)
    try:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as c:
            info = c.get_flight_info(fl.FlightDescriptor.for_path("t"))
            readers = [c.do_get(e.ticket) for e in info.endpoints]  # all open at once
            parts = [r.read_all() for r in reversed(readers)][::-1]
            assert pa.concat_tables(parts).equals(lance.dataset(str(root / "t")).to_table())
        stats = server.readahead.stats()
        assert stats["claimed"] == stats["started"] and stats["parked"] == 0
    finally:
        server.shutdown()


def test_an_unclaimed_stream_expires_and_its_producer_stops(root):
    server = _server(root)
    server.readahead.ttl = 0.2
    threads = {t.ident for t in threading.enumerate()}
    try:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as c:
            info = c.get_flight_info(fl.FlightDescriptor.for_path("t"))
            c.do_get(info.endpoints[0].ticket).read_all()  # and then the client stops
            assert _wait(lambda: server.readahead.stats()["parked"] == 1)
            time.sleep(0.3)
            # the next call notices the expired stream (here: reading the last endpoint)
            c.do_get(info.endpoints[4].ticket).read_all()
        assert server.readahead.stats()["expired"] == 1
        assert server.readahead.stats()["parked"] == 0

        def no_producer_left() -> bool:
            extra = [t for t in threading.enumerate() if t.ident not in threads]
            return not [t for t in extra if t.name == "lance-prefetch"]

        assert _wait(no_producer_left)
    finally:
        server.shutdown()


def test_a_parked_stream_goes_only_to_a_caller_who_may_read_it(root, tmp_path):
    users = users_file(tmp_path, [("bob", "pw", "read"), ("alice", "pw", "read:read=other")])
    auth = Authenticator.from_files(users, None, secret=SECRET)
    server = _server(root, authenticator=auth)
    try:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as c:
            bob = bearer_options(c.authenticate_basic_token("bob", "pw")[1])
            alice = bearer_options(c.authenticate_basic_token("alice", "pw")[1])
            info = c.get_flight_info(fl.FlightDescriptor.for_path("t"), bob)
            first = c.do_get(info.endpoints[0].ticket, bob).read_all()
            assert _wait(lambda: server.readahead.stats()["parked"] == 1)
            with pytest.raises(fl.FlightError) as denied:
                c.do_get(info.endpoints[1].ticket, alice).read_all()
            assert "may not read" in str(denied.value)
            second = c.do_get(info.endpoints[1].ticket, bob).read_all()
        assert server.readahead.stats()["claimed"] == 1
        want = lance.dataset(str(root / "t")).to_table()
        assert pa.concat_tables([first, second]).equals(want.slice(0, 20_000))
    finally:
        server.shutdown()


def test_calls_that_never_end_do_not_grow_the_records():
    """A DoGet whose stream is never pulled never ends its record: the records stay bounded
    (a client cannot grow the server's memory with such calls)."""
    from flight_server import readahead

    started: list[bytes] = []
    ra = readahead.ReadAhead(lambda t: started.append(t) or iter(()))
    for i in range(readahead.PLANS + 500):
        assert ra.begin(b"ticket-%d" % i) is None
    assert len(ra._active) == readahead.PLANS and len(ra._began) == readahead.PLANS
    # the newest calls are still known as being served: no read-ahead for them
    ra.note_plan([b"a", b"ticket-%d" % (readahead.PLANS + 499)])
    ra.begin(b"a")
    ra.after(b"a")
    assert started == []
