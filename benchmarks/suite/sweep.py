"""Throughput versus latency: one windowed aggregate fed at increasing rates until its p99
cycle latency exceeds 5 s or it falls behind the offered rate.

The aggregate is the sliding 60 s / 10 s AVG per key over 1000 keys. sparkcq reads a
generator stream in real-time pace (event time follows the wall clock; a cycle takes what
was generated since the last one); Spark Structured Streaming reads its ``rate`` source
(rows stamped with the wall clock) with back-to-back micro-batches; both write to their
memory sinks. A rate step runs a warm-up (discarded: start-up and the backlog it leaves),
then the measured interval. Flink is not in the sweep: its pipeline has no cycles to time
from outside.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sparkcq import Engine

LIMIT_S = 5.0
QUERY = ("RSTREAM SELECT k, avg(v) AS a FROM events "
         "[RANGE 60 SECONDS SLIDE 10 SECONDS] GROUP BY k")


@dataclass
class SweepPoint:
    """One engine at one offered rate."""

    engine: str
    rate: int  # offered events/s
    achieved: float  # events/s processed in the measured interval
    cycles: list[float]

    def latency(self, q: float) -> float:  # noqa: D102
        if len(self.cycles) == 1:
            return self.cycles[0]
        return statistics.quantiles(self.cycles, n=100, method="inclusive")[int(q * 100) - 1]

    @property
    def keeps_up(self) -> bool:
        """Within the latency limit and processing (nearly) all that is offered."""
        return self.latency(0.99) <= LIMIT_S and self.achieved >= 0.9 * self.rate


def sweep_sparkcq(spark: SparkSession, rate: int, warmup_s: float, measure_s: float
                  ) -> SweepPoint:
    """The engine cycling over a real-time generator at ``rate`` events/s."""
    eng = Engine(spark=spark)
    eng.execute(f"CREATE STREAM events (k INT, v DOUBLE, ts TIMESTAMP) WITH (event_time='ts', "
                f"source='generator', rate='{rate}', keys='1000')")
    eng.execute(f"CREATE QUERY q AS {QUERY}")
    began = time.monotonic()
    while time.monotonic() - began < warmup_s:
        eng.run_cycle()
    measured = time.monotonic()
    reports = []
    while time.monotonic() - measured < measure_s:
        reports.append(eng.run_cycle())
    elapsed = time.monotonic() - measured
    eng.stop()
    return SweepPoint("sparkcq", rate, sum(r.rows_in for r in reports) / elapsed,
                      [r.seconds for r in reports])


def sweep_spark(spark: SparkSession, rate: int, warmup_s: float, measure_s: float
                ) -> SweepPoint:
    """Structured Streaming over the ``rate`` source at ``rate`` rows/s."""
    source = (spark.readStream.format("rate").option("rowsPerSecond", rate).load()
              .select((F.col("value") % 1000).cast("int").alias("k"),
                      (F.abs(F.xxhash64("value")) % 100_000 / 1000.0).alias("v"),
                      F.col("timestamp").alias("ts")))
    result = (source.withWatermark("ts", "1 second")
              .groupBy(F.window("ts", "60 seconds", "10 seconds"), "k")
              .agg(F.avg("v").alias("a")))
    query = (result.writeStream.outputMode("append").format("memory")
             .queryName("bench_sweep").start())
    time.sleep(warmup_s)
    seen = {p["batchId"] for p in query.recentProgress}
    time.sleep(measure_s)
    query.stop()
    batches = [p for p in query.recentProgress if p["batchId"] not in seen]
    spark.catalog.dropTempView("bench_sweep")
    rows = sum(p["numInputRows"] for p in batches)
    return SweepPoint("spark", rate, rows / measure_s,
                      [p["durationMs"]["triggerExecution"] / 1000 for p in batches] or [0.0])


def sweep(spark: SparkSession, rates: list[int], warmup_s: float, measure_s: float
          ) -> list[SweepPoint]:
    """Every engine at each rate, an engine stopping after the first rate it cannot take."""
    points = []
    for engine, run in (("sparkcq", sweep_sparkcq), ("spark", sweep_spark)):
        for rate in rates:
            point = run(spark, rate, warmup_s, measure_s)
            points.append(point)
            print(f"sweep {engine} {rate:,} events/s offered: {point.achieved:,.0f} achieved, "
                  f"p50 / p99 cycle {point.latency(0.5):.2f} / {point.latency(0.99):.2f} s",
                  flush=True)
            if not point.keeps_up:
                break
    return points


def sweep_table(points: list[SweepPoint]) -> list[str]:
    """Markdown: the sweep per engine, and the highest rate each sustained."""
    lines = ["## Throughput versus latency", "",
             "Sliding 60 s / 10 s AVG per key, 1000 keys, input at a fixed offered rate "
             "(sparkcq: real-time generator; Spark: `rate` source); p99 of the cycle / "
             f"micro-batch durations; an engine stops at the first rate where p99 > {LIMIT_S:g} "
             "s or it processes under 90 % of what is offered.", "",
             "| engine | offered events/s | achieved events/s | p50 / p99 cycle | keeps up |",
             "|---|---|---|---|---|"]
    for p in points:
        lines.append(f"| {p.engine} | {p.rate:,} | {p.achieved:,.0f} | "
                     f"{p.latency(0.5):.2f} / {p.latency(0.99):.2f} s | "
                     f"{'yes' if p.keeps_up else 'no'} |")
    best = {}
    for p in points:
        if p.keeps_up:
            best[p.engine] = max(best.get(p.engine, 0), p.rate)
    if best.get("sparkcq") and best.get("spark"):
        lines += ["", f"Highest rate kept up: sparkcq {best['sparkcq']:,}, Spark "
                      f"{best['spark']:,} events/s (ratio "
                      f"{best['sparkcq'] / best['spark']:.2f})."]
    return lines


def plot_sweep(path: str, points: list[SweepPoint]) -> None:
    """p99 cycle latency against the achieved rate, one line per engine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for engine, label in (("sparkcq", "sparkcq"), ("spark", "Spark SS")):
        mine = [p for p in points if p.engine == engine]
        ax.plot([p.achieved for p in mine], [p.latency(0.99) for p in mine], marker="o",
                label=label)
    ax.axhline(LIMIT_S, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("achieved events/s")
    ax.set_ylabel("p99 cycle latency (s)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
