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

import csv
import heapq
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import IO, Any

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
EVENT_TYPES = {"person": 0, "auction": 1, "bid": 2}  # nexmark-flink's event_type


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


# Flink's parallelism: one source reader of the query's lane file. On 2 cores its NEXMark jobs
# ran faster and steadier than with two readers of two round-robin lanes (11M bids, alone
# on the machine: q5 13.7-15.3 s against 17.2-19.5 s; q7 31.6-32.4 s against 28-64 s; q8
# persons and auctions 8.2-8.3 s against 8.5-8.9 s), where the suite's `over` ran faster
# with two (benchmarks/suite/data.py)
FLINK_PARALLELISM = 1


def run_flink(python: str, q: Query, inp: Input) -> Run:
    """The query as Flink SQL in a local mini-cluster (``benchmarks/suite/flink_job.py``),
    the query's streams read from one file (``flink_lane``), the result to CSV files.
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
    """Flink tables over the query's lane file (``flink_lane``): each stream's written
    columns (timestamps with microseconds) and ``date_time`` in milliseconds as the event
    time, watermark 1 s. Rowtimes have at most millisecond precision in Flink; truncating
    the generator's ``x.xxx5`` s keeps every event in the same half-open windows.

    One stream is a table of that name. Several are one table ``events`` of all their rows,
    an ``event_type`` and every stream's columns prefixed with its name (empty where the row
    is another stream's), and a view per stream selecting its rows: nexmark-flink's layout,
    one source in event-time order. Two sources race: whichever reader runs ahead fills the
    window join's state until the other's watermark catches up, and q8's runs over 4M
    persons and auctions held 5 to 48 MB at a checkpoint and took 21 to 34 s (under 1 MB
    and 20 to 22 s from one source).
    """
    lane = flink_lane(inp, streams)
    if len(streams) == 1:
        (stream,) = streams
        columns = ", ".join(f"{name} {_flink_type(kind)}" for name, kind in _columns(stream))
        return [_flink_table(stream, columns.replace("date_time ", "date_time_us "),
                             "date_time_us", lane, "")]
    columns = ", ".join(["event_type INT", *(f"{stream}_{name} {_flink_type(kind)}"
                                             for stream in streams
                                             for name, kind in _columns(stream))])
    times = ", ".join(f"{stream}_date_time" for stream in streams)
    statements = [_flink_table("events", columns, f"COALESCE({times})", lane,
                               ", 'csv.null-literal'=''")]
    for stream in streams:
        renamed = ", ".join(f"{stream}_{name} AS {'date_time_us' if name == 'date_time' else name}"
                            for name, _ in _columns(stream))
        statements.append(f"CREATE VIEW {stream} AS SELECT {renamed}, date_time FROM events "
                          f"WHERE event_type = {EVENT_TYPES[stream]}")
    return statements


def _flink_table(name: str, columns: str, written_time: str, path: str, options: str) -> str:
    return (f"CREATE TABLE {name} ({columns}, date_time AS CAST({written_time} AS "
            f"TIMESTAMP(3)), WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) "
            f"WITH ('connector'='filesystem', 'path'='{path}', 'format'='csv'{options})")


def _columns(stream: str) -> list[tuple[str, str]]:
    """The stream's written columns as (name, type)."""
    return [(column.split()[0], column.split()[1]) for column in SCHEMAS[stream].split(", ")]


def _flink_type(kind: str) -> str:
    return "TIMESTAMP(6)" if kind == "TIMESTAMP" else kind


def flink_lane(inp: Input, streams: tuple[str, ...]) -> str:
    """The rows of ``streams`` in one file in event-time order (written once), for Flink's
    one reader: a reader working through the time-range files takes them in an order of its
    own and drops earlier files as late (``benchmarks/suite/data.py``). One stream's
    time-range files are joined in the order of their names; several are merged file by
    file on ``date_time`` (its written form sorts as text; each stream's rows keep their
    written order, so jittered times stay as out of order as the stream has them), each row
    led by its ``event_type`` and padded with empty fields where the other streams' columns
    are.
    """
    path = os.path.join(inp.path, "flink-lane", "-".join(streams))
    done = os.path.join(path, "_complete")
    if os.path.exists(done):
        return path
    os.makedirs(path, exist_ok=True)
    names = sorted(n for n in os.listdir(inp.stream_path(streams[0])) if n.endswith(".csv"))
    if len(streams) == 1:
        with open(os.path.join(path, "lane.csv"), "wb") as out:
            for name in names:
                with open(os.path.join(inp.stream_path(streams[0]), name), "rb") as part:
                    shutil.copyfileobj(part, out)
            _flush_to_disk(out)
    else:
        with open(os.path.join(path, "lane.csv"), "w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out)
            for name in names:
                rows = [_lane_rows(inp, streams, stream, name) for stream in streams]
                writer.writerows(row for _, row in heapq.merge(*rows, key=lambda r: r[0]))
            _flush_to_disk(out)
    mark_written(done)
    return path


def _flush_to_disk(out: IO[Any]) -> None:
    """Put the lane on disk before any run is timed: Flink's first run over a 1.6 GB lane
    written just before took 68 s against 50 s for the next two, and with the lane already
    on disk the first run was no slower than the others.
    """
    out.flush()
    os.fsync(out.fileno())


def _lane_rows(inp: Input, streams: tuple[str, ...], stream: str,
               name: str) -> Iterator[tuple[str, list[str]]]:
    """One stream's rows of time-range file ``name`` as (written time, lane row)."""
    widths = [len(_columns(s)) for s in streams]
    at = streams.index(stream)
    before, after = [""] * sum(widths[:at]), [""] * sum(widths[at + 1:])
    time_at = [column for column, _ in _columns(stream)].index("date_time")
    with open(os.path.join(inp.stream_path(stream), name), newline="",
              encoding="utf-8") as part:
        for row in csv.reader(part):
            yield row[time_at], [str(EVENT_TYPES[stream]), *before, *row, *after]


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
