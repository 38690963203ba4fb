"""The benchmark suite's instruments: what Spark did for a job group, and the output check
every engine's result goes through.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import functions as F

from benchmarks.demo_cycles import parse_cycles, report
from benchmarks.suite.compare import differences, leave_out_unemitted, normalised
from benchmarks.suite.from_log import sized_runs
from benchmarks.suite.marginal import SizedRuns, marginal_rate, marginal_table
from benchmarks.suite.spark_work import job_group, spark_work
from sparkcq.runtime.spark_work import busy_ms


def test_busy_time_is_the_union_of_job_intervals():
    assert busy_ms([(30, 40), (0, 10), (5, 20), (12, 15)]) == 30
    assert busy_ms([]) == 0


def test_the_marginal_rate_cancels_start_up_for_every_engine():
    # 1M events in 12 s and 5M in 32 s: 4M events in the 20 s more, 200,000/s; start-up 7 s
    m = marginal_rate((1_000_000, 12.0), (5_000_000, 32.0))
    assert m is not None and m.events_per_s == 200_000 and m.startup_s == 7.0
    # an engine that hides 5 s more of its work in "start-up" gets the same rate
    hidden = marginal_rate((1_000_000, 17.0), (5_000_000, 37.0))
    assert hidden is not None and hidden.events_per_s == 200_000 and hidden.startup_s == 12.0
    assert marginal_rate((1_000_000, 12.0), (5_000_000, 11.0)) is None  # noise: no rate
    runs = SizedRuns("tumble", "tumbling")
    for engine, small, large in (("sparkcq", [12.0, 13.0, 12.5], [32.5]),
                                 ("spark", [8.0], [18.0])):
        for s in small:
            runs.add(engine, 1_000_000, s)
        for s in large:
            runs.add(engine, 5_000_000, s)
        runs.checks[engine] = "ok"
    table = marginal_table([runs], ["sparkcq", "spark", "flink"])
    # sparkcq: 4M / (32.5 - 12.5) = 200,000/s; Spark: 4M / 10 = 400,000/s: 0.50
    # the spread: 4M / (32.5 - 12.0) and 4M / (32.5 - 13.0)
    assert ("| tumble | sparkcq | 1,000,000, 12.5 | 5,000,000, 32.5 | "
            "200,000 (195,122 to 205,128) | 7.5 s | - | ok |") in table
    assert "| tumble | spark | 1,000,000, 8.0 | 5,000,000, 18.0 | 400,000 | 5.5 s | 0.50 | ok |" \
        in table
    assert not any("| flink |" in line for line in table)


def test_a_cut_short_run_s_log_gives_the_marginal_rates_of_what_it_finished():
    log = [
        "tumble 1,000,000 events rep 1/1 sparkcq: 50,000 events/s, start-up 7.6 s, whole 99.0 s;"
        " output ok: 100 rows",  # the warm-up: left out
        *(f"tumble {n:,} events rep {r}/2 {e}: 1 events/s, start-up 1.0 s, whole {t} s; "
          f"output {c}"
          for n, r, e, t, c in [
              (1_000_000, 1, "sparkcq", 12.0, "ok: 100 rows"),
              (1_000_000, 1, "spark", 8.0, "ok: 99 rows (the last 1 rows are never emitted)"),
              (1_000_000, 2, "sparkcq", 13.0, "ok: 100 rows"),
              (1_000_000, 2, "spark", 8.0, "ok: 99 rows"),
              (5_000_000, 1, "sparkcq", 32.5, "ok: 500 rows"),
              (5_000_000, 1, "spark", 18.0, "sparkcq 3 rows, expected 5; missing e.g. []"),
              (5_000_000, 2, "sparkcq", 33.5, "ok: 500 rows")]),
        "Traceback (most recent call last):",
    ]
    (runs,), engines = sized_runs(log)
    assert engines == ["sparkcq", "spark"]
    # medians: sparkcq 12.5 s and 33.0 s, 4M / 20.5 s; Spark 8.0 and 18.0 s, 4M / 10 s
    assert round(runs.marginal("sparkcq").events_per_s) == 195_122
    assert runs.marginal("spark").events_per_s == 400_000
    assert runs.checks == {"sparkcq": "ok",
                           "spark": "sparkcq 3 rows, expected 5; missing e.g. []"}


def test_spark_work_counts_the_jobs_of_its_group_only(spark):
    with job_group(spark, "bench-tools-a"):
        rows = (spark.range(0, 1_000, numPartitions=3).groupBy((F.col("id") % 10).alias("k"))
                .count().collect())
    with job_group(spark, "bench-tools-b"):
        spark.range(10).collect()
    assert len(rows) == 10
    work, other = spark_work(spark, ["bench-tools-a"]), spark_work(spark, ["bench-tools-b"])
    assert work.jobs == 1 and other.jobs == 1
    # a grouping shuffles: a map stage of one task per input partition, then a reduce stage
    assert work.stages >= 2 and work.tasks >= 3 + 1
    # map-side combine: each key written at least once, at most once per map task
    assert 10 <= work.shuffled <= 3 * 10
    assert work.task_s > 0 and 0 < work.busy_s
    both = spark_work(spark, ["bench-tools-a", "bench-tools-b"])
    assert (both.jobs, both.stages, both.tasks, both.shuffled) == (
        work.jobs + other.jobs, work.stages + other.stages, work.tasks + other.tasks,
        work.shuffled + other.shuffled)
    per = work.per(50_000)
    assert per["jobs"] == 2 * work.jobs and per["shuffled"] == 2 * work.shuffled


def _frame(rows: list[tuple[str, int, float]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["w", "k", "a"])
    return normalised(frame, ["w", "k", "a"], ["w"])


def test_differences_names_what_differs():
    want = _frame([("2026-01-01 00:00:10", 1, 0.1 + 0.2), ("2026-01-01 00:00:20", 1, 2.0)])
    assert differences(_frame([("2026-01-01 00:00:20", 1, 2.0),
                               ("2026-01-01 00:00:10", 1, 0.3)]), want) == "ok: 2 rows"
    wrong = differences(_frame([("2026-01-01 00:00:10", 1, 0.3),
                                ("2026-01-01 00:00:20", 1, 2.1)]), want)
    assert wrong.startswith("1 of 2 rows differ") and "2.1" in wrong
    short = differences(_frame([("2026-01-01 00:00:10", 1, 0.3)]), want)
    assert short.startswith("1 rows, expected 2") and "missing e.g." in short
    assert "00:00:20" in short.split("missing e.g.")[1].split("extra")[0]


def test_spark_keeps_only_the_windows_its_watermark_passed():
    want = _frame([("2026-01-01 00:00:10", 1, 1.0), ("2026-01-01 00:00:20", 1, 2.0)])
    got = _frame([("2026-01-01 00:00:10", 1, 1.0)])
    kept, note = leave_out_unemitted("spark", got, want)
    assert len(kept) == 1 and "last 1 rows" in note
    assert differences(got, kept, note).startswith("ok: 1 rows")
    same, none = leave_out_unemitted("sparkcq", got, want)
    assert len(same) == 2 and none == ""


def test_feed_benchmark_counts_the_cycles_that_took_rows():
    from benchmarks.feed import CycleSamples

    def status(cycles: int, seconds: float, rows: int) -> dict:
        return {"cycles": cycles, "last_cycle_seconds": seconds, "rows_processed": {"s": rows}}

    samples = CycleSamples()
    # a cycle counts its rows when it takes them (at its start) and ends later
    for at, cycles, seconds, rows in [(0.0, 1, 0.01, 0), (0.1, 1, 0.01, 100),
                                      (0.2, 2, 0.30, 100), (0.3, 2, 0.30, 100),
                                      (0.4, 3, 0.01, 100),  # an empty cycle
                                      (0.5, 3, 0.01, 250), (0.6, 4, 0.40, 250)]:
        samples.add(at, status(cycles, seconds, rows), "s")
    got = samples.between(0.0, 1.0)
    assert got["cycles_with_rows"] == 1  # the first has no end before it to time it by
    assert got["cycle_p50_ms"] == 400.0
    assert got["cycle_period_p50_ms"] == 200.0  # since the end of the empty cycle


def test_the_demo_benchmark_reads_the_cycles_after_the_skipped_ones():
    text = ("sparkcq demo: queries a, b\n"
            "cycle 0: 0 rows in 0.02 s (0 rows/s; 0 rows/s overall), state rows 0\n"
            "jumbo · cycle 1 · 5 new record(s)\n"
            "cycle 1: 7,677 rows in 5.46 s (1,405 rows/s; ...)\n"
            "cycle 2: 6,000 rows in 0.40 s (...)\ncycle 3: 6,010 rows in 1.20 s (...)\n"
            "cycle 4: 5,990 rows in 0.30 s (...)\n")
    run = parse_cycles(text, skip=2)
    assert run.cycles == ((6000, 0.40), (6010, 1.20), (5990, 0.30)) and run.slow == (3,)
    assert run.p50 == 0.40 and max(run.seconds) == 1.20
    table = report([run, parse_cycles(text, skip=3)], duration=90, skip=2)
    assert "| 1 | 3 | 6,000 | 0.400 s | 1.200 s | 1.200 s | 1 [3] |" in table
    assert "Median of the runs' p50: **0.575 s**" in table  # of 0.400 and 0.750 (skip 3)
