"""A stream as a query with ``on_error='skip'`` reads it: without the rows it raised on.

When such a query fails a cycle, the supervisor (``runtime/skipping.py``) finds the input
rows its row-level expressions raise on, sends them to the stream's dead letters with the
error, and adds them here; the cycle then runs again. From then on this operator leaves
every equal row out of the query's input (an expression raises on equal values again),
in this cycle and later ones. The rows left out are state in Spark, saved by checkpoints.
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkcq.plan.nodes import Quarantine
from sparkcq.runtime.frames import Runtime, Slice, col, union_all
from sparkcq.runtime.operators.base import CycleContext, Operator


class QuarantineOperator(Operator):
    """Leaves the quarantined rows out of its stream; see the module docstring."""

    def __init__(self, node: Quarantine, rt: Runtime):
        super().__init__(node, rt)
        self.names = [f.name for f in node.schema.fields]
        self.rows = self.state(node.schema, "rows-left-out")

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        left_out = self.rows.get()
        if inp.df is None or left_out is None:
            return Slice(inp.df, inp.lo, inp.hi, ended_at=inp.ended_at)
        out = F.broadcast(left_out.select(*[col(n).alias(f"_q{i}")
                                            for i, n in enumerate(self.names)]))
        same = reduce(lambda a, b: a & b, [inp.df[n].eqNullSafe(out[f"_q{i}"])
                                           for i, n in enumerate(self.names)])
        return Slice(inp.df.join(out, same, "left_anti"), inp.lo, inp.hi,
                     ended_at=inp.ended_at)

    def leave_out(self, rows: DataFrame) -> None:
        """From now on, leave rows equal to ``rows`` (the stream's columns) out."""
        self.rows.set(union_all([self.rows.get(), rows.select(*[col(n) for n in self.names])]))

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:  # noqa: D102
        return self.step([Slice(children[0], at, at + 1)], CycleContext()).df
