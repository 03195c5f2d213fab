"""The scripts (benchmarks, demo data, the pipeline example) use lance_format as a user would:
through its public surface only, so that what they measure and show is the public API."""

from __future__ import annotations

from public_api import violations
from repo_paths import REPO


def test_scripts_import_only_the_public_api():
    files = sorted((REPO / "scripts").glob("*.py"))
    assert len(files) > 5  # the scripts are scanned, not an empty glob
    sources = {f: f.read_text() for f in files}
    assert sum("lance_format" in s for s in sources.values()) > 5  # and they use the library
    found = [v for f, s in sources.items() for v in violations(s, str(f.relative_to(REPO)))]
    assert found == []
