"""Arrow Flight SQL for the Lance Flight server: BI tools and SQL clients query the datasets.

The server routes Flight SQL calls (Any-packed ``arrow.flight.protocol.sql`` messages) to
:class:`FlightSqlService`; DuckDB executes the SQL and reads the datasets through our scanner
with projection and filter pushdown.  Modules: :mod:`.protocol` (messages on the wire),
:mod:`.naming` (datasets as tables), :mod:`.sqlinfo` and :mod:`.metadata` (the metadata
commands), :mod:`.engine` (DuckDB), :mod:`.statements` (queries, handles, DELETE),
:mod:`.ingest` (bulk ingest), :mod:`.errors` and :mod:`.service` (the entry points).
"""

from .service import FlightSqlService

__all__ = ["FlightSqlService"]
