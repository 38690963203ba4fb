"""Windows: stream to relation (DESIGN 2.2), O(1) work per event whatever the slide."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StructField, StructType

from sparkcq.plan.nodes import (
    CutSpec,
    KeyedSpec,
    RangeSpec,
    ResolvedWindow,
    RowsSpec,
    UnboundedSpec,
)
from sparkcq.plan.nodes import Window as WindowNode
from sparkcq.runtime.frames import D, Runtime, Slice, T, ceil_to, col, floor_to, union_all
from sparkcq.runtime.operators.base import FutureBuffer, Operator, as_changes_at

_NEW = "_new"
_DEL = "_del"  # a keyed stream's delete (a row of its key's partition, no element)


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
    row of its partition arrives; and a keyed stream's rows (``KeyedSpec``): a row leaves
    when the next row or delete of its key arrives.

    State is the last n rows of every partition. Rows are ordered by event time, then by
    their values, so ties resolve the same way whatever the cycle boundaries. A keyed
    stream is ``[PARTITION BY key ROWS 1]`` where a delete (a ``_d`` = -1 row of the scan's
    edge) is one more row of its key's partition: it ends the row before it and is no
    element itself; at one instant a key's deletes come before its rows, so a delete and a
    row at the same time replace the key's row by the new one (an update sent as a delete
    and an insert).
    """

    def __init__(self, node: WindowNode, rt: Runtime):
        super().__init__(node, rt)
        spec = node.spec
        assert isinstance(spec, RowsSpec | KeyedSpec)
        self.keyed = isinstance(spec, KeyedSpec)
        self.rows = 1 if isinstance(spec, KeyedSpec) else spec.rows
        self.partition_by = spec.key if isinstance(spec, KeyedSpec) else spec.partition_by
        self.names = [f.name for f in node.schema.fields]
        self.order_cols = [f.name for f in node.schema.fields
                           if "map<" not in f.dataType.simpleString()]
        self.last = self.state(StructType([*node.schema.fields, StructField(T, LongType())]),
                               "last-rows")

    def arrivals(self, df: DataFrame) -> DataFrame:
        """The input's rows, ``_new`` true; a keyed stream's deletes flagged ``_del``."""
        if not self.keyed:
            return _events(df).withColumn(_NEW, F.lit(True))
        inserts = _events(df).withColumn(_DEL, F.lit(False))
        deletes = df.where(col(D) < 0).drop(D).withColumn(_DEL, F.lit(True))
        return inserts.unionByName(deletes).withColumn(_NEW, F.lit(True))

    def step(self, inputs: list[Slice]) -> Slice:  # noqa: D102
        (inp,) = inputs
        if inp.df is None:
            return Slice(None, inp.lo, inp.hi)
        new = self.arrivals(inp.df)
        old = self.last.get()
        if old is not None:
            old = old.withColumn(_NEW, F.lit(False).cast(BooleanType()))
            if self.keyed:
                old = old.withColumn(_DEL, F.lit(False))
        rows = union_all([old, new])
        assert rows is not None
        order = [col(T).asc(), *([col(_DEL).desc()] if self.keyed else []),
                 *[col(c).asc_nulls_first() for c in self.order_cols]]
        w = Window.partitionBy(*[col(c) for c in self.partition_by]).orderBy(*order)
        ranked = self.rt.cache_for_cycle(
            rows.withColumn("_leave", F.lead(col(T), self.rows).over(w)))
        element = ~col(_DEL) if self.keyed else F.lit(True)
        plus = ranked.where(col(_NEW) & element).select(*[col(n) for n in self.names], col(T),
                                                        F.lit(1).cast("long").alias(D))
        minus = ranked.where(col("_leave").isNotNull() & element).select(
            *[col(n) for n in self.names], col("_leave").alias(T), F.lit(-1).cast("long").alias(D))
        self.last.set(ranked.where(col("_leave").isNull() & element).select(
            *[col(n) for n in self.names], col(T)))
        out = plus.unionByName(minus)
        # a row whose n-th successor has the same instant lives for an empty interval
        out = out.groupBy(*[col(n) for n in self.names], col(T)).agg(F.sum(col(D)).alias(D))
        return Slice(out.where(col(D) != 0), inp.lo, inp.hi)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The last n rows of each partition are the live elements."""
        last = self.last.get()
        return None if last is None else as_changes_at(last, self.names, None, at)
