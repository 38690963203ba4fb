"""Grouped aggregation of a stream per instant: stateless, one grouping per cycle.

The input is a stream of instants (an RSTREAM's snapshots, joined with tables): every row
is an event at ``_t``. The output holds, at each instant, one row per group of the rows
at that instant, so it is snapshot by snapshot what the aggregate gives on the relation
the snapshots came from. Only ``sum``, ``count``, ``min`` and ``max`` (the calls that
combine partial results); a cycle's rows are grouped by (keys, instant) in one exchange,
and nothing is kept: an instant is complete once its cycle ran, as the RSTREAM below
emits each instant once, whole.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from sparkcq.model.columns import D, T
from sparkcq.plan.nodes import InstantAggregate
from sparkcq.runtime.frames import Runtime, Slice, col
from sparkcq.runtime.operators.base import CycleContext
from sparkcq.runtime.operators.stateless import StatelessOperator

_COMBINE = {"sum": F.sum, "min": F.min, "max": F.max}


class InstantAggregateOperator(StatelessOperator):
    """GROUP BY the keys and the instant over a cycle's rows (see the module docstring)."""

    def __init__(self, node: InstantAggregate, rt: Runtime):
        super().__init__(node, rt)
        self.keys = [col(k) for k in node.keys]
        self.calls: list[Column] = [_COMBINE[a.func](col(a.arg or "")).alias(a.name)
                                    for a in node.aggs]

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        if inp.df is None:
            return Slice(None, inp.lo, inp.hi)
        out = inp.df.groupBy(*self.keys, col(T)).agg(*self.calls)
        names = [col(f.name) for f in self.node.schema.fields]
        return Slice(out.select(*names, col(T), F.lit(1).cast("long").alias(D)), inp.lo, inp.hi)
