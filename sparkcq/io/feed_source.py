"""The source of a stream fed over the network (``CREATE STREAM s WITH (source='feed')``).

It is the memory source's queue with two additions. The schema arrives with the feed's
first HEADER (until then the stream is ``not connected``). And with a spool folder, every
group of accepted messages is written to the spool (``io/spool.py``) before it is
acknowledged: a batch a cycle took is described by its spool numbers, a checkpoint's
position is a spool number, the entries before the newest checkpoint's are trimmed, and
after a crash the entries after it are queued again. So every acknowledged row is
processed, and, with the checkpoint's replay of logged cycles, processed once.

Message numbers (``seq``) of each producer are kept with the entries: a message sent again
after a reconnect, whose number the spool already holds, is acknowledged and not taken twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from sparkcq.errors import BackpressureError, FeedError
from sparkcq.io.ingest import arrow_schema
from sparkcq.io.sources import IngestLimits, MemorySource, PushReceipt, _held, _Push
from sparkcq.io.spool import Spool
from sparkcq.model.columns import ARRIVAL_WATERMARK
from sparkcq.model.rows import RowError
from sparkcq.runtime.cycle_input import SourceBatch


@dataclass(frozen=True)
class FeedInput:
    """One message's worth of input: rows (JSON objects or Arrow), a watermark, the end."""

    rows: list[Any] | pa.Table | None = None
    watermark: int | None = None
    end: bool = False
    seq: int | None = None  # the producer's number for the message
    deletes: list[Any] | None = None  # keys whose rows end (a keyed stream)


@dataclass(frozen=True)
class FeedReceipt(PushReceipt):
    """A push receipt that also says whether the message was a resend already held."""

    duplicate: bool = False


class FeedSource(MemorySource):
    """Rows from feed connections, spooled before they are acknowledged (if ``spool``)."""

    def __init__(self, spark: SparkSession, name: str, spool: Spool | None,
                 limits: IngestLimits | None = None, max_spool_bytes: int = 1 << 30):
        super().__init__(spark, name, StructType([]), "", 0, limits)
        self.spool = spool
        self.max_spool_bytes = max_spool_bytes
        self.polled_to = 0  # spool number after the last polled entry
        self.loaded = False
        # the highest message number taken from each producer (the spool's survive a crash)
        self.producers: dict[str, int] = dict(spool.producers) if spool is not None else {}
        self.connections = 0  # open feed connections (the server counts them)
        self.stopped = False  # a STOP came and no data since

    @property
    def connected(self) -> bool:
        """Whether the stream has a schema (a HEADER arrived)."""
        return bool(self.schema.fields)

    def stop(self) -> None:
        """A STOP came: the stream's queries pause until data comes again."""
        self.stopped = True

    def set_schema(self, schema: StructType, time_col: str, lateness: int,
                   key: tuple[str, ...] = ()) -> None:
        """Take the schema a HEADER declared; the first time, queue what the spool holds."""
        with self.lock:
            self.schema, self.time_col, self.lateness, self.key = schema, time_col, lateness, key
            self.delete_schema = StructType([f for f in schema.fields
                                             if f.name in {*key, time_col}])
        if not self.loaded and self.spool is not None:
            self.loaded = True
            seqs = self.spool.seqs()
            # from the checkpoint's position if a restart sought one before this HEADER
            self.polled_to = max(self.polled_to, seqs[0] if seqs else self.spool.next_seq)
            self._requeue(self.polled_to)

    def _requeue(self, start: int) -> None:
        """Queue the spool's entries from ``start`` on again (after a restart)."""
        assert self.spool is not None
        with self.lock:
            self.queue.clear()
            self.queued_rows = 0
            for seq in self.spool.seqs():
                if seq < start:
                    continue
                entry = self.spool.read(seq)
                push = _Push(entry.table, entry.rejected, entry.watermark, entry.end, seq)
                self.queue.append(push)
                self.queued_rows += _held(push)
                if entry.table is not None:
                    self.watermark = max(self.watermark, *entry.table.column(
                        ARRIVAL_WATERMARK).to_pylist())
                    self._advance(entry.table)
                if entry.watermark is not None:
                    self.watermark = max(self.watermark, entry.watermark)
                self.ended = self.ended or entry.end

    def push(self, rows: Any, watermark: int | None = None, end: bool = False,
             deletes: Any = None) -> PushReceipt:
        """A push from Python or the HTTP rows route: one message, spooled like the others."""
        return self.push_group([FeedInput(rows, watermark, end, None, deletes)], None)[0]

    def push_group(self, inputs: Sequence[FeedInput], producer: str | None) -> list[FeedReceipt]:
        """Take several messages of one producer at once: one spool append (one flush to
        disk) for all, then one receipt each. When the queue fills up on the way, only the
        messages before are taken (fewer receipts: send the rest again later);
        ``BackpressureError`` when not even the first fits or the spool is full.
        """
        if not self.connected:
            msg = f"stream {self.name!r} has no schema yet: send a HEADER before rows"
            raise FeedError(msg)
        doors = [self._door(one.rows, one.deletes) for one in inputs]
        with self.lock:
            held = self.producers_seq(producer)
            if self.spool is not None and self.spool.bytes > self.max_spool_bytes:
                msg = (f"stream {self.name!r}: the spool holds {self.spool.bytes:,} bytes "
                       f"(at most {self.max_spool_bytes:,}); send again later")
                raise BackpressureError(msg)
            saved = (self.watermark, self.ended)
            pushes: list[_Push] = []
            receipts: list[FeedReceipt] = []
            top = held
            extra = 0
            try:
                for one, (fit, removed) in zip(inputs, doors, strict=True):
                    if one.seq is not None and one.seq <= top:
                        receipts.append(FeedReceipt(0, (), duplicate=True))
                        continue
                    try:
                        push = self._admit(fit, one.watermark, one.end, extra)
                    except BackpressureError:
                        if not receipts:
                            raise
                        break  # the queue is full: the messages before are taken
                    extra += _held(push)
                    pushes.append(push)
                    top = max(top, one.seq or 0)
                    taken = self.receipt(push, fit, removed)
                    receipts.append(FeedReceipt(taken.accepted, taken.rejected, taken.deleted,
                                                taken.late, taken.late_rows))
            except BaseException:
                self.watermark, self.ended = saved
                raise
            if not pushes:
                return receipts
            self.stopped = False  # data resumes
            group = _merge(pushes)
            if self.spool is not None:
                try:
                    group.seq = self.spool.append(
                        group.table, arrow_schema(self.schema).append(
                            pa.field(ARRIVAL_WATERMARK, pa.int64())),
                        group.watermark, group.end, group.rejected,
                        {producer: top} if producer and top else {})
                except BaseException:
                    self.watermark, self.ended = saved
                    raise
            self.queue.append(group)
            self.queued_rows += _held(group)
            if producer and top:
                self.producers[producer] = top
        return receipts

    def refuse_message(self, reason: str, raw: str) -> None:
        """Keep a message that could not be read as a dead letter of the stream."""
        error = RowError(0, None, f"message refused: {reason}", raw)
        with self.lock:
            push = _Push(None, (error,), None, False)
            if self.spool is not None:
                push.seq = self.spool.append(
                    None, arrow_schema(self.schema).append(pa.field(ARRIVAL_WATERMARK,
                                                                     pa.int64())),
                    None, False, (error,), {})
            self.queue.append(push)
            self.queued_rows += 1

    def producers_seq(self, producer: str | None) -> int:
        """The highest message number of ``producer`` already held (0: none)."""
        return self.producers.get(producer, 0) if producer is not None else 0

    def poll(self) -> SourceBatch:  # noqa: D102
        taken = self._take()
        seqs = [p.seq for p in taken if p.seq is not None]
        span = None
        if seqs:
            span = (seqs[0], seqs[-1] + 1)
            self.polled_to = span[1]
        return self._batch(taken, span)

    def position(self) -> dict[str, Any]:
        """The spool number the next poll starts at, and the watermark and end after the
        last polled entry.
        """
        return {**super().position(), "seq": self.polled_to}

    def seek(self, position: dict[str, Any]) -> None:
        """Continue from a checkpoint's position: queue the spool's entries from its number
        on again; before the stream's HEADER (the journal gives it after the checkpoint),
        only keep the number: the HEADER queues them (rows cannot be read without a schema).
        """
        super().seek(position)
        if self.spool is not None and "seq" in position:
            self.polled_to = int(position["seq"])
            if self.loaded:
                self._requeue(self.polled_to)

    def describe(self, batch: SourceBatch, folder: str) -> dict[str, Any]:
        """The batch's spool numbers: the spool keeps the entries until a checkpoint is past
        them; without a spool the rows are written under ``folder`` as the memory source's.
        """
        if self.spool is None or batch.span is None:
            return super().describe(batch, folder)
        return {"spool": list(batch.span), "watermark": batch.watermark, "end": batch.end,
                "after": self.position()}

    def start_of(self, described: dict[str, Any]) -> dict[str, Any] | None:
        """The spool number of a batch's first entry: the spool keeps it from there."""
        return {"seq": int(described["spool"][0])} if "spool" in described else None

    def replay(self, described: dict[str, Any]) -> SourceBatch:  # noqa: D102
        if "spool" not in described:
            return super().replay(described)
        first, after = described["spool"]
        with self.lock:  # the entries are at the front of the queue since the seek
            while self.queue and (self.queue[0].seq or 0) < after:
                self.queued_rows -= _held(self.queue.popleft())
        assert self.spool is not None
        pushes = [self._entry_push(seq) for seq in range(first, after)
                  if seq in self.spool.sizes]
        self.polled_to = after
        super().seek(described["after"])
        return self._batch(pushes, (first, after))

    def _entry_push(self, seq: int) -> _Push:
        assert self.spool is not None
        entry = self.spool.read(seq)
        return _Push(entry.table, entry.rejected, entry.watermark, entry.end, seq)

    def release_before(self, position: dict[str, Any]) -> None:
        """No restart needs the input before ``position`` any more: trim the spool."""
        if self.spool is not None and "seq" in position:
            self.spool.trim(int(position["seq"]))

    def delete(self) -> None:
        """The stream was removed: drop what it queued and its spool."""
        with self.lock:
            self.queue.clear()
            self.queued_rows = 0
        if self.spool is not None:
            self.spool.delete()


def _merge(pushes: list[_Push]) -> _Push:
    """Consecutive pushes as one queue entry (one spool append)."""
    if len(pushes) == 1:
        return pushes[0]
    tables = [p.table for p in pushes if p.table is not None]
    marks = [p.watermark for p in pushes if p.watermark is not None]
    return _Push(pa.concat_tables(tables) if tables else None,
                 tuple(e for p in pushes for e in p.rejected),
                 max(marks) if marks else None, any(p.end for p in pushes))


def spool_size(source: FeedSource) -> int:
    """Bytes a feed's spool holds (0 without one)."""
    return source.spool.bytes if source.spool is not None else 0

