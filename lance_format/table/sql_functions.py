"""Scalar SQL functions for expressions (projections, ``add_columns``) and filters.

String, math and date functions as pylance evaluates them (DataFusion): the same result
types (``concat`` of mixed string types is a string_view, ``power`` is float64,
``date_part`` an int32) and the same edge cases (``lpad`` cuts long strings, ``strpos``
counts characters, ``regexp_replace`` replaces the first match unless flagged ``g``).
Arguments that pylance takes as literals (patterns, widths, separators) must be literals.
JSON functions (``json_extract``, ``json_get_*``...) and list functions (``array_has*``,
``l[i]``) have no Arrow kernel and run as Arrow scalar UDFs, with lance's conversions.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from .. import jsonb
from ..errors import InvalidArgumentError
from .sql_terms import (
    ARROW_ERRORS,
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


# -- row-wise functions (JSON, lists) ----------------------------------------------------------
#
# Arrow has no kernels for JSON paths or list membership, so these run as Arrow scalar UDFs:
# registered once per signature, called from the expression like any kernel, batch by batch.

_UDF_NAMES: dict[tuple[str, tuple[str, ...], str], str] = {}
_UDF_LOCK = threading.Lock()


def _udf_call(
    name: str,
    fn: Callable[..., pa.Array],
    args: list[pc.Expression],
    in_types: list[pa.DataType],
    out_type: pa.DataType,
) -> pc.Expression:
    """Call ``fn`` (arrays or scalars in, an array out) as an Arrow function of ``args``."""
    key = (name, tuple(str(t) for t in in_types), str(out_type))
    with _UDF_LOCK:
        registered = _UDF_NAMES.get(key)
        if registered is None:
            registered = f"lance_format_{name}_{len(_UDF_NAMES)}"

            def kernel(ctx, *arrays):  # noqa: ARG001 - Arrow passes a context first
                return fn(*arrays)

            pc.register_scalar_function(
                kernel,
                registered,
                {"summary": name, "description": f"SQL {name}, as pylance evaluates it"},
                {f"arg{i}": t for i, t in enumerate(in_types)},
                out_type,
            )
            _UDF_NAMES[key] = registered
    return pc.Expression._call(registered, args)


def _name(node: exp.Func) -> str:
    return node.name.lower() if isinstance(node, exp.Anonymous) else node.sql_name().lower()


# JSON: an ``arrow.json`` column's text, a JSONPath or key literal


_PATH_STEP = re.compile(r"""\.([A-Za-z_][\w]*)|\[(\d+)\]|\[['"]([^'"]*)['"]\]|(\.\*|\[\*\])""")
Step = str | int | None  # a field name, an array index, or None for a wildcard (* / [*])
_MISSING = object()


def _json_path(text: str) -> list[Step] | None:
    """``$.a.b[0]["c"][*]`` as its steps; None for JSONPath beyond names, indexes and
    wildcards (filters, slices, recursive descent)."""
    if not text.startswith("$"):
        return None
    steps: list[Step] = []
    pos = 1
    while pos < len(text):
        m = _PATH_STEP.match(text, pos)
        if m is None:
            return None
        steps.append(m[1] if m[1] is not None else int(m[2]) if m[2] is not None else m[3])
        pos = m.end()
    return steps


def _json_step(value: object, step: Step) -> list:
    """The values one step reaches from ``value`` (none, one, or all for a wildcard)."""
    if step is None:
        if isinstance(value, list):
            return value
        return list(value.values()) if isinstance(value, dict) else []
    if isinstance(step, int):
        return [value[step]] if isinstance(value, list) and step < len(value) else []
    if isinstance(value, dict) and step in value:
        return [value[step]]
    return []


def _json_text(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _json_key(key: str) -> str | int:
    """json_get's key: an array index when it is a number, otherwise a field name."""
    return int(key) if key.isdigit() else key


def _as_string(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value) if not isinstance(value, float) else _json_text(value)
    raise InvalidArgumentError("json_get_string: failed to convert to string: InvalidCast")


_DECIMAL_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_SPECIAL_FLOATS = {
    "inf",
    "+inf",
    "-inf",
    "infinity",
    "+infinity",
    "-infinity",
    "nan",
    "+nan",
    "-nan",
}


def _number_text(text: str, what: str) -> float | int:
    """A number spelled in a JSON string ('35', '1e3', '.5'), as Rust parses one."""
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    if _DECIMAL_TEXT.fullmatch(text) or text.casefold() in _SPECIAL_FLOATS:
        return float(text)
    raise InvalidArgumentError(f"json_get_{what}: failed to convert to {what}: InvalidCast")


def _rounded(value: float | int, what: str) -> int:
    """An integer from a number: halves rounded away from zero (2.5 -> 3)."""
    if isinstance(value, int):
        return int(value)  # a bool counts 0 / 1
    if not math.isfinite(value):
        raise InvalidArgumentError(f"json_get_{what}: failed to convert to integer: InvalidCast")
    return int(math.floor(abs(value) + 0.5)) * (1 if value >= 0 else -1)


def _as_int(value: object) -> int | None:
    """json_get_int: booleans count 0/1, floats round, strings holding a number parse."""
    if value is None:
        return None
    if isinstance(value, (bool, int, float)):
        return _rounded(value, "int")
    if isinstance(value, str):
        return _rounded(_number_text(value, "int"), "int")
    raise InvalidArgumentError("json_get_int: failed to convert to integer: InvalidCast")


def _as_float(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, str):
        _number_text(value, "float")  # validates the spelling
        return float(value)  # keeps '-0' negative
    raise InvalidArgumentError("json_get_float: failed to convert to float: InvalidCast")


_BOOL_TEXT = {"true": True, "yes": True, "false": False, "no": False}


def _as_bool(value: object) -> bool | None:
    """json_get_bool: booleans, and the strings true/yes/false/no in any case."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.casefold() in _BOOL_TEXT:
        return _BOOL_TEXT[value.casefold()]
    raise InvalidArgumentError("json_get_bool: failed to convert to boolean: InvalidCast")


def _json_args(t: Translator, node: exp.Func, count: int) -> tuple[Term, list[str]]:
    """The JSON column and the literal path/key/value arguments after it."""
    args = [
        constant(pa.scalar(a.sql().strip("'"))) if isinstance(a, exp.JSONPath) else t.translate(a)
        for a in t.args(node)
    ]
    name = _name(node)
    if len(args) != count:
        raise t.invalid(f"{name} takes {count} arguments", node)
    subject = args[0]
    if not (
        _is_json(subject.type) or is_stringy(subject.type) or pa.types.is_large_binary(subject.type)
    ):
        raise t.invalid(f"{name} needs a JSON column, got {subject.type}", node)
    texts = []
    for extra in args[1:]:  # pylance casts a number literal to its text
        if extra.const is None or not extra.const.is_valid:
            raise t.unsupported(f"{name} with a path or key that is not a literal", node)
        if not (is_stringy(extra.type) or is_numeric(extra.type)):
            raise t.invalid(f"{name} needs a string path or key, got {extra.type}", node)
        texts.append(extra.number_text or str(extra.const.as_py()))
    return subject, texts


def _is_json(t: pa.DataType) -> bool:
    return getattr(t, "extension_name", None) == "arrow.json"


def _json_udf(
    t: Translator,
    node: exp.Func,
    subject: Term,
    params: list[str],
    out_type: pa.DataType,
    row: Callable[..., object],
) -> Term:
    """Apply ``row(value, *params)`` to each row's parsed JSON (``_MISSING`` for NULL).

    The literal parameters travel as scalar arguments: the function is registered once
    per name, so it must not close over one filter's values."""
    binary = pa.types.is_large_binary(subject.type)  # JSONB, as json_get returns it
    if _is_json(subject.type):
        text = subject.expr.cast(subject.type.storage_type).cast(pa.large_string())
    elif binary:
        text = subject.expr
    else:
        text = subject.expr.cast(pa.large_string())
    parse = (lambda v: json.loads(jsonb.decode(v))) if binary else json.loads

    def fn(texts: pa.Array, *scalars: pa.Scalar | pa.Array) -> pa.Array:
        values = [_param(s) for s in scalars]
        out = []
        for v in texts.to_pylist():
            out.append(row(_MISSING if v is None else parse(v), *values))
        return pa.array(out, out_type)

    args = [text] + [pc.scalar(p) for p in params]
    in_types = [subject.type if binary else pa.large_string()] + [pa.string()] * len(params)
    return Term(_udf_call(_name(node), fn, args, in_types, out_type), out_type)


def _param(value: pa.Scalar | pa.Array) -> object:
    """A literal argument of a UDF: Arrow passes a scalar, or an array when it broadcasts."""
    return value.as_py() if isinstance(value, pa.Scalar) else value[0].as_py()


def _select_all(document: object, steps: list[Step]) -> list:
    """Every value the path reaches, in document order."""
    if document is _MISSING:
        return []
    found = [document]
    for step in steps:
        found = [reached for value in found for reached in _json_step(value, step)]
    return found


def _select(document: object, steps: list[Step]) -> object:
    """The first value the path reaches, or ``_MISSING``."""
    found = _select_all(document, steps)
    return found[0] if found else _MISSING


def _json_path_arg(t: Translator, node: exp.Func, text: str) -> str:
    if _json_path(text) is None:
        raise t.unsupported(f"JSONPath {text!r} (only .name, [index], ['name'], * steps)", node)
    return text


def _row_extract(document: object, path: str) -> str | None:
    """The value reached, or the array of all of them when a wildcard reaches several."""
    found = _select_all(document, _json_path(path) or [])
    if not found:
        return None
    return _json_text(found[0] if len(found) == 1 else found)


def _fn_json_extract(t: Translator, node: exp.Func) -> Term:
    """json_extract(j, '$.a.b'): the JSON text of the value there (`null` too); NULL if absent;
    an array of the values when a wildcard reaches several."""
    subject, (path,) = _json_args(t, node, 2)
    _json_path_arg(t, node, path)
    return _json_udf(t, node, subject, [path], pa.string(), _row_extract)


def _row_exists(document: object, path: str) -> bool | None:
    if document is _MISSING:
        return None
    return _select(document, _json_path(path) or []) is not _MISSING


def _fn_json_exists(t: Translator, node: exp.Func) -> Term:
    """json_exists(j, '$.a'): whether the path leads somewhere (a JSON null counts)."""
    subject, (path,) = _json_args(t, node, 2)
    _json_path_arg(t, node, path)
    return _json_udf(t, node, subject, [path], pa.bool_(), _row_exists)


def _fn_json_get_as(convert: Callable[[object], object], out_type: pa.DataType):
    """json_get_string/int/float/bool(j, key): one field (or array index), converted
    strictly: a value of the wrong kind is an error, as in pylance."""

    def row(document: object, key: str) -> object:
        value = _select(document, [_json_key(key)])
        return None if value is _MISSING else convert(value)

    def handler(t: Translator, node: exp.Func) -> Term:
        subject, (key,) = _json_args(t, node, 2)
        return _json_udf(t, node, subject, [key], out_type, row)

    return handler


def _row_get(document: object, key: str) -> bytes | None:
    value = _select(document, [_json_key(key)])
    return None if value is _MISSING else jsonb.encode(_json_text(value))


def _fn_json_get(t: Translator, node: exp.Func) -> Term:
    """json_get(j, key): the field (or array element) as JSONB bytes, for the json_get_*
    functions to read further."""
    subject, (key,) = _json_args(t, node, 2)
    return _json_udf(t, node, subject, [key], pa.large_binary(), _row_get)


def _row_array_contains(document: object, path: str, wanted: str) -> bool | None:
    if document is _MISSING:
        return None
    for value in _select_all(document, _json_path(path) or []):
        if isinstance(value, list) and any(_json_text(e) in (wanted, f'"{wanted}"') for e in value):
            return True
    return False


def _fn_json_array_contains(t: Translator, node: exp.Func) -> Term:
    """json_array_contains(j, '$.tags', 'x'): an element at the path whose JSON text, or
    whose text unquoted, is the value."""
    subject, (path, wanted) = _json_args(t, node, 3)
    _json_path_arg(t, node, path)
    return _json_udf(t, node, subject, [path, wanted], pa.bool_(), _row_array_contains)


def _row_array_length(document: object, path: str) -> int | None:
    value = _select(document, _json_path(path) or [])
    if value is _MISSING:
        return None
    return len(value) if isinstance(value, list) else 0  # pylance counts no elements


def _fn_json_array_length(t: Translator, node: exp.Func) -> Term:
    """json_array_length(j, '$.tags'): the array's length (0 for any other value); NULL
    when the path leads nowhere."""
    subject, (path,) = _json_args(t, node, 2)
    _json_path_arg(t, node, path)
    return _json_udf(t, node, subject, [path], pa.int64(), _row_array_length)


def _fn_arrow_cast(t: Translator, node: exp.Func) -> Term:
    """arrow_cast(x, 'Int32'): a cast to the Arrow type DataFusion names so."""
    args = [t.translate(a) for a in t.args(node)]
    if len(args) != 2 or args[1].const is None or not is_stringy(args[1].type):
        raise t.invalid("arrow_cast takes a value and an Arrow type name literal", node)
    type_name = str(args[1].const.as_py())
    target = _ARROW_TYPES.get(type_name)
    if target is None:
        raise t.unsupported(f"arrow_cast to {type_name!r}", node)
    return cast_term(args[0], target)


_ARROW_TYPES = {
    "Int8": pa.int8(),
    "Int16": pa.int16(),
    "Int32": pa.int32(),
    "Int64": pa.int64(),
    "UInt8": pa.uint8(),
    "UInt16": pa.uint16(),
    "UInt32": pa.uint32(),
    "UInt64": pa.uint64(),
    "Float16": pa.float16(),
    "Float32": pa.float32(),
    "Float64": pa.float64(),
    "Boolean": pa.bool_(),
    "Utf8": pa.string(),
    "LargeUtf8": pa.large_string(),
    "Utf8View": pa.string_view(),
    "Binary": pa.binary(),
    "LargeBinary": pa.large_binary(),
    "Date32": pa.date32(),
    "Date64": pa.date64(),
    "Timestamp(Second, None)": pa.timestamp("s"),
    "Timestamp(Millisecond, None)": pa.timestamp("ms"),
    "Timestamp(Microsecond, None)": pa.timestamp("us"),
    "Timestamp(Nanosecond, None)": pa.timestamp("ns"),
}


# lists: membership of literal values, subscripts


def _is_list(t: pa.DataType) -> bool:
    return (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
    )


def _rows_holding(lists: pa.Array, needle: pa.Array) -> np.ndarray:
    """Per row, whether the list holds any of ``needle``'s values (a NULL needle matches a
    NULL element, as DataFusion compares them)."""
    flat = pc.list_flatten(lists)
    parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
    hit = pc.is_in(flat, value_set=needle, skip_nulls=False)
    hit = hit.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    return np.bincount(parents[hit], minlength=len(lists)) > 0


_NO_MATCH = object()  # a literal no element can equal (2.5 among integers)


def _list_needles(t: Translator, node: exp.Func, lists: Term, arg: exp.Expr) -> list:
    """The literal values of ``[a, b, ...]`` (or a single literal), in the list's value type;
    ``_NO_MATCH`` for one the type cannot hold exactly."""
    items = arg.expressions if isinstance(arg, exp.Array) else [arg]
    value_type = lists.type.value_type
    out: list = []
    for item in items:
        term = t.translate(item)
        if term.const is None:
            raise t.unsupported(f"{_name(node)} with values that are not literals", node)
        try:
            out.append(term.const.cast(value_type).as_py())
        except ARROW_ERRORS:
            out.append(_NO_MATCH)
    return out


def _fn_array_has(mode: str):
    """array_has(l, v) / array_contains: ``v`` is in ``l``; array_has_any(l, [..]) and
    array_has_all(l, [..]): any or all of the literals are.  NULL for a NULL list (but an
    empty literal list is false for any, true for all, whatever the row); array_has of NULL
    is NULL, a NULL among many literals matches a NULL element."""

    def handler(t: Translator, node: exp.Func) -> Term:
        args = t.args(node)
        name = _name(node)
        if len(args) != 2:
            raise t.invalid(f"{name} takes a list and a value", node)
        lists = t.translate(args[0])
        if not _is_list(lists.type):
            raise t.invalid(f"{name} needs a list, got {lists.type}", node)
        if mode != "one" and not isinstance(args[1], exp.Array):
            raise t.unsupported(f"{name} with a second argument that is not [literals]", node)
        needles = _list_needles(t, node, lists, args[1])
        if mode == "one" and needles == [None]:
            return constant(BOOL_NULL)
        if not needles:
            return constant(pa.scalar(mode == "all"))
        if mode == "all" and _NO_MATCH in needles:  # false, or NULL for a NULL list
            null = pc.scalar(BOOL_NULL)
            return Term(pc.if_else(pc.is_null(lists.expr), null, pc.scalar(False)), pa.bool_())
        needle_type = pa.list_(lists.type.value_type)
        values_arg = pa.scalar([v for v in needles if v is not _NO_MATCH], needle_type)

        def fn(column: pa.Array, needle: pa.Scalar | pa.Array) -> pa.Array:
            values = needle.values if isinstance(needle, pa.Scalar) else needle[0].values
            if mode == "all":
                found = np.ones(len(column), dtype=bool)
                for i in range(len(values)):
                    found &= _rows_holding(column, values.slice(i, 1))
            else:
                found = _rows_holding(column, values)
            return pa.array(found, pa.bool_(), mask=column.is_null().to_numpy(zero_copy_only=False))

        args = [lists.expr, pc.scalar(values_arg)]
        out = _udf_call(f"array_has_{mode}", fn, args, [lists.type, needle_type], pa.bool_())
        return Term(out, pa.bool_())

    return handler


def list_element(t: Translator, lists: Term, index: int, node: exp.Expr) -> Term:
    """``l[i]``: the i-th element counting from 1 (from -1 at the end); NULL when out of range."""
    if not _is_list(lists.type):
        raise t.invalid(f"a subscript needs a list, got {lists.type}", node)
    value_type = lists.type.value_type

    def fn(column: pa.Array, at: pa.Scalar | pa.Array) -> pa.Array:
        i = at.as_py() if isinstance(at, pa.Scalar) else at[0].as_py()
        lengths = pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False)
        position = lengths + i if i < 0 else np.full(len(column), i - 1, dtype=np.int64)
        inside = (i != 0) & (position >= 0) & (position < lengths)
        starts = np.cumsum(lengths) - lengths
        flat = pc.list_flatten(column)
        if not len(flat):
            return pa.nulls(len(column), value_type)
        return flat.take(pa.array(np.where(inside, starts + position, 0), mask=~inside))

    at = pc.scalar(pa.scalar(index, pa.int64()))
    out = _udf_call("list_element", fn, [lists.expr, at], [lists.type, pa.int64()], value_type)
    return Term(out, value_type)


def list_equals(t: Translator, lists: Term, literal: Term, node: exp.Expr) -> Term:
    """``l = [1, 2]``: whole-list equality with a literal list; NULL for a NULL list."""
    if not _is_list(lists.type) or literal.const is None or not _is_list(literal.type):
        raise t.invalid(f"cannot compare {lists.type} with {literal.type}", node)
    target = pa.list_(lists.type.value_type)
    try:
        wanted = literal.scalar().cast(target)
    except ARROW_ERRORS as e:
        raise t.invalid(f"cannot compare {lists.type} with {literal.type} ({e})", node) from None

    def fn(column: pa.Array, value: pa.Scalar | pa.Array) -> pa.Array:
        expected = _param(value)
        rows = column.to_pylist()
        return pa.array([None if r is None else r == expected for r in rows], pa.bool_())

    args = [lists.expr, pc.scalar(wanted)]
    out = _udf_call("list_equals", fn, args, [lists.type, target], pa.bool_())
    return Term(out, pa.bool_())


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
    "JSONExtract": _fn_json_extract,
    "json_extract": _fn_json_extract,
    "json_exists": _fn_json_exists,
    "json_get": _fn_json_get,
    "json_get_string": _fn_json_get_as(_as_string, pa.string()),
    "json_get_int": _fn_json_get_as(_as_int, pa.int64()),
    "json_get_float": _fn_json_get_as(_as_float, pa.float64()),
    "json_get_bool": _fn_json_get_as(_as_bool, pa.bool_()),
    "json_array_contains": _fn_json_array_contains,
    "JSONArrayContains": _fn_json_array_contains,
    "json_array_length": _fn_json_array_length,
    "ArrayContains": _fn_array_has("one"),
    "array_has": _fn_array_has("one"),
    "array_contains": _fn_array_has("one"),
    "array_has_any": _fn_array_has("any"),
    "ArrayContainsAll": _fn_array_has("all"),
    "array_has_all": _fn_array_has("all"),
    "arrow_cast": _fn_arrow_cast,
}
