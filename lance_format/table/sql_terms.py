"""Typed terms of SQL translation: the primitives the translator and its functions share.

A translated sub-expression is a :class:`Term`: an Arrow expression with its Arrow type and,
for a literal, its value, so that literals can take the type of the column they meet.  The
type rules here (which common type two sides take, which types order) follow DataFusion, as
pylance evaluates them.  Function handlers see the translator only through the
:class:`Translator` protocol, so that the dependency runs one way: ``filters`` ->
``sql_functions`` -> ``sql_terms``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from ..errors import InvalidArgumentError

__all__ = [
    "ARROW_ERRORS",
    "BOOL_NULL",
    "UNIT_NS",
    "FunctionHandler",
    "Term",
    "Translator",
    "cast_term",
    "common_type",
    "constant",
    "decimal_type",
    "int_fits",
    "is_numeric",
    "is_stringy",
    "orderable",
]

ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowKeyError)
UNIT_NS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}


def int_fits(value: int, typ: pa.DataType) -> bool:
    bits = typ.bit_width
    if pa.types.is_signed_integer(typ):
        return -(1 << (bits - 1)) <= value < (1 << (bits - 1))
    return 0 <= value < (1 << bits)


def is_stringy(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def orderable(t: pa.DataType) -> bool:
    """Types Arrow's comparison kernels take when both sides have that type."""
    return (
        is_numeric(t)
        or is_stringy(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def common_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both sides of an operator are cast to, as DataFusion's coercion picks it.

    Made explicit because Arrow's own dispatch narrows integer literals to the smallest type
    that holds them, so ``int32_col * 1000000000`` would overflow in int32.
    """
    if a == b:
        return None
    if pa.types.is_null(a) or pa.types.is_null(b):
        return None
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        if pa.types.is_signed_integer(a) == pa.types.is_signed_integer(b):
            return a if a.bit_width >= b.bit_width else b
        signed, unsigned = (a, b) if pa.types.is_signed_integer(a) else (b, a)
        if unsigned.bit_width < signed.bit_width:
            return signed
        return SIGNED_INTS[min(64, 2 * unsigned.bit_width)]
    if pa.types.is_floating(a) and pa.types.is_integer(b):
        return a if a.bit_width >= 32 else pa.float32()
    if pa.types.is_integer(a) and pa.types.is_floating(b):
        return b if b.bit_width >= 32 else pa.float32()
    if pa.types.is_floating(a) and pa.types.is_floating(b):
        return a if a.bit_width >= b.bit_width else b
    if (pa.types.is_decimal(a) and pa.types.is_floating(b)) or (
        pa.types.is_floating(a) and pa.types.is_decimal(b)
    ):
        return pa.float64()
    if is_stringy(a) and is_stringy(b):
        return pa.large_string()
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        if a.tz != b.tz:
            return None
        unit = a.unit if UNIT_NS[a.unit] <= UNIT_NS[b.unit] else b.unit
        return pa.timestamp(unit, a.tz)
    if pa.types.is_timestamp(a) and pa.types.is_date(b):
        return a
    if pa.types.is_date(a) and pa.types.is_timestamp(b):
        return b
    return None


SIGNED_INTS = {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}


def decimal_type(precision: int, scale: int) -> pa.DataType:
    if precision <= 38:
        return pa.decimal128(precision, scale)
    return pa.decimal256(min(76, precision), scale)


def cast_term(term: Term, target: pa.DataType) -> Term:
    if term.type == target:
        return term
    if term.const is not None:
        value = term.const
        if pa.types.is_timestamp(value.type) and pa.types.is_timestamp(target):
            ns = value.cast(pa.int64()).as_py() * UNIT_NS[value.type.unit]
            factor = UNIT_NS[target.unit]
            if ns is not None and ns % factor == 0:
                return constant(pa.scalar(ns // factor, target), term.number_text)
        try:
            return constant(value.cast(target, safe=False), term.number_text)
        except ARROW_ERRORS:
            pass
    options = pc.CastOptions(target, allow_float_truncate=True, allow_time_truncate=False)
    return Term(term.expr.cast(options=options), target, not_null=term.not_null)


@dataclass
class Term:
    """A translated sub-expression, its Arrow type and, for a constant, its value."""

    expr: pc.Expression
    type: pa.DataType
    const: pa.Scalar | None = None
    number_text: str | None = None  # the SQL spelling of a numeric literal, for decimals
    not_null: bool = False  # never NULL: non-null literals and what only they and
    # non-nullable columns make (tracked for a projection's output nullability)

    @property
    def is_null_const(self) -> bool:
        return self.const is not None and not self.const.is_valid

    def scalar(self) -> pa.Scalar:
        """The value of a constant term (callers have checked that it is one)."""
        assert self.const is not None
        return self.const


def constant(value: pa.Scalar, number_text: str | None = None) -> Term:
    return Term(pc.scalar(value), value.type, value, number_text, value.is_valid)


BOOL_NULL = pa.scalar(None, pa.bool_())


class Translator(Protocol):
    """What a function handler may ask of the translator that calls it."""

    require_boolean: bool  # False: a value expression (``add_columns``), not a filter

    def translate(self, node: exp.Expr) -> Term: ...

    def args(self, node: exp.Func) -> list[exp.Expr]: ...

    def string_arg(self, node: exp.Func, count: int) -> list[Term]: ...

    def type_of(self, expr: pc.Expression, node: exp.Expr) -> pa.DataType: ...

    def coerce(self, term: Term, target: pa.DataType, node: exp.Expr) -> Term: ...

    def unify(
        self, left: Term, right: Term, node: exp.Expr, arithmetic: bool = False
    ) -> tuple[Term, Term]: ...

    def invalid(self, problem: str, node: exp.Expr | None = None) -> InvalidArgumentError: ...

    def unsupported(self, what: str, node: exp.Expr) -> InvalidArgumentError: ...


# a SQL function's translation, by sqlglot node class name
FunctionHandler = Callable[[Translator, Any], Term]
