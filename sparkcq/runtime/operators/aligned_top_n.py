"""A Top-N (or ranking) of a relation that changes only at multiples of a step, evaluated at
those instants with no state.

``AlignedTopN`` (made by ``plan/rules/evaluate_at_slides.py``) reads its input's segments
(``Slice.segments``), takes the input's rows at each multiple of the step the cycle
evaluates (``slide_instants.py``) and ranks each instant's rows per partition with Spark's
own ranking function: the Top-N of the snapshot at ``m``, which holds over ``[m, m + step)``.
Each copy of a row is a row, and rows equal in the ORDER BY keys are ordered by all their
columns, ascending with NULLs first, as the general operator (``top_n.py``) does. NEXMark
q5 in its Top-N form, ``RANK() OVER (ORDER BY num DESC) = 1`` per 5 s slide::

    counts at 10: (a1, 2), (a2, 3)     ranks a2 1, a1 2     top at 10: (a2, 3) over [10, 15)

The general operator keeps the live rows as a multiset and ranks each partition at every
instant where it changes, from +1/-1 changes.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from sparkcq.model.columns import AT, D, T
from sparkcq.plan.nodes import AlignedTopN, RankKind
from sparkcq.runtime.frames import Runtime, q
from sparkcq.runtime.operators.slide_instants import InstantOperator


class AlignedTopNOperator(InstantOperator):
    """The ranking of each snapshot at the multiples of the step (see module)."""

    def __init__(self, node: AlignedTopN, rt: Runtime):
        top = node.top
        inputs = [f.name for f in top.child.schema.fields]
        super().__init__(node, rt, inputs, [f.name for f in top.schema.fields], node.step,
                         "alignedtopn")
        within = ", ".join([*map(q, top.partition), q(AT)])
        keys = ", ".join(k.sql() for k in top.order)
        ties = ", ".join(f"{q(c)} ASC NULLS FIRST" for c in inputs)
        ranking = {RankKind.ROW_NUMBER: f"row_number() OVER (PARTITION BY {within} "
                                        f"ORDER BY {keys}, {ties})",
                   RankKind.RANK: f"rank() OVER (PARTITION BY {within} ORDER BY {keys})",
                   RankKind.DENSE_RANK: f"dense_rank() OVER (PARTITION BY {within} "
                                        f"ORDER BY {keys})"}[top.rank]
        shown = f", `_rank` AS {q(top.rank_column)}" if top.rank_column else ""
        kept = "" if top.n is None else f" WHERE `_rank` <= {top.n}"
        # over rows, one copy each, with an instant ``_at``
        self.ranked = (f"SELECT {', '.join(map(q, inputs))}{shown}, {q(AT)} FROM "
                       f"(SELECT *, CAST({ranking} AS BIGINT) AS `_rank` FROM ({{rows}})){kept}")

    def per_instant(self, rows: str) -> str:  # noqa: D102
        return self.ranked.replace("{rows}", rows)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The ranking of the input's contents (rows with multiplicities), at ``at``."""
        (inp,) = children
        if inp is None:
            return None
        cols = ", ".join(map(q, self.inputs))
        copies = (f"SELECT {cols}, CAST({at} AS BIGINT) AS {q(AT)} FROM {{inp}} LATERAL VIEW "
                  f"explode(array_repeat(1, CAST({q(D)} AS INT))) AS _copy WHERE {q(D)} > 0")
        names = ", ".join(map(q, self.names))
        return self.views.sql(f"SELECT {names}, {q(AT)} AS {q(T)}, CAST(1 AS BIGINT) AS {q(D)} "
                              f"FROM ({self.ranked.replace('{rows}', copies)})", inp=inp)
