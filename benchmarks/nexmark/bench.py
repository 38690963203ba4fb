"""Run a NEXMark query on sparkcq or on Spark Structured Streaming over the generated CSV
files; time it, collect its output, and check it against the independent pandas result.

Conventions are the suite's (``benchmarks/suite``): sparkcq reads each stream with
``source='files'`` and ``files_per_cycle='1'``, so a cycle takes file ``i`` of every stream
it reads (the same event-number range, hence the same time range); Spark reads with
``maxFilesPerTrigger=1`` and an ``availableNow`` trigger into the memory sink (q5 finishes
each micro-batch in ``foreachBatch``). Start-up (the first cycle / micro-batch, which plans,
compiles and starts workers) is kept apart from throughput; events are the rows of the
streams the query reads.
"""

from __future__ import annotations

import shutil
import tempfile
import time

import pandas as pd
from pyspark.sql import DataFrame, SparkSession

from benchmarks.nexmark.generator import SCHEMAS, Input, read_stream
from benchmarks.nexmark.queries import QUERIES, Query
from benchmarks.suite.engines import Run, expand_intervals, run_cycles
from sparkcq import Engine

LATENESS = "1 SECOND"
WATERMARK_DELAY = "1 second"


def run_query(spark: SparkSession, query_name: str, engine: str, inp: Input) -> Run:
    """One run of ``query_name`` on ``engine`` ('sparkcq' or 'spark') over ``inp``."""
    q = QUERIES[query_name]
    if engine == "sparkcq":
        return run_sparkcq(spark, q, inp)
    if engine == "spark":
        return run_spark(spark, q, inp)
    msg = f"unknown engine {engine!r}; expected 'sparkcq' or 'spark'"
    raise ValueError(msg)


def run_sparkcq(spark: SparkSession, q: Query, inp: Input) -> Run:
    """The query as a sparkcq script over files streams, one file of each stream per cycle."""
    eng = Engine(spark=spark)
    for stream in q.streams:
        eng.execute(f"CREATE STREAM {stream} ({SCHEMAS[stream]}) WITH (event_time='date_time', "
                    f"lateness='{LATENESS}', source='files', format='csv', header='false', "
                    f"path='{inp.stream_path(stream)}', bounded='true', files_per_cycle='1')")
    eng.execute(q.sparkcq)
    return run_cycles(eng, q.name, _events(inp, q), lambda: sparkcq_output(eng.results("q"), q))


def sparkcq_output(frame: pd.DataFrame, q: Query) -> pd.DataFrame:
    """Sparkcq's results as ``q.columns`` rows (see ``Query.form``)."""
    if q.form == "rstream":
        return frame.rename(columns={"_ts": "w"})[list(q.columns)]
    if q.form == "intervals":
        cols = [c for c in q.columns if c != "w"]
        return expand_intervals(frame, cols, q.slide_s)
    return frame[list(q.columns)]


def run_spark(spark: SparkSession, q: Query, inp: Input) -> Run:
    """The query as a Structured Streaming query, one file of each stream per micro-batch."""
    name = f"nexmark_{q.name}"
    sources = {s: (spark.readStream.schema(SCHEMAS[s]).option("header", "false")
                   .option("maxFilesPerTrigger", 1).csv(inp.stream_path(s))
                   .withWatermark("date_time", WATERMARK_DELAY)) for s in q.streams}
    checkpoint = tempfile.mkdtemp(prefix="sparkcq-nexmark-ss-")
    batches: list[pd.DataFrame] = []
    finish = q.spark_batch
    writer = q.spark(sources).writeStream.outputMode("append") \
        .option("checkpointLocation", checkpoint).trigger(availableNow=True)
    if finish is not None:
        def each_batch(df: DataFrame, _batch_id: int) -> None:
            batches.append(finish(df).toPandas())

        writer = writer.foreachBatch(each_batch)
    else:
        writer = writer.format("memory").queryName(name)
    began = time.monotonic()
    query = writer.start()
    query.awaitTermination()
    total = time.monotonic() - began
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    startup = total - sum(durations[1:])
    if finish is not None:
        out = pd.concat(batches, ignore_index=True) if batches else \
            pd.DataFrame(columns=list(q.columns))
    else:
        out = spark.table(name).toPandas()
        spark.catalog.dropTempView(name)
    shutil.rmtree(checkpoint, ignore_errors=True)
    return Run("spark", q.name, _events(inp, q), startup, sum(durations[1:]),
               sum(p["numInputRows"] for p in progress[1:]), durations[1:],
               out[list(q.columns)])


def _events(inp: Input, q: Query) -> int:
    """Rows of the streams ``q`` reads (2 % persons, 6 % auctions, 92 % bids)."""
    share = {"person": 1, "auction": 3, "bid": 46}
    return sum(inp.events * share[s] // 50 for s in q.streams)


# -- expected results and the check ---------------------------------------------------------
def expected(query_name: str, inp: Input) -> pd.DataFrame:
    """The query's result computed by pandas over all generated rows (not by any engine)."""
    q = QUERIES[query_name]
    rows = {s: read_stream(inp, s) for s in q.streams}
    return q.expected(rows)[list(q.columns)]


def normalised(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Rows sorted, times as naive UTC (microseconds), decimals as floats rounded to 3."""
    out = frame[columns].copy()
    for c in out.columns:
        s = out[c]
        if s.dtype == object and len(s) and not isinstance(s.iloc[0], str):
            s = pd.to_numeric(s) if not isinstance(s.iloc[0], pd.Timestamp) else s
        if c in ("w", "date_time"):
            s = pd.to_datetime(s)
            s = s.dt.tz_convert("UTC").dt.tz_localize(None) if s.dt.tz is not None else s
            s = s.astype("datetime64[us]")
        elif s.dtype.kind == "f":
            s = s.astype("float64").round(3)
        elif s.dtype.kind in "iu":
            s = s.astype("int64")
        out[c] = s
    return out.sort_values(columns).reset_index(drop=True)


def check(run: Run, want: pd.DataFrame, query_name: str) -> str:
    """``ok: N rows`` or what differs. Spark's append mode never emits the windows its final
    watermark has not passed: those expected rows are left out for Spark, and said so.
    """
    q = QUERIES[query_name]
    assert run.output is not None
    cols = list(q.columns)
    g, e = normalised(run.output, cols), normalised(want, cols)
    note = ""
    if run.engine == "spark" and "w" in cols:
        last = g["w"].max() if len(g) else pd.Timestamp.min
        dropped = int((e["w"] > last).sum())
        e = e[e["w"] <= last].reset_index(drop=True)
        note = f" (the last {dropped} rows are never emitted by append mode)"
    if len(g) != len(e):
        missing = e.merge(g, how="left", indicator=True).query("_merge == 'left_only'")
        extra = g.merge(e, how="left", indicator=True).query("_merge == 'left_only'")
        return (f"{len(g)} rows, expected {len(e)}{note}; missing e.g. "
                f"{missing.drop(columns='_merge').head(2).to_dict('records')}, extra e.g. "
                f"{extra.drop(columns='_merge').head(2).to_dict('records')}")
    diff = (g != e).any(axis=1)
    if diff.any():
        example = g[diff].head(1).to_dict("records")
        wanted = e[diff].head(1).to_dict("records")
        return f"{int(diff.sum())} of {len(g)} rows differ, e.g. {example} for {wanted}"
    return f"ok: {len(g)} rows{note}"
