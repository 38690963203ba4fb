"""Run a NEXMark query on sparkcq, on Spark Structured Streaming or (q5, q7, q8) on Flink SQL
over the generated CSV files; time it, collect its output, and check it against the
independent pandas result.

Conventions are the suite's (``benchmarks/suite``): sparkcq reads each stream with
``source='files'`` and ``files_per_cycle='1'``, so a cycle takes file ``i`` of every stream
it reads (the same event-number range, hence the same time range); Spark reads with
``maxFilesPerTrigger=1`` and an ``availableNow`` trigger into the memory sink (q5 finishes
each micro-batch in ``foreachBatch``). Start-up (the first cycle / micro-batch, which plans,
compiles and starts workers) is kept apart from throughput; events are the rows of the
streams the query reads.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pandas as pd
from pyspark.sql import SparkSession

from benchmarks.nexmark.generator import SCHEMAS, Input, read_stream
from benchmarks.nexmark.queries import QUERIES, Query
from benchmarks.suite.compare import differences, leave_out_unemitted, normalised
from benchmarks.suite.data import mark_written
from benchmarks.suite.engines import (
    Run,
    expand_intervals,
    read_flink_output,
    run_cycles,
    run_flink_job,
    run_structured_streaming,
)
from sparkcq import Engine

LATENESS = "1 SECOND"
TIMES = ("w", "date_time")
WATERMARK_DELAY = "1 second"


def run_query(spark: SparkSession, query_name: str, engine: str, inp: Input,
              flink_python: str = "") -> Run:
    """One run of ``query_name`` on ``engine`` ('sparkcq', 'spark', or 'flink' with the
    Python of Flink's own environment) over ``inp``.
    """
    q = QUERIES[query_name]
    if engine == "sparkcq":
        return run_sparkcq(spark, q, inp)
    if engine == "spark":
        return run_spark(spark, q, inp)
    if engine == "flink" and q.flink and flink_python:
        return run_flink(flink_python, q, inp)
    msg = (f"no {engine!r} run of NEXMark {query_name}; expected 'sparkcq', 'spark' or "
           f"'flink' (q5, q7, q8, given Flink's Python)")
    raise ValueError(msg)


def sparkcq_engine(spark: SparkSession, q: Query, inp: Input) -> Engine:
    """An engine running the query as a sparkcq script over files streams, one file of each
    stream per cycle (also what ``benchmarks.suite.cycle_profile`` profiles).
    """
    eng = Engine(spark=spark, trusted=True)  # our own harness, reading its own input files
    for stream in q.streams:
        eng.execute(f"CREATE STREAM {stream} ({SCHEMAS[stream]}) WITH (event_time='date_time', "
                    f"lateness='{LATENESS}', source='files', format='csv', header='false', "
                    f"path='{inp.stream_path(stream)}', bounded='true', files_per_cycle='1')")
    eng.execute(q.sparkcq)
    return eng


def run_sparkcq(spark: SparkSession, q: Query, inp: Input) -> Run:
    """The query on sparkcq, timed cycle by cycle."""
    eng = sparkcq_engine(spark, q, inp)
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


# Flink's parallelism: one source reader of one file per stream. On 2 cores its NEXMark jobs
# ran faster and steadier than with two readers of two round-robin lanes (11M bids, alone
# on the machine: q5 13.7-15.3 s against 17.2-19.5 s; q7 31.6-32.4 s against 28-64 s; q8
# persons and auctions 8.2-8.3 s against 8.5-8.9 s), where the suite's `over` ran faster
# with two (benchmarks/suite/data.py)
FLINK_PARALLELISM = 1


def run_flink(python: str, q: Query, inp: Input) -> Run:
    """The query as Flink SQL in a local mini-cluster (``benchmarks/suite/flink_job.py``),
    each stream read from one file (``flink_lane``), the result to CSV files.
    """
    work = tempfile.mkdtemp(prefix="sparkcq-bench-flink-")
    out_dir = os.path.join(work, "out")
    statements = [*flink_tables(inp, q.streams),
                  f"CREATE TABLE results ({q.flink_sink}) WITH ('connector'='filesystem', "
                  f"'path'='{out_dir}', 'format'='csv')"]
    timing = run_flink_job(python, f"sparkcq-bench-nexmark-{q.name}", FLINK_PARALLELISM,
                           statements, [f"INSERT INTO results {q.flink}"], work)
    out = read_flink_output(out_dir, list(q.columns), [c for c in q.columns if c in TIMES])
    shutil.rmtree(work, ignore_errors=True)
    events = _events(inp, q)
    return Run("flink", f"nexmark-{q.name}", events, timing["startup_s"], timing["run_s"],
               events, [], out)


def flink_tables(inp: Input, streams: tuple[str, ...]) -> list[str]:
    """Flink tables over the streams' lane files: the written columns (timestamps with
    microseconds), and ``date_time`` in milliseconds as the event time, watermark 1 s.
    Rowtimes have at most millisecond precision in Flink; truncating the generator's
    ``x.xxx5`` s keeps every event in the same half-open windows.
    """
    tables = []
    for stream in streams:
        columns = SCHEMAS[stream].replace("date_time TIMESTAMP", "date_time_us TIMESTAMP(6)") \
            .replace("expires TIMESTAMP", "expires TIMESTAMP(6)")
        tables.append(
            f"CREATE TABLE {stream} ({columns}, date_time AS CAST(date_time_us AS "
            f"TIMESTAMP(3)), WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) "
            f"WITH ('connector'='filesystem', 'path'='{flink_lane(inp, stream)}', "
            f"'format'='csv')")
    return tables


def flink_lane(inp: Input, stream: str) -> str:
    """The stream's rows in one file, in time order (its time-range files joined in the
    order of their names; written once), for Flink's one reader: a reader working through
    the time-range files takes them in an order of its own and drops earlier files as late
    (``benchmarks/suite/data.py``).
    """
    path = os.path.join(inp.path, "flink-lane", stream)
    done = os.path.join(path, "_complete")
    if os.path.exists(done):
        return path
    os.makedirs(path, exist_ok=True)
    folder = inp.stream_path(stream)
    with open(os.path.join(path, "lane.csv"), "wb") as out:
        for name in sorted(n for n in os.listdir(folder) if n.endswith(".csv")):
            with open(os.path.join(folder, name), "rb") as part:
                shutil.copyfileobj(part, out)
    mark_written(done)
    return path


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
