"""DuckDB runs the SQL; Lance datasets are read through our own scanner, with pushdown.

A statement is parsed once (sqlglot, DuckDB dialect) to find the tables it reads and its
parameters.  To run it, a fresh in-memory DuckDB connection is opened, locked down (no file
system, no extensions, configuration locked), and every dataset version the statement reads is
registered as a :class:`LanceSource` under a private name; the table references in the SQL
text are replaced by those names (the rest of the text is kept verbatim) and DuckDB runs it.

Pushdown: DuckDB 2.0's Arrow scan talks to a *source* object (``duckdb._sources``): it asks
``accepts(predicate)`` for each filter it could push into the scan and then calls
``stream(columns, filters)`` with the projected columns and the accepted predicates.  The
source answers with a stream from ``Dataset.scanner(columns=..., filter=...)``: only the
projected columns are decoded, the filter columns are read first and the rest only for
matching rows.  A predicate is accepted only when DuckDB's own translator
(``duckdb._sources.to_arrow``) turns it into an Arrow expression that evaluates exactly as
DuckDB would; our scanner evaluates that expression with the same Arrow kernels and prunes
nothing by statistics, so an accepted filter never changes a result.  Anything else (LIKE,
functions, expressions over several columns) stays with DuckDB, which applies its whole plan.

Why this and not a SQL rewrite: the alternative (sqlglot's pushdown_predicates /
pushdown_projections, then ``scanner(filter=<SQL text>)`` per table) pushes predicates in our
filter dialect, whose semantics (pylance's) are not DuckDB's in corner cases, so DuckDB would
have to re-check everything and a wrong translation could still drop rows.  DuckDB's source
protocol hands us exactly the predicates its optimiser pushes (constants already folded and
typed, join-derived filters included) with a translator written for exactly this job, and
takes care of projections through joins, subqueries and CTEs.  The cost is a dependency on
DuckDB's private source hook (``_register_arrow_source``), hence the ``duckdb>=2.0,<3`` pin;
:class:`SqlEngine` fails at construction, with a clear message, if the hook is missing.

Nothing is materialised: DuckDB pulls batches from the scanner as it needs them, and the
result comes out as a ``RecordBatchReader`` that the Flight stream drains batch by batch.
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import duckdb
import numpy as np
import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from flight_server.errors import NotFound
from lance_format import ROW_ADDRESS, Dataset, Scanner, prefetch
from lance_format.errors import InvalidArgumentError, LanceError, UnsupportedError, first_line

from .errors import NotFoundError, SqlError
from .limits import Watch
from .naming import Resolver, VersionSpec, parse_version
from .vector_search import FUNCTION as SEARCH_FUNCTION
from .vector_search import SearchCall, find_calls

try:  # DuckDB's Arrow scan source protocol (see the module docstring)
    from duckdb._sources import ArrowScanSource
    from duckdb._sources.nodes import Col, Node, Untranslatable
    from duckdb._sources.to_arrow import to_arrow
except ImportError:  # pragma: no cover - only with an unsupported DuckDB
    ArrowScanSource = object  # type: ignore[assignment,misc]
    Node = Col = object  # type: ignore[assignment,misc]
    Untranslatable = Exception  # type: ignore[assignment,misc]
    to_arrow = None  # type: ignore[assignment]

__all__ = [
    "Binding",
    "Catalog",
    "LanceSource",
    "ScanRecord",
    "SqlEngine",
    "Statement",
    "TableRef",
    "parse_statement",
]

DEFAULT_RESULT_BATCH_ROWS = 64 * 1024
# rows per batch DuckDB pulls from a scan (unless set): each pull takes the GIL, and DuckDB
# cuts batches into its own vectors anyway
SCAN_BATCH_ROWS = 64 * 1024
# A predicate goes into our scanner only when it keeps at most PUSH_SHARE of the rows (judged
# on a sample): the scanner then decodes the other columns for the matching rows alone.  One
# keeping more costs a copy of every matching row out of the decoded pages, while DuckDB,
# handed the pages as they are, filters for less (measured on TPC-H Q1 and Q6: pushing
# their predicates, which keep 98% and 15-70% of the rows, cost DuckDB 20-40% more CPU).
PUSH_SHARE = 0.05
SAMPLE_FRAGMENTS = 8
SAMPLE_ROWS = 4096
PARAMS_ALIAS = "__lance_params"
# schemas DuckDB keeps for itself: references into them are not datasets
WRITES = ("delete", "update", "merge")  # statements that change their target table
_SYSTEM_SCHEMAS = {"information_schema", "pg_catalog", "system", "temp"}


class Catalog(Protocol):
    """What the engine needs from the server's catalog of datasets."""

    def names(self) -> list[str]: ...

    def open(self, name: str, version: int | str | None = None) -> Dataset: ...


# -- parsing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableRef:
    """One table reference of a statement, as written."""

    name: str
    db_schema: str | None
    catalog: str | None
    version: VersionSpec

    @property
    def shown(self) -> str:
        return ".".join(p for p in (self.catalog, self.db_schema, self.name) if p)

    @property
    def alias(self) -> str:
        """The name columns are qualified with when the SQL gives no alias (no ``@version``)."""
        return self.name.rpartition("@")[0] or self.name


@dataclass(frozen=True)
class _Span:
    """Where a table reference sits in the SQL text (inclusive character positions)."""

    start: int
    end: int
    has_alias: bool
    has_when: bool
    node: exp.Table | None
    search: SearchCall | None = None  # a lance_vector_search(...) call, not a table


@dataclass
class Statement:
    """A parsed statement: what it reads and how many parameters it takes."""

    sql: str  # the text the positions below refer to (after `name@version` merging)
    kind: str  # "query", "delete" or "update"
    refs: list[TableRef]
    param_count: int
    tree: exp.Expr = field(repr=False)
    spans: list[_Span] = field(repr=False, default_factory=list)
    target: int | None = None  # the reference a DELETE deletes from


def _merge_version_suffixes(sql: str) -> str:
    """``lineitem@5`` -> ``"lineitem@5"``: an identifier immediately followed by ``@`` and a
    version or tag (no spaces) becomes one quoted identifier, which sqlglot and DuckDB parse."""
    try:
        tokens = sqlglot.Dialect.get_or_raise("duckdb").tokenize(sql)
    except SqlglotError as e:
        raise SqlError(f"cannot parse SQL: {first_line(e)}") from None
    names = (TokenType.VAR, TokenType.IDENTIFIER)
    pieces, last = [], 0
    i = 0
    while i + 2 < len(tokens):
        a, at, v = tokens[i], tokens[i + 1], tokens[i + 2]
        if (
            a.token_type in names
            and at.text == "@"
            and at.start == a.end + 1
            and v.start == at.end + 1
            and v.token_type in (TokenType.NUMBER, TokenType.VAR, TokenType.IDENTIFIER)
        ):
            merged = f"{a.text}@{v.text}".replace('"', '""')
            pieces += [sql[last : a.start], f'"{merged}"']
            last = v.end + 1
            i += 3
            continue
        i += 1
    return "".join(pieces) + sql[last:] if pieces else sql


def _cte_names(tree: exp.Expr) -> set[str]:
    return {cte.alias_or_name.casefold() for cte in tree.find_all(exp.CTE)}


def _version_of(table: exp.Table, shown: str) -> VersionSpec:
    when = table.args.get("when")
    if when is None:
        return None
    kind = str(when.args.get("kind") or "").upper()
    value = when.args.get("expression")
    if kind not in ("VERSION", "TAG") or not isinstance(value, exp.Literal):
        raise InvalidArgumentError(
            f"table {shown!r}: only AT (VERSION => <number or tag>) is supported for time travel"
        )
    return parse_version(int(value.this) if not value.is_string else value.this)


def _parameter_name(node: exp.Expression) -> str | None:
    """None for a positional ``?``, else the name or number of ``$name`` / ``$n``."""
    value = node.args.get("this")
    if value is None:
        return None
    return value.name if isinstance(value, exp.Expression) else str(value)


def _parameter_count(tree: exp.Expr) -> int:
    """The number of parameters: ``?`` counted in order, or the highest ``$n``."""
    positional, numbered = 0, 0
    for node in tree.find_all(exp.Placeholder, exp.Parameter):
        text = _parameter_name(node)
        if text is None:
            positional += 1
        else:
            if not text.isdigit() or int(text) < 1:
                raise SqlError(f"named parameters are not supported ({node.sql('duckdb')})")
            numbered = max(numbered, int(text))
    if positional and numbered:
        raise SqlError("do not mix ? and $n parameters in one statement")
    return positional or numbered


def parse_statement(sql: str) -> Statement:
    """Parse one SELECT-like query, DELETE or UPDATE; anything else is refused clearly."""
    if not isinstance(sql, str) or not sql.strip():
        raise SqlError("the SQL text is empty")
    text = _merge_version_suffixes(sql)
    try:
        trees = [t for t in sqlglot.parse(text, dialect="duckdb") if t is not None]
    except SqlglotError as e:
        raise SqlError(f"cannot parse SQL: {first_line(e)}") from None
    if len(trees) != 1:
        raise SqlError(f"send exactly one statement at a time (got {len(trees)})")
    tree = trees[0]
    if isinstance(tree, exp.Delete):
        kind = "delete"
    elif isinstance(tree, exp.Update):
        kind = "update"
    elif isinstance(tree, exp.Merge):
        kind = "merge"
    elif isinstance(tree, exp.Query):
        kind = "query"
    elif isinstance(tree, exp.Insert):
        raise UnsupportedError(
            "INSERT is not supported: rows are added with bulk ingest (CommandStatementIngest, "
            "adbc_ingest) or MERGE INTO, changed with UPDATE and removed with DELETE"
        )
    else:
        raise SqlError(
            "only queries (SELECT, WITH, VALUES, set operations), DELETE, UPDATE and MERGE "
            "INTO are supported, "
            f"not {tree.key.upper()}"
        )
    ctes = _cte_names(tree)
    refs: list[TableRef] = []
    spans: list[_Span] = []
    target: int | None = None
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue  # a table function such as range(10)
        db = table.args.get("db")
        if db is not None and db.name.casefold() in _SYSTEM_SCHEMAS:
            continue
        if db is None and table.name.casefold() in ctes:
            continue
        catalog = table.args["catalog"].name if table.args.get("catalog") else None
        db_name = db.name if db is not None else None
        shown = ".".join(p for p in (catalog, db_name, table.name) if p)
        ref = TableRef(table.name, db_name, catalog, _version_of(table, shown))
        parts = [p for p in table.parts if isinstance(p, exp.Identifier)]
        start, end = parts[0].meta.get("start"), parts[-1].meta.get("end")
        if start is None or end is None:
            raise SqlError(f"cannot locate table {ref.shown!r} in the SQL text")
        if table is tree.args.get("this") and kind in WRITES:
            target = len(refs)
        refs.append(ref)
        has_alias = table.args.get("alias") is not None
        spans.append(_Span(start, end, has_alias, table.args.get("when") is not None, table))
    if SEARCH_FUNCTION in text.casefold():
        if kind in WRITES:
            raise SqlError(f"{SEARCH_FUNCTION} cannot be used in a {kind.upper()}")
        for call in find_calls(text):
            refs.append(TableRef(call.table, None, None, None))
            spans.append(_Span(call.start, call.end, True, False, None, call))
    if kind in WRITES and target is None:
        raise SqlError(f"{kind.upper()} must name a table of this server")
    return Statement(text, kind, refs, _parameter_count(tree), tree, spans, target)


# -- reading datasets ------------------------------------------------------------------------


@dataclass
class ScanRecord:
    """What one scan of a dataset was asked for and produced (for tests and debugging)."""

    dataset: str
    version: int
    columns: list[str] | None
    filters: list[str]
    rows: int = 0
    batches: int = 0


class ScanLog:
    """The most recent scans, thread-safe and bounded."""

    def __init__(self, size: int = 256):
        self._items: collections.deque[ScanRecord] = collections.deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, record: ScanRecord) -> None:
        with self._lock:
            self._items.append(record)

    def snapshot(self) -> list[ScanRecord]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class LanceSource(ArrowScanSource):
    """One dataset version as a DuckDB Arrow scan source, read through our scanner."""

    schema_is_stable = True

    def __init__(
        self,
        ds: Dataset,
        name: str,
        *,
        with_row_address: bool = False,
        batch_size: int | None = None,
        log: ScanLog | None = None,
    ):
        super().__init__(ds)
        self.ds = ds
        self.name = name
        self.with_row_address = with_row_address
        self.batch_size = batch_size
        self.log = log
        schema = ds.schema
        if with_row_address and ROW_ADDRESS not in schema.names:
            schema = schema.append(pa.field(ROW_ADDRESS, pa.uint64(), nullable=False))
        self.schema = schema
        self._rows: int | None = None
        self._shares: dict[str, float | None] = {}  # sampled share kept, per predicate

    def __arrow_c_schema__(self) -> object:
        return self.schema.__arrow_c_schema__()

    def rows(self) -> int | None:
        """Live rows (a cardinality hint for DuckDB's join ordering)."""
        if self._rows is None:
            self._rows = sum(f.count_rows() for f in self.ds.get_fragments())
        return self._rows

    def accepts(self, predicate: Node) -> bool:
        try:
            expr = to_arrow(predicate, self.schema)
        except Untranslatable:
            return False
        columns = _columns_of(predicate)
        if not columns <= set(self.ds.schema.names):  # the row address: only we can
            return True
        key = predicate.fragment()
        if key not in self._shares:
            try:
                self._shares[key] = self._sampled_share(expr, sorted(columns))
            except (LanceError, pa.ArrowException):
                self._shares[key] = None
        share = self._shares[key]
        return share is None or share <= PUSH_SHARE

    def _sampled_share(self, expr: object, columns: list[str]) -> float | None:
        """The share of rows ``expr`` keeps in a sample: SAMPLE_ROWS from the middle of up
        to SAMPLE_FRAGMENTS fragments spread over the version (None: no rows)."""
        frags = self.ds.get_fragments()
        picked = frags[:: max(1, len(frags) // SAMPLE_FRAGMENTS)][:SAMPLE_FRAGMENTS]
        ranges = {}
        for f in picked:
            a = max(0, f.physical_rows // 2 - SAMPLE_ROWS // 2)
            ranges[f.fragment_id] = (a, min(f.physical_rows, a + SAMPLE_ROWS))
        if not ranges:
            return None
        total = self.ds.scanner(columns=columns, fragments=picked, ranges=ranges).count_rows()
        if not total:
            return None
        scan = self.ds.scanner(columns=columns, filter=expr, fragments=picked, ranges=ranges)
        return scan.count_rows() / total

    def stream(self, columns: Sequence[int] | None, filters: Sequence[Node]) -> tuple[object, bool]:
        names = self.schema.names if columns is None else [self.schema.names[i] for i in columns]
        mask = None
        for predicate in filters:
            term = to_arrow(predicate, self.schema)
            mask = term if mask is None else mask & term
        data_columns = [c for c in names if c != ROW_ADDRESS or c in self.ds.schema.names]
        address = ROW_ADDRESS in names and ROW_ADDRESS not in self.ds.schema.names
        scanner = self.ds.scanner(
            columns=data_columns,
            filter=mask,
            with_row_address=address,
            batch_size=self.batch_size or SCAN_BATCH_ROWS,
        )
        record = ScanRecord(
            self.name,
            self.ds.version,
            None if columns is None else list(names),
            [p.fragment() for p in filters],
        )
        if self.log is not None:
            self.log.add(record)
        out_schema = pa.schema([self.schema.field(c) for c in names])
        rows = scanner.options.batch_size
        # the next range decodes on a background thread while DuckDB works on this one;
        # each range's pages are handed over unjoined (batches cut where a page ends)
        ranges = prefetch(scanner.to_ranges()) if isinstance(scanner, Scanner) else None
        batches = (
            (b for t in ranges for b in t.to_batches(max_chunksize=rows))
            if ranges is not None
            else scanner.to_batches()
        )
        reader = pa.RecordBatchReader.from_batches(
            out_schema, _counted(batches, record, out_schema)
        )
        return reader.__arrow_c_stream__(), True


def _columns_of(predicate: Node) -> set[str]:
    """The top-level columns a predicate reads."""
    out: set[str] = set()
    pending = [predicate]
    while pending:
        node = pending.pop()
        if isinstance(node, Col):
            out.add(node.parts[0])
        pending.extend(node._children())
    return out


def _counted(
    batches: Iterator[pa.RecordBatch], record: ScanRecord, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        if batch.schema.names != schema.names:
            batch = batch.select(schema.names)
        if not batch.schema.equals(schema):
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=schema)
        record.rows += batch.num_rows
        record.batches += 1
        yield batch


# -- running ---------------------------------------------------------------------------------


@dataclass
class Binding:
    """A statement with every table reference bound to an opened dataset version."""

    statement: Statement
    datasets: list[tuple[str, Dataset]]  # per reference: (dataset name, opened version)

    @property
    def pins(self) -> list[tuple[str, int]]:
        return [(name, ds.version) for name, ds in self.datasets]


class SqlEngine:
    """Parses, binds and runs Flight SQL statements over the datasets of a catalog."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        threads: int = 2,
        memory_limit: str | None = None,
        result_batch_rows: int = DEFAULT_RESULT_BATCH_ROWS,
        scan_batch_rows: int | None = None,
        log: ScanLog | None = None,
    ):
        if to_arrow is None or not hasattr(duckdb.DuckDBPyConnection, "_register_arrow_source"):
            raise UnsupportedError(
                f"DuckDB {duckdb.__version__} lacks the Arrow scan source hook this engine "
                "needs (duckdb>=2.0,<3)"
            )
        self.catalog = catalog
        self.threads = int(threads)
        self.memory_limit = memory_limit
        self.result_batch_rows = int(result_batch_rows)
        self.scan_batch_rows = scan_batch_rows
        self.log = log if log is not None else ScanLog()
        self._db: duckdb.DuckDBPyConnection | None = None
        self._db_lock = threading.Lock()

    # -- binding -----------------------------------------------------------------------------

    def resolve(self, statement: Statement) -> list[tuple[str, VersionSpec]]:
        """Dataset and version spec of every reference (checks that the tables exist)."""
        if not statement.refs:
            return []
        resolver = Resolver(self.catalog.names())
        return [resolver.resolve(r.name, r.db_schema, r.catalog, r.version) for r in statement.refs]

    def bind(self, statement: Statement, pins: Sequence[tuple[str, int]] | None = None) -> Binding:
        """Open every referenced dataset: at ``pins`` (a ticket's versions) or as the SQL says
        (its pinned version, else the latest)."""
        if pins is not None:
            if len(pins) != len(statement.refs):
                raise InvalidArgumentError("the statement handle does not match its SQL")
            targets: Sequence[tuple[str, VersionSpec]] = pins
        else:
            targets = self.resolve(statement)
        opened: dict[tuple[str, VersionSpec], Dataset] = {}
        datasets = []
        for name, version in targets:
            key = (name, version)
            if key not in opened:
                opened[key] = self._open(name, version)
            datasets.append((name, opened[key]))
        return Binding(statement, datasets)

    def _open(self, name: str, version: VersionSpec) -> Dataset:
        try:
            return self.catalog.open(name, version=version)
        except NotFound:
            raise
        except LanceError as e:
            if version is None:
                raise
            raise NotFoundError(f"table {name!r} has no version {version!r}: {e}") from None

    # -- running -----------------------------------------------------------------------------

    def _database(self) -> duckdb.DuckDBPyConnection:
        """The engine's one in-memory DuckDB database, locked down when it is made: no file
        system, no extensions, configuration frozen.  Statements run on cursors of it (a
        connection each: registrations are private to a connection), so opening one costs
        microseconds instead of a new database's ~20 ms, and ``threads`` and
        ``memory_limit`` bound all statements together."""
        with self._db_lock:
            if self._db is None:
                config: dict[str, str | bool | int | float | list[str]] = {
                    "enable_external_access": False,
                    "autoinstall_known_extensions": False,
                    "autoload_known_extensions": False,
                    "threads": self.threads,
                    # no spilling: the memory limit is a hard limit, and an in-memory
                    # database would spill into the working directory
                    "temp_directory": "",
                }
                if self.memory_limit:
                    config["memory_limit"] = self.memory_limit
                db = duckdb.connect(":memory:", config=config)
                db.execute("SET lock_configuration = true")
                self._db = db
                # closed at exit at the latest (an open DuckDB at interpreter exit is reported
                # as leaked objects by its bindings)
                self._finalizer = weakref.finalize(self, db.close)
            return self._db

    def close(self) -> None:
        """Close the DuckDB database (running statements fail)."""
        with self._db_lock:
            if self._db is not None:
                self._finalizer()
                self._db = None

    def _connect(
        self, binding: Binding, *, addresses_for: int | None = None
    ) -> tuple[duckdb.DuckDBPyConnection, list[str]]:
        """A connection with the binding's datasets registered; the private name of each
        reference."""
        con = self._database().cursor()
        try:
            aliases: list[str] = []
            seen: dict[tuple[int, bool], str] = {}
            for i, (name, ds) in enumerate(binding.datasets):
                call = binding.statement.spans[i].search
                if call is not None:  # the search result, computed here, as a table
                    aliases.append(f"__lance_s{i}")
                    con.register(aliases[-1], call.run(ds))
                    continue
                want_address = addresses_for == i
                key = (id(ds), want_address)
                if key not in seen:
                    alias = f"__lance_t{len(seen)}"
                    source = LanceSource(
                        ds,
                        name,
                        with_row_address=want_address,
                        batch_size=self.scan_batch_rows,
                        log=self.log,
                    )
                    con._register_arrow_source(alias, source)
                    seen[key] = alias
                aliases.append(seen[key])
            return con, aliases
        except BaseException:
            con.close()
            raise

    def query_sql(self, binding: Binding, aliases: list[str]) -> str:
        """The statement's text with each table reference replaced by its private name (and
        its ``AT (...)`` clause dropped); the rest of the text is kept as written."""
        st = binding.statement
        text = st.sql
        pieces, last = [], 0
        for i in sorted(range(len(st.spans)), key=lambda i: st.spans[i].start):
            span = st.spans[i]
            replacement = _quote(aliases[i])
            if span.search is not None:
                replacement = f"(SELECT * FROM {replacement})"
            elif not span.has_alias:
                replacement += " AS " + _quote(st.refs[i].alias)
            pieces += [text[last : span.start], replacement]
            last = span.end + 1
            if span.has_when:
                last = _skip_time_travel(text, last)
        return "".join(pieces) + text[last:]

    def schema(
        self, binding: Binding, params: pa.Table | None = None, watch: Watch | None = None
    ) -> pa.Schema:
        """The result schema of a query, without reading any data."""
        rows = _param_rows(binding.statement, params)
        con, aliases = self._connect(binding)
        watch = watch or Watch(None, None)
        watch.on_stop(con.interrupt)
        try:
            with watch.busy():
                rel = con.sql(self.query_sql(binding, aliases), params=rows[0] if rows else None)
                return rel.limit(0).to_arrow_table().schema
        finally:
            con.close()

    def execute(
        self, binding: Binding, params: pa.Table | None = None, watch: Watch | None = None
    ) -> Execution:
        """Start a query, once per row of parameters (results concatenated).  DuckDB runs it
        as the returned :class:`Execution` is iterated; nothing is collected up front.
        ``watch`` (the statement's, from the service's governor) times DuckDB's work and
        interrupts it when the statement must stop."""
        return Execution(self, binding, _param_rows(binding.statement, params), watch)

    def select_for_write(
        self, binding: Binding, sql_of: Callable[[exp.Expr, str], dict[str, str]], watch=None
    ) -> dict[str, pa.Table]:
        """Run the SELECTs ``sql_of(tree, target alias)`` builds over the statement's tree
        (its tables renamed to their private names, the target with ``_rowaddr``), on one
        connection; their results by name (how a MERGE finds its rows)."""
        st = binding.statement
        tree = st.tree.copy()
        con, aliases = self._connect(binding, addresses_for=st.target)
        watch = watch or Watch(None, None)
        watch.on_stop(con.interrupt)
        try:
            target_alias = _use_private_names(tree, st, aliases)
            if target_alias is None:
                raise SqlError("the statement names no target table")
            out = {}
            for name, sql in sql_of(tree, target_alias).items():
                with watch.busy():
                    out[name] = con.sql(sql).to_arrow_table()
        finally:
            con.close()
        return out

    def delete_addresses(
        self, binding: Binding, params: pa.Table | None = None, watch: Watch | None = None
    ) -> np.ndarray:
        """Row addresses of the target rows of a DELETE, over every row of parameters.

        The parameters become a table joined to the statement (``?`` number i reads its
        column i), so one scan serves any number of parameter rows."""
        found = self.target_rows(binding, params, watch).column(0).to_numpy()
        return np.unique(found.astype(np.uint64, copy=False))

    def target_rows(
        self, binding: Binding, params: pa.Table | None = None, watch: Watch | None = None
    ) -> pa.Table:
        """The target rows of a DELETE or UPDATE, over every row of parameters: their row
        addresses (sorted, unique for a DELETE) and, for an UPDATE, the new values."""
        st = binding.statement
        if st.kind not in WRITES:
            raise InvalidArgumentError("not a DELETE or UPDATE statement")
        if st.param_count and (params is None or params.num_columns != st.param_count):
            _param_rows(st, params)  # raises the clear error
        tree = st.tree.copy()
        con, aliases = self._connect(binding, addresses_for=st.target)
        watch = watch or Watch(None, None)
        watch.on_stop(con.interrupt)
        try:
            assert isinstance(tree, exp.Delete | exp.Update)  # st.kind is in WRITES
            sql = _target_select(tree, st, aliases)
            if st.param_count:
                assert params is not None  # else _param_rows raised above
                if params.num_rows == 0:
                    return con.sql(sql + " LIMIT 0").to_arrow_table()
                named = params.rename_columns([f"p{i}" for i in range(params.num_columns)])
                con.register(PARAMS_ALIAS, named)
            with watch.busy():
                table = con.sql(sql).to_arrow_table()
        finally:
            con.close()
        return table


class Execution:
    """A running query: the result schema, then batches as DuckDB produces them.

    It owns a DuckDB connection until iterated to the end or closed; its watch (or
    :meth:`cancel`, from any thread) interrupts DuckDB and ends the iteration with the
    error of the reason it stopped."""

    def __init__(
        self,
        engine: SqlEngine,
        binding: Binding,
        rows: list[list[object]],
        watch: Watch | None = None,
    ):
        self._con, aliases = engine._connect(binding)
        self._batch_rows = engine.result_batch_rows
        self._rows: list[list[object] | None] = list(rows) or [None]
        self._watch = watch or Watch(None, None)
        self._watch.on_stop(self._con.interrupt)
        try:
            self._sql = engine.query_sql(binding, aliases)
            with self._watch.busy():  # a blocking plan (aggregate, sort) may run right here
                self._reader = self._open(self._rows[0])
        except BaseException:
            self._con.close()
            raise
        self.schema: pa.Schema = self._reader.schema

    def _open(self, values: list[object] | None) -> pa.RecordBatchReader:
        return self._con.sql(self._sql, params=values).to_arrow_reader(self._batch_rows)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        try:
            for i, values in enumerate(self._rows):
                if i == 0:
                    reader = self._reader
                else:
                    with self._watch.busy():
                        reader = self._open(values)
                try:
                    while True:
                        with self._watch.busy():
                            batch = next(reader, None)
                        if batch is None:
                            break
                        if not batch.schema.equals(self.schema):
                            batch = batch.cast(self.schema)
                        yield batch
                finally:
                    reader.close()
        finally:
            self.close()

    def cancel(self) -> None:
        """Stop the query (from any thread): DuckDB is interrupted, the iteration ends with
        CANCELLED."""
        self._watch.stop("cancelled")

    def close(self) -> None:
        self._con.close()


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _skip_time_travel(text: str, pos: int) -> int:
    """The position just after the ``AT (...)`` clause that starts at ``pos``."""
    tokens = sqlglot.Dialect.get_or_raise("duckdb").tokenize(text[pos:])
    if len(tokens) >= 2 and tokens[0].text.upper() == "AT" and tokens[1].text == "(":
        depth = 0
        for tok in tokens[1:]:
            depth += tok.token_type == TokenType.L_PAREN
            depth -= tok.token_type == TokenType.R_PAREN
            if depth == 0:
                return pos + tok.end + 1
    raise SqlError("write the time-travel clause right after the table name: t AT (VERSION => 5)")


def _param_rows(statement: Statement, params: pa.Table | None) -> list[list[object]]:
    """Parameter rows as Python values, checked against the statement's parameter count."""
    want = statement.param_count
    have = 0 if params is None else params.num_columns
    if params is None or have == 0:
        if want:
            raise SqlError(
                f"the statement takes {want} parameter(s) and none were bound "
                "(bind them with DoPut on the prepared statement)"
            )
        return []
    if have != want:
        raise SqlError(f"the statement takes {want} parameter(s), {have} were bound")
    columns = [c.to_pylist() for c in params.columns]
    return [list(row) for row in zip(*columns, strict=True)]


def _use_private_names(tree: exp.Expr, st: Statement, aliases: list[str]) -> str | None:
    """Replace the table references of ``tree`` (a copy of the statement's) by their
    private names, each keeping its alias (or its name as alias); the target's alias."""
    index = {id(span.node): i for i, span in enumerate(st.spans)}
    pairs = zip(st.tree.find_all(exp.Table), tree.find_all(exp.Table), strict=True)
    copies = [(index[id(orig)], copy) for orig, copy in pairs if id(orig) in index]
    target_alias = None
    for i, table in copies:
        alias = table.args.get("alias")
        alias_name = alias.name if alias is not None else st.refs[i].alias
        if i == st.target:
            target_alias = alias_name
        table.replace(
            exp.Table(
                this=exp.to_identifier(aliases[i], quoted=True),
                alias=exp.TableAlias(this=exp.to_identifier(alias_name, quoted=True)),
            )
        )
    return target_alias


def _target_select(tree: exp.Delete | exp.Update, st: Statement, aliases: list[str]) -> str:
    """``DELETE FROM t [USING u] WHERE c`` -> ``SELECT t._rowaddr FROM t [, u] WHERE c``;
    ``UPDATE t SET a = e [FROM u] WHERE c`` -> ``SELECT t._rowaddr, e AS a FROM t [, u]
    WHERE c``; table references replaced by their private names and parameters by
    parameter columns."""
    target_alias = _use_private_names(tree, st, aliases)
    positional = 0
    for node in list(tree.find_all(exp.Placeholder, exp.Parameter)):
        text = _parameter_name(node)
        if text is None:
            number = positional
            positional += 1
        else:
            number = int(text) - 1
        node.replace(exp.column(f"p{number}", table=PARAMS_ALIAS, quoted=True))
    sources = [tree.this.sql("duckdb")]
    sources += [u.sql("duckdb") for u in tree.args.get("using") or []]
    assert target_alias is not None  # the target is one of the statement's tables
    selected = [f"{_quote(target_alias)}.{_quote(ROW_ADDRESS)}"]
    if isinstance(tree, exp.Update):
        extra = tree.args.get("from_")
        if extra is not None:
            sources.append(extra.this.sql("duckdb"))
            sources += [j.this.sql("duckdb") for j in extra.args.get("joins") or []]
        for assignment in tree.expressions:
            if not isinstance(assignment, exp.EQ) or not isinstance(assignment.this, exp.Column):
                raise SqlError("UPDATE ... SET takes column = expression pairs")
            value = assignment.expression.sql("duckdb")
            selected.append(f"({value}) AS {_quote(assignment.this.name)}")
    if st.param_count:
        sources.append(_quote(PARAMS_ALIAS))
    where = tree.args.get("where")
    sql = f"SELECT {', '.join(selected)} FROM {', '.join(sources)}"
    if where is not None:
        sql += f" WHERE {where.this.sql('duckdb')}"
    return sql
