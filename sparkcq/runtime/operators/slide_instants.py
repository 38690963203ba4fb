"""Relations that change only at multiples of a step: read at those instants from their
segments, and written as rows per instant (``aligned_aggregate.py``, ``aligned_join.py``).

A relation whose rows change only at multiples of ``step`` holds over ``[m, m + step)`` what
it holds at the multiple ``m``. A cycle ``[lo, hi)`` evaluates the multiples from the last
one below ``lo`` (``first_instant``: its rows hold at ``lo``, or, when ``lo`` is a multiple,
end there) to the last one below ``hi`` (all final: an input's segments starting before
``hi`` are). With ``step`` 5 and the cycle ``[7, 21)``: the instants 5, 10, 15 and 20; the
rows at 5 began in the cycle before, those at 10, 15 and 20 begin in this one, and those at
5, 10 and 15 end in it. With the cycle ``[10, 21)``: 5 too (its rows end at 10).
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from sparkcq.model.columns import AT, FROM, TO, D, T
from sparkcq.model.time import TIME_MIN
from sparkcq.plan.nodes import PlanNode
from sparkcq.runtime.frames import Runtime, Slice, SqlViews, bound_sql, q
from sparkcq.runtime.operators.base import CycleContext, Operator


def grid_floor(at: int, step: int) -> int:
    """The multiple of ``step`` at or before ``at`` (``TIME_MIN`` stays itself)."""
    return at if at == TIME_MIN else at - at % step


def first_instant(lo: int, step: int) -> int:
    """The first instant a cycle from ``lo`` evaluates: the last multiple of ``step`` below
    ``lo`` (``TIME_MIN`` stays itself).
    """
    return lo if lo == TIME_MIN else grid_floor(lo - 1, step)


def instants_sql(names: list[str], step: int, lower: int, hi: int, segments: str) -> str:
    """The rows of ``segments`` (interval rows, ``Slice.segments``) at each multiple of
    ``step`` in ``[lower, hi)`` they cover, ``lower`` a multiple of ``step`` (or
    ``TIME_MIN``): columns ``names`` and the instant ``_at``. A segment's ends are
    multiples of ``step``; one without an end holds until ``hi``.
    """
    cols = ", ".join(map(q, names))
    upper = bound_sql(hi)
    spans = (f"SELECT {cols}, greatest({q(FROM)}, {bound_sql(lower)}) AS _lo, "
             f"least(coalesce({q(TO)}, {upper}), {upper}) AS _hi FROM {segments}")
    return (f"SELECT {cols}, {q(AT)} FROM (SELECT * FROM ({spans}) WHERE _lo < _hi) "
            f"LATERAL VIEW explode(sequence(_lo, _hi - 1, CAST({step} AS BIGINT))) AS {q(AT)}")


class InstantRows:
    """An operator's output rows per instant, given as a slice (see module): segments for
    the readers of segments, and the change edge for everyone else (a query's records).
    """

    def __init__(self, rt: Runtime, names: list[str], step: int):
        self.rt = rt
        self.names = names
        self.step = step
        self.views = SqlViews(rt.spark, "instants")

    def slice(self, rows: DataFrame | None, lo: int, hi: int, fresh: bool,
              edge: bool) -> Slice:
        """The slice ``[lo, hi)`` of the relation whose rows at the instants the cycle
        evaluates (``first_instant(lo)`` to ``hi``) are ``rows`` (``names`` and ``_at``).
        ``fresh``: nothing was emitted yet, so the rows that hold at ``lo`` start there (a
        query added to a running plan); otherwise they began in an earlier cycle. ``edge``:
        build the change edge.
        """
        if rows is None:
            return Slice(None, lo, hi)
        if edge:  # read twice
            rows = self.rt.cache_for_cycle(rows)
        cols = ", ".join(map(q, self.names))
        at, step = q(AT), self.step
        segments = self.views.sql(f"SELECT {cols}, {at} AS {q(FROM)}, {at} + {step} AS {q(TO)} "
                                  "FROM {rows}", rows=rows)
        # the rows that start here: at ``lo`` or later, or (fresh) from ``lo`` on, all that
        # hold there
        first = bound_sql(first_instant(lo, step) if fresh else lo)
        starts = f"{at} >= {first} AND {at} + {step} > {bound_sql(lo)}"
        start = f"greatest({at}, {bound_sql(lo)})"
        changes = None
        if edge:
            # the rows that end here: every one whose end lies in the slice, unless (fresh)
            # it ended at ``lo`` before it began
            after = bound_sql(lo if fresh or lo == TIME_MIN else lo - 1)
            changes = self.views.sql_union([
                f"SELECT {cols}, {start} AS {q(T)}, CAST(1 AS BIGINT) AS {q(D)} FROM {{rows}} "
                f"WHERE {starts}",
                f"SELECT {cols}, {at} + {step} AS {q(T)}, CAST(-1 AS BIGINT) AS {q(D)} "
                f"FROM {{rows}} WHERE {at} + {step} < {bound_sql(hi)} AND {at} + {step} > "
                f"{after}"], rows=rows)
        return Slice(changes, lo, hi, segments)


class InstantOperator(Operator):
    """A one-input operator evaluated per instant from its input's segments, with no state:
    ``per_instant`` (over the input's rows at the cycle's instants, a text with ``_at``)
    gives its output rows at each instant (``names`` and ``_at``).
    """

    contents_from_inputs = True

    def __init__(self, node: PlanNode, rt: Runtime, inputs: list[str], names: list[str],
                 step: int, kind: str):
        super().__init__(node, rt)
        self.grid = step
        self.inputs = inputs
        self.names = names
        self.views = SqlViews(rt.spark, kind)
        self.rows = InstantRows(rt, names, step)

    def per_instant(self, rows: str) -> str:
        """The output rows at each instant of ``rows`` (a SQL text, one copy a row)."""
        raise NotImplementedError(type(self).__name__)

    def reads_edge(self, i: int, own_edge_read: bool) -> bool:
        """Not the input's changes: its segments."""
        return False

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        fresh = self.progress.position is None or bool(self.progress.waiting)
        if inp.segments is None:
            return Slice(None, inp.lo, inp.hi)
        instants = instants_sql(self.inputs, self.grid, first_instant(inp.lo, self.grid),
                                inp.hi, "{seg}")
        rows = self.views.sql(self.per_instant(instants), seg=inp.segments)
        return self.rows.slice(rows, inp.lo, inp.hi, fresh,
                               edge=self.node not in cycle.edges_unread)
