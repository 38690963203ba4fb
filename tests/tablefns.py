"""Table functions for the tests, written as a user would: plain classes with ``process``
and, where they need them, ``begin_chunk`` and ``end_chunk``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd


class Fold:
    """Per key, a number folded over every value it has seen, in order: after each chunk it
    emits the chunks seen so far, the chunk's rows and the fold. The fold depends on every
    row's place in the whole history, so a chunk cut otherwise, a row out of order or a
    state lost or applied twice changes it.
    """

    def __init__(self, base: int) -> None:
        self.base = base
        self.acc = 0
        self.chunks = 0
        self.rows = 0

    def begin_chunk(self, chunk: Any) -> None:
        self.chunks += 1
        self.rows = 0

    def process(self, rows: pd.DataFrame) -> None:
        for v in rows["v"]:
            self.acc = (self.acc * self.base + int(v) + 1) % 1_000_003
            self.rows += 1

    def end_chunk(self) -> tuple[int, int, int]:
        return [(self.chunks, self.rows, self.acc)]  # type: ignore[return-value]


class Trace:
    """Emits one row per call, naming it: what a chunk's call sequence was. Batches of at
    most two rows (``batch_rows``), so a chunk of three rows is processed in two calls.
    """

    batch_rows = 2

    def __init__(self) -> None:
        self.calls = 0  # query scope: across chunks and cycles

    def begin_chunk(self, chunk: Any) -> None:
        self.calls += 1
        self.chunk = f"{chunk.at}:{chunk.rows}"  # chunk scope

    def process(self, rows: pd.DataFrame) -> list[tuple[str, int]]:
        self.calls += 1
        return [(f"process {self.chunk} {','.join(map(str, rows['v']))}", self.calls)]

    def end_chunk(self) -> dict[str, Any]:
        self.calls += 1
        return {"call": f"end {self.chunk}", "n": self.calls}


class Fragile:
    """Passes rows through, and raises on a value of 7 (a bug in user code)."""

    def process(self, rows: pd.DataFrame) -> pd.DataFrame:
        if (rows["v"] == 7).any():
            msg = "cannot take 7"
            raise ValueError(msg)
        return rows


class Liar:
    """Declares a BIGINT column and emits a string."""

    def process(self, rows: pd.DataFrame) -> list[tuple[str]]:
        return [("many",)]
