"""What a grouped aggregate keeps per group and part (a pane, an instant) so that parts
combine, and how each call's value comes out of the combined columns.

``count``, ``sum``, ``avg``, ``min`` and ``max`` combine by ``sum``, ``min`` and ``max`` of a
few columns per argument: a count of its non-null values, an exact sum (a DOUBLE's as two
BIGINTs, ``aggregate.exact_double_parts``, so the result does not depend on the order rows
are added in) and its extremes. Each row counts ``_d`` times; ``_n`` (the combined
``sum(_d)``) is the group's row count. ``sum(v)`` and ``count(*)`` over one column ``v``
share its count column::

    count(*) AS c, sum(v) AS s     measures _c0 = sum(v IS NOT NULL ? _d : 0), _s0, _f0
                                   values   c = CAST(_n AS BIGINT), s = CASE WHEN _c0 > 0 ...
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql.types import DataType, DoubleType, LongType

from sparkcq.model.columns import D, N
from sparkcq.plan.nodes import Aggregate
from sparkcq.runtime.frames import q
from sparkcq.runtime.operators.aggregate import (
    EXACT_DOUBLE,
    accumulator_type,
    exact_double_parts,
    exact_double_value,
)


@dataclass(frozen=True)
class Measure:
    """One column kept per group and part for an aggregate argument, and how parts combine it."""

    name: str
    sql: str  # over a row (its argument and multiplicity ``_d``)
    combine: str  # sum, min or max
    dtype: DataType


@dataclass
class Measures:
    """An aggregate's measures (by column name) and each call's value over them (by output
    column: SQL over the combined measures and ``_n``).
    """

    columns: dict[str, Measure] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)

    def keep(self, name: str, sql: str, combine: str, dtype: DataType) -> str:
        """Keep ``sql`` per part (once, however many calls read it); its column, quoted."""
        self.columns.setdefault(name, Measure(name, sql, combine, dtype))
        return q(name)

    def combined_sql(self) -> str:
        """``_n`` and every measure combined over a group's parts, comma-separated."""
        return ", ".join([f"sum({q(D)}) AS {q(N)}",
                          *(f"{m.combine}({m.sql}) AS {q(m.name)}"
                            for m in self.columns.values())])


def measures_of(agg: Aggregate) -> Measures:
    """The measures of ``agg``'s calls (all built-in: ``model.aggregate_functions.BUILTIN``)
    and their values.
    """
    measures = Measures()
    arg_types = {f.name: f.dataType for f in agg.child.schema.fields}
    out_types = {f.name: f.dataType for f in agg.schema.fields}
    for call in agg.aggs:
        out = out_types[call.name].simpleString()
        if call.arg is None:
            measures.values[call.name] = f"CAST(`{N}` AS {out})"
            continue
        i = list(arg_types).index(call.arg)
        arg, dtype = q(call.arg), arg_types[call.arg]
        count = measures.keep(f"_c{i}", f"CASE WHEN {arg} IS NOT NULL THEN {q(D)} ELSE 0 END",
                              "sum", LongType())
        if call.func == "count":
            measures.values[call.name] = f"CAST({count} AS {out})"
        elif call.func in ("sum", "avg"):
            acc = accumulator_type(dtype)
            if acc == EXACT_DOUBLE:  # two BIGINT sums, a DOUBLE once per row out
                whole, fraction = exact_double_parts(f"{arg} * {q(D)}")
                total = exact_double_value(
                    measures.keep(f"_s{i}", whole, "sum", LongType()),
                    measures.keep(f"_f{i}", fraction, "sum", LongType()))
            else:
                total = measures.keep(f"_s{i}", f"CAST({arg} * {q(D)} AS {acc.simpleString()})",
                                      "sum", acc)
            if call.func == "sum":
                value = f"CAST({total} AS {out})"
            elif isinstance(out_types[call.name], DoubleType):
                value = f"CAST({total} AS DOUBLE) / CAST({count} AS DOUBLE)"
            else:
                value = f"CAST({total} / {count} AS {out})"
            measures.values[call.name] = f"CASE WHEN {count} > 0 THEN {value} END"
        else:
            extreme = measures.keep(f"_{call.func}{i}", arg, call.func, dtype)
            measures.values[call.name] = f"CAST({extreme} AS {out})"
    return measures
