"""A join of two relations that change only at multiples of a step, evaluated at those
instants with no state.

``AlignedJoin`` (made by ``plan/rules/evaluate_at_slides.py``) reads both inputs' segments
(``Slice.segments``), takes each input's rows at every multiple of the step the cycle
evaluates (``slide_instants.py``) and joins the rows of equal instants: the SQL join of the
snapshots at ``m``, which holds over ``[m, m + step)``. NEXMark q5, the counts per auction
joined with their maximum on ``num = top``, 5 s slides::

    counts at 10: (a1, 3), (a2, 4)     top at 10: 4     pairs at 10: (a2, 4, 4) over [10, 15)
    counts at 15: (a3, 1)              top at 15: 1     pairs at 15: (a3, 1, 1) over [15, 20)

Every join kind is the SQL join per instant (an outer join pads a row that has no partner
at that instant). The pairs go on as segments and as changes. The general join instead
keeps both inputs' elements and rebuilds them from +1/-1 changes every cycle.

Both inputs change on the same step. When one is ahead of the other (its stream's
watermark is), its rows at the instants past the slower one's ``hi`` wait in a small state
(``ahead``) and meet the other input's rows of those instants in a later cycle.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StructField, StructType

from sparkcq.model.columns import AT, D, T
from sparkcq.plan.nodes import AlignedJoin, JoinHow, keyless_aggregate
from sparkcq.runtime.frames import Runtime, Slice, SqlViews, bound_sql, project, q, union_all
from sparkcq.runtime.operators.base import CycleContext, Operator
from sparkcq.runtime.operators.slide_instants import (
    InstantRows,
    first_instant,
    grid_floor,
    instants_sql,
)

_SQL_JOIN = {JoinHow.INNER: "INNER", JoinHow.LEFT: "LEFT OUTER", JoinHow.RIGHT: "RIGHT OUTER",
             JoinHow.FULL: "FULL OUTER", JoinHow.SEMI: "LEFT SEMI", JoinHow.ANTI: "LEFT ANTI"}


class AlignedJoinOperator(Operator):
    """The join of the inputs' snapshots at the multiples of the step (see module)."""

    contents_from_inputs = True

    def __init__(self, node: AlignedJoin, rt: Runtime):
        super().__init__(node, rt)
        self.grid = node.step
        self.sides = [[f.name for f in child.schema.fields] for child in node.children]
        self.names = [f.name for f in node.schema.fields]
        join = node.join
        self.how = join.how
        cols = [f"l.{q(n)}" for n in self.sides[0]]
        count = "l._d"
        if join.how.keeps_right_columns:
            cols += [f"r.{q(n)}" for n in self.sides[1]]
            count = ("l._d * r._d" if join.how is JoinHow.INNER
                     else "coalesce(l._d, 1) * coalesce(r._d, 1)")
        at = {JoinHow.FULL: f"coalesce(l.{q(AT)}, r.{q(AT)})",
              JoinHow.RIGHT: f"r.{q(AT)}"}.get(join.how, f"l.{q(AT)}")
        condition = f" AND ({join.condition.sql})" if join.condition is not None else ""
        # in a large cycle a keyless aggregate's row per instant goes to every task of the
        # other side, which is then not shuffled (a small cycle has no shuffle to save: a
        # broadcast would be a Spark job more)
        small = [side for side, child in zip("lr", node.children, strict=True)
                 if keyless_aggregate(child)]
        hint = f"/*+ BROADCAST({small[-1]}) */ " if small else ""
        # over each side's rows with an instant ``_at`` and a multiplicity ``_d``
        body = (f"{', '.join(cols)}, {at} AS {q(AT)}, {count} AS {q(D)} "
                f"FROM {{left}} AS l {_SQL_JOIN[join.how]} JOIN {{right}} AS r "
                f"ON l.{q(AT)} = r.{q(AT)}{condition}")
        self.pairs_sql = f"SELECT {body}"
        self.broadcast_pairs_sql = f"SELECT {hint}{body}"
        self.views = SqlViews(rt.spark, "alignedjoin")
        self.rows = InstantRows(rt, self.names, self.grid)
        # each input's rows at the instants past the other's ``hi``, while it is ahead
        self.ahead = [self.state(StructType([*child.schema.fields,
                                             StructField(AT, LongType())]), f"ahead-{i}")
                      for i, child in enumerate(node.children)]

    def reads_edge(self, i: int, own_edge_read: bool) -> bool:
        """Neither input's changes: their segments."""
        return False

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        fresh = self.progress.position is None or bool(self.progress.waiting)
        lo = self.progress.position
        lo = lo if lo is not None else min(s.lo for s in inputs)
        hi = min(s.hi for s in inputs)
        sides = [self.instants(i, side, lo, hi) for i, side in enumerate(inputs)]
        how = self.how
        if (sides[0] is None and not how.padded(1)) or (sides[1] is None and not (
                how.padded(0) or how is JoinHow.ANTI)):
            return Slice(None, lo, hi)
        pairs_sql = self.pairs_sql if self.rt.single else self.broadcast_pairs_sql
        pairs = self.views.sql(f"SELECT * FROM ({pairs_sql}) WHERE {q(AT)} < "
                               f"{bound_sql(hi)}", left=self.side_or_empty(sides[0], 0),
                               right=self.side_or_empty(sides[1], 1))
        return self.rows.slice(pairs, lo, hi, fresh, edge=self.node not in cycle.edges_unread)

    def instants(self, i: int, side: Slice, lo: int, hi: int) -> DataFrame | None:
        """Input ``i``'s rows at the instants from ``first_instant(lo)`` on, up to its own
        ``hi``; those from ``first_instant(hi)`` on are kept while the input is ahead of the
        other.
        """
        kept = self.ahead[i].get()
        new = None
        if side.segments is not None:
            # behind its own ``lo`` the kept rows hold the input's instants
            lower = (first_instant(lo, self.grid) if side.lo == lo
                     else -grid_floor(-side.lo, self.grid))
            new = self.views.sql(instants_sql(self.sides[i], self.grid, lower, side.hi,
                                              "{seg}"), seg=side.segments)
        rows = union_all([kept, new])
        self.ahead[i].set(None if rows is None or side.hi <= hi else project(
            rows, "*", where=f"{q(AT)} >= {bound_sql(first_instant(hi, self.grid))}"))
        return rows

    def side_or_empty(self, rows: DataFrame | None, i: int) -> DataFrame:
        """Input ``i``'s instant rows with a multiplicity of one each (none: no rows)."""
        if rows is None:
            rows = self.rt.empty(self.ahead[i].schema)
        return project(rows, "*", f"CAST(1 AS BIGINT) AS {q(D)}")

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The join of the inputs' contents (rows with multiplicities), at ``at``."""
        if children[0] is None and children[1] is None:
            return None
        views = {}
        for i, (key, rows) in enumerate(zip(("left", "right"), children, strict=True)):
            if rows is None:
                rows = self.rt.empty(StructType([*self.node.children[i].schema.fields,
                                                 StructField(T, LongType()),
                                                 StructField(D, LongType())]))
            views[key] = project(rows, *map(q, self.sides[i]), f"{q(T)} AS {q(AT)}", q(D))
        cols = ", ".join(map(q, self.names))
        return self.views.sql(f"SELECT {cols}, {q(AT)} AS {q(T)}, {q(D)} FROM "
                              f"({self.pairs_sql}) WHERE {q(D)} > 0", **views)
