"""What a request handler may use: the service's shared state, passed explicitly.

Actions, the Flight SQL service, the REST application and the Flight handlers get a
:class:`ServiceContext` rather than the server object, so each sees only the catalog, the
cache, the endpoint locations, the message limits and the metrics, and no module needs to
import the server (which imports them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lance_format import SearchCache

from .catalog import Catalog
from .limits import Limits

if TYPE_CHECKING:  # metrics imports prometheus_client: only a type here
    from .metrics import ServerMetrics


@dataclass
class ServiceContext:
    """The shared state of one server process.

    ``locations``: where endpoints may be read (this process first); filled in once the
    server knows its port.  ``metrics`` is None when metrics are off.  ``read_ahead_stats``
    gives the Flight server's read-ahead counts (None for other services).
    """

    catalog: Catalog
    limits: Limits = field(default_factory=Limits)
    locations: list[str] = field(default_factory=list)
    metrics: ServerMetrics | None = None
    read_ahead_stats: Callable[[], dict[str, int]] | None = None

    @property
    def cache(self) -> SearchCache:
        """The search cache the catalog's datasets share."""
        return self.catalog.cache

    @property
    def root(self) -> str:
        return self.catalog.root
