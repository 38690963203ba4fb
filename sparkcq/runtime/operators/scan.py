"""The entry of a source stream into the plan: event time, watermark, late data, order."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparkcq.model.rows import RowError
from sparkcq.model.time import TIME_MAX, TIME_MIN, TimeKind
from sparkcq.plan.nodes import StreamScan
from sparkcq.runtime.frames import (
    D,
    Runtime,
    Slice,
    T,
    col,
    split_at,
    union_all,
    unpersist_checkpoint,
)
from sparkcq.runtime.operators.base import FutureBuffer, Operator

TE = "_te"
REASON = "_reason"
RAW = "_raw"  # a dead letter refused at the door: the row as it was sent
DEAD_BATCH = "_dead_batch"  # which batch of dead letters a row came in (oldest dropped first)
#: optional column of a source's rows: the watermark in force when the row arrived, when a
#: source delivers several arrivals in one cycle (io/sources.py MemorySource)
ARRIVAL_WATERMARK = "_arrival_watermark"


@dataclass
class SourceBatch:
    """What a source delivered for one cycle: rows, an explicit watermark, end of input,
    and rows it refused at the door (each becomes a dead letter).
    """

    df: DataFrame | None = None
    watermark: int | None = None
    end: bool = False
    rejected: tuple[RowError, ...] = ()
    # the rows of ``df`` on the driver, when the source has them there (pushed rows): the
    # scan then checks them without a Spark job of its own
    arrow: pa.Table | None = None


def merge_batches(kept: SourceBatch, new: SourceBatch) -> SourceBatch:
    """A batch a failed cycle kept, followed by the source's next one."""
    if kept.df is None and kept.watermark is None and not kept.end and not kept.rejected:
        return new
    df = union_all([kept.df, new.df])
    marks = [w for w in (kept.watermark, new.watermark) if w is not None]
    arrow = None
    if (kept.df is None or kept.arrow is not None) and (new.df is None or new.arrow is not None):
        arrow = pa.concat_tables([t for t in (kept.arrow, new.arrow) if t is not None]) \
            if df is not None else None
    return SourceBatch(df, max(marks) if marks else None, kept.end or new.end,
                       kept.rejected + new.rejected, arrow)


class ScanOperator(Operator):
    """Turns a source's raw rows into the stream edge every consumer of the stream reads.

    Watermark ``W`` (DESIGN 2.4): the maximum event time seen minus the allowed lateness
    (0 when events come in order), raised by explicit watermarks, +inf at end of input.
    Events before the previous watermark are late: counted and kept in the dead-letter table
    with the reason, never applied. Events at or after the new watermark wait in a buffer
    (in Spark) so that each cycle releases exactly the events in [W_prev, W).
    """

    def __init__(self, node: StreamScan, rt: Runtime, lateness: int = 0,
                 max_dead_letters: int = 100_000):
        super().__init__(node, rt)
        self.scan = node
        self.lateness = lateness
        self.watermark = TIME_MIN
        self.max_seen: int | None = None
        self.batch = SourceBatch()
        self.ended = False
        fields = [*node.schema.fields, StructField(T, LongType())]
        if node.end_col:
            fields.append(StructField(TE, LongType()))
        self.pending = self.state(StructType(fields), "pending")
        self.dead_schema = StructType([*node.schema.fields, StructField(REASON, StringType()),
                                       StructField(RAW, StringType())])
        self.dead = self.state(StructType([*self.dead_schema.fields,
                                           StructField(DEAD_BATCH, LongType())]), "dead-letters")
        self.dead_count = 0  # every dead letter ever
        # the newest dead letters are kept, about ``max_dead_letters`` of them: (batch, rows)
        # of each batch kept, oldest first (a tuple: the cycle's rollback restores it)
        self.max_dead_letters = max_dead_letters
        self.dead_batches: tuple[tuple[int, int], ...] = ()
        self.rows_in = 0
        # recent events, for a window added later over this stream to start from (DESIGN
        # 4.2): each cycle's cached rows with the [lo, hi) it released from them, for
        # ``history_reach`` of event time, kept since the watermark ``history_since``
        self.history_reach = 0
        self.history_since: int | None = None
        self.recent: tuple[tuple[int, int, DataFrame], ...] = ()
        self.future = (
            FutureBuffer(self, StructType([*node.schema.fields, StructField(T, LongType()),
                                           StructField(D, LongType())]))
            if node.end_col else None
        )

    def time_expr(self, name: str):  # noqa: ANN201 - a Column
        """The long time axis value of a time column."""
        if self.scan.stream_time_kind is TimeKind.TIMESTAMP:
            return F.unix_micros(col(name).cast("timestamp"))
        return col(name).cast("long")

    def step(self, inputs: list[Slice]) -> Slice:  # noqa: D102
        batch, self.batch = self.batch, SourceBatch()
        lo = self.watermark
        good = None
        if batch.rejected:
            self.refuse(batch.rejected)
        if batch.df is not None:
            good = self.accept(batch.df, lo, batch.arrow)
        wm = lo
        if self.max_seen is not None:
            wm = max(wm, self.max_seen - self.lateness)
        if batch.watermark is not None:
            wm = max(wm, batch.watermark)
        if batch.end:
            self.ended = True
        if self.ended:
            wm = TIME_MAX
        self.watermark = hi = wm
        if good is None and (self.pending.rows == 0 or (self.pending.min_t or TIME_MAX) >= hi):
            return self.emit(None, lo, hi)
        merged = union_all([self.pending.get(), good])
        assert merged is not None
        merged = self.rt.cache_for_cycle(merged)
        self.log_history(merged, lo, hi)
        ready, later = split_at(merged, hi)
        self.pending.set(later)
        return self.emit(ready, lo, hi)

    def want_history(self, reach: int) -> None:
        """Keep the events of the last ``reach`` of event time from now on (see
        ``history``); a consumer asks when it is added.
        """
        if self.future is not None or reach <= self.history_reach:
            return
        self.history_reach = reach
        if self.history_since is None:
            self.history_since = self.watermark

    def log_history(self, rows: DataFrame, lo: int, hi: int) -> None:
        """Remember the cycle's rows (cached for the cycle: kept, not copied) as history."""
        if not self.history_reach:
            return
        if hi == TIME_MAX:
            for _lo, _hi, frame in self.recent:
                self.rt.release_at_cycle_end(frame)
            self.recent = ()
            return
        self.rt.keep_after_cycle(rows)
        kept = []
        for entry in self.recent:  # history up to lo stays readable in this cycle
            if entry[1] <= lo - self.history_reach:
                self.rt.release_at_cycle_end(entry[2])
            else:
                kept.append(entry)
        self.recent = (*kept, (lo, hi, rows))

    def covers(self, at: int, length: int) -> bool:
        """Whether ``history`` can give every event of [at - length, at)."""
        return (self.watermark == at and length <= self.history_reach
                and self.history_since is not None
                and (self.history_since == TIME_MIN or self.history_since <= at - length))

    def history(self, at: int, length: int) -> DataFrame | None:
        """The events of [at - length, at) as this stream's edge delivered them (instants,
        ``_d`` = 1); ``covers`` says whether they are all still kept. None: there were none.
        """
        names = [col(f.name) for f in self.scan.schema.fields]
        parts = [frame.where((col(T) >= F.lit(max(lo, at - length)))
                             & (col(T) < F.lit(min(hi, at))))
                 .select(*names, col(T), F.lit(1).cast("long").alias(D))
                 for lo, hi, frame in self.recent if hi > at - length and lo < at]
        return union_all(parts)

    def release(self) -> None:  # noqa: D102
        super().release()
        for _lo, _hi, frame in self.recent:
            unpersist_checkpoint(frame)
        self.recent = ()

    def accept(self, raw: DataFrame, lo: int, arrow: pa.Table | None = None) -> DataFrame | None:
        """Add time columns; route null, late and malformed events to the dead letters.

        The rows are counted, and the largest on-time event time found, on the driver when
        ``arrow`` holds them there, otherwise by a Spark job over the cycle's cached rows.
        """
        names = [f.name for f in self.scan.schema.fields]
        # late: before the watermark of the cycle, or of the row's arrival if later
        bound = (F.greatest(F.lit(lo), col(ARRIVAL_WATERMARK))
                 if ARRIVAL_WATERMARK in raw.columns else F.lit(lo))
        df = raw.select(*[col(n) for n in names], bound.alias("_bound")).withColumn(
            T, self.time_expr(self.scan.time_col))
        reason = (
            F.when(col(T).isNull(), F.lit(f"null event time in column {self.scan.time_col!r}"))
            .when(col(T) < col("_bound"), F.concat(
                F.lit("late: event time "), col(T).cast("string"),
                F.lit(" is before the watermark "), col("_bound").cast("string")))
        )
        if self.scan.end_col:
            df = df.withColumn(TE, self.time_expr(self.scan.end_col))
            reason = reason.when(col(TE).isNull() | (col(TE) < col(T)), F.lit(
                f"end time {self.scan.end_col!r} is null or before the event time"))
        df = df.withColumn(REASON, reason)
        if arrow is not None and not self.scan.end_col:
            total, bad, mx = self.check_on_driver(arrow, lo)
        else:
            df = self.rt.cache_for_cycle(df)
            self.rt.jobs += 1
            total, bad, mx = df.agg(
                F.count(F.lit(1)), F.count(col(REASON)),
                F.max(F.when(col(REASON).isNull(), col(T)))).first()  # type: ignore[misc]
        self.rows_in += total
        if bad:
            self.keep_dead(df.where(col(REASON).isNotNull()).select(
                *[col(n) for n in names], col(REASON), F.lit(None).cast("string").alias(RAW)),
                bad)
        if mx is not None:
            self.max_seen = mx if self.max_seen is None else max(self.max_seen, mx)
        if total == bad:
            return None
        return df.where(col(REASON).isNull()).drop(REASON, "_bound")

    def check_on_driver(self, rows: pa.Table, lo: int) -> tuple[int, int, int | None]:
        """Rows, dead rows (null or late event time) and the largest on-time event time of
        the batch's rows held on the driver, as ``accept``'s Spark expressions count them.
        """
        times = rows.column(self.scan.time_col)
        if pa.types.is_timestamp(times.type):
            times = pc.cast(times, pa.timestamp("us", times.type.tz))
        times = pc.cast(times, pa.int64())
        bound = pa.scalar(lo, pa.int64())
        if ARRIVAL_WATERMARK in rows.column_names:
            bound = pc.max_element_wise(rows.column(ARRIVAL_WATERMARK), bound)
        good = pc.fill_null(pc.greater_equal(times, bound), False)
        on_time = pc.filter(times, good)
        total = rows.num_rows
        kept = len(on_time)
        largest = pc.max(on_time).as_py() if kept else None
        return total, total - kept, largest

    def refuse(self, rejected: tuple[RowError, ...]) -> None:
        """Keep rows a source refused at the door as dead letters: reason and raw row."""
        rows = [(*([None] * len(self.scan.schema.fields)), e.describe(), e.raw)
                for e in rejected[-self.max_dead_letters:]]
        self.keep_dead(self.rt.spark.createDataFrame(rows, self.dead_schema), len(rejected))

    def keep_dead(self, new_dead: DataFrame, rows: int) -> None:
        """Add a batch of dead letters; drop the oldest batches beyond ``max_dead_letters``
        (all are still counted), so a client sending bad rows cannot grow the state.
        """
        self.dead_count += rows
        new_dead = new_dead.limit(self.max_dead_letters)
        batch = (self.dead_batches[-1][0] + 1) if self.dead_batches else 0
        rows = min(rows, self.max_dead_letters)
        kept = (*self.dead_batches, (batch, rows))
        dropped = None
        while len(kept) > 1 and sum(n for _, n in kept) > self.max_dead_letters:
            dropped, kept = kept[0][0], kept[1:]
        self.dead_batches = kept
        old = self.dead.get()
        if old is not None and dropped is not None:
            old = old.where(col(DEAD_BATCH) > F.lit(dropped))
        self.dead.set(union_all([old, new_dead.withColumn(DEAD_BATCH, F.lit(batch).cast("long"))]))

    def emit(self, ready: DataFrame | None, lo: int, hi: int) -> Slice:
        """Stream edge: instants with _d = 1; with an end time, +1 at ts and -1 at te."""
        names = [f.name for f in self.scan.schema.fields]
        if self.future is None:
            if ready is None:
                return Slice(None, lo, hi)
            return Slice(ready.select(*[col(n) for n in names], col(T), F.lit(1).cast("long")
                                      .alias(D)), lo, hi)
        produced = None
        if ready is not None:
            live = ready.where(col(TE) > col(T))
            starts = live.select(*[col(n) for n in names], col(T), F.lit(1).cast("long").alias(D))
            ends = live.select(*[col(n) for n in names], col(TE).alias(T),
                               F.lit(-1).cast("long").alias(D))
            produced = starts.unionByName(ends)
        return self.future.emit(produced, lo, hi)

    def dead_letters(self) -> DataFrame:
        """The stream's newest dead letters (``max_dead_letters``, about): rejected rows with
        the reason, and the raw row for those refused at the door.
        """
        return self.dead.get_or_empty().drop(DEAD_BATCH)
