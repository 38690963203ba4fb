"""Count and key cuts: chunks whose cut points are rows of the stream.

``[CUT EVERY n ROWS]`` cuts the stream, in event-time order (ties by value, as ``[ROWS n]``
orders them), into chunks of n rows; ``[CUT ON k]`` starts a new chunk wherever ``k``
differs from the previous row's. A chunk is complete when the first row of the next chunk
is seen: that row's instant is the chunk's **cut point**, from which its rows are valid for
one chunk, or for ``WINDOW m CHUNKS``, until the first row of the chunk m later:

    CUT EVERY 2 ROWS over rows at 1, 2, 4, 7, 9:  chunks {1, 2} {4, 7} {9}
    rows at 1 and 2 are valid on [4, 9); rows at 4 and 7 from 9 until a sixth row comes.

At the end of the input the last chunk is complete too, as if the next chunk started where
the stream ended: one time unit after its last row, or at the watermark the stream had
reached (its last heartbeat) if that is later, since no row could have come before it. So
the last chunk's rows are valid from then on, and the chunk before it (one chunk) ends
there. Above, if the input ends after the row at 9: rows at 4 and 7 are valid on [9, 10),
the row at 9 from 10 on; had a heartbeat at 15 come before the end, on [9, 15) and from 15.
A cut below the watermark would change output already final, and a query started at that
watermark from the relation's contents would keep rows that left before its start.

Read by a table function (``EACH_CHUNK_ONCE``), a chunk's rows enter at its cut and never
leave: each chunk once, as a stream, so an equal row leaving one chunk at the instant it
enters the next cannot cancel it. Then only the last chunk's rows wait as state.

A chunk's rows thus wait (as state) until the next chunk starts, and stay until the chunk m
later starts: the state is the rows of the last m + 1 chunks, numbered by their place in
the stream (``_i``) and their chunk (``_c``), which the next cycle's rows continue. The
order is total and only rows below the safe time reach a window, so the chunks do not
depend on how input was split into cycles. Cutting needs the stream's one order, so the
numbering runs in one Spark task; the rows it touches are the cycle's and the state's.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StructField, StructType

from sparkcq.model.columns import CHUNK, INDEX, NEW, D, T
from sparkcq.model.time import TIME_MAX
from sparkcq.plan.nodes import EACH_CHUNK_ONCE, CountCutSpec, KeyCutSpec
from sparkcq.plan.nodes import Window as WindowNode
from sparkcq.runtime.frames import Runtime, Slice, col, union_all
from sparkcq.runtime.operators.base import CycleContext, Operator, as_changes_at


class ChunkCutOperator(Operator):
    """``[CUT EVERY n ROWS]`` and ``[CUT ON k]``, each with ``WINDOW m CHUNKS``."""

    def __init__(self, node: WindowNode, rt: Runtime):
        super().__init__(node, rt)
        assert isinstance(node.spec, CountCutSpec | KeyCutSpec)
        self.spec = node.spec
        self.names = [f.name for f in node.schema.fields]
        self.order_cols = [f.name for f in node.schema.fields
                           if "map<" not in f.dataType.simpleString()]
        self.pending = self.state(StructType([
            *node.schema.fields, StructField(T, LongType()), StructField(INDEX, LongType()),
            StructField(CHUNK, LongType())]), "chunks")

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        # the input ends in this slice: its last chunk is complete (see the module)
        ends = inp.hi == TIME_MAX and inp.lo != TIME_MAX
        if inp.df is None and not (ends and self.pending.get() is not None):
            return Slice(None, inp.lo, inp.hi)
        rows = self.rt.cache_for_cycle(self.numbered(inp.df))
        last_before = F.coalesce(F.max(F.when(~col(NEW), col(INDEX))).over(Window.partitionBy()),
                                 F.lit(-1).cast("long"))
        firsts = rows.groupBy(col(CHUNK)).agg(
            F.min_by(col(T), col(INDEX)).alias("_ct"), F.min(col(INDEX)).alias("_fi"))
        if ends:  # the next chunk's first row, as if it came where the stream ended
            # an input that does not tell where it ended (a union of streams): where this
            # operator stood, so no change falls below output already final
            ended_at = inp.lo if inp.ended_at is None else inp.ended_at
            firsts = firsts.unionByName(rows.agg(
                (F.max(col(CHUNK)) + 1).alias(CHUNK),
                F.greatest(F.max(col(T)) + 1, F.lit(ended_at).cast("long")).alias("_ct"),
                (F.max(col(INDEX)) + 1).alias("_fi")))
        # a chunk's cut point: the first row of the next chunk; its end: m chunks later
        start = firsts.select((col(CHUNK) - 1).alias("_sc"), col("_ct").alias("_s"),
                              col("_fi").alias("_sf"))
        placed = (rows.withColumn("_before", last_before)
                  .join(F.broadcast(start), col(CHUNK) == col("_sc"), "left"))
        names = [col(n) for n in self.names]
        if self.spec.chunks == EACH_CHUNK_ONCE:  # rows never leave: kept until their cut
            placed = self.rt.cache_for_cycle(placed)
            self.pending.set(placed.where(col("_s").isNull()).select(
                *names, col(T), col(INDEX), col(CHUNK)))
            out = placed.where(col("_sf") > col("_before")).groupBy(*names, col("_s")).agg(
                F.count(F.lit(1)).alias(D)).withColumnRenamed("_s", T)
            return Slice(out, inp.lo, inp.hi)
        end = firsts.select((col(CHUNK) - self.spec.chunks - 1).alias("_ec"),
                            col("_ct").alias("_e"), col("_fi").alias("_ef"))
        placed = placed.join(F.broadcast(end), col(CHUNK) == col("_ec"), "left")
        placed = self.rt.cache_for_cycle(placed)
        plus = placed.where(col("_sf") > col("_before")).select(
            *names, col("_s").alias(T), F.lit(1).cast("long").alias(D))
        minus = placed.where(col("_ef") > col("_before")).select(
            *names, col("_e").alias(T), F.lit(-1).cast("long").alias(D))
        self.pending.set(placed.where(col("_e").isNull()).select(
            *names, col(T), col(INDEX), col(CHUNK)))
        out = plus.unionByName(minus).groupBy(*names, col(T)).agg(F.sum(col(D)).alias(D))
        # a chunk whose cut point and end are one instant is valid for an empty interval
        return Slice(out.where(col(D) != 0), inp.lo, inp.hi)

    def numbered(self, changes: DataFrame | None) -> DataFrame:
        """The pending rows and the cycle's events, each with its place and chunk (``_new``
        tells the cycle's).
        """
        new = None
        if changes is not None:
            events = changes.where(col(D) > 0)
            events = events.withColumn(D, F.explode(F.array_repeat(F.lit(1).cast("long"),
                                                                   col(D).cast("int"))))
            new = events.select(*[col(n) for n in self.names], col(T),
                                F.lit(None).cast("long").alias(INDEX),
                                F.lit(None).cast("long").alias(CHUNK),
                                F.lit(True).alias(NEW))
        old = self.pending.get()
        rows = union_all([
            old.withColumn(NEW, F.lit(False).cast(BooleanType())) if old is not None else None,
            new])
        assert rows is not None
        whole = Window.partitionBy()
        order = [col(NEW).asc(), col(INDEX).asc_nulls_last(), col(T).asc(),
                 *[col(c).asc_nulls_first() for c in self.order_cols]]
        ranked = rows.withColumn("_r", F.row_number().over(whole.orderBy(*order)))
        base = F.coalesce(F.max(col(INDEX)).over(whole), F.lit(-1).cast("long"))
        # pending rows precede the cycle's (they are older than its safe time's start)
        ranked = ranked.withColumn(INDEX, F.when(col(NEW), base + col("_r")
                                                 - F.count(F.when(~col(NEW), 1)).over(whole))
                                   .otherwise(col(INDEX)))
        return ranked.withColumn(CHUNK, self.chunk_of(ranked)).drop("_r")

    def chunk_of(self, rows: DataFrame) -> Column:
        """The chunk of each row: its place divided by n, or (by key) the previous pending
        chunk plus the key changes up to it.
        """
        if isinstance(self.spec, CountCutSpec):
            return F.floor(col(INDEX) / F.lit(self.spec.rows)).cast("long")
        in_order = Window.orderBy(col(INDEX))
        keys = self.spec.keys
        changed = F.lit(False)
        for k in keys:
            changed = changed | ~col(k).eqNullSafe(F.lag(col(k)).over(in_order))
        changed = F.when(F.lag(col(INDEX)).over(in_order).isNull(), F.lit(True)).otherwise(changed)
        last_chunk = F.coalesce(F.max(col(CHUNK)).over(Window.partitionBy()),
                                F.lit(-1).cast("long"))
        counted = F.sum(F.when(col(NEW) & changed, 1).otherwise(0)).over(
            in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow))
        return F.when(col(NEW), last_chunk + counted).otherwise(col(CHUNK))

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """Live elements: pending rows of every chunk but the last, which has not started."""
        pending = self.pending.get()
        if pending is None:
            return None
        live = pending.withColumn("_last", F.max(col(CHUNK)).over(Window.partitionBy())) \
            .where(col(CHUNK) < col("_last"))
        return as_changes_at(live, self.names, None, at)
