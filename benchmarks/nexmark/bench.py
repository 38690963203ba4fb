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

import pandas as pd
from pyspark.sql import SparkSession

from benchmarks.nexmark.generator import SCHEMAS, Input, read_stream
from benchmarks.nexmark.queries import QUERIES, Query
from benchmarks.suite.compare import differences, leave_out_unemitted, normalised
from benchmarks.suite.engines import Run, expand_intervals, run_cycles, run_structured_streaming
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
    eng = Engine(spark=spark, trusted=True)  # our own harness, reading its own input files
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
    sources = {s: (spark.readStream.schema(SCHEMAS[s]).option("header", "false")
                   .option("maxFilesPerTrigger", 1).csv(inp.stream_path(s))
                   .withWatermark("date_time", WATERMARK_DELAY)) for s in q.streams}
    return run_structured_streaming(spark, f"nexmark-{q.name}", [q.spark(sources)],
                                    list(q.columns), _events(inp, q), q.spark_batch)


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


TIMES = ("w", "date_time")


def check(run: Run, want: pd.DataFrame, query_name: str) -> str:
    """``ok: N rows`` or what differs (``benchmarks/suite/compare.py``); Spark's append
    mode never emits the windows its final watermark has not passed: those expected rows
    are left out for Spark, and said so.
    """
    assert run.output is not None
    columns = list(QUERIES[query_name].columns)
    times = [c for c in columns if c in TIMES]
    got, wanted = normalised(run.output, columns, times), normalised(want, columns, times)
    wanted, note = leave_out_unemitted(run.engine, got, wanted)
    return differences(got, wanted, note)
