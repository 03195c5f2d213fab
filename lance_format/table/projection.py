"""Expression projections: ``columns={"out": "SQL expression", ...}`` as pylance takes them.

Each output is a SQL value expression over the dataset's columns (translated by
:mod:`.filters`, with pylance's projection typing: a literal beside a column takes its type).
Outputs come in the order given; the scan reads only the columns the expressions name, and
a plain column keeps its exact type (dictionaries, extension types).  Like pylance, a
projection must read at least one column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from ..errors import InvalidArgumentError
from .filters import CompiledFilter, compile_value

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


@dataclass(frozen=True)
class _Output:
    name: str
    sql: str
    compiled: CompiledFilter
    column: str | None  # a plain top-level column, passed through as it is


class Projection:
    """A compiled dict projection over ``schema`` (the dataset's columns, plus ``_rowid`` /
    ``_rowaddr`` when the scan can provide them)."""

    def __init__(self, columns: Mapping[str, str], schema: pa.Schema):
        if not columns:
            raise InvalidArgumentError("a projection needs at least one output column")
        self.outputs: list[_Output] = []
        for name, sql in columns.items():
            if not isinstance(name, str) or not isinstance(sql, str):
                raise InvalidArgumentError(
                    "columns must map output names to SQL expressions (both strings), "
                    f"got {name!r}: {sql!r}"
                )
            compiled = compile_value(sql, schema)
            self.outputs.append(_Output(name, sql, compiled, _plain_column(compiled, schema)))
        self.columns: list[str] = list(
            dict.fromkeys(c for o in self.outputs for c in o.compiled.top_level_columns)
        )
        if not self.columns:
            raise InvalidArgumentError(
                "a projection must read at least one column (every expression is a constant)"
            )
        empty = pa.schema([schema.field(c) for c in self.columns]).empty_table()
        self.schema = pa.schema(
            [
                pa.field(o.name, a.type, self._nullable(o, schema))
                for o, a in zip(self.outputs, self._arrays(empty), strict=True)
            ]
        )

    def _nullable(self, out: _Output, schema: pa.Schema) -> bool:
        if out.column is not None:
            return schema.field(out.column).nullable
        return out.compiled.nullable

    def apply(self, table: pa.Table) -> pa.Table:
        """The outputs computed over ``table`` (holding at least :attr:`columns`)."""
        return pa.Table.from_arrays(self._arrays(table), schema=self.schema)

    def _arrays(self, table: pa.Table) -> list[pa.ChunkedArray]:
        computed = {o.name: o.compiled.expression for o in self.outputs if o.column is None}
        values: dict[str, pa.ChunkedArray] = {}
        if computed:
            inputs = table.select([c for c in self.columns if c in table.column_names])
            try:
                result = pads.dataset(inputs).to_table(columns=computed)
            except _ARROW_ERRORS as e:
                raise InvalidArgumentError(f"cannot compute the projection: {e}") from None
            values = {name: result.column(name) for name in computed}
        return [
            table.column(o.column) if o.column is not None else values[o.name] for o in self.outputs
        ]


def _plain_column(compiled: CompiledFilter, schema: pa.Schema) -> str | None:
    """The top-level column an expression merely names (``"id"``), else None."""
    if len(compiled.paths) != 1 or len(compiled.paths[0]) != 1:
        return None
    name = compiled.paths[0][0]
    ref = pc.field(name)
    t = schema.field(name).type
    plain = [ref] + ([ref.cast(t.value_type)] if pa.types.is_dictionary(t) else [])
    return name if any(compiled.expression.equals(p) for p in plain) else None
