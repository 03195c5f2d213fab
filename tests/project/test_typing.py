"""mypy over the packages that type-check, so CI keeps them that way.

``lance_format`` ships ``py.typed``: its annotations are part of its API.  The settings are
``[tool.mypy]`` in pyproject.toml; mypy's incremental cache (``.mypy_cache``) makes reruns
take seconds.
"""

from __future__ import annotations

import subprocess
import sys

from repo_paths import REPO as ROOT

CHECKED = ["lance_format", "flight_server"]


def test_mypy_passes() -> None:
    args = [sys.executable, "-m", "mypy", "--no-error-summary"]
    for package in CHECKED:
        args += ["-p", package]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_typed_packages_ship_their_marker() -> None:
    """PEP 561: the marker and the protobuf stubs are package data (pyproject.toml)."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_data = data["package-data"]
    for package in ("lance_format", "flight_server"):
        assert (ROOT / package / "py.typed").is_file()
        assert "py.typed" in package_data[package]
    stubs = sorted(p.name for p in (ROOT / "lance_format" / "pb").glob("*_pb2.pyi"))
    modules = sorted(p.name + "i" for p in (ROOT / "lance_format" / "pb").glob("*_pb2.py"))
    assert stubs == modules and "*.pyi" in package_data["lance_format.pb"]
