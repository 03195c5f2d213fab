"""Where the repository is, for test files at any depth of ``tests/``.

The test tree mirrors the packages (``tests/lance_format/table/...``), so a test never finds
the checkout from its own ``__file__``: it imports ``REPO`` (or ``TESTS``) from here.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent  # tests/: conftest.py and the shared helper modules
REPO = TESTS.parent
