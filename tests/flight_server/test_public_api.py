"""The Flight service, its Spark client (``flight_server.spark``) included, imports only
lance_format's public surface: every import in every flight_server module, nested ones
included, is parsed with ``ast`` and checked against the modules as imported."""

from __future__ import annotations

import importlib

from public_api import PUBLIC, violations
from repo_paths import REPO as ROOT


def test_flight_server_imports_only_the_public_api():
    files = sorted((ROOT / "flight_server").rglob("*.py"))
    assert len(files) > 30  # the whole package is scanned, not an empty glob
    assert ROOT / "flight_server" / "spark" / "source.py" in files  # the Spark client
    found = [v for f in files for v in violations(f.read_text(), str(f.relative_to(ROOT)))]
    assert found == []


def test_the_check_catches_private_imports():
    """The checker itself: each kind of reach past the surface is reported, and the public
    forms are not."""
    bad = """
from lance_format.table import paths
from lance_format.table.scanner import ROW_ID
import lance_format.workers
from lance_format import workers
from lance_format.staging import _JOB_ID
from lance_format.schema import _has_extension
from lance_format import *

def nested():
    from lance_format.container.describe import describe
"""
    assert len(violations(bad)) == 8
    good = """
import lance_format
from lance_format import ROW_ID, Dataset, layout, staging
from lance_format.errors import LanceError
from lance_format.schema import LanceField
from lance_format.vector import index_metric
from flight_server import wire
"""
    assert violations(good) == []


def test_every_public_module_and_name_resolves():
    """The declared surface exists: each public module imports and each ``__all__`` name is
    an attribute of its module."""
    for name in PUBLIC:
        module = importlib.import_module(name)
        for exported in getattr(module, "__all__", ()):
            assert hasattr(module, exported), f"{name}.{exported}"
