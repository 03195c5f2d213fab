"""``MERGE INTO`` over Flight SQL: DuckDB finds the rows, one Update commit changes them.

Supported (DuckDB's syntax, parsed by sqlglot)::

    MERGE INTO target [AS t] USING source [AS s] ON condition
      WHEN MATCHED [AND c] THEN UPDATE SET col = expr, ... | UPDATE SET * | DELETE
      WHEN NOT MATCHED [BY TARGET] [AND c] THEN INSERT [(cols)] VALUES (exprs) | INSERT *
      WHEN NOT MATCHED BY SOURCE [AND c] THEN DELETE

``source`` is a dataset of this server or a subquery.  At most one clause of each of the
three kinds (a statement with several is refused: their first-match order is not
implemented), no parameters, no ``UPDATE`` for rows not matched by the source.  A target row
matched by several source rows is refused, as in DuckDB.  Updated, deleted and inserted rows
are committed together, as pylance's ``merge_insert`` commits them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from sqlglot import exp

from lance_format import ROW_ADDRESS

from .errors import SqlError


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _clauses(tree: exp.Merge) -> dict[str, exp.When]:
    """The WHEN clauses by kind: ``matched``, ``not_matched`` (by target), ``by_source``."""
    whens = tree.args.get("whens")
    out: dict[str, exp.When] = {}
    for when in whens.expressions if whens is not None else []:
        if when.args.get("matched"):
            kind = "matched"
        elif when.args.get("source"):
            kind = "by_source"
        else:
            kind = "not_matched"
        if kind in out:
            raise SqlError(
                f"MERGE with several WHEN {kind.replace('_', ' ').upper()} clauses is not supported"
            )
        out[kind] = when
    if not out:
        raise SqlError("MERGE needs at least one WHEN clause")
    return out


def _action(when: exp.When) -> str:
    then = when.args.get("then")
    if then is None:
        raise SqlError("a MERGE clause without an action")
    if isinstance(then, exp.Var) and then.name.upper() == "DELETE":
        return "delete"
    if isinstance(then, exp.Update):
        return "update"
    if isinstance(then, exp.Insert):
        return "insert"
    raise SqlError(f"unsupported MERGE action {then.sql('duckdb')!r}")


def _alias_of(node: exp.Expression) -> str:
    alias = node.args.get("alias")
    if alias is not None:
        return alias.name
    if isinstance(node, exp.Table):
        return node.name
    raise SqlError("the MERGE source subquery needs an alias")


def merge_selects(tree: exp.Expr, target: str, columns: list[str]) -> dict[str, str]:
    """The SELECTs finding a MERGE's rows, over ``tree`` whose tables have their private
    names (``target`` is the target's alias, ``columns`` its columns): ``update``
    (``_rowaddr`` and new values), ``delete`` (``_rowaddr``), ``insert`` (new rows) and
    ``ambiguous`` (target rows matched more than once)."""
    if not isinstance(tree, exp.Merge):
        raise SqlError("not a MERGE statement")
    if tree.args.get("returning") is not None:
        raise SqlError("MERGE ... RETURNING is not supported")
    clauses = _clauses(tree)
    source = tree.args["using"]
    src = _alias_of(source)
    t_sql, s_sql = tree.this.sql("duckdb"), source.sql("duckdb")
    on = tree.args["on"].sql("duckdb")
    addr = f"{_q(target)}.{_q(ROW_ADDRESS)}"
    out = {
        "ambiguous": f"SELECT {addr} FROM {t_sql} JOIN {s_sql} ON {on} GROUP BY 1 HAVING count(*) > 1 LIMIT 1"
    }

    def cond(when: exp.When) -> str:
        c = when.args.get("condition")
        return f" AND ({c.sql('duckdb')})" if c is not None else ""

    deletes = []
    if "matched" in clauses:
        when = clauses["matched"]
        joined = f"FROM {t_sql} JOIN {s_sql} ON {on} WHERE TRUE{cond(when)}"
        if _action(when) == "delete":
            deletes.append(f"SELECT {addr} {joined}")
        elif _action(when) == "update":
            sets = []
            for a in when.args["then"].expressions:
                if isinstance(a, exp.Star):
                    sets += [f"{_q(src)}.{_q(c)} AS {_q(c)}" for c in columns]
                elif isinstance(a, exp.EQ) and isinstance(a.this, exp.Column):
                    sets.append(f"({a.expression.sql('duckdb')}) AS {_q(a.this.name)}")
                else:
                    raise SqlError("UPDATE SET takes column = expression pairs or *")
            out["update"] = f"SELECT {addr}, {', '.join(sets)} {joined}"
        else:
            raise SqlError("WHEN MATCHED takes UPDATE or DELETE")
    if "by_source" in clauses:
        when = clauses["by_source"]
        if _action(when) != "delete":
            raise SqlError("WHEN NOT MATCHED BY SOURCE supports DELETE only here")
        deletes.append(
            f"SELECT {addr} FROM {t_sql} WHERE NOT EXISTS (SELECT 1 FROM {s_sql} WHERE {on})"
            f"{cond(when)}"
        )
    if deletes:
        out["delete"] = " UNION ALL ".join(deletes)
    if "not_matched" in clauses:
        when = clauses["not_matched"]
        if _action(when) != "insert":
            raise SqlError("WHEN NOT MATCHED takes INSERT")
        insert = when.args["then"]
        values = insert.args.get("expression")
        if isinstance(insert.this, exp.Star):
            picked = [f"{_q(src)}.{_q(c)} AS {_q(c)}" for c in columns]
        else:
            names = (
                [c.name for c in insert.this.expressions] if insert.this is not None else columns
            )
            exprs = values.expressions if values is not None else []
            if len(names) != len(exprs):
                raise SqlError("INSERT lists a different number of columns and values")
            unknown = [n for n in names if n not in columns]
            if unknown:
                raise SqlError(f"INSERT names unknown columns {unknown}")
            given = dict(zip(names, exprs, strict=True))
            picked = [
                f"({given[c].sql('duckdb')}) AS {_q(c)}" if c in given else f"NULL AS {_q(c)}"
                for c in columns
            ]
        out["insert"] = (
            f"SELECT {', '.join(picked)} FROM {s_sql} "
            f"WHERE NOT EXISTS (SELECT 1 FROM {t_sql} WHERE {on}){cond(when)}"
        )
    return out


def check_ambiguous(found: pa.Table) -> None:
    if found.num_rows:
        raise SqlError(
            "MERGE matched one target row with several source rows: the merge is ambiguous"
        )


def deleted_addresses(found: dict[str, pa.Table]) -> np.ndarray:
    table = found.get("delete")
    if table is None:
        return np.zeros(0, np.uint64)
    return np.unique(table.column(0).to_numpy().astype(np.uint64))
