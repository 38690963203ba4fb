"""Helpers that make a stream test a few lines: a list-backed source and a collecting sink.

from sparkcq.testing import ListSource, Watermark, EndOfInput, CollectingSink
eng.attach_source("s", ListSource([{"k": "a", "t": 1}, Watermark(5), EndOfInput()]))
eng.register_sink("out", sink := CollectingSink())
eng.execute("CREATE QUERY q INTO out AS SELECT * FROM s")
eng.run_until_idle()
sink.frame("q")
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StructField,
    StructType,
)

from sparkcq.io.sinks import QueryOutput, Sink
from sparkcq.io.sources import Source, to_pandas
from sparkcq.model.columns import DELETE
from sparkcq.runtime.cycle_input import SourceBatch


@dataclass(frozen=True)
class Watermark:
    """A marker in a ListSource: no later event has event time below ``time``."""

    time: int


@dataclass(frozen=True)
class EndOfCycle:
    """A marker in a ListSource: this cycle's delivery ends here (with no rows, if none
    precede it), so a test decides in which cycle each row arrives.
    """


@dataclass(frozen=True)
class Delete:
    """An item of a ListSource feeding a keyed stream: a delete of ``row``'s key (its key
    columns and event time) at its event time, delivered with the rows around it.
    """

    row: dict[str, Any]


@dataclass(frozen=True)
class EndOfInput:
    """A marker in a ListSource: the stream is complete (watermark +inf)."""


class ListSource(Source):
    """Delivers a list of rows and markers: one cycle takes the rows up to the next marker
    (``Watermark``, ``EndOfCycle``, ``EndOfInput``) or ``rows_per_cycle`` rows, so tests
    choose exactly how input is cut into cycles.
    """

    def __init__(self, items: list[Any], rows_per_cycle: int | None = None,
                 on_driver: bool = True):
        self.items = list(items)
        self.rows_per_cycle = rows_per_cycle
        # rows also handed over as Arrow, so the scan counts them on the driver as it does
        # pushed rows; False: the cycle's commit measures them, as it does a file's
        self.on_driver = on_driver
        self.pos = 0
        self.attached: tuple[Any, Any, str] | None = None
        # a list with deletes (of a keyed stream) flags every row it delivers in ``_delete``
        self.deletes = any(isinstance(item, Delete) for item in self.items)

    def attach(self, spark: Any, schema: Any, name: str) -> None:
        """Called by the engine with the stream it feeds."""
        self.attached = (spark, schema, name)

    def has_pending(self) -> bool:  # noqa: D102
        return self.pos < len(self.items)

    def poll(self) -> SourceBatch:  # noqa: D102
        assert self.attached is not None, "attach the ListSource with Engine.attach_source"
        spark, schema, name = self.attached
        rows: list[Any] = []
        flags: list[bool] = []
        watermark, end = None, False
        while self.pos < len(self.items):
            item = self.items[self.pos]
            self.pos += 1
            if isinstance(item, Watermark):
                watermark = item.time
                break
            if isinstance(item, EndOfInput):
                end = True
                break
            if isinstance(item, EndOfCycle):
                break
            flags.append(isinstance(item, Delete))
            rows.append(item.row if isinstance(item, Delete) else item)
            if self.rows_per_cycle and len(rows) >= self.rows_per_cycle:
                break
        if not rows:
            return SourceBatch(None, watermark, end)
        given = [{f.name: row.get(f.name) for f in schema.fields} if flag else row
                 for row, flag in zip(rows, flags, strict=True)]
        frame = to_pandas(given, schema, name)
        if self.deletes:
            frame = frame.assign(**{DELETE: flags})
            schema = StructType([*schema.fields, StructField(DELETE, BooleanType())])
        df = spark.createDataFrame(frame, schema)
        return SourceBatch(df, watermark, end,
                           arrow=on_driver_rows(frame, schema) if self.on_driver else None)


def on_driver_rows(frame: pd.DataFrame, schema: StructType) -> pa.Table:
    """The rows as Arrow, integral columns as integers (pandas holds an integer column
    with a missing value as floats; NaN is null here).
    """
    table = pa.Table.from_pandas(frame, preserve_index=False)
    for f in schema.fields:
        if isinstance(f.dataType, ByteType | ShortType | IntegerType | LongType):
            i = table.schema.get_field_index(f.name)
            table = table.set_column(i, f.name, pc.cast(table.column(i), pa.int64()))
    return table


@dataclass
class CollectingSink(Sink):
    """Collects every committed record, per query and per cycle."""

    cycles: dict[str, list[tuple[int, pd.DataFrame]]] = field(default_factory=dict)

    def write(self, cycle: int, records: dict[str, tuple[QueryOutput, pd.DataFrame]]) -> None:  # noqa: D102
        for name, (_out, frame) in records.items():
            self.cycles.setdefault(name, []).append((cycle, frame))

    def frame(self, query: str) -> pd.DataFrame:
        """All records of ``query`` in commit order."""
        parts = [f for _, f in self.cycles.get(query, [])]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


class PushesInCycles(Protocol):
    """What ``push_in_cycles`` drives: an ``Engine``'s pushes and cycles."""

    def push(self, stream: str, rows: Any, watermark: Any = None) -> object: ...  # noqa: D102

    def run_until_idle(self) -> int: ...  # noqa: D102

    def end_input(self, stream: str) -> None: ...  # noqa: D102


def push_in_cycles(engine: PushesInCycles, stream: str, rows: Sequence[dict[str, Any]],
                   cuts: Sequence[int], time: str = "t") -> None:
    """Push ``rows`` into ``stream`` a cycle per cut, then end it: before each cut, the
    rows whose ``time`` lies before it (and at or after the cut before), with the cut as the
    watermark; every cycle a push makes runs. A result that must not depend on how input
    was cut into cycles is tested with several ``cuts`` (the last one after every row).
    """
    start = None
    for cut in cuts:
        batch = [r for r in rows if (start is None or start <= r[time]) and r[time] < cut]
        engine.push(stream, batch, watermark=cut)
        engine.run_until_idle()
        start = cut
    engine.end_input(stream)
    engine.run_until_idle()


@dataclass(frozen=True)
class Lag:
    """From ``since`` on (an instant), a partner lies ``low`` to ``high`` time units behind
    its tuple (``[low, high)``).
    """

    since: int
    low: int
    high: int


def correlated_streams(seed: int, length: int, per_unit: float, lags: list[Lag],
                       keys: int = 10, noise: float = 1.0,
                       ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two streams ``a`` and ``b`` (rows ``k``, ``v``, ``t``) over ``[0, length)`` whose join
    on ``a.k = b.k AND a.v = b.v`` is time-correlated, for load-shedding tests and
    benchmarks (``docs/shedding.md``).

    ``a`` has ``per_unit`` tuples per time unit; each has one partner in ``b`` (same key and
    value) lying behind it by a lag drawn from the ``Lag`` in force at its time (so the
    correlation can shift mid-run); ``b`` also has ``noise`` unmatched tuples per ``a``
    tuple, on the same keys. Values are unique per partner pair; each list is sorted by
    time.
    """
    rng = random.Random(seed)
    a_rows: list[dict[str, Any]] = []
    b_rows: list[dict[str, Any]] = []
    count = int(length * per_unit)
    for i in range(count):
        t = rng.randrange(length)
        k = f"k{rng.randrange(keys)}"
        lag = max((g for g in lags if g.since <= t), key=lambda g: g.since)
        a_rows.append({"k": k, "v": i, "t": t})
        partner = t - rng.randrange(lag.low, lag.high)
        if partner >= 0:
            b_rows.append({"k": k, "v": i, "t": partner})
    for j in range(int(count * noise)):
        b_rows.append({"k": f"k{rng.randrange(keys)}", "v": -1 - j,
                       "t": rng.randrange(length)})
    return sorted(a_rows, key=lambda r: r["t"]), sorted(b_rows, key=lambda r: r["t"])
