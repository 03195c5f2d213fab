"""lance-flight: an Arrow Flight server for the Lance datasets under a root directory.

``flight_server.LanceFlightServer(root, location="grpc://127.0.0.1:8815", ...)`` is the
server (:mod:`flight_server.server`); ``lance-flight serve ROOT`` runs it
(:mod:`flight_server.cli`).  Imported lazily, so the CLI's other commands start fast.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LanceFlightServer"]


def __getattr__(name: str) -> Any:
    if name == "LanceFlightServer":
        from .server import LanceFlightServer

        return LanceFlightServer
    raise AttributeError(f"module 'flight_server' has no attribute {name!r}")
