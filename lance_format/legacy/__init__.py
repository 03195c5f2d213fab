"""Reading the v1 ("legacy", 0.1) Lance file format through the v2 reader's API.

Modules: :mod:`.container` (footer, ``Metadata``, page table, embedded schema), :mod:`.rows`
(row ranges inside pages), :mod:`.plain` / :mod:`.binary` / :mod:`.dictionary` (the three
v1 encodings), :mod:`.arrays` (assembly per Arrow type: structs, lists, nulls), :mod:`.reader`
(what :class:`~lance_format.reader.LanceFileReader` dispatches to) and :mod:`.statistics`
(page statistics and :func:`pages_that_may_match`).  v1 is read only; nothing writes it.
"""

from .container import LEGACY_VERSION, LegacyMetadata, is_legacy_footer, read_legacy_metadata
from .statistics import pages_that_may_match, rows_that_may_match

__all__ = [
    "LEGACY_VERSION",
    "LegacyMetadata",
    "is_legacy_footer",
    "pages_that_may_match",
    "read_legacy_metadata",
    "rows_that_may_match",
]
