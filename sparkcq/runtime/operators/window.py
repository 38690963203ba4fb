"""Windows: stream to relation (DESIGN 2.2), O(1) work per event whatever the slide."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StructField, StructType

from sparkcq.plan.nodes import CutSpec, RangeSpec, ResolvedWindow, RowsSpec, UnboundedSpec
from sparkcq.plan.nodes import Window as WindowNode
from sparkcq.runtime.frames import D, Runtime, Slice, T, ceil_to, col, floor_to, union_all
from sparkcq.runtime.operators.base import FutureBuffer, Operator, as_changes_at

_NEW = "_new"


def _events(df: DataFrame) -> DataFrame:
    """The arrivals on an input edge: each +n change becomes n instants (-n are ignored)."""
    arrivals = df.where(col(D) > 0)
    return arrivals.withColumn(D, F.explode(F.array_repeat(F.lit(1).cast("long"),
                                                           col(D).cast("int")))).drop(D)


def element_interval(spec: ResolvedWindow, t: Column) -> tuple[Column, Column | None]:
    """Start and end (None: never) of the element of a time window for an event at ``t``;
    a hopping window aligns both ends to the slide grid instead of copying the event once
    per window.
    """
    if isinstance(spec, UnboundedSpec):
        return t, None
    if isinstance(spec, RangeSpec):
        if spec.slide:
            return ceil_to(t, spec.slide), ceil_to(t + F.lit(spec.size), spec.slide)
        return t, t + F.lit(spec.size)
    if isinstance(spec, CutSpec):
        cut = floor_to(t, spec.by) + F.lit(spec.by)
        return cut, cut + F.lit(spec.by * spec.chunks)
    msg = f"unsupported window {spec}"
    raise TypeError(msg)


class TimeWindowOperator(Operator):
    """RANGE, RANGE ... SLIDE, NOW, UNBOUNDED and CUT windows.

    Each event maps to one +1 change at the start of its interval and one -1 change at its
    end, computed with two column expressions; a hopping window aligns both ends to the slide
    grid instead of copying the event once per window. The -1 changes wait in a future
    buffer until the watermark reaches them, so the buffer is the set of live elements.
    """

    def __init__(self, node: WindowNode, rt: Runtime):
        super().__init__(node, rt)
        self.spec = node.spec
        schema = StructType([*node.schema.fields, StructField(T, LongType()),
                             StructField(D, LongType())])
        self.future = FutureBuffer(self, schema)

    def interval(self, t: Column) -> tuple[Column, Column | None]:
        """Start and end (None: never) of the element for an event at ``t``."""
        return element_interval(self.spec, t)

    def step(self, inputs: list[Slice]) -> Slice:  # noqa: D102
        (inp,) = inputs
        produced = None
        if inp.df is not None:
            names = [f.name for f in self.node.schema.fields]
            events = _events(inp.df)
            start, end = self.interval(col(T))
            if self.seeded_inputs:  # events before lo (``with_start``): live from lo on
                start = F.greatest(start, F.lit(inp.lo))
            events = events.select(*[col(n) for n in names], start.alias("_s"),
                                   (end if end is not None else F.lit(None).cast("long"))
                                   .alias("_e"))
            events = events.where(col("_e").isNull() | (col("_e") > col("_s")))
            plus = events.select(*[col(n) for n in names], col("_s").alias(T),
                                 F.lit(1).cast("long").alias(D))
            produced = plus
            if end is not None:
                minus = events.select(*[col(n) for n in names], col("_e").alias(T),
                                      F.lit(-1).cast("long").alias(D))
                produced = plus.unionByName(minus)
        return self.future.emit(produced, inp.lo, inp.hi)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """Live elements: every one of them still has its -1 waiting in the future buffer."""
        if isinstance(self.spec, UnboundedSpec):
            return super().contents(children, at)
        buffered = self.future.frame.get()
        if buffered is None:
            return None
        names = [col(f.name) for f in self.node.schema.fields]
        live = buffered.groupBy(*names).agg((-F.sum(col(D))).alias(D)).where(col(D) > 0)
        return live.select(*names, F.lit(at).cast("long").alias(T), col(D))


class RowsWindowOperator(Operator):
    """``[ROWS n]`` and ``[PARTITION BY k ROWS n]``: an element leaves when the n-th later
    row of its partition arrives.

    State is the last n rows of every partition. Rows are ordered by event time, then by
    their values, so ties resolve the same way whatever the cycle boundaries.
    """

    def __init__(self, node: WindowNode, rt: Runtime):
        super().__init__(node, rt)
        assert isinstance(node.spec, RowsSpec)
        self.spec = node.spec
        self.names = [f.name for f in node.schema.fields]
        self.order_cols = [f.name for f in node.schema.fields
                           if "map<" not in f.dataType.simpleString()]
        self.last = self.state(StructType([*node.schema.fields, StructField(T, LongType())]),
                               "last-rows")

    def step(self, inputs: list[Slice]) -> Slice:  # noqa: D102
        (inp,) = inputs
        if inp.df is None:
            return Slice(None, inp.lo, inp.hi)
        new = _events(inp.df).withColumn(_NEW, F.lit(True))
        old = self.last.get()
        rows = union_all([
            old.withColumn(_NEW, F.lit(False).cast(BooleanType())) if old is not None else None,
            new,
        ])
        assert rows is not None
        order = [col(T).asc(), *[col(c).asc_nulls_first() for c in self.order_cols]]
        w = Window.partitionBy(*[col(c) for c in self.spec.partition_by]).orderBy(*order)
        ranked = self.rt.cache_for_cycle(
            rows.withColumn("_leave", F.lead(col(T), self.spec.rows).over(w)))
        plus = ranked.where(col(_NEW)).select(*[col(n) for n in self.names], col(T),
                                               F.lit(1).cast("long").alias(D))
        minus = ranked.where(col("_leave").isNotNull()).select(
            *[col(n) for n in self.names], col("_leave").alias(T), F.lit(-1).cast("long").alias(D))
        self.last.set(ranked.where(col("_leave").isNull()).select(*[col(n) for n in self.names],
                                                                   col(T)))
        out = plus.unionByName(minus)
        # a row whose n-th successor has the same instant lives for an empty interval
        out = out.groupBy(*[col(n) for n in self.names], col(T)).agg(F.sum(col(D)).alias(D))
        return Slice(out.where(col(D) != 0), inp.lo, inp.hi)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The last n rows of each partition are the live elements."""
        last = self.last.get()
        return None if last is None else as_changes_at(last, self.names, None, at)
