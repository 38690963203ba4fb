"""Windows: stream to relation, O(1) work per event whatever the slide."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, IntegerType, LongType, StructField, StructType

from sparkcq.model.columns import DELETED, FIRST, KEY_HASH, NEW, D, T
from sparkcq.plan.nodes import (
    EACH_CHUNK_ONCE,
    CumulateSpec,
    CutSpec,
    IntervalJoin,
    KeyedSpec,
    RangeSpec,
    ResolvedWindow,
    RowsSpec,
    SessionSpec,
    UnboundedSpec,
)
from sparkcq.plan.nodes import Window as WindowNode
from sparkcq.runtime.frames import Runtime, Slice, bound, col, q, sql_column, union_all
from sparkcq.runtime.operators.base import CycleContext, FutureBuffer, Operator, as_changes_at


def _events(df: DataFrame) -> DataFrame:
    """The arrivals on an input edge: each +n change becomes n instants (-n are ignored)."""
    arrivals = df.where(col(D) > 0)
    return arrivals.withColumn(D, F.explode(F.array_repeat(F.lit(1).cast("long"),
                                                           col(D).cast("int")))).drop(D)


def element_interval(spec: ResolvedWindow) -> tuple[Column, Column | None]:
    """Start and end (None: never) of the element of a time window for an event at its
    instant ``_t`` (``element_interval_sql``).
    """
    start, end = element_interval_sql(spec, q(T))
    return sql_column(start), None if end is None else sql_column(end)


def element_interval_sql(spec: ResolvedWindow, t: str) -> tuple[str, str | None]:
    """SQL for the start and end (None: never) of the element of a time window for an
    event at ``t``; a hopping window aligns both ends to the slide grid instead of copying
    the event once per window.
    """
    if isinstance(spec, UnboundedSpec):
        return t, None
    if isinstance(spec, RangeSpec):
        if spec.slide:
            return ceil_to_sql(t, spec.slide), ceil_to_sql(f"({t} + {spec.size})", spec.slide)
        return t, f"({t} + {spec.size})"
    if isinstance(spec, CutSpec):
        cut = f"({t} - pmod({t}, {spec.by}) + {spec.by})"
        if spec.chunks == EACH_CHUNK_ONCE:
            return cut, None
        return cut, f"({cut} + {spec.by * spec.chunks})"
    if isinstance(spec, CumulateSpec):
        cut = f"({t} - pmod({t}, {spec.step}) + {spec.step})"
        return cut, f"({t} - pmod({t}, {spec.size}) + {spec.size + spec.step})"
    msg = f"unsupported window {spec}"
    raise TypeError(msg)


def ceil_to_sql(t: str, step: int) -> str:
    """SQL for the smallest multiple of ``step`` not below ``t``."""
    return f"({t} + pmod(-{t}, {step}))"


def element_span(spec: ResolvedWindow) -> int | None:
    """The longest an element of a time window lasts (None: it never ends)."""
    if isinstance(spec, RangeSpec):
        return spec.size + (spec.slide or 0)
    if isinstance(spec, CutSpec):
        return spec.by * spec.chunks if spec.chunks != EACH_CHUNK_ONCE else None
    if isinstance(spec, CumulateSpec):
        return spec.size
    return None


def side_span(side: WindowNode | IntervalJoin) -> int | None:
    """The longest an element of an interval join's side lasts: its window's, or for a side
    that reads the pairs of a join below, that join's shorter side's (a pair ends with the
    earlier of its elements). None: its elements never end.
    """
    if isinstance(side, WindowNode):
        return element_span(side.spec)
    spans = [s for i in (0, 1) if (s := side_span(side.side(i)[0])) is not None]
    return min(spans, default=None)


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

    def interval(self) -> tuple[Column, Column | None]:
        """Start and end (None: never) of the element for an event at ``_t``."""
        return element_interval(self.spec)

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        produced = None
        if inp.df is not None:
            names = [f.name for f in self.node.schema.fields]
            events = _events(inp.df)
            start, end = self.interval()
            if self.progress.waiting:  # events before lo (``with_start``): live from lo on
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

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        if inp.df is None:
            return Slice(None, inp.lo, inp.hi)
        new = _events(inp.df).withColumn(NEW, F.lit(True))
        old = self.last.get()
        rows = union_all([
            old.withColumn(NEW, F.lit(False).cast(BooleanType())) if old is not None else None,
            new,
        ])
        assert rows is not None
        order = [col(T).asc(), *[col(c).asc_nulls_first() for c in self.order_cols]]
        w = Window.partitionBy(*[col(c) for c in self.spec.partition_by]).orderBy(*order)
        ranked = self.rt.cache_for_cycle(
            rows.withColumn("_leave", F.lead(col(T), self.spec.rows).over(w)))
        plus = ranked.where(col(NEW)).select(*[col(n) for n in self.names], col(T),
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



class KeyedWindowOperator(Operator):
    """A keyed stream read as a relation (``KeyedSpec``): a row lives from its event time
    until the next row or delete of its key.

    As ``[PARTITION BY key ROWS 1]`` (``RowsWindowOperator``), with a delete one more row
    of its key that ends the row before it and is no element itself; at one instant a
    key's deletes come before its rows, then rows by value, so a delete and a row at the
    same time are an update (the row stays). But a cycle pays for the keys it touches, not
    for the table: the state (each key's current row) is hash-partitioned by a hash of
    the key and only joined, not shuffled or sorted, with the cycle's first change of each
    key, which closes that key's row; only the cycle's own events are ranked.
    """

    def __init__(self, node: WindowNode, rt: Runtime):
        super().__init__(node, rt)
        assert isinstance(node.spec, KeyedSpec)
        self.key = list(node.spec.key)
        self.names = [f.name for f in node.schema.fields]
        self.order_cols = [f.name for f in node.schema.fields
                           if "map<" not in f.dataType.simpleString()]
        self.current = self.state(
            StructType([*node.schema.fields, StructField(T, LongType()),
                        StructField(KEY_HASH, IntegerType())]), "current-rows",
            partition_by=KEY_HASH)

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        if inp.df is None:
            return Slice(None, inp.lo, inp.hi)
        rows = _events(inp.df).withColumn(DELETED, F.lit(False))
        deletes = inp.df.where(col(D) < 0).drop(D).withColumn(DELETED, F.lit(True))
        new = self.rt.partition_by(rows.unionByName(deletes).withColumn(
            KEY_HASH, F.hash(*[col(k) for k in self.key])), col(KEY_HASH))
        order = [col(T).asc(), col(DELETED).desc(),
                 *[col(c).asc_nulls_first() for c in self.order_cols]]
        w = Window.partitionBy(col(KEY_HASH), *[col(k) for k in self.key]).orderBy(*order)
        ranked = self.rt.cache_for_cycle(new.withColumn("_leave", F.lead(col(T), 1).over(w)))
        names = [col(n) for n in self.names]
        plus = ranked.where(~col(DELETED)).select(*names, col(T), F.lit(1).cast("long").alias(D))
        minus = ranked.where(col("_leave").isNotNull() & ~col(DELETED)).select(
            *names, col("_leave").alias(T), F.lit(-1).cast("long").alias(D))
        last = ranked.where(col("_leave").isNull() & ~col(DELETED)).select(
            *names, col(T), col(KEY_HASH))
        old = self.current.get()
        if old is not None:
            # the key's first change of the cycle (all after its current row) closes it
            firsts = ranked.groupBy(col(KEY_HASH), *[col(k) for k in self.key]).agg(
                F.min(col(T)).alias(FIRST)).select(
                col(KEY_HASH).alias("_fh"), *[col(k).alias(f"_f{i}")
                                               for i, k in enumerate(self.key)], col(FIRST))
            same = col(KEY_HASH) == col("_fh")
            for i, k in enumerate(self.key):
                same = same & col(k).eqNullSafe(col(f"_f{i}"))
            # no broadcast: it would compute ``firsts`` in a Spark job of its own; both
            # sides are partitioned by the key hash, so the join shuffles neither
            met = self.rt.cache_for_cycle(old.join(firsts.hint("shuffle_hash"), same, "left"))
            minus = minus.unionByName(met.where(col(FIRST).isNotNull()).select(
                *names, col(FIRST).alias(T), F.lit(-1).cast("long").alias(D)))
            last = met.where(col(FIRST).isNull()).select(
                *names, col(T), col(KEY_HASH)).unionByName(last)
        self.current.set(last)
        out = plus.unionByName(minus)
        # a row followed at its own instant by another of its key lives for no time
        out = out.groupBy(*names, col(T)).agg(F.sum(col(D)).alias(D))
        return Slice(out.where(col(D) != 0), inp.lo, inp.hi)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """Each key's current row is a live element."""
        current = self.current.get()
        return None if current is None else as_changes_at(current, self.names, None, at)


class SessionWindowOperator(Operator):
    """``[SESSION g]`` and ``[PARTITION BY k SESSION g]``: an event's element lives from its
    time until ``g`` after the last event of its session, the events of its partition each
    at most ``g`` after the one before (as Spark's ``session_window`` and Flink's
    ``SESSION`` merge windows that touch).

    An element starts at its event, known on arrival: its +1 is emitted at once. Its end is
    known once no event can still extend the session, when the session's end ``last + g``
    is below the watermark ``hi`` (every event before ``hi`` has arrived): then every
    element of the session gets its -1 there. A late but allowed event that bridges two
    sessions arrives before the watermark passes it, so both are still open and merge
    exactly. State: the events of the open sessions (ordered by time, then values).
    """

    def __init__(self, node: WindowNode, rt: Runtime):
        super().__init__(node, rt)
        assert isinstance(node.spec, SessionSpec)
        self.spec = node.spec
        self.names = [f.name for f in node.schema.fields]
        self.open = self.state(StructType([*node.schema.fields, StructField(T, LongType())]),
                               "open-sessions")

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        old = self.open.get()
        earliest_end = None if self.open.min_t is None else self.open.min_t + self.spec.gap
        if inp.df is None and (old is None or (earliest_end is not None
                                               and earliest_end >= inp.hi)):
            return Slice(None, inp.lo, inp.hi)  # nothing new, no session can end yet
        names = [col(n) for n in self.names]
        rows = union_all([
            old.withColumn(NEW, F.lit(False).cast(BooleanType())) if old is not None else None,
            _events(inp.df).withColumn(NEW, F.lit(True)) if inp.df is not None else None,
        ])
        assert rows is not None
        part = [col(c) for c in self.spec.partition_by]
        w = Window.partitionBy(*part).orderBy(col(T).asc())
        starts = F.when(F.lag(col(T)).over(w).isNull()
                        | (col(T) - F.lag(col(T)).over(w) > F.lit(self.spec.gap)), 1
                        ).otherwise(0)
        session = F.sum(starts).over(w.rowsBetween(Window.unboundedPreceding,
                                                   Window.currentRow))
        rows = rows.withColumn("_session", session)
        end = F.max(col(T)).over(Window.partitionBy(*part, col("_session"))) + F.lit(
            self.spec.gap)
        ended = self.rt.cache_for_cycle(rows.withColumn("_end", end))
        plus = ended.where(col(NEW)).select(*names, col(T), F.lit(1).cast("long").alias(D))
        minus = ended.where(col("_end") < bound(inp.hi)).select(
            *names, col("_end").alias(T), F.lit(-1).cast("long").alias(D))
        self.open.set(ended.where(col("_end") >= bound(inp.hi)).select(*names, col(T)))
        return Slice(plus.unionByName(minus), inp.lo, inp.hi)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The events of the open sessions are the live elements."""
        live = self.open.get()
        return None if live is None else as_changes_at(live, self.names, None, at)
