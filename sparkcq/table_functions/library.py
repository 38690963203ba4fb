"""Table functions that ship with sparkcq, written as a user would write theirs.

Each follows the protocol of ``sparkcq.table_functions.user``; every engine may load them
by name::

    CREATE FUNCTION dedup(of STRING, tolerance BIGINT, horizon BIGINT)
        RETURNS TABLE (callee STRING, start BIGINT)
        USING 'sparkcq.table_functions.library:Deduplicate';
    SELECT * FROM dedup(TABLE calls [CUT ON t BY 5] PARTITION BY caller, 'start', 1, 60);
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pandas as pd

from sparkcq.table_functions.user import Chunk


def _number(v: Any) -> Any:
    """A value to measure distances on: a timestamp as microseconds, a number as is."""
    if isinstance(v, pd.Timestamp):
        return v.value // 1000
    return v


class Deduplicate:
    """Drops a key's rows that repeat one seen shortly before: the telecom probes' duplicate
    call records (same caller, callee and start time within a tolerance, from two probes).

    ``Deduplicate(of, tolerance, horizon)``: a row is a duplicate when an earlier row of its
    key (in this chunk or in one cut less than ``horizon`` before it) has a value of column
    ``of`` within ``tolerance`` of its own; duplicates are dropped, every other row is emitted
    (the columns the function declares, picked by name). ``tolerance`` and ``horizon`` are in
    the stream's time units (microseconds for a timestamp), ``of`` numeric or a timestamp.
    The state is the values seen within the horizon: its memory follows the key's rate, not
    the stream's length.
    """

    def __init__(self, of: str, tolerance: int, horizon: int) -> None:
        if tolerance < 0 or horizon <= 0:
            msg = f"Deduplicate needs tolerance >= 0 and horizon > 0, got {tolerance}, {horizon}"
            raise ValueError(msg)
        self.of = of
        self.tolerance = tolerance
        self.horizon = horizon
        self.seen: deque[tuple[int, Any]] = deque()  # (cut point, value), oldest first
        self.at = 0

    def begin_chunk(self, chunk: Chunk) -> None:
        self.at = chunk.at
        while self.seen and self.seen[0][0] <= chunk.at - self.horizon:
            self.seen.popleft()

    def process(self, rows: pd.DataFrame) -> pd.DataFrame:
        if self.of not in rows.columns:
            msg = f"Deduplicate: no column {self.of!r}; the input has {', '.join(rows.columns)}"
            raise KeyError(msg)
        keep = []
        for v in rows[self.of]:
            x = _number(v)
            repeated = x is not None and any(
                y is not None and abs(x - y) <= self.tolerance for _, y in self.seen)
            keep.append(not repeated)
            self.seen.append((self.at, x))
        return rows[keep]


class ExponentialAverage:
    """A key's exponentially weighted moving average of column ``of``, after each chunk.

    ``ExponentialAverage(of, alpha)``: each row, in the chunk's order, moves the average
    ``alpha`` of the way to its value (the first row sets it); NULLs are skipped. At the end
    of every chunk with a value it emits ``average`` (DOUBLE) and ``samples`` (BIGINT, the
    values the chunk gave). Unlike ``avg`` over a window, it weighs all history, recent
    values most, in one number per key.
    """

    def __init__(self, of: str, alpha: float) -> None:
        if not 0 < alpha <= 1:
            msg = f"ExponentialAverage needs 0 < alpha <= 1, got {alpha}"
            raise ValueError(msg)
        self.of = of
        self.alpha = alpha
        self.average: float | None = None
        self.samples = 0

    def begin_chunk(self, chunk: Chunk) -> None:
        self.samples = 0

    def process(self, rows: pd.DataFrame) -> None:
        for v in rows[self.of]:
            if v is None or pd.isna(v):
                continue
            x = float(v)
            self.average = x if self.average is None else \
                self.average + self.alpha * (x - self.average)
            self.samples += 1

    def end_chunk(self) -> dict[str, Any] | None:
        if not self.samples:
            return None
        return {"average": self.average, "samples": self.samples}
