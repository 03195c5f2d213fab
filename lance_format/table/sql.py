"""``Dataset.sql``: pylance's SQL queries over one dataset version, run by DuckDB.

pylance plans them with DataFusion; here the dataset's scan (with ``_rowid`` / ``_rowaddr``
when asked, blob columns as descriptors or bytes) is streamed into DuckDB as the table
``dataset`` (or the name given), so any SELECT DuckDB understands works.  Results follow
DuckDB's naming and typing where the two engines differ (``count_star()`` rather than
DataFusion's ``count(*)`` for an unnamed ``count(*)``; alias columns to be portable).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from .dataset import Dataset

DEFAULT_TABLE_NAME = "dataset"
DEFAULT_BATCH_SIZE = 8192
BLOB_HANDLING = ("all_binary", "blobs_descriptions", "all_descriptions")


class SqlQuery:
    """An executable SQL query (made by :meth:`SqlQueryBuilder.build`)."""

    def __init__(self, builder: SqlQueryBuilder):
        self._b = builder

    def to_stream_reader(self) -> pa.RecordBatchReader:
        """The result, streamed: the scan feeds DuckDB as DuckDB pulls."""
        import duckdb

        b = self._b
        scan = b.ds.scanner(
            with_row_id=b.row_id or None,
            with_row_address=b.row_addr or None,
            blob_handling="all_binary" if b.blobs == "all_binary" else None,
            batch_size=b.rows_per_batch,
        )
        con = duckdb.connect()
        con.register(b.name, scan.to_reader())
        try:
            result = con.sql(b.sql).to_arrow_reader(b.rows_per_batch)
        except duckdb.Error as exc:
            con.close()
            raise InvalidArgumentError(f"SQL query failed: {exc}") from None

        def batches() -> Iterator[pa.RecordBatch]:
            try:  # the connection lives as long as its result is read
                yield from result
            finally:
                con.close()

        return pa.RecordBatchReader.from_batches(result.schema, batches())

    def to_batch_records(self) -> list[pa.RecordBatch]:
        """The whole result as record batches."""
        return list(self.to_stream_reader())


class SqlQueryBuilder:
    """pylance's builder of a SQL query over a dataset (:meth:`Dataset.sql`)."""

    def __init__(self, ds: Dataset, sql: str):
        if not isinstance(sql, str) or not sql.strip():
            raise InvalidArgumentError("sql must be a non-empty SQL statement")
        self.ds = ds
        self.sql = sql
        self.name = DEFAULT_TABLE_NAME
        self.row_id = False
        self.row_addr = False
        self.blobs = "blobs_descriptions"
        self.rows_per_batch = DEFAULT_BATCH_SIZE

    def table_name(self, table_name: str) -> SqlQueryBuilder:
        if not isinstance(table_name, str) or not table_name:
            raise InvalidArgumentError("table_name must be a non-empty string")
        self.name = table_name
        return self

    def with_row_id(self, with_row_id: bool = True) -> SqlQueryBuilder:
        self.row_id = bool(with_row_id)
        return self

    def with_row_addr(self, with_row_addr: bool = True) -> SqlQueryBuilder:
        self.row_addr = bool(with_row_addr)
        return self

    def blob_handling(self, blob_handling: str) -> SqlQueryBuilder:
        if blob_handling not in BLOB_HANDLING:
            raise InvalidArgumentError(f"blob_handling must be one of {list(BLOB_HANDLING)}")
        self.blobs = blob_handling
        return self

    def batch_size(self, batch_size: int) -> SqlQueryBuilder:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise InvalidArgumentError("batch_size must be a positive integer")
        self.rows_per_batch = batch_size
        return self

    def batch_size_bytes(self, batch_size_bytes: int) -> SqlQueryBuilder:
        """Accepted as pylance's tuning hint; batches are bounded by rows here."""
        if not isinstance(batch_size_bytes, int) or batch_size_bytes <= 0:
            raise InvalidArgumentError("batch_size_bytes must be a positive integer")
        return self

    def build(self) -> SqlQuery:
        return SqlQuery(self)


__all__ = ["SqlQuery", "SqlQueryBuilder"]
