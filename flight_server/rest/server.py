"""Running the REST application beside the Flight server: uvicorn on a thread of its own,
with its own event loop, in the same process (and so in every worker process).

Workers share one REST port: each binds it with ``SO_REUSEPORT`` and the kernel spreads
connections over them (without ``SO_REUSEPORT`` only one process may bind it).  TLS uses the
Flight server's certificate and key.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import uvicorn

from .app import RestApp

log = logging.getLogger("lance_flight")
START_TIMEOUT = 30.0


class RestServer:
    """``RestServer(app, host, port).start()`` serves until :meth:`stop`."""

    def __init__(
        self,
        app: RestApp,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        reuse_port: bool = False,
    ):
        self.app = app
        self.host = host
        self.tls = bool(tls_cert)
        self._sock = _bind(host, port, reuse_port)
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            ssl_certfile=tls_cert,
            ssl_keyfile=tls_key,
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._sock]},
            name="lance-rest",
            daemon=True,
        )

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def start(self) -> RestServer:
        """Serve from now on (a no-op when already serving)."""
        if self._thread.is_alive() or self._server.started:
            return self
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._sock.close()
                raise OSError(f"the REST server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self, grace: float = 5.0) -> None:
        self._server.should_exit = True
        self._thread.join(grace)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(1.0)
        self._sock.close()

    close = stop

    def __enter__(self) -> RestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _bind(host: str, port: int, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port and hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock
