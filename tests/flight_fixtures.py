"""Start ``lance-flight serve`` in a subprocess for tests and always stop it.

The server prints ``lance-flight listening on LOCATION`` once it serves (with the real port
when asked for port 0); everything else it logs goes to a file the test can read.  Also the
small client helpers the Flight test modules share.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import repo_paths

REPO = str(repo_paths.REPO)
# what the pyarrow client raises for each error kind of the server (the gRPC status decides)
CLIENT_ERRORS: dict[str, type[Exception]] = {
    "INVALID_ARGUMENT": pa.ArrowInvalid,
    "NOT_FOUND": pa.ArrowKeyError,
    "UNIMPLEMENTED": pa.ArrowNotImplementedError,
    "UNAUTHENTICATED": fl.FlightUnauthenticatedError,
    "PERMISSION_DENIED": fl.FlightUnauthorizedError,
    "UNAVAILABLE": fl.FlightUnavailableError,
    "CANCELLED": fl.FlightCancelledError,
    "DEADLINE_EXCEEDED": fl.FlightTimedOutError,
    "INTERNAL": fl.FlightInternalError,
    # no gRPC status carries these from a pyarrow server: UNKNOWN, the kind in extra_info
    "ALREADY_EXISTS": fl.FlightServerError,
    "FAILED_PRECONDITION": fl.FlightServerError,
    "ABORTED": fl.FlightServerError,
    "RESOURCE_EXHAUSTED": fl.FlightServerError,
}
SERVER_ERRORS = (fl.FlightError, pa.ArrowException)  # any error a server sends
START_TIMEOUT = 60


@dataclass
class RunningServer:
    process: subprocess.Popen
    location: str
    log_path: str
    lines: list[str]

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


@contextlib.contextmanager
def serve(root: str, *args: str, env: dict | None = None) -> Iterator[RunningServer]:
    """``lance-flight serve ROOT --port 0 ARGS...`` until the block ends."""
    log = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
    cmd = [sys.executable, "-m", "flight_server.cli", "serve", root, "--port", "0", *args]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {}), "PYTHONPATH": REPO},
    )
    server = None
    try:
        lines = []
        while True:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the server exited before listening:\n{open(log.name).read()}")
            lines.append(line.strip())
            if line.startswith("lance-flight listening on "):
                break
        location = lines[-1].rsplit(" ", 1)[1]
        if "--workers" in args:
            lines.append(proc.stdout.readline().strip())
        server = RunningServer(proc, location, log.name, lines)
        yield server
    finally:
        if server is not None:
            server.stop()
        elif proc.poll() is None:
            proc.kill()
            proc.wait()
        os.unlink(log.name)


# -- helpers shared by the Flight test modules ---------------------------------------------


def make_table(n: int, start: int = 0, seed: int = 0) -> pa.Table:
    """``n`` rows: a unique ``id`` from ``start``, a float and a nullable string."""
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n)
    strings = pa.array([f"s{i % 17}" for i in ids.tolist()])
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array(rng.random(n)),
            "s": pc.if_else(pa.array(ids % 11 == 0), pa.scalar(None, pa.string()), strings),
        }
    )


def cmd(**kw) -> fl.FlightDescriptor:
    """A command descriptor holding ``kw`` as JSON."""
    return fl.FlightDescriptor.for_command(json.dumps(kw).encode())


def read_info(client: fl.FlightClient, info: fl.FlightInfo, parallel: bool = False) -> pa.Table:
    """Every endpoint of ``info`` read (in threads when ``parallel``) and concatenated in
    endpoint order."""

    def one(endpoint: fl.FlightEndpoint) -> pa.Table:
        return client.do_get(endpoint.ticket).read_all()

    if parallel:
        with ThreadPoolExecutor(4) as pool:
            tables = list(pool.map(one, info.endpoints))
    else:
        tables = [one(e) for e in info.endpoints]
    if not tables:
        return info.schema.empty_table()
    return pa.concat_tables(tables).combine_chunks()


def action(client: fl.FlightClient, kind: str, **body) -> dict:
    """Run action ``kind`` with a JSON body; its one JSON result."""
    results = list(client.do_action(fl.Action(kind, json.dumps(body).encode())))
    assert len(results) == 1
    return json.loads(results[0].body.to_pybytes())


def put(client: fl.FlightClient, descriptor: fl.FlightDescriptor, table: pa.Table, **kw) -> dict:
    """do_put ``table`` (in batches of ``max_chunksize`` rows); the PutResult JSON."""
    writer, reader = client.do_put(descriptor, table.schema)
    try:
        writer.write_table(table, **kw)
        writer.done_writing()
        buf = reader.read()
    finally:
        writer.close()
    return json.loads(buf.to_pybytes())


def data_files(uri: str) -> set[str]:
    """Names of the files in a dataset's ``data/`` directory (empty when there is none)."""
    path = os.path.join(uri, "data")
    return set(os.listdir(path)) if os.path.isdir(path) else set()


def every_version(root: str | os.PathLike[str]) -> dict[str, list[pa.Table]]:
    """Every version of every dataset under ``root``, as pylance reads it (to show a call
    changed nothing: compare before and after)."""
    import lance

    out = {}
    for dirpath, dirnames, _ in os.walk(root):
        if "_versions" in dirnames:
            name = os.path.relpath(dirpath, root).replace(os.sep, "/")
            ds = lance.dataset(dirpath)
            out[name] = [
                lance.dataset(dirpath, version=v["version"]).to_table() for v in ds.versions()
            ]
            dirnames[:] = []
    return out


def status_of(exc: BaseException) -> str | None:
    """The gRPC status a client saw: the Flight class's own code, else the server's
    ``[KIND]`` (in ``extra_info`` or the message)."""
    from flight_server.errors import error_kind

    own = {
        fl.FlightUnauthenticatedError: "UNAUTHENTICATED",
        fl.FlightUnauthorizedError: "PERMISSION_DENIED",
        fl.FlightUnavailableError: "UNAVAILABLE",
        fl.FlightCancelledError: "CANCELLED",
        fl.FlightTimedOutError: "DEADLINE_EXCEEDED",
    }
    for cls, code in own.items():
        if isinstance(exc, cls):
            return code
    return error_kind(exc)


def run_auth_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    """``python -m flight_server.auth ARGS`` (the helper that writes auth-file lines)."""
    return subprocess.run(
        [sys.executable, "-m", "flight_server.auth", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def login_flood(location: str, users: list[str], attempts: int) -> list[str]:
    """Bad passwords for ``users`` (one thread each), ``attempts`` each: the outcomes, "in"
    (let in!), "limited" (refused unchecked), "bad" (checked and refused) or "busy"."""
    import threading

    outcomes: list[str] = []

    def attacker(user: str) -> None:
        client = fl.FlightClient(location)
        for i in range(attempts):
            try:
                client.authenticate_basic_token(user, f"guess-{i}")
                outcomes.append("in")
            except fl.FlightUnauthenticatedError as exc:
                outcomes.append("limited" if "too many failed logins" in str(exc) else "bad")
            except fl.FlightUnavailableError:
                outcomes.append("busy")

    threads = [threading.Thread(target=attacker, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return outcomes


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for commands that need a number, not 0)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
