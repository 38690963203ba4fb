"""UNION ALL: the bag union of its inputs, released up to the slowest input's watermark."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StructField, StructType

from sparkcq.model.columns import D, T
from sparkcq.plan.nodes import PlanNode
from sparkcq.runtime.frames import Runtime, Slice, StateFrame, split_at, union_all
from sparkcq.runtime.operators.base import CycleContext, Operator


class AlignedInputs:
    """Per-input buffers that hold changes until every input's watermark has passed them.

    An operator with several inputs may only process time below the minimum of their
    watermarks (its safe time); changes of a faster input beyond it wait here, in Spark
    (state frames of the operator's).
    """

    def __init__(self, op: Operator, inputs: tuple[PlanNode, ...]):
        self.op = op
        self.buffers: list[StateFrame] = []
        for i, node in enumerate(inputs):
            schema = StructType([*node.schema.fields, StructField(T, LongType()),
                                 StructField(D, LongType())])
            self.buffers.append(op.state(schema, f"input-{i}"))

    def align(self, inputs: list[Slice], since: int | None) -> list[Slice]:
        """Slices of all inputs cut at the common safe time [lo, hi): from where the
        operator stands (``since``, its position; at first the earliest input's lo).
        """
        hi = min(s.hi for s in inputs)
        lo = since if since is not None else min(s.lo for s in inputs)
        out = []
        for s, buf in zip(inputs, self.buffers, strict=True):
            if s.df is None and (buf.rows == 0 or (buf.min_t is not None and buf.min_t >= hi)):
                out.append(Slice(None, lo, hi))
                continue
            merged = union_all([buf.get(), s.df])
            assert merged is not None
            if s.hi <= hi and buf.rows == 0:
                out.append(Slice(merged, lo, hi))
                continue
            merged = self.op.rt.cache_for_cycle(merged)
            due, later = split_at(merged, hi)
            buf.set(later)
            out.append(Slice(due, lo, hi))
        return out


class UnionOperator(Operator):
    """UNION ALL of streams or relations, columns matched by position."""

    contents_from_inputs = True

    def __init__(self, node: PlanNode, rt: Runtime):
        super().__init__(node, rt)
        self.names = [f.name for f in node.schema.fields]
        self.aligned = AlignedInputs(self, node.children)

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        parts = self.aligned.align(inputs, self.progress.position)
        frames = []
        for part in parts:
            if part.df is None:
                continue
            frames.append(part.df.toDF(*self.names, T, D))
        lo, hi = parts[0].lo, parts[0].hi
        return Slice(union_all(frames), lo, hi)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The bag union of the inputs' contents."""
        return union_all([c.toDF(*self.names, T, D) for c in children if c is not None])


