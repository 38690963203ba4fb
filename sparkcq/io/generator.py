"""A deterministic synthetic stream generated inside Spark, for demos and benchmarks.

Row ``i`` of the stream is a pure function of ``i`` (and the seed): its event time is
``start + i * (1 s / rate)`` and every other column is computed by a Spark SQL expression over
``id``, so the same settings always give the same stream, whatever the cycle sizes, and no
data passes through Python. Options (``CREATE STREAM ... WITH (source='generator', ...)``):

- ``rate``: events per second of event time (default 1000);
- ``keys``: number of distinct keys for generated key columns (default 100);
- ``skew``: 0 for uniform keys; s > 0 draws key k with weight ~ 1/(k+1)^s (default 0);
- ``pace``: ``realtime`` (event time follows the wall clock, the default) or ``fast``
  (each cycle produces ``batch`` events as fast as it can);
- ``batch``: events per cycle when ``pace='fast'`` (default = rate);
- ``limit``: stop after this many events (then the stream ends);
- ``expr_<column>``: a Spark SQL expression over ``id`` (and ``rnd``, a uniform [0, 1)
  number derived from id and column) giving that column.
"""

from __future__ import annotations

import functools
import re
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sparkcq.errors import SourceError
from sparkcq.io.sources import Source
from sparkcq.runtime.cycle_input import SourceBatch
from sparkcq.runtime.frames import SqlViews, bound_sql, q, sql_literal

START_MICROS = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


class GeneratorSource(Source):
    """Generates rows from their ids (``ids``) at a configured rate and key skew."""

    def __init__(self, spark: SparkSession, name: str, schema: StructType, time_col: str,
                 options: dict[str, str], numeric_time: bool = False):
        self.spark = spark
        self.name = name
        self.schema = schema
        self.time_col = time_col
        self.numeric_time = numeric_time
        try:
            self.rate = float(options.get("rate", "1000"))
            self.keys = int(options.get("keys", "100"))
            self.skew = float(options.get("skew", "0"))
            self.batch = int(options.get("batch", str(max(1, int(self.rate)))))
            self.limit = int(options["limit"]) if "limit" in options else None
            self.seed = int(options.get("seed", "42"))
        except ValueError as e:
            msg = f"generator stream {name!r}: bad option value ({e})"
            raise SourceError(msg) from None
        self.pace = options.get("pace", "realtime").lower()
        if self.pace not in ("realtime", "fast"):
            msg = f"generator stream {name!r}: pace must be 'realtime' or 'fast'"
            raise SourceError(msg)
        self.exprs = {k[len("expr_"):].lower(): v for k, v in options.items()
                      if k.startswith("expr_")}
        self.own_time = time_col.lower() in self.exprs  # then watermarks come from lateness
        self.step = 1 if numeric_time else max(1, int(round(1_000_000 / self.rate)))
        self.next_id = 0
        self.last_first = 0  # the first id of the last poll's rows
        self.started: float | None = None
        self.ended = False

    def has_pending(self) -> bool:  # noqa: D102
        return not self.ended and (self.limit is None or self.pace == "fast")

    def _due(self) -> int:
        if self.pace == "fast":
            return self.next_id + self.batch
        now = time.monotonic()
        if self.started is None:
            self.started = now
        return int((now - self.started) * self.rate)

    def poll(self) -> SourceBatch:  # noqa: D102
        if self.ended:
            return SourceBatch()
        end = self._due()
        if self.limit is not None:
            end = min(end, self.limit)
        self.last_first = self.next_id
        if end <= self.next_id:
            return SourceBatch(None, self._time_at(self.next_id))
        df = self.rows(self.next_id, end)
        self.next_id = end
        done = self.limit is not None and end >= self.limit
        self.ended = done
        return SourceBatch(df, self._time_at(end), done, rows=end - self.last_first)

    def position(self) -> dict[str, Any]:
        """The id of the next row, and whether the stream ended."""
        return {"next_id": self.next_id, "ended": self.ended}

    def seek(self, position: dict[str, Any]) -> None:
        """Continue at row ``next_id``; a realtime pace goes on from the wall clock now."""
        self.next_id, self.ended = int(position["next_id"]), bool(position["ended"])
        self.started = time.monotonic() - self.next_id / self.rate

    def describe(self, batch: SourceBatch, folder: str) -> dict[str, Any]:
        """The rows polled last are ids [first, next_id): a pure function of the ids."""
        return {"first": self.last_first, "next_id": self.next_id, "watermark": batch.watermark,
                "end": batch.end}

    def replay(self, described: dict[str, Any]) -> SourceBatch:  # noqa: D102
        first, end = int(described["first"]), int(described["next_id"])
        self.seek({"next_id": end, "ended": described["end"]})
        df = None if end <= first else self.rows(first, end)
        return SourceBatch(df, described["watermark"], described["end"], rows=end - first)

    def rows(self, first: int, end: int) -> DataFrame:
        """Rows ``first`` to ``end - 1`` of the stream."""
        ids = ids_sql(self.slice_count, first, end)
        return self.views.sql(f"SELECT {self.columns} FROM ({ids})", inp=self.slices)

    @functools.cached_property
    def slices(self) -> DataFrame:
        """One row per slice of a batch's ids (``ids_sql``): the same frame every cycle, so
        a cycle builds none (each frame built is analysed in the JVM).
        """
        return self.spark.range(0, self.slice_count, 1, self.slice_count)

    @functools.cached_property
    def slice_count(self) -> int:
        """How many slices a batch's ids are split over: the session's parallelism."""
        return self.spark.sparkContext.defaultParallelism

    @functools.cached_property
    def views(self) -> SqlViews:
        """The rows' text, analysed once (the same every cycle but for the ids' bounds)."""
        return SqlViews(self.spark, "generator")

    @functools.cached_property
    def columns(self) -> str:
        """SQL for the stream's columns from ``id``: the same every cycle, built once."""
        return ", ".join(f"{self.column(f.name, f.dataType)} AS {q(f.name)}"
                         for f in self.schema.fields)

    def _time_at(self, i: int) -> int | None:
        if self.own_time:
            return None
        return i * self.step if self.numeric_time else START_MICROS + i * self.step

    def column(self, name: str, dtype: DataType) -> str:
        """SQL for the expression generating column ``name`` from ``id``."""
        rnd = (f"(abs(xxhash64(id, {self.seed}, {sql_literal(name)})) % 1000003 "
               "/ CAST(1000003.0 AS DOUBLE))")
        of = dtype.simpleString()
        if name.lower() in self.exprs:
            with_rnd = re.sub(r"\brnd\b", f"({_rnd_sql(self.seed, name)})",
                              self.exprs[name.lower()])
            return f"CAST(({with_rnd}) AS {of})"
        if name == self.time_col:
            micros = f"id * {self.step} + {0 if self.numeric_time else START_MICROS}"
            return f"CAST({micros} AS {of})" if self.numeric_time else f"timestamp_micros({micros})"
        key = (f"CAST(floor({self.keys} * pow({rnd}, CAST({1.0 + self.skew!r} AS DOUBLE))) "
               "AS BIGINT)")
        if isinstance(dtype, StringType):
            return f"concat({sql_literal(name + '_')}, CAST({key} AS STRING))"
        if isinstance(dtype, DoubleType | FloatType | DecimalType):
            return f"CAST({rnd} * CAST(100.0 AS DOUBLE) AS {of})"
        if isinstance(dtype, BooleanType):
            return f"{rnd} < CAST(0.5 AS DOUBLE)"
        if isinstance(dtype, TimestampType | TimestampNTZType):
            return f"timestamp_micros({START_MICROS} + id * {self.step})"
        return f"CAST({key} AS {of})"


def ids_sql(slices: int, first: int, end: int) -> str:
    """SQL for column ``id`` from ``first`` to ``end - 1`` over view ``{inp}`` (a range of
    one row per slice, 0 to ``slices - 1``), split over the slices.

    Not ``spark.range(first, end)``: its generated code holds the range as literals, so
    every cycle compiled its stage (the columns' expressions with it) afresh, 5-35 ms each.
    Here the range comes in as ``bound_sql`` values: the code is the same every cycle, and
    the text is analysed once (``SqlViews``).
    """
    per = -(-(end - first) // slices)
    lo = f"({bound_sql(first)} + id * {bound_sql(per)})"
    hi = f"least({lo} + {bound_sql(per)}, {bound_sql(end)})"
    return (f"SELECT explode(IF({lo} < {hi}, sequence({lo}, {hi} - 1), "
            "CAST(array() AS ARRAY<BIGINT>))) AS id FROM {inp}")


def _rnd_sql(seed: int, name: str) -> str:
    return f"abs(xxhash64(id, {seed}, '{name}')) % 1000003 / 1000003.0"
