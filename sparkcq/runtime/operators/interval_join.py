"""Inner join of two time-windowed streams, from the elements' intervals (DESIGN 6).

An event of a RANGE, NOW or CUT window becomes an element whose interval ``[s, e)`` is known
when the event arrives. A pair of elements meeting the condition is in the join's relation
over ``[max(s), min(e))`` when that is not empty, so in a cycle ``[lo, hi)`` the join's
changes are:

- ``+1`` at ``max(s)`` for the pairs whose later start lies in ``[lo, hi)``: one side starts
  in the cycle and the other started no later (ties go to the left side);
- ``-1`` at ``min(e)`` for the pairs whose earlier end lies in ``[lo, hi)``: one side ends in
  the cycle and the other ends no earlier (ties go to the left side).

A change of the cycle lies below ``hi``, the slower input's watermark, and so do the starts
of both elements of its pair; every event with a time below ``hi`` has arrived, and an
element never starts before its event (``s >= t``), so each pair is found exactly once, by
probing the elements that start (or end) in the cycle against the other side's elements. A
faster input's events beyond ``hi`` need not wait in a buffer: their elements start at or
after ``hi``, so they are only kept, and probed in the cycle they start in.

Each side's state is its elements that may still start or end a pair, ``e >= hi``: the
cycle's frame of the side itself, hash-partitioned by the equi-join keys and kept for the
next cycle rather than copied (``StateFrame.adopt``); elements that ended are filtered out
when it is read. Only the new elements are shuffled (a union with the kept ones keeps their
partitioning), and the four probes run on co-partitioned frames with no shuffle of their own.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from sparkcq.model.columns import D, T
from sparkcq.model.time import TIME_MAX, TIME_MIN
from sparkcq.plan.nodes import (
    Filter,
    IntervalJoin,
    Project,
    StreamScan,
)
from sparkcq.runtime.frames import Runtime, Slice, SqlViews, col, q
from sparkcq.runtime.operators.base import CycleContext, Operator, as_changes_at
from sparkcq.runtime.operators.window import element_interval

#: where each side's element starts and ends (the left's ``_ls``/``_le``, the right's
#: ``_rs``/``_re``), so the join condition's columns and these never clash
STARTS, ENDS = ("_ls", "_rs"), ("_le", "_re")


class IntervalJoinOperator(Operator):
    """Pairs elements of two windowed streams by their intervals (see module)."""

    def __init__(self, node: IntervalJoin, rt: Runtime):
        super().__init__(node, rt)
        self.interval_join = node
        self.views = SqlViews(rt.spark, "ijoin")
        # a source stream's events are taken in as they arrive (``Slice.arrivals``): their
        # elements start at or after their time, so they wait in the state, not in a buffer
        self.reads_arrivals = [isinstance(c, StreamScan) for c in node.children]
        self.names = [[f.name for f in node.join.children[i].schema.fields] for i in (0, 1)]
        self.keys = [[k[i] for k in node.join.equi_keys] for i in (0, 1)]
        self.condition = node.join.condition or "TRUE"
        self.events_sql = [self.build_events_sql(i) for i in (0, 1)]
        self.sides = [self.state(StructType([
            *node.join.children[i].schema.fields,
            StructField(STARTS[i], LongType()), StructField(ENDS[i], LongType())]),
            ("left", "right")[i] + "-elements") for i in (0, 1)]

    # -- SQL text, built once ----------------------------------------------------------------
    def build_events_sql(self, i: int) -> str:
        """Side ``i``'s new events (view ``{inp}``) through the filters and projections
        above its window: its columns and ``_t``.
        """
        _window, steps = self.interval_join.side(i)
        src = f"(SELECT * FROM {{inp}} WHERE {q(D)} > 0)"  # a stream edge: one event per row
        for step in steps:
            if isinstance(step, Filter):
                src = f"(SELECT * FROM {src} WHERE {step.predicate})"
            else:
                assert isinstance(step, Project)
                exprs = ", ".join(f"{sql} AS {q(name)}" for name, sql in step.exprs)
                src = f"(SELECT {exprs}, {q(T)} FROM {src})"
        return f"SELECT {', '.join(map(q, self.names[i]))}, {q(T)} FROM {src}"

    def elements(self, i: int, events: DataFrame) -> DataFrame:
        """Side ``i``'s new events as elements: its columns with the interval's start and
        end (``element_interval``, as its window would give them); empty ones dropped.
        """
        window, _steps = self.interval_join.side(i)
        start, end = element_interval(window.spec, col(T))
        assert end is not None  # the rule takes windows whose elements end
        rows = self.views.sql(self.events_sql[i], inp=events)
        return rows.select(*[col(n) for n in self.names[i]], start.alias(STARTS[i]),
                           end.alias(ENDS[i])).where(col(ENDS[i]) > col(STARTS[i]))

    def side(self, i: int, old: DataFrame | None, events: DataFrame | None,
             lo: int) -> DataFrame | None:
        """Side ``i``'s elements that may still start or end a pair at or after ``lo``: the
        kept ones (``old``) and those of the new ``events``, hash-partitioned by the equi-join
        keys and sorted by them within each partition, so the probes merge-join the frames
        with no shuffle and no sort of their own (a hash join builds a table per probe that
        cannot spill: many joins in one commit ran out of memory).

        Built with DataFrame calls, not SQL text: a subquery's name on the columns makes
        Spark 4.3 forget the partitioning of a copy of the cached frame (the four probes
        read it in one plan) or of a union with it, and every probe shuffled again.
        """
        names = [*self.names[i], STARTS[i], ENDS[i]]
        kept = None
        if old is not None:  # partitioned and sorted already
            kept = old.select(*[col(n).alias(n) for n in names])
            if lo != TIME_MIN:
                kept = kept.where(col(ENDS[i]) >= F.lit(lo))
        if events is None:
            return kept
        new = self.elements(i, events)
        keys = [col(k) for k in self.keys[i]]
        if keys:
            new = new.repartition(self.rt.partitions, *keys)
        side = new if kept is None else kept.unionByName(new)
        return side.sortWithinPartitions(*keys) if keys else side

    def changes_sql(self, lo: int, hi: int) -> str:
        """The changes of the cycle ``[lo, hi)``, four probes: +1 at the later start, -1 at
        the earlier end, each pair found once (see module).
        """
        ls, rs = STARTS
        le, re_ = ENDS
        cols = ", ".join(map(q, [*self.names[0], *self.names[1]]))

        def within(column: str) -> str:
            bounds = [f"{column} >= {lo}" if lo != TIME_MIN else "",
                      f"{column} < {hi}" if hi != TIME_MAX else ""]
            return " AND ".join(b for b in bounds if b) or "TRUE"

        probes = [  # (instant, change, band of the pair)
            (ls, 1, f"{within(ls)} AND {rs} <= {ls} AND {re_} > {ls}"),
            (rs, 1, f"{within(rs)} AND {ls} < {rs} AND {le} > {rs}"),
            (le, -1, f"{within(le)} AND {re_} >= {le} AND {rs} < {le}"),
            (re_, -1, f"{within(re_)} AND {le} > {re_} AND {ls} < {re_}"),
        ]
        hint = "/*+ MERGE(r) */"  # both sides are frames of the cycle: no broadcast
        return " UNION ALL ".join(
            f"SELECT {hint} {cols}, {at} AS {q(T)}, CAST({sign} AS BIGINT) AS {q(D)} "
            f"FROM {{left}} AS l JOIN {{right}} AS r ON ({self.condition}) AND {band}"
            for at, sign, band in probes)

    # -- the cycle ---------------------------------------------------------------------------
    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        left, right = inputs
        # the safe time is the slower input's; a faster input's events beyond it are no
        # trouble (their elements start at or after ``hi``: kept, probed in a later cycle),
        # so no input waits in a buffer
        # from the last safe time (its position; at first the earliest input's lo)
        lo = self.progress.position
        lo = lo if lo is not None else min(left.lo, right.lo)
        hi = min(left.hi, right.hi)
        frames: list[DataFrame | None] = []
        for i, inp in enumerate((left, right)):
            events = inp.arrivals if self.reads_arrivals[i] else inp.df
            side = self.side(i, self.sides[i].get(), events, lo)
            if events is not None and side is not None:
                side = self.rt.cache_for_cycle(side)
                if hi != TIME_MAX:
                    self.sides[i].adopt(side)
            frames.append(side)
        if hi == TIME_MAX:
            for state in self.sides:
                state.set(None)
        if frames[0] is None or frames[1] is None:
            return Slice(None, lo, hi)
        changes = self.views.sql(self.changes_sql(lo, hi), left=frames[0], right=frames[1])
        return Slice(changes, lo, hi)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The pairs valid just before ``at`` (the operator's position): both elements
        started before it and neither ended before it.
        """
        left, right = (s.get() for s in self.sides)
        if left is None or right is None:
            return None
        ls, rs = STARTS
        le, re_ = ENDS
        cols = ", ".join(map(q, [*self.names[0], *self.names[1]]))
        pairs = self.views.sql(
            f"SELECT {cols} FROM {{left}} AS l JOIN {{right}} AS r ON ({self.condition}) "
            f"AND {ls} < {at} AND {rs} < {at} AND {le} >= {at} AND {re_} >= {at}",
            left=left, right=right)
        return as_changes_at(pairs, [*self.names[0], *self.names[1]], None, at)
