"""The Flight service imports only lance_format's public surface (``lance_format.__all__`` and
``lance_format.PUBLIC_MODULES``): every import in every flight_server module, nested ones
included, is parsed with ``ast`` and checked against the modules as imported."""

from __future__ import annotations

import ast
import importlib
import pathlib

import lance_format

ROOT = pathlib.Path(__file__).resolve().parents[1]
PUBLIC = set(lance_format.PUBLIC_MODULES)


def _exported(module_name: str, name: str) -> bool:
    """``name`` is part of a public module's surface: listed in its ``__all__`` when it has
    one, else not underscored; a public submodule counts for the package."""
    if f"{module_name}.{name}" in PUBLIC:
        return True
    module = importlib.import_module(module_name)
    declared = getattr(module, "__all__", None)
    if declared is not None:
        return name in declared
    return not name.startswith("_") and hasattr(module, name)


def violations(source: str, filename: str = "<source>") -> list[str]:
    """Every import of ``lance_format`` in ``source`` that reaches past the public surface."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top == "lance_format" and alias.name not in PUBLIC:
                    found.append(f"{filename}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "lance_format":
                continue
            if node.module not in PUBLIC:
                found.append(f"{filename}:{node.lineno}: from {node.module} import ...")
                continue
            for alias in node.names:
                if alias.name == "*" or not _exported(node.module, alias.name):
                    found.append(
                        f"{filename}:{node.lineno}: from {node.module} import {alias.name}"
                    )
    return found


def test_flight_server_imports_only_the_public_api():
    files = sorted((ROOT / "flight_server").rglob("*.py"))
    assert len(files) > 30  # the whole package is scanned, not an empty glob
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
