"""Sources: where a stream's rows come from, polled once per cycle.

Contract: ``poll`` is called once at the start of every cycle and returns what arrived since
the last poll (rows as a Spark DataFrame, an explicit watermark, end of input). It must not
block. What it returned is handed to the stream's scan in the same cycle; ``has_pending``
tells the engine whether another cycle would receive anything.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from sparkcq.errors import SourceError
from sparkcq.runtime.operators.scan import SourceBatch


class Source:
    """Base class of sources."""

    def poll(self) -> SourceBatch:
        """Everything that arrived since the last poll; never blocks."""
        raise NotImplementedError(type(self).__name__)

    def has_pending(self) -> bool:
        """Whether the next poll would return anything."""
        return False

    def close(self) -> None:
        """Release resources (threads, sockets, files)."""


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


class MemorySource(Source):
    """Rows pushed from Python (``Engine.push``), delivered in push order.

    One poll delivers the pushes up to and including the first that carries a watermark or
    the end of input, so a watermark always applies to exactly the rows pushed before it.
    """

    def __init__(self, spark: SparkSession, name: str, schema: StructType):
        self.spark = spark
        self.name = name
        self.schema = schema
        self.queue: deque[tuple[pd.DataFrame | None, int | None, bool]] = deque()

    def push(self, rows: Iterable[Any] | pd.DataFrame | None, watermark: int | None = None,
             end: bool = False) -> None:
        """Queue rows (and optionally a watermark or the end of input) for the next cycle."""
        frame = to_pandas(rows, self.schema, self.name) if rows is not None else None
        if frame is not None and frame.empty:
            frame = None
        self.queue.append((frame, watermark, end))

    def has_pending(self) -> bool:  # noqa: D102
        return bool(self.queue)

    def poll(self) -> SourceBatch:  # noqa: D102
        frames: list[pd.DataFrame] = []
        watermark: int | None = None
        end = False
        while self.queue:
            frame, watermark, end = self.queue.popleft()
            if frame is not None:
                frames.append(frame)
            if watermark is not None or end:
                break
        if not frames:
            return SourceBatch(None, watermark, end)
        data = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        try:
            df = self.spark.createDataFrame(data, schema=self.schema)
        except (TypeError, ValueError) as e:
            msg = f"rows pushed to {self.name!r} do not fit its schema: {e}"
            raise SourceError(msg) from e
        return SourceBatch(df, watermark, end)
