"""Sources: where a stream's rows come from, polled once per cycle.

Contract: ``poll`` is called once at the start of every cycle and returns what arrived since
the last poll (rows as a Spark DataFrame, an explicit watermark, end of input). It must not
block. What it returned is handed to the stream's scan in the same cycle; ``has_pending``
tells the engine whether another cycle would receive anything.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from sparkcq.errors import BackpressureError, SourceError
from sparkcq.io.ingest import Conformed, arrow_schema, conform, conform_arrow
from sparkcq.model.columns import ARRIVAL_WATERMARK, DELETE
from sparkcq.model.rows import RowError
from sparkcq.model.time import TIME_MAX, TIME_MIN
from sparkcq.runtime.cycle_input import SourceBatch


class Source:
    """Base class of sources.

    A source that can be recovered after a crash (``Engine(checkpoint_dir=...)``) also
    tells where it is (``position``, JSON), goes back there (``seek``), and describes each
    polled batch (``describe``) so that ``replay`` reads exactly that batch again: a cycle
    logged before it ran but not committed is redone with the same input, so its results
    are the same rows the sinks may already hold.
    """

    def poll(self) -> SourceBatch:
        """Everything that arrived since the last poll; never blocks."""
        raise NotImplementedError(type(self).__name__)

    def has_pending(self) -> bool:
        """Whether the next poll would return anything."""
        return False

    def close(self) -> None:
        """Release resources (threads, sockets, files)."""

    def position(self) -> dict[str, Any]:
        """Where the next poll starts, as JSON (after the last polled batch)."""
        return {}

    def seek(self, position: dict[str, Any]) -> None:
        """Continue from ``position`` (what ``position`` returned)."""

    def release_before(self, position: dict[str, Any]) -> None:
        """No restart will need the input before ``position``: it may be discarded."""

    def start_of(self, described: dict[str, Any]) -> dict[str, Any] | None:
        """Where a batch ``describe`` described begins, if reading it again needs the
        input from there kept (``release_before``); None: the description alone reads it.
        """
        return None

    def describe(self, batch: SourceBatch, folder: str) -> dict[str, Any]:
        """How to read ``batch`` (the last poll's) again, as JSON; may write files under
        ``folder``. A source that cannot replay raises SourceError.
        """
        msg = f"{type(self).__name__} cannot replay its input after a crash"
        raise SourceError(msg)

    def replay(self, described: dict[str, Any]) -> SourceBatch:
        """The batch ``describe`` described, read again; the position moves past it."""
        msg = f"{type(self).__name__} cannot replay its input after a crash"
        raise SourceError(msg)


def to_pandas(rows: Any, schema: StructType, stream: str) -> pd.DataFrame:
    """Rows given as a DataFrame, dicts or tuples, as a pandas frame with the stream's
    columns in order; SourceError names a missing or unknown column.
    """
    names = [f.name for f in schema.fields]
    if isinstance(rows, pd.DataFrame):
        frame = rows
    else:
        rows = list(rows)
        if rows and isinstance(rows[0], Mapping):
            frame = pd.DataFrame.from_records(rows)
        else:
            frame = pd.DataFrame.from_records(rows, columns=names)
    if frame.empty and not len(frame.columns):
        frame = pd.DataFrame({n: [] for n in names})
    missing = [n for n in names if n not in frame.columns]
    extra = [c for c in frame.columns if c not in names]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing column(s) {', '.join(map(repr, missing))}")
        if extra:
            parts.append(f"unknown column(s) {', '.join(map(repr, extra))}")
        msg = f"rows pushed to {stream!r}: {'; '.join(parts)}; the stream has {', '.join(names)}"
        raise SourceError(msg)
    return frame[names]


@dataclass(frozen=True)
class IngestLimits:
    """Bounds on what a pushed stream holds: rows queued and not yet taken by a cycle (a
    push beyond it is refused, to be retried later), and rows one cycle takes.
    """

    max_queued_rows: int = 1_000_000
    max_rows_per_cycle: int = 500_000
    max_dead_letters: int = 100_000  # kept per stream (the newest; all are counted)


@dataclass(frozen=True)
class PushReceipt:
    """What became of a push: rows accepted (they will be processed), rows and deletes
    refused (``RowError.what`` tells which), deletes accepted, and rows late (older than
    the watermark in force: kept as dead letters, not processed), counted in ``late_rows``
    and the first hundred listed in ``late``.
    """

    accepted: int
    rejected: tuple[RowError, ...] = ()
    deleted: int = 0
    late: tuple[RowError, ...] = ()
    late_rows: int = 0


@dataclass
class _Push:
    table: pa.Table | None  # the rows that fit, with the watermark in force at the push
    rejected: tuple[RowError, ...]
    watermark: int | None
    end: bool
    seq: int | None = None  # its entry in a feed's spool


def _held(push: _Push) -> int:
    """Rows a push holds in the queue: those that fit and those refused."""
    return (0 if push.table is None else push.table.num_rows) + len(push.rejected)


class MemorySource(Source):
    """Rows pushed from Python or over HTTP (``Engine.push``), delivered in push order.

    ``push`` may be called from any thread; it checks every row at the door
    (``io/ingest.py``) and answers at once. A cycle takes every queued push, up to
    ``max_rows_per_cycle`` rows, not one push per cycle. Lateness stays as if each push were
    a cycle of its own: each row carries the watermark in force when it was pushed (from the
    pushes before it: their explicit watermarks, their largest event time minus the
    lateness), and the stream's scan sends a row older than that to the dead letters.

    A keyed stream (``key``) also takes deletes: each gives the key columns and the event
    time, goes through the same door and the same lateness rule (a late delete is a dead
    letter), and travels with the rows flagged in column ``_delete``.
    """

    def __init__(self, spark: SparkSession, name: str, schema: StructType, time_col: str,
                 lateness: int = 0, limits: IngestLimits | None = None,
                 key: tuple[str, ...] = (), epoch_micros: int | None = None):
        self.spark = spark
        self.epoch_micros = epoch_micros  # a number given for a TIMESTAMP counts these
        self.name = name
        self.schema = schema
        self.time_col = time_col
        self.key = key
        wanted = {*key, time_col}
        self.delete_schema = StructType([f for f in schema.fields if f.name in wanted])
        self.lateness = lateness
        self.limits = limits or IngestLimits()
        self.queue: deque[_Push] = deque()
        self.queued_rows = 0
        self.watermark = TIME_MIN  # in force for the next push
        self.ended = False
        self.lock = threading.Lock()

    def push(self, rows: Iterable[Any] | pd.DataFrame | None, watermark: int | None = None,
             end: bool = False, deletes: Iterable[Any] | pd.DataFrame | None = None,
             ) -> PushReceipt:
        """Queue the rows and deletes that fit (and a watermark, or the end of input) for
        the next cycle; refuse the others, each with its reason. ``BackpressureError`` when
        the queue is full: nothing of the push is queued, it may be sent again later.
        """
        fit, removed = self._door(rows, deletes)
        with self.lock:
            push = self._admit(fit, watermark, end)
            self.queue.append(push)
            self.queued_rows += _held(push)
        return self.receipt(push, fit, removed)

    def receipt(self, push: _Push, fit: Conformed, removed: int) -> PushReceipt:
        """What became of ``push``'s rows: refused at the door, late, accepted."""
        rows = (0 if push.table is None else push.table.num_rows) - removed
        late_rows, late = self._late(push, fit, rows)
        return PushReceipt(rows - late_rows, fit.errors, removed, late, late_rows)

    def _late(self, push: _Push, fit: Conformed, rows: int) -> tuple[int, tuple[RowError, ...]]:
        """How many of the first ``rows`` rows of ``push`` (its rows, not its deletes) are
        older than the watermark in force, and the first hundred of them: the stream's scan
        keeps them as dead letters; the sender is told at once.
        """
        if push.table is None or not rows:
            return 0, ()
        times = push.table.column(self.time_col).slice(0, rows)
        marks = push.table.column(ARRIVAL_WATERMARK).slice(0, rows)
        late = pc.less(pc.cast(times, pa.int64()), marks)
        found = pc.indices_nonzero(late).to_pylist()
        out = []
        for row in found[:100]:
            mark = pa.scalar(marks[row].as_py(), pa.int64()).cast(times.type).as_py()
            out.append(RowError(fit.index(row), self.time_col,
                                f"late: event time {times[row].as_py()} is before the "
                                f"stream's watermark {mark}", ""))
        return len(found), tuple(out)

    def _door(self, rows: Any, deletes: Any = None) -> tuple[Conformed, int]:
        """Rows (JSON objects, tuples, a pandas frame or Arrow) and deletes checked against
        the schema; a keyed stream's flagged in ``_delete``. The deletes that fit come after
        the rows in the table; how many.
        """
        if isinstance(rows, pa.Table):
            fit = conform_arrow(rows, self.schema, self.name)
        else:
            fit = conform(rows if rows is not None else [], self.schema, self.name,
                          epoch_micros=self.epoch_micros)
        errors = fit.errors
        table = fit.table if fit.table.num_rows else None
        removed = 0
        if self.key:
            table = self._flagged(table, False)
        if deletes is not None and not isinstance(deletes, pd.DataFrame):
            deletes = list(deletes)
        if deletes is not None and len(deletes):
            if not self.key:
                msg = (f"stream {self.name!r} has no key, so it takes no deletes; declare "
                       "one with WITH (key='column')")
                raise SourceError(msg)
            gone = conform(deletes, self.delete_schema, self.name,
                           required=(*self.key, self.time_col), what="delete")
            errors += gone.errors
            removed = gone.table.num_rows
            if removed:
                table = pa.concat_tables([t for t in (table, self._flagged(gone.table, True))
                                          if t is not None])
        if table is None:
            table = fit.table.slice(0, 0)
            if self.key:
                table = self._flagged(table, False)
        assert table is not None
        return Conformed(table, errors, fit.kept), removed

    def _admit(self, fit: Conformed, watermark: int | None, end: bool,
               extra_rows: int = 0) -> _Push:
        """The push ``fit`` makes, its rows stamped with the watermark in force; moves the
        watermark on. Called under the lock; refuses an ended stream or a full queue
        (``extra_rows``: rows of the same group admitted before it, not yet queued).
        """
        table = fit.table if fit.table.num_rows else None
        if self.ended:
            msg = f"stream {self.name!r} has ended (end of input was pushed); it takes no more"
            raise SourceError(msg)
        n = 0 if table is None else table.num_rows
        held = n + len(fit.errors)  # refused rows wait for the cycle too
        queued = self.queued_rows + extra_rows
        if queued and queued + held > self.limits.max_queued_rows:
            msg = (f"stream {self.name!r} has {queued:,} rows queued (at most "
                   f"{self.limits.max_queued_rows:,}); send the push again later")
            raise BackpressureError(msg)
        if table is not None:
            table = table.append_column(
                ARRIVAL_WATERMARK, pa.array([self.watermark] * n, type=pa.int64()))
            self._advance(table)
        if watermark is not None:
            self.watermark = max(self.watermark, watermark)
        if end:
            self.ended = True
            self.watermark = TIME_MAX
        return _Push(table, fit.errors, watermark, end)

    def _flagged(self, table: pa.Table | None, delete: bool) -> pa.Table | None:
        """Rows (``delete`` false) or deletes in the stream's columns, with ``_delete``."""
        if table is None:
            return None
        n = table.num_rows
        full = arrow_schema(self.schema)
        columns = [table.column(f.name) if f.name in table.column_names
                   else pa.nulls(n, type=f.type) for f in full]
        return pa.Table.from_arrays([*columns, pa.array([delete] * n, type=pa.bool_())],
                                    names=[*full.names, DELETE])

    def _advance(self, table: pa.Table) -> None:
        """Raise the watermark by the push's largest on-time event time minus the lateness."""
        times = pc.cast(table.column(self.time_col), pa.int64())  # timestamps: microseconds
        on_time = pc.filter(times, pc.greater_equal(times, self.watermark))
        largest = pc.max(on_time).as_py()
        if largest is not None:
            self.watermark = max(self.watermark, largest - self.lateness)

    def has_pending(self) -> bool:  # noqa: D102
        return bool(self.queue)

    def poll(self) -> SourceBatch:  # noqa: D102
        return self._batch(self._take())

    def _take(self) -> list[_Push]:
        """The queued pushes the next cycle takes (at least one, if any)."""
        with self.lock:
            taken: list[_Push] = []
            rows = 0
            while self.queue and (not taken or rows < self.limits.max_rows_per_cycle):
                push = self.queue.popleft()
                taken.append(push)
                rows += _held(push)
            self.queued_rows -= rows
        return taken

    def _batch(self, taken: list[_Push], span: tuple[int, int] | None = None) -> SourceBatch:
        """One cycle's batch of the pushes ``taken``."""
        tables = [p.table for p in taken if p.table is not None]
        marks = [p.watermark for p in taken if p.watermark is not None]
        rejected = tuple(e for p in taken for e in p.rejected)
        arrow = pa.concat_tables(tables) if tables else None
        df = self.spark.createDataFrame(arrow) if arrow is not None else None
        return SourceBatch(df, max(marks) if marks else None, any(p.end for p in taken),
                           rejected, arrow, span)

    def position(self) -> dict[str, Any]:
        """The watermark in force for the next push, and whether the input ended; pushes
        not yet taken by a cycle are not part of it (they are lost with the process).
        """
        return {"watermark": self.watermark, "ended": self.ended}

    def seek(self, position: dict[str, Any]) -> None:  # noqa: D102
        with self.lock:
            self.watermark = max(self.watermark, int(position["watermark"]))
            self.ended = self.ended or bool(position["ended"])

    def describe(self, batch: SourceBatch, folder: str) -> dict[str, Any]:
        """The batch's rows as an Arrow file under ``folder`` (a write-ahead log of the
        pushed rows a cycle took), its watermark and end; refused rows are not kept.
        """
        path = None
        if batch.arrow is not None:
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"{self.name.lower()}.arrow")
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, batch.arrow.schema) as w:
                w.write_table(batch.arrow)
        return {"arrow": path, "watermark": batch.watermark, "end": batch.end,
                "after": self.position()}

    def replay(self, described: dict[str, Any]) -> SourceBatch:  # noqa: D102
        arrow = None
        if described["arrow"] is not None:
            with pa.memory_map(described["arrow"]) as f:
                arrow = pa.ipc.open_file(f).read_all()
        self.seek(described["after"])
        df = self.spark.createDataFrame(arrow) if arrow is not None else None
        return SourceBatch(df, described["watermark"], described["end"], (), arrow)
