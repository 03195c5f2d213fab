"""Session-wide fixtures: pylance-written Lance files, generated once per session in a tmp dir.

Test functions that take a ``fixture_id`` argument are parametrized over every (theme,
version) file of :mod:`fixtures`; ``lance_file`` gives the generated file.  ``api`` imports
the reader under test lazily, so that the pylance-only checks (refusals, fixture sanity) still
run when ``lance_format`` cannot be imported, and every reader test fails loudly instead.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest
from hypothesis import settings

# CI replays a fixed set of examples so that a run is reproducible; local runs keep exploring
# new ones (and a failure they find is a bug to fix, then pinned with @example).
# No deadlines: tests never assert timings, and a loaded 2-core machine makes them flaky.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

import fixtures as fx  # noqa: E402
from storage_fixtures import moto_server, s3_root  # noqa: E402, F401 - shared fixtures

_STORES: list[fx.FixtureStore] = []


@pytest.fixture(scope="session")
def fixture_store(tmp_path_factory: pytest.TempPathFactory) -> fx.FixtureStore:
    store = fx.FixtureStore(str(tmp_path_factory.mktemp("lance_fixtures")))
    _STORES.append(store)
    return store


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fixture_id" in metafunc.fixturenames:
        metafunc.parametrize(
            "fixture_id", fx.FIXTURE_IDS, ids=[f"{t}-{v}" for t, v in fx.FIXTURE_IDS]
        )
    if "nested_fixture_id" in metafunc.fixturenames:
        ids = fx.NESTED_FIXTURE_IDS
        metafunc.parametrize("nested_fixture_id", ids, ids=[f"{t}-{v}" for t, v in ids])


@pytest.fixture
def lance_file(fixture_store: fx.FixtureStore, fixture_id: tuple[str, str]) -> fx.FixtureFile:
    return fixture_store.get(*fixture_id)


@pytest.fixture(scope="session")
def api() -> SimpleNamespace:
    """The reader under test (imported here so an ImportError fails each test that uses it)."""
    import lance_format
    from lance_format import errors

    return SimpleNamespace(
        LanceFileReader=lance_format.LanceFileReader,
        SearchCache=lance_format.SearchCache,
        LanceError=lance_format.LanceError,
        errors=errors,
    )


@pytest.fixture(scope="session")
def blob_v2_file(tmp_path_factory: pytest.TempPathFactory):
    """(data file path, dataset read) of a 2.2 dataset with blob-v2 columns and sidecars."""
    t0 = time.perf_counter()
    out = fx.write_blob_v2_dataset(str(tmp_path_factory.mktemp("blob_v2")))
    _EXTRA_SECONDS["blob_v2_dataset"] = time.perf_counter() - t0
    return out


@pytest.fixture(scope="session")
def legacy_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    return fx.write_legacy_file(str(tmp_path_factory.mktemp("legacy")))


_EXTRA_SECONDS: dict[str, float] = {}


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    seconds = {k: v for s in _STORES for k, v in s.seconds.items()}
    seconds.update(_EXTRA_SECONDS)
    if seconds:
        slowest = sorted(seconds.items(), key=lambda kv: -kv[1])[:3]
        terminalreporter.write_line(
            f"lance fixtures: {len(seconds)} files generated in {sum(seconds.values()):.2f} s "
            f"(slowest: {', '.join(f'{k} {v:.2f} s' for k, v in slowest)})"
        )
