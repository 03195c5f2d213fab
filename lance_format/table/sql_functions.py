"""Scalar SQL functions for expressions (projections, ``add_columns``) and filters.

String, math and date functions as pylance evaluates them (DataFusion): the same result
types (``concat`` of mixed string types is a string_view, ``power`` is float64,
``date_part`` an int32) and the same edge cases (``lpad`` cuts long strings, ``strpos``
counts characters, ``regexp_replace`` replaces the first match unless flagged ``g``).
Arguments that pylance takes as literals (patterns, widths, separators) must be literals.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from .filters import _cast_term, _common_type, _const, _is_numeric, _is_stringy, _Term, _Translator


def _fn_float_math(kernel: Callable):
    """sqrt, exp, ln, trunc...: floats keep their type, integers compute in float64."""

    def handler(t: _Translator, node: exp.Func) -> _Term:
        args = [t.translate(a) for a in t.args(node)]
        if len(args) != 1:
            raise t.invalid(f"{node.sql_name()} takes one argument", node)
        return _float_result(t, kernel, args[0], node)

    return handler


def _float_result(t: _Translator, kernel: Callable, arg: _Term, node: exp.Func) -> _Term:
    if not (_is_numeric(arg.type) or arg.is_null_const):
        raise t.invalid(f"{node.sql_name()} needs a number, got {arg.type}", node)
    if not pa.types.is_floating(arg.type):
        arg = _cast_term(arg, pa.float64())
    out = kernel(arg.expr)
    return _Term(out, t.type_of(out, node))


def _fn_log(t: _Translator, node: exp.Log) -> _Term:
    args = [t.translate(a) for a in t.args(node)]
    if len(args) == 1:  # log(x) is the base-10 logarithm, as in DataFusion
        return _float_result(t, pc.log10, args[0], node)
    base = args[0].const.as_py() if args[0].const is not None else None
    kernels = {10: pc.log10, 2: pc.log2}
    if len(args) != 2 or base not in kernels:
        raise t.unsupported("log with a base other than 2 or 10", node)
    return _float_result(t, kernels[base], args[1], node)


def _fn_round(t: _Translator, node: exp.Round) -> _Term:
    arg = t.translate(node.this)
    digits = 0
    if node.args.get("decimals") is not None:
        d = t.translate(node.args["decimals"])
        if d.const is None or not pa.types.is_integer(d.type):
            raise t.unsupported("round with a number of digits that is not an integer", node)
        digits = d.const.as_py()

    def kernel(e: pc.Expression) -> pc.Expression:  # halves away from zero, as Rust's round
        return pc.round(e, ndigits=digits, round_mode="half_towards_infinity")

    out = _float_result(t, kernel, arg, node)
    return _Term(out.expr, out.type, not_null=arg.not_null)


def _fn_pow(t: _Translator, node: exp.Pow) -> _Term:
    base, power = t.translate(node.this), t.translate(node.expression)
    for side in (base, power):
        if not _is_numeric(side.type):
            raise t.invalid(f"power needs numbers, got {side.type}", node)
    target = pa.float64()  # pylance computes power in float64, integers too
    out = pc.power(_cast_term(base, target).expr, _cast_term(power, target).expr)
    return _Term(out, t.type_of(out, node))


def _fn_concat(t: _Translator, node: exp.Concat) -> _Term:
    """concat(a, b, ...): NULL arguments count as empty strings; the arguments' string type,
    or string_view when they mix types, as pylance returns it."""
    return _joined(t, node, node.expressions, "")


def _fn_concat_ws(t: _Translator, node: exp.ConcatWs) -> _Term:
    """concat_ws(sep, a, b, ...): the non-NULL arguments joined by a literal separator."""
    if not node.expressions:
        raise t.invalid("concat_ws needs a separator", node)
    sep = t.translate(node.expressions[0])
    if sep.const is None or not _is_stringy(sep.type) or not sep.const.is_valid:
        raise t.unsupported("concat_ws with a separator that is not a string literal", node)
    return _joined(t, node, node.expressions[1:], sep.const.as_py())


def _joined(t: _Translator, node: exp.Func, operands: list, separator: str) -> _Term:
    args = [t.translate(a) for a in operands]
    kinds = {a.type if a.const is None else pa.string() for a in args if not a.is_null_const}
    out_type = kinds.pop() if len(kinds) == 1 else pa.string_view()
    sep = pc.scalar(pa.scalar(separator, pa.large_string()))
    out = None  # NULL while every argument so far was NULL (Arrow's "skip" mode misbehaves)
    for arg in args:
        if arg.is_null_const:
            continue
        if not _is_stringy(arg.type):
            raise t.invalid(f"{node.sql_name()} needs strings, got {arg.type}", node)
        part = _cast_term(arg, pa.large_string()).expr
        if out is None:
            out = part
            continue
        both = pc.binary_join_element_wise(out, part, sep)
        out = pc.if_else(pc.is_null(out), part, pc.if_else(pc.is_null(part), out, both))
    if out is None:
        return _const(pa.scalar("", out_type))
    out = pc.coalesce(out, pc.scalar(pa.scalar("", pa.large_string())))
    return _Term(out.cast(out_type), out_type)


def _fn_regexp_replace(t: _Translator, node: exp.RegexpReplace) -> _Term:
    """regexp_replace(s, pattern, replacement[, flags]): the first match, or every match
    with flag ``g``; ``i`` ignores case."""
    subject = t.translate(node.this)
    texts = []
    for key in ("expression", "replacement", "position"):
        arg = node.args.get(key)
        term = t.translate(arg) if arg is not None else _const(pa.scalar(""))
        if term.const is None or not _is_stringy(term.type) or not term.const.is_valid:
            raise t.unsupported("regexp_replace with arguments that are not literals", node)
        texts.append(term.const.as_py())
    pattern, replacement, flags = texts
    if set(flags) - set("gi") or "\\" in replacement or "$" in replacement:
        raise t.unsupported(
            "regexp_replace with groups in the replacement or flags beyond g, i", node
        )
    if not _is_stringy(subject.type):
        raise t.invalid(f"regexp_replace needs a string, got {subject.type}", node)
    regex = ("(?i)" if "i" in flags else "") + pattern
    limit = None if "g" in flags else 1
    out = pc.replace_substring_regex(
        subject.expr, pattern=regex, replacement=replacement, max_replacements=limit
    )
    out_type = subject.type if pa.types.is_string(subject.type) else pa.string_view()
    return _Term(out.cast(out_type), out_type)


_DATE_PARTS = {
    "year": pc.year,
    "quarter": pc.quarter,
    "month": pc.month,
    "week": pc.iso_week,
    "day": pc.day,
    "doy": pc.day_of_year,
    "hour": pc.hour,
    "minute": pc.minute,
    "second": pc.second,
}


def _fn_date_part(t: _Translator, node: exp.Func) -> _Term:
    """date_part('year' | 'month' | ... | 'dow', date or timestamp): an int32."""
    args = [t.translate(a) for a in t.args(node)]
    if len(args) != 2 or args[0].const is None or not _is_stringy(args[0].type):
        raise t.invalid("date_part takes a part name and a date or timestamp", node)
    part, value = str(args[0].const.as_py()).lower(), args[1]
    if not (pa.types.is_date(value.type) or pa.types.is_timestamp(value.type)):
        raise t.invalid(f"date_part needs a date or timestamp, got {value.type}", node)
    if part == "dow":  # Sunday is 0
        out = pc.day_of_week(value.expr, count_from_zero=True, week_start=7)
    elif part in _DATE_PARTS:
        out = _DATE_PARTS[part](value.expr)
    else:
        raise t.unsupported(f"date_part {part!r}", node)
    return _Term(out.cast(pa.int32()), pa.int32())


def _fn_slice_end(left: bool):
    """left(s, n) / right(s, n): the first or last ``n`` characters, as a string_view."""

    def handler(t: _Translator, node: exp.Func) -> _Term:
        subject, count = t.translate(node.this), t.translate(node.expression)
        if not _is_stringy(subject.type):
            raise t.invalid(f"{node.sql_name()} needs a string, got {subject.type}", node)
        n = count.const.as_py() if count.const is not None else None
        if not isinstance(n, int) or n < 0:
            raise t.unsupported(f"{node.sql_name()} with a count that is not a literal >= 0", node)
        if left:
            out = pc.utf8_slice_codeunits(subject.expr, start=0, stop=n)
        elif n == 0:
            out = pc.utf8_slice_codeunits(subject.expr, start=0, stop=0)
        else:
            out = pc.utf8_slice_codeunits(subject.expr, start=-n)
        return _Term(out.cast(pa.string_view()), pa.string_view())

    return handler


def _fn_pad(t: _Translator, node: exp.Pad) -> _Term:
    """lpad/rpad(s, n[, fill]): cut to ``n`` characters, then padded to ``n``."""
    subject, width = t.translate(node.this), t.translate(node.expression)
    fill: object = " "
    if node.args.get("fill_pattern") is not None:
        f = t.translate(node.args["fill_pattern"])
        fill = f.const.as_py() if f.const is not None and _is_stringy(f.type) else None
    n = width.const.as_py() if width.const is not None else None
    if not _is_stringy(subject.type) or not isinstance(n, int) or n < 0:
        raise t.unsupported("lpad/rpad other than (string, literal width >= 0[, 'c'])", node)
    if not isinstance(fill, str) or len(fill) != 1:
        raise t.unsupported("lpad/rpad with a fill that is not one character", node)
    cut = pc.utf8_slice_codeunits(subject.expr, start=0, stop=n)
    pad = pc.utf8_lpad if node.args.get("is_left") else pc.utf8_rpad
    out = pad(cut, width=n, padding=fill)
    return _Term(out, t.type_of(out, node))


def _fn_replace(t: _Translator, node: exp.Replace) -> _Term:
    subject = t.translate(node.this)
    pattern, replacement = t.translate(node.expression), t.translate(node.args["replacement"])
    if not _is_stringy(subject.type):
        raise t.invalid(f"replace needs a string, got {subject.type}", node)
    if any(p.const is None or not _is_stringy(p.type) for p in (pattern, replacement)):
        raise t.unsupported("replace with a pattern or replacement that is not a literal", node)
    out = pc.replace_substring(
        subject.expr, pattern=pattern.scalar().as_py(), replacement=replacement.scalar().as_py()
    )
    return _Term(out, subject.type)


def _fn_strpos(t: _Translator, node: exp.StrPosition) -> _Term:
    """strpos(s, sub): 1-based position of the first match, 0 when absent."""
    subject, needle = t.translate(node.this), t.translate(node.args["substr"])
    if not _is_stringy(subject.type) or needle.const is None or not _is_stringy(needle.type):
        raise t.unsupported("strpos other than (string, string literal)", node)
    text = needle.const.as_py()
    found = pc.find_substring(subject.expr, text)
    out_type = t.type_of(found, node)
    # find_substring counts bytes: the position in characters is the length of what
    # precedes the first match, plus one
    before = pc.replace_substring_regex(
        subject.expr, pattern="(?s)" + _RE2_SPECIAL.sub(r"\\\g<0>", text) + ".*", replacement=""
    )
    position = pc.add(pc.utf8_length(before).cast(out_type), pc.scalar(pa.scalar(1, out_type)))
    out = pc.if_else(pc.less(found, 0), pc.scalar(pa.scalar(0, out_type)), position)
    return _Term(out, out_type, not_null=subject.not_null)


_RE2_SPECIAL = re.compile(r"[\\.^$|?*+()\[\]{}]")


def _fn_extreme(kernel: Callable):
    """greatest / least: the common type of the arguments, NULLs skipped."""

    def handler(t: _Translator, node: exp.Func) -> _Term:
        args = [t.translate(a) for a in [node.this, *node.expressions]]
        target = args[0].type
        for a in args[1:]:
            target = _common_type(target, a.type) or target
        out = kernel(*[_cast_term(a, target).expr for a in args], skip_nulls=True)
        return _Term(out, t.type_of(out, node))

    return handler


def _fn_nullif(t: _Translator, node: exp.Nullif) -> _Term:
    left, right = t.translate(node.this), t.translate(node.expression)
    left, right = t.unify(left, right, node, arithmetic=True)
    null = pc.scalar(pa.scalar(None, left.type))
    out = pc.if_else(pc.equal(left.expr, right.expr), null, left.expr)
    return _Term(out, t.type_of(out, node))


def _fn_octet_length(t: _Translator, node: exp.Func) -> _Term:
    (arg,) = t.string_arg(node, 1)
    out = pc.binary_length(arg.expr)
    return _Term(out, t.type_of(out, node))


def _fn_bit_length(t: _Translator, node: exp.Func) -> _Term:
    (arg,) = t.string_arg(node, 1)
    length = pc.binary_length(arg.expr)
    out = pc.multiply(length, pc.scalar(pa.scalar(8, t.type_of(length, node))))
    return _Term(out, t.type_of(out, node))


def _fn_btrim(t: _Translator, node: exp.Func) -> _Term:
    (arg,) = t.string_arg(node, 1)
    return _Term(pc.utf8_trim(arg.expr, characters=" "), arg.type)


# handler by sqlglot class name: each takes the node class it is named for
VALUE_FUNCTIONS: dict[str, Callable[[_Translator, Any], _Term]] = {
    "BitLength": _fn_bit_length,
    "octet_length": _fn_octet_length,
    "btrim": _fn_btrim,
    "Concat": _fn_concat,
    "ConcatWs": _fn_concat_ws,
    "RegexpReplace": _fn_regexp_replace,
    "date_part": _fn_date_part,
    "Left": _fn_slice_end(left=True),
    "Right": _fn_slice_end(left=False),
    "Pad": _fn_pad,
    "Replace": _fn_replace,
    "StrPosition": _fn_strpos,
    "Round": _fn_round,
    "Sqrt": _fn_float_math(pc.sqrt),
    "Exp": _fn_float_math(pc.exp),
    "Ln": _fn_float_math(pc.ln),
    "Trunc": _fn_float_math(pc.trunc),
    "Log": _fn_log,
    "Pow": _fn_pow,
    "Greatest": _fn_extreme(pc.max_element_wise),
    "Least": _fn_extreme(pc.min_element_wise),
    "Nullif": _fn_nullif,
}
