"""The public surface of ``lance_format`` (``lance_format.__all__`` and
``lance_format.PUBLIC_MODULES``) and a checker of the imports that reach past it, shared by the
tests that hold the service (tests/flight_server/test_public_api.py) and the scripts
(tests/project/test_scripts_public_api.py) to it."""

from __future__ import annotations

import ast
import importlib

import lance_format

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
