"""The text of a SQL filter before sqlglot sees it: size and nesting limits, and long
``IN (literal, ...)`` lists lifted out.

sqlglot tokenizes and parses in pure Python at tens of microseconds a token, and its parser
recurses about twenty Python frames for each level of parentheses.  So, in one linear pass
of regular expressions (C speed):

* a filter longer than :data:`MAX_FILTER_BYTES` is refused;
* every ``IN (...)`` list of :data:`MIN_LIFTED_ITEMS` or more plain literals (numbers,
  quoted strings, NULL) is cut out and replaced by a placeholder (``IN (:lance_in_3)``); the
  translator turns the list into one Arrow array at once, so a million items take a fraction
  of a second instead of minutes;
* what is left for sqlglot must fit :data:`MAX_PARSED_BYTES`, and its nesting (parentheses,
  function calls, CASE, and chains of NOT or minus) must stay within
  :data:`MAX_FILTER_DEPTH` levels, so that parsing never meets Python's recursion limit;
  once parsed, operators may sit at most :data:`MAX_TREE_DEPTH` deep (``a + b + c ...``
  chains, which parse flat but translate recursively).

The limits are characters of the text (a filter is a Python ``str``); they apply to
``add_columns`` expressions too.

Quoted strings, backtick identifiers and comments are skipped whole, so nothing inside them
is mistaken for a list or a parenthesis.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError

__all__ = [
    "MAX_FILTER_BYTES",
    "MAX_FILTER_DEPTH",
    "MAX_PARSED_BYTES",
    "MAX_TREE_DEPTH",
    "LiteralList",
    "PreparedFilter",
    "prepare",
]

MAX_FILTER_BYTES = 64 * 1024 * 1024  # the whole filter text (IN lists included)
MAX_PARSED_BYTES = 64 * 1024  # the text left for the SQL parser once IN lists are lifted
MAX_FILTER_DEPTH = 24  # levels of parentheses, function calls and CASE (NOT counts half)
MAX_TREE_DEPTH = 128  # operators inside one another once parsed (an AND/OR chain is one)
MIN_LIFTED_ITEMS = 16  # shorter IN lists go through the SQL parser as written

PLACEHOLDER_PREFIX = "lance_in_"

# nesting cost in eighths of a level: what each construct costs sqlglot's recursive parser
_LEVEL, _NOT, _MINUS = 8, 4, 1

# skipped whole; one left open runs to the end (one pass, never a rescan per position)
_SQ = r"'[^']*(?:''[^']*)*(?:'|\Z)"  # '' escapes a quote; backslash is an ordinary character
_DQ = r'"(?:[^"\']|\'["\']?)*(?:"|\Z)'  # sqlglot: ' escapes ' and " inside "..."
_SKIP = rf"{_SQ}|{_DQ}|`[^`]*(?:`|\Z)|--[^\n]*|/\*.*?(?:\*/|\Z)"
_SCAN = re.compile(
    rf"(?P<list>(?<![\w$`])IN\s*\()|(?P<skip>{_SKIP})|(?P<word>[A-Za-z_][\w$]*)"
    r"|(?P<open>\()|(?P<close>\))|(?P<sep>,)|(?P<minus>-)|[^'\"`A-Za-z_(),\-/]+|.",
    re.IGNORECASE | re.DOTALL,
)
_SCOPE_ENDS = {"AND", "OR", "WHEN", "THEN", "ELSE", "sep"}  # where a NOT chain ends

_STRING_ITEM = re.compile(r"'([^']*(?:''[^']*)*)'")
_NOT_A_NUMBER_LIST = re.compile(r"[^0-9eE.,+\-\sNnUuLl]")  # found at once in other text
_NULLS_AND_COMMAS = re.compile(r"\s*(?:NULL\s*)?(?:,\s*(?:NULL\s*)?)*", re.IGNORECASE)
# what the SQL tokenizer reads as one number literal (a leading minus is its negation)
_NUMBER_ITEM = r"^(?:-?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?|(?i:null))$"


@dataclass
class LiteralList:
    """The items of one lifted ``IN`` list: an Arrow string array of the numbers' texts as
    written (``numeric``) or of the strings' values, and how many items were NULL."""

    values: pa.Array
    numeric: bool
    nulls: int
    integers: bool = False  # numbers written as integers only (no point, no exponent)

    def __len__(self) -> int:
        return len(self.values) + self.nulls

    def items(self) -> list[str | None]:
        """Every item for item-by-item use: a string's value or a number's text, None for
        each NULL (at the end: the order of an IN list means nothing)."""
        return [*self.values.to_pylist(), *([None] * self.nulls)]


def _lift_numbers(body: str) -> LiteralList | None:
    if body.count(",") + 1 < MIN_LIFTED_ITEMS or _NOT_A_NUMBER_LIST.search(body):
        return None
    parts = pc.ascii_trim_whitespace(pc.split_pattern(pa.array([body]), ",").flatten())
    other = parts.filter(pc.invert(pc.ascii_is_decimal(parts)))  # negative, decimal, NULL
    if not len(other):
        return LiteralList(parts, True, 0, integers=True)
    if not pc.all(pc.match_substring_regex(other, _NUMBER_ITEM)).as_py():
        return None
    is_null = pc.equal(pc.ascii_upper(other), "NULL")
    nulls = pc.sum(is_null).as_py() or 0
    if nulls:
        parts = parts.filter(pc.not_equal(pc.ascii_upper(parts), "NULL"))
    signed = other.filter(pc.invert(is_null))
    integers = not len(signed) or pc.all(pc.match_substring_regex(signed, r"^-\d+$")).as_py()
    return LiteralList(parts, True, nulls, integers=bool(integers))


def _split_plain(text: str) -> pa.Array:
    return pc.split_pattern(pa.array([text]), "', '").flatten()


def _split_spaced(text: str) -> pa.Array:
    return pc.split_pattern_regex(pa.array([text]), r"'\s*,\s*'").flatten()


def _lift_strings(body: str) -> LiteralList | None:
    stripped = body.strip()
    if "''" not in body and stripped[:1] == "'" and stripped[-1:] == "'":
        # the common case: 'a', 'b', ... with no NULL, so every gap is a quoted comma; each
        # gap holds two of the quotes, so any other quote means another shape
        text = stripped[1:-1]
        quotes = text.count("'")
        for split in (_split_plain, _split_spaced):
            values = split(text)
            if quotes == 2 * (len(values) - 1):
                return LiteralList(values, False, 0) if len(values) >= MIN_LIFTED_ITEMS else None
    # NULL items, escaped quotes: item by item
    rest = _STRING_ITEM.sub("", body)
    if not _NULLS_AND_COMMAS.fullmatch(rest):
        return None
    found = _STRING_ITEM.findall(body)
    if "''" in body:
        found = [v.replace("''", "'") for v in found]
    nulls = len(re.findall("(?i)null", rest))
    if len(found) + nulls != rest.count(",") + 1 or len(found) + nulls < MIN_LIFTED_ITEMS:
        return None  # an empty item, or two strings side by side: the parser says what
    return LiteralList(pa.array(found, pa.string()), False, nulls)


def _lift(sql: str, pos: int) -> tuple[LiteralList, int] | None:
    """The literal list whose body starts at ``pos`` (after ``IN (``) and the position after
    its closing parenthesis, or None when it is not a long list of plain literals."""
    end, quotes, start = -1, 0, pos
    while True:  # the first ")" after an even number of quotes (an escape is two quotes)
        end = sql.find(")", start)
        if end < 0:
            return None
        quotes += sql.count("'", start, end)
        if quotes % 2 == 0:
            break
        start = end + 1
    body = sql[pos:end]
    lifted = _lift_strings(body) if quotes else _lift_numbers(body)
    return None if lifted is None else (lifted, end + 1)


@dataclass
class PreparedFilter:
    """The filter text for the SQL parser, and the lists taken out of it by name."""

    sql: str
    lists: dict[str, LiteralList]


def prepare(sql: str) -> PreparedFilter:
    """Check the limits of ``sql`` and lift its long literal ``IN`` lists (see the module
    docstring); raises :class:`InvalidArgumentError` naming the limit that was exceeded."""
    if len(sql) > MAX_FILTER_BYTES:
        raise InvalidArgumentError(
            f"the filter is {len(sql):,} characters long; the limit is {MAX_FILTER_BYTES:,}"
        )
    # a fresh name for each filter: a placeholder the user wrote can never name our list
    prefix = f"{PLACEHOLDER_PREFIX}{secrets.token_hex(4)}_"
    out: list[str] = []
    lists: dict[str, LiteralList] = {}
    parsed = 0
    scopes = [0]  # per open level: the cost of the NOT and minus chains still in scope
    pos = done = 0  # scanned up to pos; copied into out up to done
    while pos < len(sql):
        m = _SCAN.match(sql, pos)
        assert m is not None  # the scanner's last alternative matches any one character
        kind = m.lastgroup
        if kind == "list":
            lifted = _lift(sql, m.end())
            if lifted is not None:
                name = f"{prefix}{len(lists)}"
                lists[name] = lifted[0]
                out.append(sql[done : m.start()])
                out.append(f"IN (:{name})")
                pos = done = lifted[1]
                parsed += len(name) + 6
                continue
            kind = "open"  # as written: its parenthesis opens a level
        pos = m.end()
        parsed += m.end() - m.start()
        if parsed > MAX_PARSED_BYTES:
            raise InvalidArgumentError(
                f"the filter has more than {MAX_PARSED_BYTES:,} characters outside long "
                "IN (...) lists of literals; write long lists of values as IN lists"
            )
        token = m.group().upper() if kind == "word" else kind
        if token in ("open", "CASE"):
            scopes.append(0)
        elif token in ("close", "END"):
            if len(scopes) > 1:
                scopes.pop()
            continue
        elif token in ("NOT", "minus"):
            scopes[-1] += _NOT if token == "NOT" else _MINUS
        elif token in _SCOPE_ENDS:
            scopes[-1] = 0
            continue
        else:
            continue
        if (len(scopes) - 1) * _LEVEL + sum(scopes) > MAX_FILTER_DEPTH * _LEVEL:
            raise InvalidArgumentError(
                f"the filter is nested too deeply: the limit is {MAX_FILTER_DEPTH} levels of "
                "parentheses, function calls and CASE (two NOTs count as one level)"
            )
    if not lists:
        return PreparedFilter(sql, lists)
    out.append(sql[done:])
    return PreparedFilter("".join(out), lists)
