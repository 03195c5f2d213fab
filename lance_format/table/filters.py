"""Dataset filters: SQL predicate strings, as pylance users write them, and Arrow expressions.

A SQL filter is parsed with sqlglot (never by hand) in pylance's dialect and translated into a
``pyarrow.compute.Expression`` that the scanner evaluates batch by batch.  The translation is
typed: every sub-expression knows its Arrow type, so that literals can be cast to the type of
the column they meet (``f32 = 0.1`` compares in float32, ``d = '2020-01-02'`` reads a date) and
so that a filter that cannot run fails here, with the SQL text in the message, instead of in
the middle of a scan.

Semantics follow pylance (DataFusion under the hood):

* three-valued logic: AND/OR are Arrow's Kleene kernels, a NULL predicate drops the row;
* backticks quote identifiers, double quotes make a string literal (as in pylance), ``''``
  escapes a quote, backslash is an ordinary character in strings and the LIKE escape;
* unquoted names match exactly, or else case-insensitively; ``a.b`` reads struct field ``b``;
* floats compare in total order: NaN equals NaN and sorts above every number, -0.0 = 0.0;
* integer arithmetic wraps, integer division truncates, division by zero is an error.

pyarrow has no public way to list the fields an expression reads, so the columns come from
the translation itself (:class:`CompiledFilter`); for an expression built elsewhere they are
found by binding it against narrowed schemas.
"""

from __future__ import annotations

import datetime as _dt
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import sqlglot
from sqlglot import exp, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError

from ..errors import InvalidArgumentError, SchemaError, first_line
from . import filter_text
from .filter_text import LiteralList
from .sql_functions import FUNCTIONS, list_element, list_equals
from .sql_terms import (
    ARROW_ERRORS,
    BOOL_NULL,
    UNIT_NS,
    Term,
    cast_term,
    common_type,
    constant,
    decimal_type,
    int_fits,
    is_numeric,
    is_stringy,
    orderable,
)

__all__ = ["CompiledFilter", "compile_filter", "parse_filter", "referenced_columns"]


class LanceFilterDialect(Dialect):
    """pylance's filter dialect: `ident` quotes names, "text" is a string literal."""

    class Tokenizer(tokens.Tokenizer):
        QUOTES = ["'", '"']
        IDENTIFIERS = ["`"]
        STRING_ESCAPES = ["'"]
        HEX_STRINGS = [("X'", "'"), ("x'", "'")]


@dataclass(frozen=True)
class CompiledFilter:
    """A translated filter: the expression and the field paths it reads."""

    expression: pc.Expression
    paths: tuple[tuple[str, ...], ...]
    sql: str | None = None
    terms: tuple[tuple[str, str, object], ...] = ()  # see conjunct_terms (SQL filters only)
    nullable: bool = True  # False when the value can never be NULL (as DataFusion infers)

    @property
    def columns(self) -> list[str]:
        """Field paths as strings (``st.x``); a part with a dot is quoted with backticks."""
        return [format_path(p) for p in self.paths]

    @property
    def top_level_columns(self) -> list[str]:
        """The top-level columns a scanner must read to evaluate the filter."""
        return list(dict.fromkeys(p[0] for p in self.paths))


def format_path(parts: Iterable[str]) -> str:
    """``("st", "x")`` -> ``st.x``; parts holding ``.`` or a backtick are backtick-quoted."""
    out = []
    for part in parts:
        if part == "" or "." in part or "`" in part:
            part = "`" + part.replace("`", "``") + "`"
        out.append(part)
    return ".".join(out)


# -- public API -----------------------------------------------------------------------------


def parse_filter(filter: str | pc.Expression | None, schema: pa.Schema) -> pc.Expression | None:
    """SQL string or Expression -> Expression, validated against ``schema``.

    Unknown columns raise :class:`SchemaError` naming the column; syntax errors, unsupported
    SQL and type errors raise :class:`InvalidArgumentError` quoting the SQL text.
    """
    compiled = compile_filter(filter, schema)
    return None if compiled is None else compiled.expression


def compile_filter(filter: str | pc.Expression | None, schema: pa.Schema) -> CompiledFilter | None:
    """Translate and validate a filter, keeping the field paths it reads."""
    if filter is None:
        return None
    if isinstance(filter, pc.Expression):
        _validate_expression(filter, schema, text=str(filter))
        paths = _probe_paths(filter, schema)
        compiled = CompiledFilter(filter, paths, None)
    elif isinstance(filter, str):
        compiled = _Translator(filter, schema).compile()
    else:
        raise InvalidArgumentError(
            f"a filter must be a SQL string or a pyarrow.compute.Expression, "
            f"got {type(filter).__name__}"
        )
    if not (isinstance(filter, str) and len(filter) > _REMEMBERED_TEXT):
        _remember(compiled)  # a long IN list would make a key of megabytes
    return compiled


def compile_value(sql: str, schema: pa.Schema) -> CompiledFilter:
    """A SQL value expression of any type (e.g. ``"price * 2"`` for ``add_columns``), with
    the field paths it reads; the same dialect and typing rules as filters."""
    if not isinstance(sql, str):
        raise InvalidArgumentError(f"a column expression must be SQL text, got {type(sql)}")
    return _Translator(sql, schema, boolean=False).compile()


def referenced_columns(expr: pc.Expression, schema: pa.Schema) -> list[str]:
    """Field paths (``col`` or ``struct.field``) that ``expr`` reads, sorted.

    Exact for expressions made by :func:`parse_filter`; for others the paths are found by
    binding the expression against schemas with fields taken away.
    """
    paths = _recall(expr)
    if paths is None:
        paths = _probe_paths(expr, schema)
    return [format_path(p) for p in paths]


# -- memory of compiled expressions (so referenced_columns need not guess) -----------------

_MEMORY: OrderedDict[bytes, tuple[tuple[str, ...], ...]] = OrderedDict()
_MEMORY_LOCK = threading.Lock()
_MEMORY_SIZE = 512
_REMEMBERED_TEXT = 64 * 1024  # longer filters are not remembered (use compile_filter's paths)


def _expression_key(expr: pc.Expression) -> bytes | None:
    try:
        return bytes(expr.__reduce__()[1][0])
    except Exception:  # an expression Arrow cannot serialise: just not remembered
        return None


def _remember(compiled: CompiledFilter) -> None:
    key = _expression_key(compiled.expression)
    if key is None:
        return
    with _MEMORY_LOCK:
        _MEMORY[key] = compiled.paths
        _MEMORY.move_to_end(key)
        while len(_MEMORY) > _MEMORY_SIZE:
            _MEMORY.popitem(last=False)


def _recall(expr: pc.Expression) -> tuple[tuple[str, ...], ...] | None:
    key = _expression_key(expr)
    if key is None:
        return None
    with _MEMORY_LOCK:
        return _MEMORY.get(key)


# -- binding against the schema -------------------------------------------------------------


def _bind(expr: pc.Expression, schema: pa.Schema) -> pa.DataType:
    """Type of ``expr`` over ``schema``; raises the Arrow error when it does not bind."""
    table = pa.schema([f.with_type(_nested_storage(f.type)) for f in schema]).empty_table()
    result = pads.dataset(table).to_table(columns={"_": expr})
    return result.schema.field(0).type


def _nested_storage(t: pa.DataType) -> pa.DataType:
    """``t`` with extension types below the top level replaced by their storage: Arrow's
    dataset scanner cannot even open a table holding ``struct<uuid>`` or ``list<uuid>``."""
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_storage_deep(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = t.value_field.with_type(_storage_deep(t.value_type))
        if pa.types.is_fixed_size_list(t):
            return pa.list_(item, t.list_size)
        return pa.list_(item) if pa.types.is_list(t) else pa.large_list(item)
    if pa.types.is_map(t):
        key = t.key_field.with_type(_storage_deep(t.key_type))
        return pa.map_(key, t.item_field.with_type(_storage_deep(t.item_type)))
    return t


def _storage_deep(t: pa.DataType) -> pa.DataType:
    return _nested_storage(t.storage_type if isinstance(t, pa.BaseExtensionType) else t)


_NO_MATCH = re.compile(r"No match for (FieldRef\..*?) in ")
_REF_NAME = re.compile(r"FieldRef\.Name\((.*?)\)(?= FieldRef|\)*$)")


def _names(names: list[str], limit: int = 20) -> str:
    """A column list for a message, cut short for wide schemas."""
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _validate_expression(expr: pc.Expression, schema: pa.Schema, text: str) -> None:
    try:
        out = _bind(expr, schema)
    except ARROW_ERRORS as e:
        missing = _NO_MATCH.search(str(e))
        if missing:
            parts = _REF_NAME.findall(missing.group(1)) or [missing.group(1)]
            name = format_path(parts)
            raise SchemaError(
                f"filter {text!r} references unknown field {name!r}; "
                f"columns: {_names(schema.names)}",
                column=name,
            ) from None
        raise InvalidArgumentError(f"filter {text!r} cannot be evaluated: {e}") from None
    if not pa.types.is_boolean(out):
        raise InvalidArgumentError(f"filter {text!r} does not return a boolean (it returns {out})")


def _probe_paths(expr: pc.Expression, schema: pa.Schema) -> tuple[tuple[str, ...], ...]:
    """Field paths an expression needs, found by group testing on narrowed schemas.

    Binding succeeds exactly when every field the expression reads is present, so halving
    the set of removable fields finds the needed ones in O(k log n) binds.
    """
    if "FieldPath(" in str(expr):  # positional refs shift when fields go: read everything
        return tuple((name,) for name in schema.names)

    def binds(fields: list[pa.Field]) -> bool:
        try:
            _bind(expr, pa.schema(fields))
            return True
        except ARROW_ERRORS:
            return False

    def needed(fields: list[pa.Field], rebuild: Callable[[list[pa.Field]], list[pa.Field]]):
        kept = list(range(len(fields)))

        def prune(group: list[int]) -> None:
            trial = [i for i in kept if i not in group]
            if binds(rebuild([fields[i] for i in trial])):
                kept[:] = trial
            elif len(group) > 1:
                half = len(group) // 2
                prune(group[:half])
                prune(group[half:])

        if kept:
            prune(list(kept))
        return kept

    text = str(expr)
    top = [f for f in schema if f.name in text]  # every field read is printed by name
    if not binds(top):
        top = list(schema)
        if not binds(top):
            return tuple((name,) for name in schema.names)
    keep_top = [top[i] for i in needed(top, lambda fs: fs)]
    paths: list[tuple[str, ...]] = []

    def descend(prefix: tuple[str, ...], field: pa.Field, place: Callable) -> None:
        if not pa.types.is_struct(field.type) or field.type.num_fields == 0:
            paths.append(prefix)
            return
        children = list(field.type)

        def rebuild_child(kids: list[pa.Field]) -> list[pa.Field]:
            return place(field.with_type(pa.struct(kids)))

        kids = needed(children, rebuild_child)
        if not kids:
            paths.append(prefix)
            return
        kept_kids = [children[i] for i in kids]
        for i in kids:
            child = children[i]

            def place_child(new_child: pa.Field, child=child) -> list[pa.Field]:
                others = [new_child if k is child else k for k in kept_kids]
                return place(field.with_type(pa.struct(others)))

            descend(prefix + (child.name,), child, place_child)

    for f in keep_top:

        def place_top(new_field: pa.Field, f=f) -> list[pa.Field]:
            return [new_field if k is f else k for k in keep_top]

        descend((f.name,), f, place_top)
    return tuple(sorted(paths))


# -- literals -------------------------------------------------------------------------------

_DATE_RE = re.compile(r"\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*")
_TS_RE = re.compile(
    r"\s*(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:[T ](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?\s*",
    re.IGNORECASE,
)
_EPOCH = _dt.date(1970, 1, 1).toordinal()
_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}


def _parse_date(text: str) -> int:
    """Days since the epoch of ``YYYY-MM-DD``."""
    m = _DATE_RE.fullmatch(text)
    if not m:
        raise ValueError(f"{text!r} is not a date (YYYY-MM-DD)")
    return _dt.date(int(m[1]), int(m[2]), int(m[3])).toordinal() - _EPOCH


def _parse_timestamp(text: str) -> int:
    """Nanoseconds since the epoch, UTC, of an ISO-8601 date-time (offset optional)."""
    m = _TS_RE.fullmatch(text)
    if not m:
        raise ValueError(f"{text!r} is not a timestamp (YYYY-MM-DD HH:MM:SS[.f][+HH:MM])")
    days = _dt.date(int(m[1]), int(m[2]), int(m[3])).toordinal() - _EPOCH
    hour, minute, sec = int(m[4] or 0), int(m[5] or 0), int(m[6] or 0)
    if hour > 23 or minute > 59 or sec > 59:
        raise ValueError(f"{text!r} has an invalid time of day")
    ns = (((days * 24 + hour) * 60 + minute) * 60 + sec) * 1_000_000_000
    ns += int((m[7] or "").ljust(9, "0"))
    offset = m[8]
    if offset and offset.upper() != "Z":
        sign = -1 if offset[0] == "-" else 1
        digits = offset[1:].replace(":", "")
        minutes = int(digits[:2]) * 60 + (int(digits[2:]) if len(digits) > 2 else 0)
        ns -= sign * minutes * 60 * 1_000_000_000
    return ns


def _trunc_div(value: int, factor: int) -> int:
    q = abs(value) // factor
    return q if value >= 0 else -q


# sqlglot type -> Arrow type for CAST and typed literals
_SIMPLE_TYPES = {
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "UTINYINT": pa.uint8(),
    "USMALLINT": pa.uint16(),
    "UINT": pa.uint32(),
    "UBIGINT": pa.uint64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "TEXT": pa.string(),
    "VARCHAR": pa.string(),
    "NVARCHAR": pa.string(),
    "CHAR": pa.string(),
    "NCHAR": pa.string(),
    "BINARY": pa.binary(),
    "VARBINARY": pa.binary(),
    "BLOB": pa.binary(),
    "DATE": pa.date32(),
}
_TS_PRECISION = {0: "s", 3: "ms", 6: "us", 9: "ns"}

_COMPARE: dict[type[exp.Expr], str] = {
    exp.EQ: "eq",
    exp.NEQ: "ne",
    exp.LT: "lt",
    exp.LTE: "le",
    exp.GT: "gt",
    exp.GTE: "ge",
}
_ARITH: dict[type[exp.Expr], str] = {
    exp.Add: "add",
    exp.Sub: "subtract",
    exp.Mul: "multiply",
    exp.Div: "divide",
}


# Three-valued helpers that fold Python constants (False/True) away.
def _and(a, b):
    if a is False or b is False:
        return False
    if a is True:
        return b
    if b is True:
        return a
    return pc.and_kleene(a, b)


def _or(a, b):
    if a is True or b is True:
        return True
    if a is False:
        return b
    if b is False:
        return a
    return pc.or_kleene(a, b)


def _not(a):
    return (not a) if isinstance(a, bool) else pc.invert(a)


# -- parsing --------------------------------------------------------------------------------

_PARSE_FAILED = "is not valid SQL"
_PLACEHOLDER = re.compile(r":(" + filter_text.PLACEHOLDER_PREFIX + r"\w+)")
_SHOWN_CHARS = 200


def _shown(sql: str) -> str:
    """``sql`` quoted for a message, cut short when long (a filter may be megabytes)."""
    if len(sql) <= _SHOWN_CHARS:
        return repr(sql)
    return f"{sql[:_SHOWN_CHARS]!r}... ({len(sql):,} characters)"


def _parse(sql: str) -> tuple[exp.Expr, dict[str, LiteralList]]:
    """The sqlglot tree of a filter whose long literal IN lists are lifted out (within the
    limits of :mod:`.filter_text`), and those lists by placeholder name."""
    prepared = filter_text.prepare(sql)
    try:
        tree = sqlglot.parse_one(prepared.sql, dialect=LanceFilterDialect, into=exp.Condition)
    except ParseError as e:
        detail = "; ".join(
            f"{err.get('description')} (line {err.get('line')}, col {err.get('col')})"
            for err in (e.errors or [])
        )
        raise InvalidArgumentError(f"{_PARSE_FAILED}: {detail or e}") from None
    except SqlglotError as e:
        raise InvalidArgumentError(f"{_PARSE_FAILED}: {e}") from None
    _check_depth(tree)
    return tree, prepared.lists


def _check_depth(tree: exp.Expr) -> None:
    """Refuse a tree deeper than :data:`.filter_text.MAX_TREE_DEPTH` (walked without
    recursion), so that translating it cannot exhaust the stack.  A chain of ANDs or of ORs
    is one level: it is translated as a flat list."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > filter_text.MAX_TREE_DEPTH:
            raise InvalidArgumentError(
                f"the filter is nested too deeply: more than {filter_text.MAX_TREE_DEPTH} "
                "operators inside one another"
            )
        chain = isinstance(node, (exp.And, exp.Or))
        for child in node.iter_expressions():
            stack.append((child, depth if chain and type(child) is type(node) else depth + 1))


def _balanced(fn: Callable, terms: list) -> object:
    """``terms`` joined with the binary ``fn`` as a balanced tree: thousands of terms must
    not make an expression thousands deep (Arrow binds it recursively)."""
    while len(terms) > 1:
        pairs = [fn(a, b) for a, b in zip(terms[0::2], terms[1::2], strict=False)]
        terms = pairs + ([terms[-1]] if len(terms) % 2 else [])
    return terms[0]


# -- the translator -------------------------------------------------------------------------


class _Translator:
    """Walks a sqlglot tree, producing typed Arrow expressions and the field paths read."""

    def __init__(self, sql: str, schema: pa.Schema, *, boolean: bool = True):
        self.sql = sql
        self.shown = _shown(sql)  # the text as error messages quote it
        self.lists: dict[str, LiteralList] = {}  # IN lists lifted out before parsing
        self.schema = schema
        self.require_boolean = boolean  # False: a value expression (``add_columns``)
        self.paths: dict[tuple[str, ...], None] = {}

    # errors ------------------------------------------------------------------------------

    def invalid(self, problem: str, node: exp.Expr | None = None) -> InvalidArgumentError:
        where = ""
        if node is not None:
            text = _PLACEHOLDER.sub(
                lambda m: f"<{len(self.lists[m[1]]):,} values>" if m[1] in self.lists else m[0],
                node.sql(dialect=LanceFilterDialect),
            )
            where = f" in {_shown(text)}"
        what = "filter" if self.require_boolean else "expression"
        return InvalidArgumentError(f"{what} {self.shown}: {problem}{where}")

    def unsupported(self, what: str, node: exp.Expr) -> InvalidArgumentError:
        return self.invalid(f"unsupported SQL construct: {what}", node)

    # entry point -------------------------------------------------------------------------

    def compile(self) -> CompiledFilter:
        if not self.sql.strip():
            raise InvalidArgumentError("the filter is empty")
        try:
            tree, self.lists = _parse(self.sql)
            term = self.translate(tree)
        except RecursionError:  # the limits are there to keep this from happening
            raise InvalidArgumentError(f"filter {self.shown} is nested too deeply") from None
        except InvalidArgumentError as e:
            if e.problem.startswith(_PARSE_FAILED):
                raise InvalidArgumentError(f"filter {self.shown} {e.problem}") from None
            raise
        if term.const is not None or self.lists:
            out = term.type  # binding again would hash every value of a lifted list again
        else:
            out = self.type_of(term.expr, tree)
        if self.require_boolean and not pa.types.is_boolean(out):
            raise InvalidArgumentError(
                f"filter {self.shown} does not return a boolean (it returns {out})"
            )
        # a struct read whole covers its fields: keep the outermost path only
        paths = sorted(self.paths)
        paths = [p for p in paths if not any(p[: len(q)] == q for q in paths if len(q) < len(p))]
        return CompiledFilter(
            term.expr,
            tuple(paths),
            self.sql,
            terms=_terms_of(tree, self.lists),
            nullable=not term.not_null,
        )

    def type_of(self, expr: pc.Expression, node: exp.Expr) -> pa.DataType:
        """Bind against the referenced columns only: cheap whatever the schema width."""
        try:
            return _bind(expr, self.bind_schema())
        except ARROW_ERRORS as e:
            raise self.invalid(f"cannot evaluate ({first_line(e)})", node) from None

    def bind_schema(self) -> pa.Schema:
        tops = dict.fromkeys(p[0] for p in self.paths)
        return pa.schema([self.schema.field(name) for name in tops])

    # dispatch ----------------------------------------------------------------------------

    def translate(self, node: exp.Expr) -> Term:
        """Translate ``node``; a constant result (``s LIKE NULL``) reads no column."""
        before = dict(self.paths)
        term = self.translate_node(node)
        if term.const is not None:
            self.paths = before
        return term

    def translate_node(self, node: exp.Expr) -> Term:
        if isinstance(node, exp.Paren):
            return self.translate(node.this)
        if isinstance(node, exp.Bracket) and _subscript(node) is not None:
            index = _subscript(node)
            assert index is not None
            return list_element(self, self.translate(node.this), index, node)
        if isinstance(node, (exp.Dot, exp.Bracket)) and _has_subscript(node.this):
            return self.field_of(node)
        if isinstance(node, (exp.Column, exp.Dot, exp.Bracket)):
            return self.column(node)
        if isinstance(node, exp.HexString):
            return self.hex_literal(node)
        if isinstance(node, exp.Array):
            return self.array_literal(node)
        if isinstance(node, exp.CurrentDate) and not node.args:
            # the UTC date at planning time, as DataFusion folds it
            today = _dt.datetime.now(_dt.UTC).date()
            return constant(pa.scalar(today, pa.date32()))
        if isinstance(node, exp.Literal):
            return self.literal(node)
        if isinstance(node, exp.Boolean):
            return constant(pa.scalar(bool(node.this)))
        if isinstance(node, exp.Null):
            return constant(pa.scalar(None, pa.null()))
        if isinstance(node, exp.Neg):
            return self.negate(node)
        if isinstance(node, (exp.And, exp.Or)):
            # flattened and joined as a balanced tree: a chain of thousands of ORs must not
            # exhaust the stack, here or when Arrow binds it
            fn = pc.and_kleene if isinstance(node, exp.And) else pc.or_kleene
            operands = [self.boolean(operand) for operand in node.flatten()]
            not_null = all(o.not_null for o in operands)
            return Term(_balanced(fn, [o.expr for o in operands]), pa.bool_(), not_null=not_null)
        if isinstance(node, exp.Not):
            inner = self.boolean(node.this)
            return Term(pc.invert(inner.expr), pa.bool_(), not_null=inner.not_null)
        kind = _COMPARE.get(type(node))
        if kind is not None:
            assert isinstance(node, exp.Binary)  # every comparison is a binary node
            left, right = self.operands(node)
            return self.compare(kind, left, right, node)
        if isinstance(node, exp.Is):
            return self.is_(node)
        if isinstance(node, exp.In):
            return self.in_(node)
        if isinstance(node, exp.Between):
            return self.between(node)
        if isinstance(node, (exp.Like, exp.ILike, exp.Escape)):
            return self.like(node)
        kind = _ARITH.get(type(node))
        if kind is not None or isinstance(node, exp.Mod):
            return self.arithmetic(node)
        if isinstance(node, exp.DPipe):
            return self.concat(node)
        if isinstance(node, exp.TryCast):
            raise self.unsupported("TRY_CAST", node)
        if isinstance(node, exp.Cast):
            return self.cast(node)
        if isinstance(node, exp.Func):
            return self.function(node)
        raise self.unsupported(type(node).__name__.upper(), node)

    def boolean(self, node: exp.Expr) -> Term:
        term = self.translate(node)
        if term.is_null_const:
            return constant(BOOL_NULL)
        if not pa.types.is_boolean(term.type):
            raise self.invalid(f"expected a boolean, got {term.type}", node)
        return term

    # columns and literals ----------------------------------------------------------------

    def column(self, node: exp.Expr) -> Term:
        parts = self.column_parts(node)
        name, quoted = parts[0]
        field = self.lookup(self.schema, name, quoted)
        if field is None:
            raise SchemaError(
                f"filter {self.shown} references unknown column {name!r}; "
                f"columns: {_names(self.schema.names)}",
                column=name,
            )
        path = [field.name]
        not_null = not field.nullable
        for child_name, child_quoted in parts[1:]:
            if not pa.types.is_struct(field.type):
                raise SchemaError(
                    f"filter {self.shown}: {format_path(path)!r} is {field.type}, "
                    f"not a struct, so it has no field {child_name!r}",
                    column=format_path(path),
                )
            child = self.lookup(field.type, child_name, child_quoted)
            if child is None:
                raise SchemaError(
                    f"filter {self.shown} references unknown field {child_name!r} of "
                    f"{format_path(path)!r}; fields: {[f.name for f in field.type]}",
                    column=format_path(path + [child_name]),
                )
            field = child
            path.append(field.name)
            not_null = not_null and not field.nullable
        self.paths[tuple(path)] = None
        if pa.types.is_dictionary(field.type):  # compare and match on the decoded values
            value_type = field.type.value_type
            return Term(pc.field(*path).cast(value_type), value_type, not_null=not_null)
        return Term(pc.field(*path), field.type, not_null=not_null)

    def column_parts(self, node: exp.Expr) -> list[tuple[str, bool]]:
        """Identifiers of a (possibly dotted or subscripted) column reference, outermost first."""
        if isinstance(node, exp.Column):
            parts = []
            for key in ("catalog", "db", "table", "this"):
                ident = node.args.get(key)
                if ident is None:
                    continue
                if not isinstance(ident, exp.Identifier):
                    raise self.unsupported(type(ident).__name__.upper(), node)
                parts.append((ident.name, bool(ident.args.get("quoted"))))
            return parts
        if isinstance(node, exp.Dot):
            right = node.expression
            if not isinstance(right, exp.Identifier):
                raise self.unsupported("field access", node)
            return self.column_parts(node.this) + [(right.name, bool(right.args.get("quoted")))]
        if isinstance(node, exp.Bracket):
            keys = node.expressions
            if len(keys) != 1 or not (isinstance(keys[0], exp.Literal) and keys[0].is_string):
                raise self.unsupported("subscript other than a struct field name", node)
            if not isinstance(node.this, (exp.Column, exp.Dot, exp.Bracket)):
                raise self.unsupported("subscript of an expression", node)
            return self.column_parts(node.this) + [(keys[0].this, True)]
        raise self.unsupported(type(node).__name__.upper(), node)

    def field_of(self, node: exp.Dot | exp.Bracket) -> Term:
        """A struct field of a computed value (``list_struct[1]['x']``, ``l[1].x``)."""
        if isinstance(node, exp.Dot):
            if not isinstance(node.expression, exp.Identifier):
                raise self.unsupported("field access", node)
            name, quoted = node.expression.name, bool(node.expression.args.get("quoted"))
        else:
            keys = node.expressions
            if len(keys) != 1 or not (isinstance(keys[0], exp.Literal) and keys[0].is_string):
                raise self.unsupported("subscript other than a struct field name", node)
            name, quoted = keys[0].this, True
        inner = self.translate(node.this)
        if not pa.types.is_struct(inner.type):
            raise self.invalid(f"{inner.type} is not a struct, so it has no field {name!r}", node)
        child = self.lookup(inner.type, name, quoted)
        if child is None:
            fields = [f.name for f in inner.type]
            raise self.invalid(f"no field {name!r} among {fields}", node)
        index = inner.type.get_field_index(child.name)
        return Term(pc.struct_field(inner.expr, [index]), child.type)

    @staticmethod
    def lookup(container: pa.Schema | pa.StructType, name: str, quoted: bool) -> pa.Field | None:
        """Exact match first; an unquoted name then matches ignoring case (as pylance)."""
        fields = list(container)
        for f in fields:
            if f.name == name:
                return f
        if not quoted:
            folded = name.casefold()
            for f in fields:
                if f.name.casefold() == folded:
                    return f
        return None

    def literal(self, node: exp.Literal) -> Term:
        text = node.this
        if node.is_string:
            return constant(pa.scalar(text, pa.string()))
        return self.number(text, node)

    def hex_literal(self, node: exp.HexString) -> Term:
        """``X'0102'``: a binary literal."""
        try:
            return constant(pa.scalar(bytes.fromhex(node.this), pa.binary()))
        except ValueError:
            raise self.invalid(
                "a binary literal needs an even number of hex digits", node
            ) from None

    def array_literal(self, node: exp.Array) -> Term:
        """``[1, 2]``: a list of literals, in their common type (int64, float64, utf8...)."""
        items = [self.translate(item) for item in node.expressions]
        if any(item.const is None for item in items):
            raise self.unsupported("a list of values that are not literals", node)
        typed = [item.type for item in items if not item.is_null_const]
        value_type = typed[0] if typed else pa.null()
        for other in typed[1:]:
            value_type = common_type(value_type, other) or value_type
        values = [cast_term(item, value_type).scalar().as_py() for item in items]
        try:
            return constant(pa.scalar(values, pa.list_(value_type)))
        except ARROW_ERRORS as e:
            raise self.invalid(f"the list mixes types ({first_line(e)})", node) from None

    def number(self, text: str, node: exp.Expr) -> Term:
        if re.fullmatch(r"-?\d+", text):
            value = int(text)
            if -(1 << 63) <= value < (1 << 63):
                return constant(pa.scalar(value, pa.int64()), text)
            if 0 <= value < (1 << 64):
                return constant(pa.scalar(value, pa.uint64()), text)
        try:
            return constant(pa.scalar(float(text), pa.float64()), text)
        except ValueError:
            raise self.invalid(f"{text!r} is not a number", node) from None

    def negate(self, node: exp.Neg) -> Term:
        inner = self.translate(node.this)
        if inner.number_text is not None and not inner.number_text.startswith("-"):
            return self.number("-" + inner.number_text, node)
        if inner.const is not None and inner.const.is_valid and is_numeric(inner.type):
            value = inner.const.as_py()
            if isinstance(value, int) and not int_fits(-value, inner.type):
                return self.number(str(-value), node)
            return constant(pa.scalar(-value, inner.type))
        if inner.is_null_const:
            return inner
        if not is_numeric(inner.type):
            raise self.invalid(f"cannot negate {inner.type}", node)
        return Term(pc.negate(inner.expr), inner.type, not_null=inner.not_null)

    # coercion ----------------------------------------------------------------------------

    def coerce(self, term: Term, target: pa.DataType, node: exp.Expr) -> Term:
        """Cast a constant to ``target`` where that keeps its value (SQL literal typing)."""
        value = term.const
        if value is None or term.type == target or pa.types.is_null(target):
            return term
        if not value.is_valid:
            try:
                return constant(pa.scalar(None, target))
            except ARROW_ERRORS:
                return term
        src = value.type
        py: Any = value.as_py() if not pa.types.is_timestamp(src) else None
        try:
            if pa.types.is_integer(target):
                if pa.types.is_integer(src) and int_fits(py, target):
                    return constant(pa.scalar(py, target))
                if pa.types.is_floating(src) and py == py and float(py).is_integer():
                    if int_fits(int(py), target):
                        return constant(pa.scalar(int(py), target))
                return term
            if pa.types.is_floating(target):
                if pa.types.is_integer(src) or pa.types.is_floating(src):
                    return constant(pa.scalar(float(py), target))
                if pa.types.is_decimal(src):
                    return constant(pa.scalar(float(py), target))
                return term
            if pa.types.is_decimal(target):
                if pa.types.is_integer(src) or pa.types.is_floating(src):
                    dec = Decimal(term.number_text) if term.number_text else Decimal(py)
                    if not dec.is_finite():
                        return term
                    try:
                        return constant(pa.scalar(dec, target))
                    except ARROW_ERRORS:
                        return constant(pa.scalar(dec))  # its own precision: compares exactly
                return term
            if is_stringy(target):
                return constant(value.cast(target)) if is_stringy(src) else term
            if pa.types.is_date(target):
                if is_stringy(src):
                    days = _parse_date(py)
                    return constant(pa.scalar(days, pa.int32()).cast(pa.date32()).cast(target))
                if pa.types.is_date(src):
                    return constant(value.cast(target))
                return term
            if pa.types.is_timestamp(target):
                return self.coerce_timestamp(term, target)
        except (ValueError, InvalidOperation) as e:
            raise self.invalid(f"cannot read {py!r} as {target}: {e}", node) from None
        return term

    def coerce_timestamp(self, term: Term, target: pa.TimestampType) -> Term:
        value = term.scalar()
        src = value.type
        if is_stringy(src):
            ns = _parse_timestamp(value.as_py())
        elif pa.types.is_date(src):
            ns = value.cast(pa.date32()).cast(pa.int32()).as_py() * 86_400 * 1_000_000_000
        elif pa.types.is_timestamp(src):
            ns = value.cast(pa.int64()).as_py() * UNIT_NS[src.unit]
        else:
            return term
        factor = UNIT_NS[target.unit]
        # a literal without a zone is read in the column's zone, as pylance does (UTC)
        if ns % factor == 0:
            return constant(pa.scalar(ns // factor, target))
        return constant(pa.scalar(ns, pa.timestamp("ns", target.tz)))

    def unify(
        self, left: Term, right: Term, node: exp.Expr, arithmetic: bool = False
    ) -> tuple[Term, Term]:
        """Bring both sides of an operator to one type.

        In a comparison a constant takes the other side's type (``f32 = 0.1`` compares in
        float32, ``d = '2020-01-02'`` reads a date); in arithmetic it keeps its own, so that
        ``u8 + 200`` is computed in int64 as DataFusion does.  Then both sides are cast to
        the common type explicitly.
        """
        if arithmetic:
            pass
        elif left.const is not None and right.const is None:
            left = self.coerce(left, right.type, node)
        elif right.const is not None and left.const is None:
            right = self.coerce(right, left.type, node)
        if left.is_null_const and not right.is_null_const:
            left = self.coerce(left, right.type, node)
        elif right.is_null_const and not left.is_null_const:
            right = self.coerce(right, left.type, node)
        left = self.decimal_partner(left, right.type)
        right = self.decimal_partner(right, left.type)
        common = common_type(left.type, right.type)
        if common is not None:
            left, right = cast_term(left, common), cast_term(right, common)
        return left, right

    @staticmethod
    def decimal_partner(term: Term, other: pa.DataType) -> Term:
        """Arrow cannot mix decimals with int64 of unknown magnitude: make the int a decimal."""
        if not (pa.types.is_decimal(other) and pa.types.is_integer(term.type)):
            return term
        if term.const is not None:
            value = term.const.as_py()
            if value is None:
                return constant(pa.scalar(None, other))
            return constant(pa.scalar(Decimal(value)))
        digits = _INT_DIGITS[term.type.bit_width] + (
            1 if pa.types.is_unsigned_integer(term.type) and term.type.bit_width == 64 else 0
        )
        typ = pa.decimal128(digits, 0)
        return Term(term.expr.cast(typ), typ)

    # predicates --------------------------------------------------------------------------

    def compare(self, kind: str, left: Term, right: Term, node: exp.Expr) -> Term:
        if kind in ("eq", "ne") and (pa.types.is_list(left.type) or pa.types.is_list(right.type)):
            lists, literal = (right, left) if left.const is not None else (left, right)
            equal = list_equals(self, lists, literal, node)
            return equal if kind == "eq" else Term(pc.invert(equal.expr), pa.bool_())
        left, right = self.unify(left, right, node)
        for side in (left, right):
            if pa.types.is_struct(side.type) or pa.types.is_list(side.type):
                raise self.invalid(f"cannot compare values of type {side.type}", node)
        fn = {
            "eq": pc.equal,
            "ne": pc.not_equal,
            "lt": pc.less,
            "le": pc.less_equal,
            "gt": pc.greater,
            "ge": pc.greater_equal,
        }[kind]
        base = fn(left.expr, right.expr)
        if not (left.type == right.type and orderable(left.type)):  # else it surely binds
            try:
                _bind(base, self.bind_schema())
            except ARROW_ERRORS:
                problem = f"cannot compare {left.type} with {right.type}"
                raise self.invalid(problem, node) from None
        floating = pa.types.is_floating(left.type) or pa.types.is_floating(right.type)
        not_null = left.not_null and right.not_null
        if not floating or left.is_null_const or right.is_null_const:
            return Term(base, pa.bool_(), not_null=not_null)
        # total order as in pylance: NaN = NaN, NaN above every number
        na, nb = self.nan_of(left), self.nan_of(right)
        if kind in ("eq", "ne"):
            eq = _or(base if kind == "eq" else pc.equal(left.expr, right.expr), _and(na, nb))
            out = eq if kind == "eq" else _not(eq)
        elif kind == "lt":
            out = _or(base, _and(nb, _not(na)))
        elif kind == "gt":
            out = _or(base, _and(na, _not(nb)))
        elif kind == "le":
            out = _not(_or(pc.greater(left.expr, right.expr), _and(na, _not(nb))))
        else:
            out = _not(_or(pc.less(left.expr, right.expr), _and(nb, _not(na))))
        if isinstance(out, bool):
            out = pc.scalar(out)
        return Term(out, pa.bool_(), not_null=not_null)

    @staticmethod
    def nan_of(term: Term):
        """``is_nan`` of a float side, as an expression or a folded Python bool."""
        if not pa.types.is_floating(term.type):
            return False
        if term.const is not None:
            value = term.const.as_py()
            return value != value
        return pc.is_nan(term.expr)

    def is_(self, node: exp.Is) -> Term:
        target = node.expression
        if isinstance(target, exp.Null):
            inner = self.translate(node.this)
            return Term(pc.is_null(inner.expr), pa.bool_(), not_null=True)
        if isinstance(target, exp.Boolean):
            inner = self.boolean(node.this)
            value = inner.expr if target.this else pc.invert(inner.expr)
            return Term(pc.coalesce(value, pc.scalar(False)), pa.bool_(), not_null=True)
        raise self.unsupported("IS other than IS [NOT] NULL/TRUE/FALSE", node)

    def in_(self, node: exp.In) -> Term:
        for key in ("query", "unnest", "field"):
            if node.args.get(key) is not None:
                raise self.unsupported(f"IN with a {key}", node)
        if not node.expressions:
            raise self.invalid("IN needs at least one value", node)
        probe = self.translate(node.this)
        lifted = self.lifted(node)
        if lifted is not None:
            value_set = self.lifted_value_set(probe, lifted)
            if value_set is not None:
                return self.in_value_set(probe, value_set, lifted.nulls > 0, node)
            items = [self.lifted_item(item, lifted.numeric, node) for item in lifted.items()]
        else:
            items = [self.translate(e) for e in node.expressions]
        if probe.const is None and all(i.const is not None for i in items):
            coerced = [self.coerce(i, probe.type, node) for i in items]
            if all(c.type == probe.type or c.is_null_const for c in coerced):
                return self.in_set(probe, coerced, node)
        equal = [self.compare("eq", probe, item, node).expr for item in items]
        not_null = probe.not_null and all(i.not_null for i in items)
        return Term(_balanced(pc.or_kleene, equal), pa.bool_(), not_null=not_null)

    def lifted(self, node: exp.In) -> LiteralList | None:
        """The literal list lifted out of ``node`` before parsing, if it was."""
        (first, *rest) = node.expressions
        if rest or not isinstance(first, exp.Placeholder):
            return None
        return self.lists.get(first.name)

    def lifted_item(self, item: str | None, numeric: bool, node: exp.Expr) -> Term:
        """One lifted literal, typed as the parser's literal would be."""
        if item is None:
            return constant(pa.scalar(None, pa.null()))
        return self.number(item, node) if numeric else constant(pa.scalar(item, pa.string()))

    @staticmethod
    def lifted_value_set(probe: Term, lifted: LiteralList) -> pa.Array | None:
        """The lifted list as one array of the probe's type, for the cases where converting
        it at once gives exactly what :meth:`coerce` gives item by item: strings against a
        string column, ISO dates against a date column, integers that fit an integer
        column, numbers against float32/64, numbers that fit a decimal column exactly.
        None for anything else (then the items go one by one)."""
        t, values = probe.type, lifted.values
        if probe.const is not None:
            return None
        try:
            if not lifted.numeric:
                if pa.types.is_date(t):  # Arrow reads YYYY-MM-DD only; others one by one
                    return values.cast(pa.date32()).cast(t)
                return values.cast(t) if is_stringy(t) else None
            if pa.types.is_integer(t):
                if not lifted.integers:
                    return None
                ints = values.cast(pa.int64())
                low, high = pc.min_max(ints).values()
                if len(ints) and not (int_fits(low.as_py(), t) and int_fits(high.as_py(), t)):
                    return None
                return ints.cast(t)
            if t in (pa.float32(), pa.float64()):
                return values.cast(pa.float64()).cast(t, safe=False)
            if pa.types.is_decimal(t):  # exact, or an error when a value does not fit
                return values.cast(t)
        except ARROW_ERRORS:  # e.g. an integer beyond int64: item by item
            return None
        return None

    def in_set(self, probe: Term, items: list[Term], node: exp.Expr) -> Term:
        values = [i.scalar() for i in items if i.scalar().is_valid]
        value_set = pa.array(values, type=probe.type) if values else pa.array([], probe.type)
        return self.in_value_set(probe, value_set, len(values) < len(items), node)

    def in_value_set(
        self, probe: Term, value_set: pa.Array, has_null: bool, node: exp.Expr
    ) -> Term:
        if pa.types.is_floating(probe.type) and len(value_set):  # -0.0 and 0.0 are one value
            if np.any(value_set.to_numpy(zero_copy_only=False) == 0):
                zeros = pa.array([0.0, -0.0], pa.float64()).cast(probe.type)
                value_set = pa.concat_arrays([value_set, zeros])

        def membership(values: pa.Array) -> pc.Expression:
            found = pc.is_in(probe.expr, value_set=values, skip_nulls=True)
            # SQL: a NULL probe gives NULL; a NULL in the list turns "not found" into NULL
            out = pc.if_else(pc.is_valid(probe.expr), found, pc.scalar(BOOL_NULL))
            return pc.or_kleene(out, pc.scalar(BOOL_NULL)) if has_null else out

        self.type_of(membership(value_set[:1]), node)  # binding hashes every value: one will do
        not_null = probe.not_null and not has_null
        return Term(membership(value_set), pa.bool_(), not_null=not_null)

    def between(self, node: exp.Between) -> Term:
        if node.args.get("symmetric"):
            raise self.unsupported("BETWEEN SYMMETRIC", node)
        subject = self.translate(node.this)
        low = self.compare("ge", subject, self.translate(node.args["low"]), node)
        high = self.compare("le", subject, self.translate(node.args["high"]), node)
        not_null = low.not_null and high.not_null
        return Term(pc.and_kleene(low.expr, high.expr), pa.bool_(), not_null=not_null)

    def like(self, node: exp.Expr) -> Term:
        escape = None
        if isinstance(node, exp.Escape):
            esc = node.expression
            if not (isinstance(esc, exp.Literal) and esc.is_string and len(esc.this) == 1):
                raise self.invalid("ESCAPE needs a single character", node)
            escape = esc.this
            node = node.this
            if not isinstance(node, (exp.Like, exp.ILike)):
                raise self.unsupported("ESCAPE outside LIKE", node)
        if node.args.get("quantifier") is not None:
            raise self.unsupported("LIKE ANY/ALL", node)
        subject = self.translate(node.this)
        pattern = self.translate(node.expression)
        if pattern.is_null_const:
            return constant(BOOL_NULL)
        if pattern.const is None or not is_stringy(pattern.type):
            raise self.unsupported("LIKE with a pattern that is not a string literal", node)
        if not (is_stringy(subject.type) or subject.is_null_const):
            raise self.invalid(f"LIKE needs a string, got {subject.type}", node)
        text = pattern.const.as_py()
        if escape is not None and escape != "\\":
            text = _reescape(text, escape)
        out = pc.match_like(subject.expr, text, ignore_case=isinstance(node, exp.ILike))
        if node.args.get("negate"):
            out = pc.invert(out)
        return Term(out, pa.bool_(), not_null=subject.not_null)

    # values ------------------------------------------------------------------------------

    def operands(self, node: exp.Binary) -> tuple[Term, Term]:
        """Both sides of a binary operator.  In a value expression (a projection), a literal
        beside a plain column takes the column's type, as pylance's planner does
        (``i32 + 1`` is int32, ``f32 * 0.1`` float32) and a literal that cannot is an error;
        filters keep DataFusion's coercion instead."""
        left, right = self.translate(node.this), self.translate(node.expression)
        if self.require_boolean:
            return left, right
        columns = (exp.Column, exp.Dot, exp.Bracket)
        if isinstance(node.this, columns) and right.const is not None and left.const is None:
            right = self.literal_as(right, left.type, node)
        elif isinstance(node.expression, columns) and left.const is not None:
            if right.const is None:
                left = self.literal_as(left, right.type, node)
        return left, right

    def literal_as(self, term: Term, target: pa.DataType, node: exp.Expr) -> Term:
        """A constant in a column's type, or an error when it does not convert exactly."""
        out = self.coerce(term, target, node)
        if out.type == target or out.is_null_const:
            return out
        if (is_numeric(target) and is_numeric(out.type)) or is_stringy(target):
            shown = term.number_text or repr(term.scalar().as_py())
            raise self.invalid(
                f"literal {shown} cannot be converted to the column's {target}", node
            )
        return out

    def arithmetic(self, node: exp.Expr) -> Term:
        assert isinstance(node, exp.Binary)  # + - * / %
        left, right = self.operands(node)
        left, right = self.unify(left, right, node, arithmetic=True)
        for side in (left, right):
            if not (is_numeric(side.type) or side.is_null_const):
                raise self.invalid(f"arithmetic on {side.type} is not supported", node)
        if isinstance(node, exp.Mod):
            out = self.modulo(left, right, node)
        else:
            fn = getattr(pc, _ARITH[type(node)])  # wrapping kernels, as DataFusion
            out = fn(left.expr, right.expr)
        if left.const is not None and right.const is not None and not self.require_boolean:
            return self.fold(out, node)  # ``i32 * (1 + 2)``: the literal 3 meets the column
        out_type = self.type_of(out, node)
        if isinstance(node, exp.Div) and pa.types.is_decimal(out_type):
            out, out_type = self.decimal_quotient(left, right, node)
        return Term(out, out_type, not_null=left.not_null and right.not_null)

    def decimal_quotient(
        self, left: Term, right: Term, node: exp.Expr
    ) -> tuple[pc.Expression, pa.DataType]:
        """DataFusion's decimal quotient: the dividend's scale plus 4, truncated toward
        zero.  Arrow's own quotient has scale max(4, s1 + p2 - s2 + 1): the dividend is
        widened first so that it keeps at least those digits before they are cut."""
        p1, s1 = left.type.precision, left.type.scale
        p2, s2 = right.type.precision, right.type.scale
        scale = s1 + 4
        widen = max(0, scale - (s1 + p2 - s2 + 1))
        dividend = left.expr
        if widen:
            wide = decimal_type(p1 + widen, s1 + widen)
            dividend = dividend.cast(wide)
        quotient = pc.divide(dividend, right.expr)
        out_type = decimal_type(p1 + s2 + 4, scale)
        options = pc.CastOptions(out_type, allow_decimal_truncate=True)
        out = quotient.cast(options=options)
        self.type_of(out, node)
        return out, out_type

    def fold(self, expr: pc.Expression, node: exp.Expr) -> Term:
        """The value of an expression that reads no column, as a constant."""
        try:
            value = pads.dataset(pa.table({"_": [0]})).to_table(columns={"v": expr})
        except ARROW_ERRORS as e:
            raise self.invalid(f"cannot evaluate ({first_line(e)})", node) from None
        return constant(value.column("v")[0])

    def modulo(self, left: Term, right: Term, node: exp.Expr) -> pc.Expression:
        """Truncated remainder (sign of the dividend), as SQL and Rust define ``%``."""
        quotient = pc.divide(left.expr, right.expr)
        qtype = self.type_of(quotient, node)
        if not pa.types.is_integer(qtype):
            quotient = pc.trunc(quotient)
        return pc.subtract(left.expr, pc.multiply(quotient, right.expr))

    def concat(self, node: exp.DPipe) -> Term:
        left, right = self.translate(node.this), self.translate(node.expression)
        left, right = self.unify(left, right, node)
        for side in (left, right):
            if not (is_stringy(side.type) or side.is_null_const):
                raise self.invalid(f"|| needs strings, got {side.type}", node)
        if left.is_null_const or right.is_null_const:
            return constant(pa.scalar(None, pa.string()))
        separator = pc.scalar(pa.scalar("", left.type))
        out = pc.binary_join_element_wise(left.expr, right.expr, separator)
        return Term(out, self.type_of(out, node), not_null=left.not_null and right.not_null)

    def sql_type(self, dtype: exp.DataType, node: exp.Expr) -> pa.DataType:
        name = dtype.this.name if hasattr(dtype.this, "name") else str(dtype.this)
        params = [p.sql() for p in dtype.expressions]
        if name in _SIMPLE_TYPES and not (params and name not in _PARAM_OK):
            return _SIMPLE_TYPES[name]
        if name in ("TIMESTAMP", "DATETIME", "TIMESTAMPTZ"):
            precision = int(params[0]) if params else 6
            unit = _TS_PRECISION.get(precision)
            if unit is None or len(params) > 1:
                raise self.invalid(f"timestamp precision must be 0, 3, 6 or 9, got {params}", node)
            return pa.timestamp(unit, "UTC" if name == "TIMESTAMPTZ" else None)
        if name == "DECIMAL" and len(params) == 2:
            precision, scale = int(params[0]), int(params[1])
            if not 1 <= precision <= 76:
                raise self.invalid(f"decimal precision {precision} is out of range", node)
            return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)
        raise self.unsupported(f"type {dtype.sql()}", node)

    def cast(self, node: exp.Cast) -> Term:
        inner = self.translate(node.this)
        to = node.to
        if inner.const is not None and to.this == exp.DataType.Type.DECIMAL and not to.expressions:
            if inner.is_null_const or is_stringy(inner.type) or is_numeric(inner.type):
                return self.decimal_literal(inner, node)
        target = self.sql_type(to, node)
        if inner.const is not None:
            return self.cast_constant(inner, target, node)
        if inner.type == target:
            return inner
        src = inner.type
        if pa.types.is_floating(src) and (
            pa.types.is_integer(target) or pa.types.is_decimal(target)
        ):
            expr = pc.trunc(inner.expr) if pa.types.is_integer(target) else inner.expr
            out = expr.cast(options=pc.CastOptions(target, allow_decimal_truncate=True))
        else:
            lossy_ok = pa.types.is_integer(src) and pa.types.is_floating(target)
            options = pc.CastOptions(
                target,
                allow_time_truncate=True,
                allow_decimal_truncate=True,
                allow_float_truncate=lossy_ok,
            )
            out = inner.expr.cast(options=options)
        return Term(out, self.type_of(out, node), not_null=inner.not_null)

    def decimal_literal(self, inner: Term, node: exp.Expr) -> Term:
        if inner.is_null_const:
            return constant(pa.scalar(None, pa.decimal128(38, 10)))
        text = inner.number_text or str(inner.scalar().as_py())
        try:
            value = Decimal(text.strip())
        except InvalidOperation:
            raise self.invalid(f"{text!r} is not a decimal number", node) from None
        if not value.is_finite():
            raise self.invalid(f"{text!r} is not a finite decimal", node)
        return constant(pa.scalar(value))

    def cast_constant(self, inner: Term, target: pa.DataType, node: exp.Expr) -> Term:
        value = inner.scalar()
        if not value.is_valid:
            return constant(pa.scalar(None, target))
        if is_stringy(value.type) and (pa.types.is_date(target) or pa.types.is_timestamp(target)):
            text = value.as_py()
            try:
                if pa.types.is_date(target):
                    days = _parse_date(text)
                    return constant(pa.scalar(days, pa.int32()).cast(pa.date32()).cast(target))
                ns = _parse_timestamp(text)
            except ValueError as e:
                raise self.invalid(str(e), node) from None
            # a cast truncates to the type's unit, as DataFusion's string cast does
            return constant(pa.scalar(_trunc_div(ns, UNIT_NS[target.unit]), target))
        if pa.types.is_decimal(target) and (is_numeric(value.type) or is_stringy(value.type)):
            text = inner.number_text or str(value.as_py())
            try:
                exact = Decimal(text.strip())
                rounded = exact.quantize(Decimal(1).scaleb(-target.scale), ROUND_HALF_UP)
                return constant(pa.scalar(rounded, target))
            except (InvalidOperation, *ARROW_ERRORS):
                raise self.invalid(f"cannot cast {text!r} to {target}", node) from None
        if pa.types.is_floating(value.type) and pa.types.is_integer(target):
            value = pc.trunc(value)
        try:
            return constant(value.cast(target))
        except ARROW_ERRORS as e:
            problem = f"cannot cast {value.as_py()!r} to {target}: {first_line(e)}"
            raise self.invalid(problem, node) from None

    def function(self, node: exp.Func) -> Term:
        name = node.name.lower() if isinstance(node, exp.Anonymous) else type(node).__name__
        handler = FUNCTIONS.get(name)
        if handler is None:
            shown = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
            raise self.unsupported(f"function {shown}()", node)
        return handler(self, node)

    def args(self, node: exp.Func) -> list[exp.Expr]:
        if isinstance(node, exp.Anonymous):
            return list(node.expressions)
        out = []
        for key in node.arg_types:
            value = node.args.get(key)
            if value is None:
                continue
            out.extend(value if isinstance(value, list) else [value])
        return out

    def string_arg(self, node: exp.Func, count: int) -> list[Term]:
        args = [self.translate(a) for a in self.args(node)]
        if len(args) != count:
            raise self.invalid(f"{node.sql_name()} takes {count} argument(s)", node)
        if not (is_stringy(args[0].type) or args[0].is_null_const):
            raise self.invalid(f"{node.sql_name()} needs a string, got {args[0].type}", node)
        for extra in args[1:]:
            if extra.const is None or not is_stringy(extra.type):
                raise self.unsupported(f"{node.sql_name()} with a non-literal pattern", node)
        return args


_PARAM_OK = {"VARCHAR", "NVARCHAR", "CHAR", "NCHAR", "BINARY", "VARBINARY"}


def _has_subscript(node: exp.Expr) -> bool:
    """Whether a column reference goes through a list subscript (so is computed)."""
    while isinstance(node, (exp.Dot, exp.Bracket, exp.Paren)):
        if isinstance(node, exp.Bracket) and _subscript(node) is not None:
            return True
        node = node.this
    return False


def _subscript(node: exp.Bracket) -> int | None:
    """The integer of a list subscript ``l[1]`` / ``l[-1]``; None for a field name."""
    keys = node.expressions
    if len(keys) != 1:
        return None
    key = keys[0]
    sign = 1
    if isinstance(key, exp.Neg):
        key, sign = key.this, -1
    if isinstance(key, exp.Literal) and not key.is_string and re.fullmatch(r"\d+", key.this):
        return sign * int(key.this)
    return None


def _reescape(pattern: str, escape: str) -> str:
    """Rewrite a LIKE pattern with a custom ESCAPE character into backslash escapes."""
    out = []
    chars = iter(pattern)
    for ch in chars:
        if ch == escape:
            nxt = next(chars, None)
            if nxt is None:
                raise InvalidArgumentError(f"LIKE pattern {pattern!r} ends with its escape")
            out.append("\\" + nxt)
        elif ch == "\\":
            out.append("\\\\")
        else:
            out.append(ch)
    return "".join(out)


# -- statistics pruning --------------------------------------------------------------------

MAX_PRUNED_VALUES = 1000  # longer IN lists are left to the filter (no statistics pruning)
_INT_TEXT = re.compile(r"-?\d+")
_PRUNE_OPS = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def conjunct_terms(filter: str | pc.Expression | None) -> list[tuple[str, str, object]]:
    """The top-level AND terms of a SQL filter that page statistics can judge:
    ``column <op> literal`` (either side), ``column IN (literals)``, ``column IS [NOT] NULL``.
    Other terms are left out, which only means less pruning (the filter still runs)."""
    if not isinstance(filter, str):
        return []
    try:
        tree, lists = _parse(filter)
    except (InvalidArgumentError, RecursionError):
        return []
    return list(_terms_of(tree, lists))


def _terms_of(tree: exp.Expr, lists: dict[str, LiteralList]) -> tuple:
    terms = []
    for node in tree.flatten() if isinstance(tree, exp.And) else [tree]:
        while isinstance(node, exp.Paren):
            node = node.this
        term = _prunable(node, lists)
        if term is not None:
            terms.append(term)
    return tuple(terms)


def _literal(node: exp.Expr) -> tuple[bool, object]:
    neg = isinstance(node, exp.Neg)
    if neg:
        node = node.this
    if not isinstance(node, exp.Literal):
        return False, None
    if node.is_string:
        return (not neg), node.this
    value: int | float
    try:
        value = int(node.this)
    except ValueError:
        try:
            value = float(node.this)
        except ValueError:
            return False, None
    return True, -value if neg else value


def _column(node: exp.Expr) -> str | None:
    if isinstance(node, exp.Column) and not node.table:
        return node.name
    return None


def _prunable(node: exp.Expr, lists: dict[str, LiteralList]) -> tuple[str, str, object] | None:
    for kind, op in _PRUNE_OPS.items():
        if isinstance(node, kind):
            left, right = node.this, node.expression
            col, (ok, value) = _column(left), _literal(right)
            if col is None:
                col, (ok, value) = _column(right), _literal(left)
                op = _FLIPPED[op]
            return (col, op, value) if col is not None and ok else None
    in_col = _column(node.this) if isinstance(node, exp.In) else None
    if isinstance(node, exp.In) and in_col and node.expressions:
        first = node.expressions[0]
        if isinstance(first, exp.Placeholder) and first.name in lists:
            lifted = lists[first.name]
            if lifted.nulls or len(lifted) > MAX_PRUNED_VALUES:
                return None  # statistics judge each value apart: not worth it for many
            items = lifted.values.to_pylist()
            if lifted.numeric:
                items = [int(v) if _INT_TEXT.fullmatch(v) else float(v) for v in items]
            return in_col, "in", items
        values = [_literal(v) for v in node.expressions]
        if all(ok for ok, _ in values):
            return in_col, "in", [v for _, v in values]
        return None
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        if null_col := _column(node.this):
            return null_col, "is_null", None
    if (
        isinstance(node, exp.Not)
        and isinstance(node.this, exp.Is)
        and isinstance(node.this.expression, exp.Null)
    ):
        if not_null_col := _column(node.this.this):
            return not_null_col, "is_not_null", None
    return None
