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

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from .sql_terms import (
    BOOL_NULL,
    FunctionHandler,
    Term,
    Translator,
    cast_term,
    common_type,
    constant,
    is_numeric,
    is_stringy,
)

# -- predicates and basic functions ------------------------------------------------------------


def _fn_unary_string(kernel: str, out_type: pa.DataType | None = None):
    def handler(t: Translator, node: exp.Func) -> Term:
        (arg,) = t.string_arg(node, 1)
        if arg.is_null_const:
            return constant(pa.scalar(None, out_type or pa.string()))
        out = getattr(pc, kernel)(arg.expr)
        return Term(out, t.type_of(out, node))

    return handler


def _fn_trim(t: Translator, node: exp.Trim) -> Term:
    if node.args.get("expression") is not None or node.args.get("collation") is not None:
        raise t.unsupported("TRIM with characters", node)
    arg = t.translate(node.this)
    if not is_stringy(arg.type):
        raise t.invalid(f"TRIM needs a string, got {arg.type}", node)
    position = (node.args.get("position") or "BOTH").upper()
    kernel = {"BOTH": pc.utf8_trim, "LEADING": pc.utf8_ltrim, "TRAILING": pc.utf8_rtrim}
    out = kernel[position](arg.expr, characters=" ")
    return Term(out, arg.type)


def _fn_abs(t: Translator, node: exp.Abs) -> Term:
    arg = t.translate(node.this)
    if not is_numeric(arg.type):
        raise t.invalid(f"abs needs a number, got {arg.type}", node)
    out = pc.abs(arg.expr)
    return Term(out, t.type_of(out, node))


def _fn_coalesce(t: Translator, node: exp.Coalesce) -> Term:
    args = [t.translate(a) for a in [node.this, *node.expressions]]
    typed = next((a.type for a in args if a.const is None), None)
    if typed is not None and t.require_boolean:
        args = [t.coerce(a, typed, node) for a in args]
    elif typed is not None:  # a projection takes the arguments' common type, as pylance
        common = args[0].type
        for a in args[1:]:
            common = common_type(common, a.type) or common
        args = [cast_term(a, common) for a in args]
    out = pc.coalesce(*[a.expr for a in args])
    return Term(out, t.type_of(out, node), not_null=any(a.not_null for a in args))


def _fn_substring_match(kernel: Callable):
    def handler(t: Translator, node: exp.Func) -> Term:
        subject, pattern = t.string_arg(node, 2)
        if subject.is_null_const:
            return constant(BOOL_NULL)
        return Term(kernel(subject.expr, pattern.scalar().as_py()), pa.bool_())

    return handler


def _fn_regexp_like(t: Translator, node: exp.Func) -> Term:
    args = t.args(node)
    flags = ""
    if len(args) == 3:
        flag = t.translate(args[2])
        if flag.const is None or not is_stringy(flag.type):
            raise t.unsupported("regexp_like flags that are not a string literal", node)
        flags = flag.const.as_py()
        if set(flags) - set("ims"):
            raise t.invalid(f"regexp flags must be among 'i', 'm', 's', got {flags!r}", node)
    elif len(args) != 2:
        raise t.invalid("regexp_like takes 2 or 3 arguments", node)
    subject, pattern = (t.translate(a) for a in args[:2])
    if subject.is_null_const:
        return constant(BOOL_NULL)
    if not is_stringy(subject.type):
        raise t.invalid(f"regexp_like needs a string, got {subject.type}", node)
    if pattern.const is None or not is_stringy(pattern.type):
        raise t.unsupported("regexp_like with a non-literal pattern", node)
    regex = pattern.const.as_py()
    if flags:
        regex = f"(?{''.join(sorted(set(flags)))}){regex}"
    return Term(pc.match_substring_regex(subject.expr, regex), pa.bool_())


def _fn_regexp_match(t: Translator, node: exp.Func) -> Term:
    # pylance reads regexp_match as "has a match": false, never NULL, for a NULL string
    found = _fn_regexp_like(t, node)
    return Term(pc.coalesce(found.expr, pc.scalar(False)), pa.bool_())


def _fn_isnan(t: Translator, node: exp.Func) -> Term:
    args = [t.translate(a) for a in t.args(node)]
    if len(args) != 1 or not pa.types.is_floating(args[0].type):
        raise t.invalid("isnan takes one floating-point argument", node)
    return Term(pc.is_nan(args[0].expr), pa.bool_())


def _fn_is_valid(t: Translator, node: exp.Func) -> Term:
    args = [t.translate(a) for a in t.args(node)]
    if len(args) != 1:
        raise t.invalid("is_valid takes one argument", node)
    return Term(pc.is_valid(args[0].expr), pa.bool_())


# -- value functions (string, math, date) -------------------------------------------------------


def _fn_float_math(kernel: Callable):
    """sqrt, exp, ln, trunc...: floats keep their type, integers compute in float64."""

    def handler(t: Translator, node: exp.Func) -> Term:
        args = [t.translate(a) for a in t.args(node)]
        if len(args) != 1:
            raise t.invalid(f"{node.sql_name()} takes one argument", node)
        return _float_result(t, kernel, args[0], node)

    return handler


def _float_result(t: Translator, kernel: Callable, arg: Term, node: exp.Func) -> Term:
    if not (is_numeric(arg.type) or arg.is_null_const):
        raise t.invalid(f"{node.sql_name()} needs a number, got {arg.type}", node)
    if not pa.types.is_floating(arg.type):
        arg = cast_term(arg, pa.float64())
    out = kernel(arg.expr)
    return Term(out, t.type_of(out, node))


def _fn_log(t: Translator, node: exp.Log) -> Term:
    args = [t.translate(a) for a in t.args(node)]
    if len(args) == 1:  # log(x) is the base-10 logarithm, as in DataFusion
        return _float_result(t, pc.log10, args[0], node)
    base = args[0].const.as_py() if args[0].const is not None else None
    kernels = {10: pc.log10, 2: pc.log2}
    if len(args) != 2 or base not in kernels:
        raise t.unsupported("log with a base other than 2 or 10", node)
    return _float_result(t, kernels[base], args[1], node)


def _fn_round(t: Translator, node: exp.Round) -> Term:
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
    return Term(out.expr, out.type, not_null=arg.not_null)


def _fn_pow(t: Translator, node: exp.Pow) -> Term:
    base, power = t.translate(node.this), t.translate(node.expression)
    for side in (base, power):
        if not is_numeric(side.type):
            raise t.invalid(f"power needs numbers, got {side.type}", node)
    target = pa.float64()  # pylance computes power in float64, integers too
    out = pc.power(cast_term(base, target).expr, cast_term(power, target).expr)
    return Term(out, t.type_of(out, node))


def _fn_concat(t: Translator, node: exp.Concat) -> Term:
    """concat(a, b, ...): NULL arguments count as empty strings; the arguments' string type,
    or string_view when they mix types, as pylance returns it."""
    return _joined(t, node, node.expressions, "")


def _fn_concat_ws(t: Translator, node: exp.ConcatWs) -> Term:
    """concat_ws(sep, a, b, ...): the non-NULL arguments joined by a literal separator."""
    if not node.expressions:
        raise t.invalid("concat_ws needs a separator", node)
    sep = t.translate(node.expressions[0])
    if sep.const is None or not is_stringy(sep.type) or not sep.const.is_valid:
        raise t.unsupported("concat_ws with a separator that is not a string literal", node)
    return _joined(t, node, node.expressions[1:], sep.const.as_py())


def _joined(t: Translator, node: exp.Func, operands: list, separator: str) -> Term:
    args = [t.translate(a) for a in operands]
    kinds = {a.type if a.const is None else pa.string() for a in args if not a.is_null_const}
    out_type = kinds.pop() if len(kinds) == 1 else pa.string_view()
    sep = pc.scalar(pa.scalar(separator, pa.large_string()))
    out = None  # NULL while every argument so far was NULL (Arrow's "skip" mode misbehaves)
    for arg in args:
        if arg.is_null_const:
            continue
        if not is_stringy(arg.type):
            raise t.invalid(f"{node.sql_name()} needs strings, got {arg.type}", node)
        part = cast_term(arg, pa.large_string()).expr
        if out is None:
            out = part
            continue
        both = pc.binary_join_element_wise(out, part, sep)
        out = pc.if_else(pc.is_null(out), part, pc.if_else(pc.is_null(part), out, both))
    if out is None:
        return constant(pa.scalar("", out_type))
    out = pc.coalesce(out, pc.scalar(pa.scalar("", pa.large_string())))
    return Term(out.cast(out_type), out_type)


def _fn_regexp_replace(t: Translator, node: exp.RegexpReplace) -> Term:
    """regexp_replace(s, pattern, replacement[, flags]): the first match, or every match
    with flag ``g``; ``i`` ignores case."""
    subject = t.translate(node.this)
    texts = []
    for key in ("expression", "replacement", "position"):
        arg = node.args.get(key)
        term = t.translate(arg) if arg is not None else constant(pa.scalar(""))
        if term.const is None or not is_stringy(term.type) or not term.const.is_valid:
            raise t.unsupported("regexp_replace with arguments that are not literals", node)
        texts.append(term.const.as_py())
    pattern, replacement, flags = texts
    if set(flags) - set("gi") or "\\" in replacement or "$" in replacement:
        raise t.unsupported(
            "regexp_replace with groups in the replacement or flags beyond g, i", node
        )
    if not is_stringy(subject.type):
        raise t.invalid(f"regexp_replace needs a string, got {subject.type}", node)
    regex = ("(?i)" if "i" in flags else "") + pattern
    limit = None if "g" in flags else 1
    out = pc.replace_substring_regex(
        subject.expr, pattern=regex, replacement=replacement, max_replacements=limit
    )
    out_type = subject.type if pa.types.is_string(subject.type) else pa.string_view()
    return Term(out.cast(out_type), out_type)


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


def _fn_date_part(t: Translator, node: exp.Func) -> Term:
    """date_part('year' | 'month' | ... | 'dow', date or timestamp): an int32."""
    args = [t.translate(a) for a in t.args(node)]
    if len(args) != 2 or args[0].const is None or not is_stringy(args[0].type):
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
    return Term(out.cast(pa.int32()), pa.int32())


def _fn_slice_end(left: bool):
    """left(s, n) / right(s, n): the first or last ``n`` characters, as a string_view."""

    def handler(t: Translator, node: exp.Func) -> Term:
        subject, count = t.translate(node.this), t.translate(node.expression)
        if not is_stringy(subject.type):
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
        return Term(out.cast(pa.string_view()), pa.string_view())

    return handler


def _fn_pad(t: Translator, node: exp.Pad) -> Term:
    """lpad/rpad(s, n[, fill]): cut to ``n`` characters, then padded to ``n``."""
    subject, width = t.translate(node.this), t.translate(node.expression)
    fill: object = " "
    if node.args.get("fill_pattern") is not None:
        f = t.translate(node.args["fill_pattern"])
        fill = f.const.as_py() if f.const is not None and is_stringy(f.type) else None
    n = width.const.as_py() if width.const is not None else None
    if not is_stringy(subject.type) or not isinstance(n, int) or n < 0:
        raise t.unsupported("lpad/rpad other than (string, literal width >= 0[, 'c'])", node)
    if not isinstance(fill, str) or len(fill) != 1:
        raise t.unsupported("lpad/rpad with a fill that is not one character", node)
    cut = pc.utf8_slice_codeunits(subject.expr, start=0, stop=n)
    pad = pc.utf8_lpad if node.args.get("is_left") else pc.utf8_rpad
    out = pad(cut, width=n, padding=fill)
    return Term(out, t.type_of(out, node))


def _fn_replace(t: Translator, node: exp.Replace) -> Term:
    subject = t.translate(node.this)
    pattern, replacement = t.translate(node.expression), t.translate(node.args["replacement"])
    if not is_stringy(subject.type):
        raise t.invalid(f"replace needs a string, got {subject.type}", node)
    if any(p.const is None or not is_stringy(p.type) for p in (pattern, replacement)):
        raise t.unsupported("replace with a pattern or replacement that is not a literal", node)
    out = pc.replace_substring(
        subject.expr, pattern=pattern.scalar().as_py(), replacement=replacement.scalar().as_py()
    )
    return Term(out, subject.type)


def _fn_strpos(t: Translator, node: exp.StrPosition) -> Term:
    """strpos(s, sub): 1-based position of the first match, 0 when absent."""
    subject, needle = t.translate(node.this), t.translate(node.args["substr"])
    if not is_stringy(subject.type) or needle.const is None or not is_stringy(needle.type):
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
    return Term(out, out_type, not_null=subject.not_null)


_RE2_SPECIAL = re.compile(r"[\\.^$|?*+()\[\]{}]")


def _fn_extreme(kernel: Callable):
    """greatest / least: the common type of the arguments, NULLs skipped."""

    def handler(t: Translator, node: exp.Func) -> Term:
        args = [t.translate(a) for a in [node.this, *node.expressions]]
        target = args[0].type
        for a in args[1:]:
            target = common_type(target, a.type) or target
        out = kernel(*[cast_term(a, target).expr for a in args], skip_nulls=True)
        return Term(out, t.type_of(out, node))

    return handler


def _fn_nullif(t: Translator, node: exp.Nullif) -> Term:
    left, right = t.translate(node.this), t.translate(node.expression)
    left, right = t.unify(left, right, node, arithmetic=True)
    null = pc.scalar(pa.scalar(None, left.type))
    out = pc.if_else(pc.equal(left.expr, right.expr), null, left.expr)
    return Term(out, t.type_of(out, node))


def _fn_octet_length(t: Translator, node: exp.Func) -> Term:
    (arg,) = t.string_arg(node, 1)
    out = pc.binary_length(arg.expr)
    return Term(out, t.type_of(out, node))


def _fn_bit_length(t: Translator, node: exp.Func) -> Term:
    (arg,) = t.string_arg(node, 1)
    length = pc.binary_length(arg.expr)
    out = pc.multiply(length, pc.scalar(pa.scalar(8, t.type_of(length, node))))
    return Term(out, t.type_of(out, node))


def _fn_btrim(t: Translator, node: exp.Func) -> Term:
    (arg,) = t.string_arg(node, 1)
    return Term(pc.utf8_trim(arg.expr, characters=" "), arg.type)


# handler by sqlglot class name: each takes the node class it is named for
FUNCTIONS: dict[str, FunctionHandler] = {
    "Lower": _fn_unary_string("utf8_lower"),
    "Upper": _fn_unary_string("utf8_upper"),
    "Length": _fn_unary_string("utf8_length", pa.int32()),
    "Reverse": _fn_unary_string("utf8_reverse"),
    "Trim": _fn_trim,
    "Abs": _fn_abs,
    "Coalesce": _fn_coalesce,
    "StartsWith": _fn_substring_match(pc.starts_with),
    "EndsWith": _fn_substring_match(pc.ends_with),
    "Contains": _fn_substring_match(pc.match_substring),
    "RegexpLike": _fn_regexp_like,
    "regexp_like": _fn_regexp_like,
    "regexp_match": _fn_regexp_match,
    "IsNan": _fn_isnan,
    "isnan": _fn_isnan,
    "is_valid": _fn_is_valid,
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
