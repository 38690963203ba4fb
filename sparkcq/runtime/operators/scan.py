"""The entry of a source stream into the plan: event time, watermark, late data, order."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from sparkcq.errors import CatalogError
from sparkcq.model.columns import ARRIVAL_WATERMARK, DEAD_BATCH, DELETE, RAW, REASON, TE, D, T
from sparkcq.model.rows import RowError
from sparkcq.model.time import TIME_MAX, TIME_MIN, TimeKind, shift
from sparkcq.plan.nodes import StreamScan
from sparkcq.runtime.frames import (
    Runtime,
    Slice,
    SqlViews,
    Summary,
    bound,
    bound_sql,
    coalesce_partitions,
    col,
    project,
    q,
    sql_literal,
    union_all,
)
from sparkcq.runtime.operators.base import CycleContext, FutureBuffer, Operator, Progress
from sparkcq.runtime.saved_frames import FrameReader, FrameWriter

HELD_FILE = "held.json"  # the cycles whose logged input holds the events held


@dataclass(frozen=True)
class HeldBatch:
    """A batch of rows the scan holds: cached in the cycle it arrived in, then kept, not
    copied, until every event of it has been delivered and has left the history's reach.

    ``frame`` has the stream's columns, ``_t`` (and ``_te``) and ``_reason`` (null: on
    time). ``largest`` (the largest on-time event time, None when there is none) and
    ``rows`` are known once ``measured``: at once for rows held on the driver, otherwise
    from the commit of the cycle the batch arrived in.
    """

    frame: DataFrame
    measured: bool
    largest: int | None = None
    rows: int = 0
    # False for a batch its one reader read straight from the source (``accept``): a
    # later reading (held events in a checkpoint, a consumer added later, dead letters)
    # reads the source again, and there are no blocks to free
    cached: bool = True
    # the cycle that took the batch (its input logged by a checkpoint directory: a
    # checkpoint names the cycle rather than writing the events held); None: not known
    cycle: int | None = None


@dataclass(frozen=True)
class ScanProgress(Progress):
    """Where a stream stands between cycles: its watermark, what it has seen and holds."""

    watermark: int = TIME_MIN
    max_seen: int | None = None  # the largest on-time event time seen
    ended: bool = False  # its input ended: the watermark is +inf
    # the batches held, oldest first, and those let go this cycle: their blocks are freed
    # a cycle later, once no rollback can bring them back
    held: tuple[HeldBatch, ...] = ()
    let_go: tuple[DataFrame, ...] = ()
    rows_in: int = 0  # rows taken in, ever
    dead_count: int = 0  # dead letters, ever
    # (batch, rows) of each batch of dead letters kept, oldest first
    dead_batches: tuple[tuple[int, int], ...] = ()


class ScanOperator(Operator):
    """Turns a source's raw rows into the stream edge every consumer of the stream reads.

    Watermark ``W`` (``docs/semantics.md``, "Progress, finality and late data"): the
    maximum event time seen minus the allowed lateness (0 when events come in order),
    raised by explicit watermarks, +inf at end of input.
    Events before the previous watermark are late: counted and kept in the dead-letter table
    with the reason, never applied.

    Each cycle's batch is cached once and held (``HeldBatch``); the edge of ``[W_prev, W)``
    is read from the batches that still hold events of it, so events beyond the watermark
    wait there without being copied into a buffer. What a batch holds is counted on the
    driver for rows pushed from Python; for files and generators it is measured by the
    cycle's commit, so such a stream's watermark moves with the batches of earlier cycles
    (as Spark Structured Streaming's does) and no Spark job of its own is needed.

    Consumers keyed by event time (sliced window aggregates, interval joins) read the
    cycle's ``arrivals`` instead: every on-time event of the batch, whatever its time, each
    delivered once, so they need not wait for the watermark to take an event in.
    """

    def __init__(self, node: StreamScan, rt: Runtime, lateness: int = 0,
                 max_dead_letters: int = 100_000):
        super().__init__(node, rt)
        self.scan = node
        self.lateness = lateness
        self.progress: ScanProgress = ScanProgress()
        self.names = [f.name for f in node.schema.fields]
        self.dead_schema = StructType([*node.schema.fields, StructField(REASON, StringType()),
                                       StructField(RAW, StringType())])
        self.dead = self.state(StructType([*self.dead_schema.fields,
                                           StructField(DEAD_BATCH, LongType())]), "dead-letters")
        # the newest dead letters are kept, about ``max_dead_letters`` of them
        self.max_dead_letters = max_dead_letters
        # recent events, for a window added later over this stream to start from: the
        # held batches reach back ``history_reach`` of event time before the watermark,
        # complete since the watermark ``history_since``
        self.history_reach = 0
        self.history_since: int | None = None
        # the stream's ``retain``: history kept always, for queries not yet added
        self.retention = 0
        self.views = SqlViews(rt.spark, "scan")
        self.future = (
            FutureBuffer(self, StructType([*node.schema.fields, StructField(T, LongType()),
                                           StructField(D, LongType())]))
            if node.end_col else None
        )

    @property
    def watermark(self) -> int:
        """The stream's watermark: no event before it is still to come."""
        return self.progress.watermark

    @property
    def ended(self) -> bool:
        """Whether the stream's input ended (its watermark is +inf)."""
        return self.progress.ended

    @property
    def rows_in(self) -> int:
        """Rows taken in since the scan was created."""
        return self.progress.rows_in

    @property
    def dead_count(self) -> int:
        """Dead letters since the scan was created (more than it keeps)."""
        return self.progress.dead_count

    @property
    def state_rows(self) -> int:
        """Dead letters, and the rows of the batches held (counted once measured)."""
        return super().state_rows + sum(b.rows for b in self.progress.held)

    @property
    def held_frames(self) -> list[DataFrame]:
        """The cached frames of the batches held, and of those let go this cycle (freed
        when the next one starts).
        """
        return [*(b.frame for b in self.progress.held if b.cached), *self.progress.let_go]

    def resume(self, watermark: int, max_seen: int | None, ended: bool) -> None:
        """Carry on from a checkpoint's watermark (between cycles)."""
        self.progress = replace(self.progress, watermark=watermark, max_seen=max_seen,
                                ended=ended)

    def marks(self) -> dict[str, int | bool | None]:
        """What a checkpoint keeps of the watermark (``resume`` takes it back)."""
        p = self.progress
        return {"watermark": p.watermark, "max_seen": p.max_seen, "ended": p.ended}

    def time_sql(self, name: str) -> str:
        """SQL for the long time axis value of a time column."""
        if self.scan.stream_time_kind is TimeKind.TIMESTAMP:
            return f"unix_micros(CAST({q(name)} AS TIMESTAMP))"
        return f"CAST({q(name)} AS BIGINT)"

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:
        """Take this cycle's batch (``cycle.input``): the edge of [old, new watermark), unless
        its consumers read only the ``arrivals`` (``cycle.edges_unread``).
        """
        batch = cycle.input.batch(self.scan)
        lo = self.progress.watermark
        for frame in self.progress.let_go:
            self.rt.release_at_cycle_end(frame)
        self.progress = replace(self.progress, let_go=())
        if batch.rejected:
            self.refuse(batch.rejected)
        arrived = None
        if batch.df is not None:
            arrived = self.accept(batch.df, lo, batch.arrow, self.node in cycle.read_once,
                                  cycle.input.number)
        wm = lo
        if self.progress.max_seen is not None:
            wm = max(wm, self.progress.max_seen - self.lateness)
        if batch.watermark is not None:
            wm = max(wm, batch.watermark)
        ended = self.progress.ended or batch.end
        ended_at = wm if ended and not self.progress.ended else None
        if ended:
            wm = TIME_MAX
        hi = wm
        self.progress = replace(self.progress, watermark=wm, ended=ended)
        self.let_go_delivered(lo)
        edge = self.node not in cycle.edges_unread
        if self.future is None:
            out = Slice(self.edge_between(lo, hi) if edge else None, lo, hi,
                        arrivals=None if arrived is None else self.instants(arrived))
        else:
            out = self.emit(self.held_between(lo, hi) if edge else None, lo, hi)
        return out if ended_at is None else replace(out, ended_at=ended_at)

    def instants_sql(self) -> str:
        """The columns of the stream's edge over a held batch: its columns, the instant and
        ``_d`` (``change``).
        """
        change = (f"CASE WHEN {q(DELETE)} THEN -1 ELSE 1 END" if self.scan.key else "1")
        return f"{', '.join(map(q, self.names))}, {q(T)}, CAST({change} AS BIGINT) AS {q(D)}"

    def instants(self, batch: DataFrame) -> DataFrame:
        """A batch's on-time events as the edge's instants (``emit``'s, as one text)."""
        return self.views.sql(f"SELECT {self.instants_sql()} FROM {{inp}} "
                              f"WHERE {q(REASON)} IS NULL", inp=batch)

    def edge_between(self, lo: int, hi: int) -> DataFrame | None:
        """The edge of [lo, hi) (``emit`` of ``held_between``) for a stream of instants:
        one text over the held batches that may have some, so a cycle analyses no
        DataFrame call of the scan's (their text is re-bound, see ``SqlViews``).
        """
        if hi <= lo:
            return None
        held = self.batches_since(lo)
        if not held:
            return None
        within = (f"{q(REASON)} IS NULL AND {q(T)} >= {bound_sql(lo)} "
                  f"AND {q(T)} < {bound_sql(hi)}")
        text = " UNION ALL ".join(f"SELECT {self.instants_sql()} FROM {{b{i}}} WHERE {within}"
                                  for i in range(len(held)))
        return self.views.sql(text, **{f"b{i}": frame for i, frame in enumerate(held)})

    def hold(self, batch: HeldBatch) -> None:
        """Hold a new batch, after those held."""
        self.progress = replace(self.progress, held=(*self.progress.held, batch))

    def let_go_delivered(self, lo: int) -> None:
        """Stop holding the batches whose events all lie before ``lo`` and before the
        history's reach back from it (delivered, and no window added in this cycle needs
        them); their blocks are freed a cycle later.
        """
        bound = lo - self.history_reach if lo != TIME_MAX else TIME_MAX
        keep: list[HeldBatch] = []
        gone: list[HeldBatch] = []
        for b in self.progress.held:
            done = b.measured and (b.largest is None or b.largest < bound)
            (gone if done else keep).append(b)
        if gone:
            self.progress = replace(self.progress, held=tuple(keep),
                                    let_go=tuple(b.frame for b in gone if b.cached))

    def held_between(self, lo: int, hi: int) -> DataFrame | None:
        """The on-time events of ``[lo, hi)`` from the batches that may hold some."""
        if hi <= lo:
            return None
        ready = union_all([frame.where(col(T) < bound(hi)) for frame in self.on_time_since(lo)])
        return None if ready is None else ready.drop(REASON)

    def on_time_since(self, since: int) -> list[DataFrame]:
        """The on-time events at or after ``since`` of each held batch that may have some."""
        return [frame.where(col(REASON).isNull() & (col(T) >= bound(since)))
                for frame in self.batches_since(since)]

    def batches_since(self, since: int) -> list[DataFrame]:
        """The held batches that may have events at or after ``since``."""
        return [b.frame for b in self.progress.held
                if not b.measured or (b.largest is not None and b.largest >= since)]

    def want_history(self, reach: int) -> None:
        """Keep the events of the last ``reach`` of event time from now on (see
        ``history``); a consumer asks when it is added.
        """
        if self.future is not None or reach <= self.history_reach:
            return
        self.history_reach = reach
        if self.history_since is None:
            self.history_since = self.progress.watermark

    def retain(self, length: int) -> None:
        """Keep the events of the last ``length`` of event time always (the stream's
        ``retain``): a query added later over a window reaching back at most that far
        starts from them, complete, even when no query computes its window yet.
        """
        self.retention = length
        self.want_history(length)

    def retains(self, reach: int | None) -> bool:
        """Whether the stream's ``retain`` keeps a window of ``reach`` for new queries."""
        return reach is not None and 0 < reach <= self.retention

    def covers(self, at: int, length: int) -> bool:
        """Whether ``history`` can give every event of [at - length, at)."""
        return (self.progress.watermark == at and length <= self.history_reach
                and self.history_since is not None
                and (self.history_since == TIME_MIN or self.history_since <= at - length))

    def history(self, at: int, length: int) -> DataFrame | None:
        """The held events at or after ``at - length`` (instants, ``_d`` = 1): the events of
        [at - length, at) (``covers`` says whether they are all still held) and every event
        held beyond ``at``, those of this cycle's batch too once the scan has stepped.

        What a consumer of ``arrivals`` added at the stream's position ``at`` starts from
        (``length`` 0: the events it would otherwise never see, those that arrived before
        it, ahead of the watermark). None: there are none.
        """
        return union_all([frame.select(*[col(n) for n in self.names], col(T), self.change())
                          for frame in self.on_time_since(shift(at, -length))])

    def change(self) -> Column:
        """The ``_d`` of a held event on the stream's edge: 1, or -1 for a keyed stream's
        delete (its key columns and instant; read by the keyed window).
        """
        if self.scan.key:
            return F.when(col(DELETE), F.lit(-1)).otherwise(F.lit(1)).cast("long").alias(D)
        return F.lit(1).cast("long").alias(D)

    def release(self) -> None:  # noqa: D102
        super().release()
        self.rt.free(self.held_frames)
        self.progress = replace(self.progress, held=(), let_go=())

    def accept(self, raw: DataFrame, lo: int, arrow: pa.Table | None = None,
               once: bool = False, number: int | None = None) -> DataFrame:
        """Add time columns and the reason a row is refused (null, late or malformed event
        time); cache the batch and hold it. The rows are counted, and the largest on-time
        event time found, on the driver when ``arrow`` holds them there, otherwise by the
        cycle's commit (``Runtime.measure``). Returns the batch to read, its refused rows
        among them (``REASON`` not NULL).

        A batch that one operator reads once (``once``: its arrivals, nothing reading the
        edge) is not cached: its reader's plan reads it straight from the source and counts
        it as it goes (``Runtime.measure_in_place``), which saves a local checkpoint (its
        planning on the driver) and a copy of the batch in memory. ``number``: the cycle
        taking the batch.
        """
        frame = self.placed(raw, lo)
        if not once:
            frame = self.rt.cache_for_cycle(frame)
            self.rt.keep_after_cycle(frame)
        elif self.rt.single:  # as a cache would be: one partition needs no exchange
            frame = coalesce_partitions(frame, 1)
        read = frame
        if arrow is not None and not self.scan.end_col:
            total, bad, largest = self.check_on_driver(arrow, lo)
            self.hold(HeldBatch(frame, True, largest, total - bad, cached=not once,
                                cycle=number))
            self.counted_batch(frame, total, bad, largest)
        else:
            self.hold(HeldBatch(frame, False, cached=not once, cycle=number))
            flag = f"{q(REASON)} IS NOT NULL"
            value = f"CASE WHEN {q(REASON)} IS NULL THEN {q(T)} END"
            then = partial(self.measured, frame)
            if once:
                read = self.rt.measure_in_place(frame, flag, value, then)
            else:
                self.rt.measure(frame, flag, value, then)
        # its consumers select its on-time rows and their columns (``step``): no
        # projection of its own
        return read

    def placed(self, raw: DataFrame, lo: int) -> DataFrame:
        """A raw batch with the event time (``_t``, and ``_te``) and the reason a row is
        refused (``_reason``, null: on time) for a cycle whose watermark was ``lo``.
        """
        # late: before the watermark of the cycle, or of the row's arrival if later
        lowest = (f"greatest({bound_sql(lo)}, {q(ARRIVAL_WATERMARK)})"
                  if ARRIVAL_WATERMARK in raw.columns else bound_sql(lo))
        # one projection of the raw batch, its text the same every cycle (``project``):
        # the event time and the bound are written out wherever a column reads them
        t = self.time_sql(self.scan.time_col)
        delete = None
        if self.scan.key:  # deletes of a keyed stream: the scan's edge carries them
            delete = (f"coalesce({q(DELETE)}, false)" if DELETE in raw.columns else "false")
        what = (f" CASE WHEN {delete} THEN ' (a delete)' ELSE '' END" if delete is not None
                else " ''")
        reason = (
            f"WHEN {t} IS NULL THEN concat("
            f"{sql_literal(f'null event time in column {self.scan.time_col!r}')},{what}) "
            f"WHEN {t} < {lowest} THEN concat('late: event time ', CAST({t} AS STRING), "
            f"' is before the watermark ', CAST({lowest} AS STRING),{what})")
        columns = [*map(q, self.names), f"{t} AS {q(T)}",
                   *([f"{delete} AS {q(DELETE)}"] if delete is not None else [])]
        if self.scan.end_col:
            te = self.time_sql(self.scan.end_col)
            reason += (f" WHEN {te} IS NULL OR {te} < {t} THEN " + sql_literal(
                f"end time {self.scan.end_col!r} is null or before the event time"))
            columns.append(f"{te} AS {q(TE)}")
        return project(raw, *columns, f"CASE {reason} END AS {q(REASON)}")

    def measured(self, frame: DataFrame, summary: Summary) -> None:
        """The commit measured a batch: count it, raise the largest event time seen, and
        keep its refused rows as dead letters (copied out of it by a Spark job of their
        own, only in a cycle that has some).
        """
        good = summary.rows - summary.flagged
        self.progress = replace(self.progress, held=tuple(
            replace(b, measured=True, largest=summary.largest, rows=good)
            if b.frame is frame else b for b in self.progress.held))
        self.counted_batch(frame, summary.rows, summary.flagged, summary.largest)
        if summary.flagged:
            self.rt.materialize(self.dead)

    def counted_batch(self, frame: DataFrame, total: int, bad: int,
                      largest: int | None) -> None:
        """Account for a batch: rows seen, dead letters, the largest on-time event time."""
        seen = self.progress.max_seen
        if largest is not None:
            seen = largest if seen is None else max(seen, largest)
        self.progress = replace(self.progress, rows_in=self.progress.rows_in + total,
                                max_seen=seen)
        if bad:
            self.keep_dead(frame.where(col(REASON).isNotNull()).select(
                *[col(n) for n in self.names], col(REASON),
                F.lit(None).cast("string").alias(RAW)), bad)

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
        count = self.progress.dead_count + rows
        new_dead = new_dead.limit(self.max_dead_letters)
        batches = self.progress.dead_batches
        batch = (batches[-1][0] + 1) if batches else 0
        rows = min(rows, self.max_dead_letters)
        kept = (*batches, (batch, rows))
        dropped = None
        while len(kept) > 1 and sum(n for _, n in kept) > self.max_dead_letters:
            dropped, kept = kept[0][0], kept[1:]
        self.progress = replace(self.progress, dead_count=count, dead_batches=kept)
        old = self.dead.get()
        if old is not None and dropped is not None:
            old = old.where(col(DEAD_BATCH) > F.lit(dropped))
        self.dead.set(union_all([old, new_dead.withColumn(DEAD_BATCH, F.lit(batch).cast("long"))]))

    def emit(self, ready: DataFrame | None, lo: int, hi: int) -> Slice:
        """The edge of a stream with an end time: +1 at ts and -1 at te of each element
        that does not end where it starts, the -1 waiting in the future buffer until the
        watermark passes it (a stream of instants: ``edge_between`` and ``instants``).
        """
        assert self.future is not None
        names = [col(n) for n in self.names]
        produced = None
        if ready is not None:
            live = ready.where(col(TE) > col(T))
            starts = live.select(*names, col(T), self.change())
            ends = live.select(*names, col(TE).alias(T), F.lit(-1).cast("long").alias(D))
            produced = starts.unionByName(ends)
        return self.future.emit(produced, lo, hi)

    def save(self, path: str, frames: FrameWriter) -> None:
        """Save the state and the events held beyond the watermark (``load`` holds them
        again), so a restored engine delivers them. A batch a cycle took from input a
        checkpoint directory logged is not written: the checkpoint names the cycle, keeps
        its logged input, and ``load`` reads it again from there.
        """
        super().save(path, frames)
        watermark = self.progress.watermark
        logged, written = [], []
        for b in self.progress.held:
            if b.measured and (b.largest is None or b.largest < watermark):
                continue  # delivered
            if b.cycle is not None and frames.keep_input(self.scan.name.lower(), b.cycle):
                logged.append({"cycle": b.cycle, "largest": b.largest, "rows": b.rows})
            else:
                written.append(b.frame.where(col(REASON).isNull()
                                             & (col(T) >= bound(watermark))))
        held = union_all(written)
        frames.add(os.path.join(path, "held-events"),
                   None if held is None else held.drop(REASON))
        with open(os.path.join(path, HELD_FILE), "w", encoding="utf-8") as f:
            json.dump({"watermark": watermark, "batches": logged}, f)

    def held_schema(self) -> StructType:
        """The columns of the events held: the stream's, the event time (and end time, and
        the delete flag of a keyed stream).
        """
        return StructType([*self.scan.schema.fields, StructField(T, LongType()),
                           *([StructField(TE, LongType())] if self.scan.end_col else []),
                           *([StructField(DELETE, BooleanType())] if self.scan.key else [])])

    def load(self, path: str, frames: FrameReader) -> None:
        """Restore what ``save`` saved: the events written, and those of the batches it
        named by cycle, read again from that cycle's logged input (not cached: a later
        reading reads the input again, until the batch is let go).
        """
        super().load(path, frames)
        self.rt.free(self.held_frames)
        frame = frames.read(os.path.join(path, "held-events"), self.held_schema()).withColumn(
            REASON, F.lit(None).cast("string"))
        rows, largest = frame.agg(F.count(F.lit(1)), F.max(col(T))).first()  # type: ignore[misc]
        held = [HeldBatch(frame, True, largest, rows)] if rows else []
        listed = os.path.join(path, HELD_FILE)
        named: dict = {"watermark": TIME_MIN, "batches": []}
        if os.path.exists(listed):
            with open(listed, encoding="utf-8") as f:
                named = json.load(f)
        watermark = int(named["watermark"])  # the stream's, restored after its state
        for entry in named["batches"]:
            raw = frames.logged_input(self.scan, int(entry["cycle"]))
            if raw is None:
                msg = (f"stream {self.scan.name!r}: the input of cycle {entry['cycle']} that "
                       f"the checkpoint under {path!r} holds events of is not logged")
                raise CatalogError(msg)
            # the events at or after the saved watermark: on time when they came (it had
            # passed none of them), so their reason is null as then
            batch = self.placed(raw, watermark).where(col(REASON).isNull()
                                                      & (col(T) >= bound(watermark)))
            held.append(HeldBatch(batch, True, entry["largest"], int(entry["rows"]),
                                  cached=False, cycle=int(entry["cycle"])))
        self.progress = replace(self.progress, held=tuple(held), let_go=())

    def dead_letters(self) -> DataFrame:
        """The stream's newest dead letters (``max_dead_letters``, about): rejected rows with
        the reason, and the raw row for those refused at the door.
        """
        return self.dead.get_or_empty().drop(DEAD_BATCH)
