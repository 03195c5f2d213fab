"""Start ``lance-flight serve`` in a subprocess for tests and always stop it.

The server prints ``lance-flight listening on LOCATION`` once it serves (with the real port
when asked for port 0); everything else it logs goes to a file the test can read.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
