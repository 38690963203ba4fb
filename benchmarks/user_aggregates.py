"""A user aggregate (median, in Python) against the built-in aggregates and against
recomputing every window from scratch, over one input, in one run.

    .venv/bin/python benchmarks/user_aggregates.py --events 200000 --batch 50000

Input: the generator's readings, 1000 events per second of event time over 100 sensors
(about 600 live elements per sensor in a 60-second window). Three ways to the answer:

- ``uda``: ``median(value)`` over ``[RANGE 60 SECONDS]`` per sensor, the library's Median
  updated incrementally (plus when an element enters, minus when it leaves);
- ``avg``: the built-in avg and count over the same window (running sums in the JVM);
- ``min/max``: the built-in min and max (a multiset of live values per group in the JVM);
- ``recompute``: for every event, the exact median of its sensor's last 60 seconds from
  scratch in Spark SQL (a range self-join and ``percentile``), what a user without
  incremental aggregates would write; checked equal to ``uda`` at every event.

Reports events/s of each (the engine's cycles after the first, which starts the Python
workers, are timed apart from start-up).
"""

from __future__ import annotations

import argparse
import statistics
import time

import pandas as pd

from sparkcq import Engine
from sparkcq.io.generator import GeneratorSource
from sparkcq.session import make_session

STREAM = ("CREATE STREAM readings (sensor STRING, value DOUBLE, t TIMESTAMP) WITH ("
          "event_time='t', source='generator', rate='1000', keys='100', pace='fast', "
          "batch='{batch}', limit='{events}')")
QUERIES = {
    "uda": "SELECT sensor, median(value) AS m FROM readings [RANGE 60 SECONDS] GROUP BY sensor",
    "avg": "SELECT sensor, avg(value) AS a, count(*) AS n FROM readings [RANGE 60 SECONDS] "
           "GROUP BY sensor",
    "min/max": "SELECT sensor, min(value) AS lo, max(value) AS hi FROM readings "
               "[RANGE 60 SECONDS] GROUP BY sensor",
}


def run_engine(spark, kind: str, events: int, batch: int) -> tuple[float, float, pd.DataFrame]:  # noqa: ANN001
    """(events/s after the first cycle, first cycle seconds, results)."""
    eng = Engine(spark=spark)
    eng.execute(STREAM.format(batch=batch, events=events))
    eng.execute("CREATE AGGREGATE median(x DOUBLE) RETURNS DOUBLE "
                "USING 'sparkcq.aggregates.library:Median'")
    eng.execute(f"CREATE QUERY q AS {QUERIES[kind]}")
    first = eng.run_cycle()
    began, seconds = time.monotonic(), []
    while eng.has_pending_input():
        seconds.append(eng.run_cycle().seconds)
    elapsed = time.monotonic() - began
    rest = sum(r.rows_in for r in eng.reports[1:])
    results = eng.results("q")
    print(f"{kind:>9}: {rest / elapsed:>9,.0f} events/s ({rest:,} events in {elapsed:.1f} s "
          f"after a first cycle of {first.seconds:.1f} s; median cycle "
          f"{statistics.median(seconds):.2f} s); {len(results):,} result elements", flush=True)
    eng.stop()
    return rest / elapsed, first.seconds, results


def run_recompute(spark, events: int) -> tuple[float, pd.DataFrame]:  # noqa: ANN001
    """Every event's 60-second median recomputed from the window's rows (one Spark job)."""
    schema = "sensor STRING, value DOUBLE, t TIMESTAMP"
    from pyspark.sql.types import _parse_datatype_string

    gen = GeneratorSource(spark, "readings", _parse_datatype_string(schema), "t",
                          {"rate": "1000", "keys": "100", "pace": "fast",
                           "batch": str(events), "limit": str(events)})
    df = gen.poll().df
    assert df is not None
    df.createOrReplaceTempView("bench_readings")
    medians = spark.sql(
        "SELECT a.sensor, a.t, percentile(b.value, 0.5) AS m FROM bench_readings a "
        "JOIN bench_readings b ON a.sensor = b.sensor AND b.t > a.t - INTERVAL 60 SECONDS "
        "AND b.t <= a.t GROUP BY a.sensor, a.t")
    began = time.monotonic()
    result = medians.toPandas()  # to the driver, as the engine's results are
    elapsed = time.monotonic() - began
    print(f"recompute: {events / elapsed:>9,.0f} events/s ({events:,} events in "
          f"{elapsed:.1f} s, one batch job)", flush=True)
    return events / elapsed, result


def check_equal(uda: pd.DataFrame, recomputed: pd.DataFrame) -> int:
    """The incremental median holds, at every event, the recomputed median; returns the
    number of events compared.
    """
    elements = uda.sort_values("_ts")
    at = recomputed.rename(columns={"t": "_ts", "m": "want"}).sort_values("_ts")
    for frame in (elements, at):
        ts = pd.to_datetime(frame["_ts"], utc=True)
        frame["_ts"] = ts.dt.tz_localize(None).astype("datetime64[us]")
    joined = pd.merge_asof(at, elements, on="_ts", by="sensor", direction="backward")
    bad = joined[(joined["m"] - joined["want"]).abs() > 1e-9]
    assert bad.empty, f"median differs at {len(bad)} events, e.g.\n{bad.head()}"
    return len(joined)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=50_000, help="events per cycle")
    args = parser.parse_args()
    spark = make_session(None)
    rates = {}
    rates["uda"], _, uda_results = run_engine(spark, "uda", args.events, args.batch)
    rates["avg"], _, _ = run_engine(spark, "avg", args.events, args.batch)
    rates["min/max"], _, _ = run_engine(spark, "min/max", args.events, args.batch)
    rates["recompute"], recomputed = run_recompute(spark, args.events)
    checked = check_equal(uda_results, recomputed)
    print(f"uda median = recomputed median at all {checked:,} events")
    print("; ".join(f"uda / {k} = {rates['uda'] / v:.2f}" for k, v in rates.items()
                    if k != "uda"))
    spark.stop()


if __name__ == "__main__":
    main()
