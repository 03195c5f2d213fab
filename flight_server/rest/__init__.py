"""The Lance Namespace REST API (``lance-format/lance-namespace``'s ``spec.yaml``) over the
same catalog, auth and TLS as the Flight server: what pylance's ``RestNamespace``, lance-spark,
lance-duckdb and other Lance connectors speak to a remote server."""

from .app import RestApp
from .server import RestServer

__all__ = ["RestApp", "RestServer"]
