"""The test tree mirrors the packages: ``tests/lance_format/table/`` holds the tests of
``lance_format/table/``, ``tests/project/`` those of the repository itself (README, scripts,
Dockerfile, types), and ``tests/`` keeps only the shared fixtures and helpers.

pytest imports test modules by their file name (no ``__init__.py`` in the tree), so two test
files with one name in different directories would clash: names stay unique.
"""

from __future__ import annotations

from collections import Counter

from repo_paths import REPO, TESTS

PROJECT = "project"


def _test_files() -> list:
    return [p for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts]


def test_every_test_directory_is_a_package_of_the_repository():
    dirs = {p.parent.relative_to(TESTS) for p in _test_files()}
    assert dirs, "no test files found"
    for d in sorted(dirs):
        if d.parts[:1] == (PROJECT,):
            assert len(d.parts) == 1, d
            continue
        assert d.parts, "test files belong in a package's directory, not in tests/ itself"
        assert (REPO / d / "__init__.py").is_file(), f"tests/{d}/ mirrors no package {d}/"


def test_test_module_names_are_unique():
    names = Counter(p.name for p in _test_files())
    assert not [n for n, c in names.items() if c > 1]


def test_no_init_or_conftest_below_the_top():
    """An ``__init__.py`` would change how pytest names the modules below it, and a second
    ``conftest.py`` would clash with the top one under pytest's default import mode."""
    extra = [
        p.relative_to(TESTS)
        for name in ("__init__.py", "conftest.py")
        for p in TESTS.rglob(name)
        if p.parent != TESTS
    ]
    assert not extra
    assert not (TESTS / "__init__.py").exists()
