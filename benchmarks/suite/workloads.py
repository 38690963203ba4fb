"""Workloads: one computation written for sparkcq, Spark Structured Streaming and Flink SQL,
with what its output rows are, so the three can be compared row for row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


@dataclass(frozen=True)
class Workload:
    """One benchmark computation; every engine's output becomes ``columns`` rows."""

    name: str
    title: str
    sparkcq: str  # CREATE QUERY body over stream ``events``
    spark: Callable[[DataFrame], DataFrame]  # streaming DataFrame -> result (append mode)
    flink: str  # SELECT over table ``events``
    flink_sink: str  # the sink table's columns
    columns: tuple[str, ...]  # output columns, ``w`` the window end
    expected: Callable[[pd.DataFrame], pd.DataFrame]  # from the raw events, independently


def _tumble_spark(df: DataFrame) -> DataFrame:
    return (df.withWatermark("ts", "1 second")
            .groupBy(F.window("ts", "10 seconds"), "k")
            .agg(F.sum("v").alias("s"), F.count(F.lit(1)).alias("n"))
            .select(F.col("window.end").alias("w"), "k", "s", "n"))


def _tumble_expected(events: pd.DataFrame) -> pd.DataFrame:
    w = events["ts"].dt.floor("10s") + pd.Timedelta(seconds=10)
    out = events.assign(w=w).groupby(["w", "k"]).agg(s=("v", "sum"), n=("v", "size"))
    return out.reset_index()[["w", "k", "s", "n"]]


TUMBLE = Workload(
    name="tumble",
    title="tumbling 10 s SUM and COUNT per key",
    sparkcq="RSTREAM SELECT k, sum(v) AS s, count(*) AS n "
            "FROM events [CUT ON ts BY 10 SECONDS] GROUP BY k",
    spark=_tumble_spark,
    flink="SELECT window_end, k, SUM(v), COUNT(*) FROM TABLE(TUMBLE(TABLE events, "
          "DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, k",
    flink_sink="w TIMESTAMP(3), k INT, s DOUBLE, n BIGINT",
    columns=("w", "k", "s", "n"),
    expected=_tumble_expected,
)

WORKLOADS = {w.name: w for w in (TUMBLE,)}
