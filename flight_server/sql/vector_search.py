"""``lance_vector_search(table, column, vector, k, ...)``: nearest-neighbour search in SQL.

Named like lance-duckdb's table function, with its argument shape: the table (a dataset name
of this server, optionally ``name@version``), the vector column, the query vector (an array
literal, e.g. ``[0.1, 0.2]::FLOAT[2]``), then ``k`` positionally or by name and the options
``metric``, ``nprobes``, ``refine_factor``, ``use_index``, ``prefilter`` and ``filter`` by name
(``name = value`` or ``name := value``).  The result has every column of the dataset plus
``_distance``.

DuckDB cannot host a Python table function in our locked-down database, so the call is
rewritten: each call site in the SQL text is replaced by a private name under which the
search result (k rows per query, computed by our exact search) is registered as an Arrow
table; DuckDB runs the rest of the statement (joins, WHERE, ORDER BY) over it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from lance_format import Dataset

from .errors import SqlError

FUNCTION = "lance_vector_search"
_OPTIONS = {"k", "metric", "nprobes", "refine_factor", "use_index", "prefilter", "filter"}


@dataclass(frozen=True)
class SearchCall:
    """One call of the table function: where it sits in the text and what it asks."""

    start: int  # inclusive character positions of ``lance_vector_search(...)``
    end: int
    table: str
    column: str
    vector: list[float] = field(hash=False)
    options: dict = field(hash=False)

    def run(self, ds: Dataset) -> pa.Table:
        """The search result (our exact search, with pylance's semantics)."""
        nearest = {"column": self.column, "q": self.vector}
        for key in ("k", "metric", "nprobes", "refine_factor", "use_index"):
            if key in self.options:
                nearest[key] = self.options[key]
        return ds.to_table(
            nearest=nearest,
            filter=self.options.get("filter"),
            prefilter=self.options.get("prefilter", False),
        )


def find_calls(text: str) -> list[SearchCall]:
    """Every ``lance_vector_search(...)`` in ``text`` (a DuckDB statement), in text order."""
    try:
        tokens = sqlglot.tokenize(text, read="duckdb")
    except SqlglotError as e:
        raise SqlError(f"cannot parse SQL: {e}") from None
    calls = []
    for i, tok in enumerate(tokens[:-1]):
        if tok.text.casefold() != FUNCTION or tokens[i + 1].token_type != TokenType.L_PAREN:
            continue
        depth = 0
        for j in range(i + 1, len(tokens)):
            kind = tokens[j].token_type
            depth += kind == TokenType.L_PAREN
            depth -= kind == TokenType.R_PAREN
            if depth == 0:
                break
        else:
            raise SqlError(f"{FUNCTION}( has no closing parenthesis")
        calls.append(_parse_call(text[tok.start : tokens[j].end + 1], tok.start, tokens[j].end))
    return calls


def _parse_call(call_text: str, start: int, end: int) -> SearchCall:
    try:
        tree = sqlglot.parse_one(f"SELECT * FROM {call_text}", dialect="duckdb")
    except SqlglotError as e:
        raise SqlError(f"cannot parse {FUNCTION}(...): {e}") from None
    fn = tree.find(exp.Anonymous)
    args = list(fn.expressions) if fn is not None else []
    positional, options = [], {}
    for arg in args:
        if isinstance(arg, (exp.EQ, exp.PropertyEQ)) and isinstance(
            arg.this, (exp.Column, exp.Identifier)
        ):
            name = arg.this.name.casefold()
            if name not in _OPTIONS:
                raise SqlError(f"{FUNCTION}: unknown option {name!r}; known: {sorted(_OPTIONS)}")
            options[name] = _constant(arg.expression, name)
        else:
            if options:
                raise SqlError(f"{FUNCTION}: positional arguments must come before named ones")
            positional.append(arg)
    if not 3 <= len(positional) <= 4:
        raise SqlError(
            f"{FUNCTION}(table, column, vector[, k], option = value...) takes 3 or 4 "
            f"positional arguments, got {len(positional)}"
        )
    table, column = _constant(positional[0], "table"), _constant(positional[1], "column")
    if not isinstance(table, str) or not isinstance(column, str):
        raise SqlError(f"{FUNCTION}: the table and the column must be string literals")
    vector = _constant(positional[2], "vector")
    if not isinstance(vector, list):
        raise SqlError(f"{FUNCTION}: the vector must be an array literal such as [0.1, 0.2]")
    if len(positional) == 4:
        if "k" in options:
            raise SqlError(f"{FUNCTION}: k is given twice")
        options["k"] = _constant(positional[3], "k")
    for key in ("prefilter", "use_index"):
        if key in options and not isinstance(options[key], bool):
            raise SqlError(f"{FUNCTION}: {key} must be true or false")
    return SearchCall(start, end, table, column, vector, options)


def _constant(node: exp.Expression, what: str) -> object:
    """The value of a literal argument (numbers, strings, booleans, arrays of numbers)."""
    while isinstance(node, exp.Cast):
        node = node.this
    if isinstance(node, exp.Neg):
        value = _constant(node.this, what)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
    elif isinstance(node, exp.Boolean):
        return bool(node.this)
    elif isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                pass
    elif isinstance(node, exp.Array):
        return [_constant(e, what) for e in node.expressions]
    raise SqlError(f"{FUNCTION}: {what} must be a constant, got {node.sql('duckdb')}")
