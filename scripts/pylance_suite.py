#!/usr/bin/env python
"""Run pylance's own Python test files against pylance and against ``lance_format``, and
tabulate, per file, the tests that pass with pylance and how many of those pass with ours.

The upstream test files are read at run time from a directory given on the command line
(nothing of them lives in this repository).  Each file runs twice in a fresh pytest process:
once unchanged (``import lance`` is pylance), once with ``lance`` and every ``lance.<sub>``
module resolved to ``lance_format`` / ``lance_format.<sub>`` -- the mapping a pylance user
makes with ``import lance_format as lance``.  A name ``lance_format`` lacks resolves to a
placeholder that fails when used, so that only the tests using it fail (not the whole file).

Example:
  python scripts/pylance_suite.py /tmp/upstream/src --out /tmp/upstream/run \\
      test_filter.py test_fragment.py
Also usable as a pytest plugin (``-p pylance_suite``): that is how the runs are instrumented.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMPLS = ("pylance", "lance_format")
# Upstream support files copied beside each test file (conftest fixtures, helpers).
SUPPORT_FILES = ("conftest.py", "helper.py")


# --------------------------------------------------------------------------- the plugin side


class _MissingMeta(type):
    """Placeholder for a pylance name ``lance_format`` lacks: usable as a base class (so a
    module subclassing it still imports) but failing on any use."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"lance_format lacks {cls.__qualname__}")

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotImplementedError(f"lance_format lacks {cls.__qualname__}.{name}")


def _missing(qualname: str) -> type:
    return _MissingMeta(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname})


class _AliasModule(types.ModuleType):
    """``lance.<sub>`` seen through ``lance_format.<sub>`` (or nothing, when ours lacks it)."""

    def __init__(self, name: str, real: types.ModuleType | None) -> None:
        super().__init__(name)
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "__path__", [])

    def __getattr__(self, name: str) -> Any:
        real = object.__getattribute__(self, "_real")
        if name.startswith("__"):
            raise AttributeError(name)
        if real is not None and hasattr(real, name):
            return getattr(real, name)
        return _missing(f"{self.__name__}.{name}")

    def __setattr__(self, name: str, value: Any) -> None:
        real = object.__getattribute__(self, "_real")
        if real is not None and not name.startswith("__") and hasattr(real, name):
            # the import system binds ``lance.dataset`` the submodule over ``lance.dataset``
            # the function; pylance keeps the function, and so do we
            if not isinstance(value, types.ModuleType):
                setattr(real, name, value)
            return
        object.__setattr__(self, name, value)


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname == "lance" or fullname.startswith("lance."):
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        target = "lance_format" + spec.name[len("lance") :]
        try:
            real: types.ModuleType | None = importlib.import_module(target)
        except ImportError:
            real = None
        return _AliasModule(spec.name, real)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _TestTimeout(Exception):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _TestTimeout("test exceeded the per-test timeout")


_outcomes: dict[str, str] = {}


def install() -> None:
    """Resolve ``lance`` to ``lance_format`` in this process (once)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())


if os.environ.get("PYLANCE_SUITE_IMPL") == "lance_format":  # before any test module imports
    install()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    seconds = int(os.environ.get("PYLANCE_SUITE_TIMEOUT", "60"))
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def pytest_runtest_logreport(report: Any) -> None:
    previous = _outcomes.get(report.nodeid)
    if report.failed:
        outcome = "failed"
    elif report.skipped:
        outcome = "skipped"
    elif report.when == "call":
        outcome = "passed"
    else:
        return
    if previous not in ("failed", "skipped"):
        _outcomes[report.nodeid] = outcome
    path = os.environ.get("PYLANCE_SUITE_RESULTS")
    if path:
        with open(path, "w") as f:
            json.dump(_outcomes, f)


# --------------------------------------------------------------------------- the runner side


def run_file(
    src: str, out: str, name: str, impl: str, timeout: int, total: int, repo: str = REPO
) -> dict:
    """One test file under one implementation, in its own pytest process; nodeid -> outcome."""
    run_dir = os.path.join(out, impl, name.removesuffix(".py"))
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    for support in (*SUPPORT_FILES, name):
        if os.path.exists(os.path.join(src, support)):
            shutil.copy(os.path.join(src, support), run_dir)
    if impl == "lance_format":  # processes the tests spawn resolve ``lance`` the same way
        with open(os.path.join(run_dir, "sitecustomize.py"), "w") as f:
            f.write("import pylance_suite  # noqa: F401\n")
    results = os.path.join(run_dir, "results.json")
    env = dict(os.environ, COLUMNS="300")
    scripts = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([repo, scripts, run_dir])
    env.update(
        PYLANCE_SUITE_IMPL=impl, PYLANCE_SUITE_RESULTS=results, PYLANCE_SUITE_TIMEOUT=str(timeout)
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pylance_suite"]
    cmd += ["--rootdir", run_dir, "--basetemp", os.path.join(run_dir, "tmp"), name]
    with open(os.path.join(run_dir, "log.txt"), "w") as log:
        try:
            subprocess.run(
                cmd, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=total
            )
        except subprocess.TimeoutExpired:
            log.write("\n*** whole run timed out\n")
    if not os.path.exists(results):
        return {}
    with open(results) as f:
        return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "src", help="directory holding pylance's test files (and conftest.py, helper.py)"
    )
    parser.add_argument(
        "files", nargs="*", help="test files to run (default: every test_*.py in src)"
    )
    parser.add_argument("--out", default="/tmp/pylance_suite", help="work directory for the runs")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per test")
    parser.add_argument(
        "--total", type=int, default=1800, help="seconds per file and implementation"
    )
    parser.add_argument("--repo", default=REPO, help="checkout whose lance_format is measured")
    parser.add_argument(
        "--impl", choices=IMPLS, action="append", help="run only these (reuse the other's results)"
    )
    args = parser.parse_intermixed_args()
    files = args.files or sorted(
        f for f in os.listdir(args.src) if f.startswith("test_") and f.endswith(".py")
    )
    impls = args.impl or list(IMPLS)
    rows = []
    for name in files:
        outcomes = {}
        for impl in IMPLS:
            saved = os.path.join(args.out, impl, name.removesuffix(".py"), "results.json")
            if impl in impls:
                outcomes[impl] = run_file(
                    args.src, args.out, name, impl, args.timeout, args.total, args.repo
                )
            elif os.path.exists(saved):
                with open(saved) as f:
                    outcomes[impl] = json.load(f)
            else:
                outcomes[impl] = {}
        theirs = {t for t, o in outcomes["pylance"].items() if o == "passed"}
        ours = {t for t in theirs if outcomes["lance_format"].get(t) == "passed"}
        rows.append((name, len(theirs), len(ours)))
        with open(os.path.join(args.out, f"{name.removesuffix('.py')}.failing.txt"), "w") as f:
            f.write("\n".join(sorted(theirs - ours)) + "\n")
        print(f"{name:32} pylance {len(theirs):4}  lance_format {len(ours):4}", flush=True)
    total_theirs = sum(r[1] for r in rows)
    total_ours = sum(r[2] for r in rows)
    share = 100 * total_ours / max(total_theirs, 1)
    print(f"{'total':32} pylance {total_theirs:4}  lance_format {total_ours:4}  ({share:.0f}%)")


if __name__ == "__main__":
    main()
