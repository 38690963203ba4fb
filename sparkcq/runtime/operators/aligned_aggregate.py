"""A grouped aggregate of a relation that changes only at multiples of a step, evaluated at
those instants with no state.

``AlignedAggregate`` (made by ``plan/rules/evaluate_at_slides.py``) reads its input's
segments (``Slice.segments``: a sliced aggregate's rows over ``[from, to)``, ends on the
grid), takes the input's rows at each multiple of the step the cycle evaluates
(``slide_instants.py``) and groups them by (keys, instant): the aggregate of the snapshot at
``m``, which holds over ``[m, m + step)``. NEXMark q5's top count per 5 s slide::

    counts (auction, num):  a1 3 over [5, 15),  a2 4 over [10, 15),  a3 1 over [10, 20)
    max(num) at 5: 3   at 10: 4   at 15: 1       rows (top) 3 [5, 10), 4 [10, 15), 1 [15, 20)

Its rows go on as segments (an aggregate or join above reads them the same way) and as
changes. The general aggregate instead keeps every group's elements and applies +1/-1
changes to them every cycle. Sums are exact and ``min``/``max`` need no state: each
snapshot is aggregated whole (``measures.py``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from sparkcq.model.columns import AT, D, N, T
from sparkcq.plan.nodes import AlignedAggregate
from sparkcq.runtime.frames import Runtime, q
from sparkcq.runtime.operators.measures import measures_of
from sparkcq.runtime.operators.slide_instants import InstantOperator


class AlignedAggregateOperator(InstantOperator):
    """The aggregate of each snapshot at the multiples of the step (see module)."""

    def __init__(self, node: AlignedAggregate, rt: Runtime):
        agg = node.aggregate
        names = [f.name for f in agg.schema.fields]
        super().__init__(node, rt, [f.name for f in agg.child.schema.fields], names,
                         node.step, "alignedagg")
        measures = measures_of(agg)
        out = ", ".join(q(n) if n in agg.keys else f"{measures.values[n]} AS {q(n)}"
                        for n in names)
        by = ", ".join([*map(q, agg.keys), q(AT)])
        # over rows with a multiplicity ``_d`` and an instant ``_at``: one row per non-empty
        # group and instant
        self.grouped = (f"SELECT {out}, {q(AT)} FROM (SELECT {by}, {measures.combined_sql()} "
                        f"FROM ({{rows}}) GROUP BY {by}) WHERE {q(N)} > 0")

    def per_instant(self, rows: str) -> str:  # noqa: D102
        return self.grouped.replace(
            "{rows}", f"SELECT *, CAST(1 AS BIGINT) AS {q(D)} FROM ({rows})")

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The aggregate of the input's contents (rows with multiplicities), at ``at``."""
        (inp,) = children
        if inp is None:
            return None
        cols = ", ".join(map(q, self.names))
        grouped = self.grouped.replace("{rows}", f"SELECT *, CAST({at} AS BIGINT) AS {q(AT)} "
                                       "FROM {inp}")
        return self.views.sql(f"SELECT {cols}, {q(AT)} AS {q(T)}, CAST(1 AS BIGINT) AS {q(D)} "
                              f"FROM ({grouped})", inp=inp)
