"""``scripts/setup.sh``: pip runs once per ``pyproject.toml``, not on every start.

Run on a copy of the setup files with a real (pip-less) virtualenv: when the stamp matches,
the script must return without touching pip; when ``pyproject.toml`` changed, it must try to
install again (here pip is absent, so that attempt fails visibly) and must not stamp a
failed install.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from repo_paths import REPO


def _checkout(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / ".venv")], check=True
    )
    return tmp_path


def _setup(root: Path, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(root / "scripts" / "setup.sh"), mode],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHON": sys.executable},
    )


def _digest(root: Path) -> str:
    return hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()


def test_setup_skips_pip_when_pyproject_is_unchanged(tmp_path):
    root = _checkout(tmp_path)
    (root / ".venv" / ".setup-serve").write_text(_digest(root) + "\n")
    run = _setup(root, "serve")
    assert run.returncode == 0, run.stderr
    assert "installing" not in run.stderr
    # a test setup installs a superset: it satisfies serve too
    (root / ".venv" / ".setup-serve").unlink()
    (root / ".venv" / ".setup-test").write_text(_digest(root) + "\n")
    run = _setup(root, "serve")
    assert run.returncode == 0 and "installing" not in run.stderr, run.stderr


def test_setup_installs_again_after_pyproject_changes_and_stamps_only_success(tmp_path):
    root = _checkout(tmp_path)
    stamp = root / ".venv" / ".setup-serve"
    stamp.write_text(_digest(root) + "\n")
    with open(root / "pyproject.toml", "a") as f:
        f.write("\n# a changed dependency list\n")
    run = _setup(root, "serve")
    assert "installing lance-flight[demo]" in run.stderr
    assert run.returncode != 0  # this venv has no pip: the attempt fails, and says so
    assert stamp.read_text().strip() != _digest(root)  # a failed install is not stamped


def test_setup_refuses_an_unknown_mode(tmp_path):
    run = _setup(_checkout(tmp_path), "everything")
    assert run.returncode == 2 and "usage" in run.stderr
