"""Run a workload on each engine over the same CSV files; time it and collect its output.

Each runner returns a ``Run``: start-up apart from throughput (sparkcq's and Spark's first
cycle/batch plans, compiles and starts workers; Flink's start-up is the mini-cluster's and
the job's), per-cycle latencies where the engine has cycles, and the output rows.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession

from benchmarks.suite.data import Input
from benchmarks.suite.spark_work import SparkWork, job_group, spark_work
from benchmarks.suite.workloads import Workload
from sparkcq import Engine

SCHEMA = "k INT, v DOUBLE, ts TIMESTAMP"
FLINK_TIMEOUT_S = 300  # a job that has not finished by then is reported, not waited for
HOSTS_SCHEMA = "k INT, name STRING"
FLINK_SCHEMA = "k INT, v DOUBLE, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND"


@dataclass
class Run:
    """One engine's run of one workload."""

    engine: str
    workload: str
    events: int
    startup_s: float
    run_s: float  # after start-up
    events_timed: int  # events processed in run_s
    cycles: list[float] = field(default_factory=list)
    output: pd.DataFrame | None = None
    work: SparkWork | None = None  # what Spark did in run_s (not for Flink)

    @property
    def events_per_s(self) -> float:  # noqa: D102
        return self.events_timed / self.run_s if self.run_s else 0.0

    def latency(self, q: float) -> float | None:
        """The q-quantile of cycle latency (seconds), if the engine has cycles."""
        if not self.cycles:
            return None
        if len(self.cycles) == 1:
            return self.cycles[0]
        return statistics.quantiles(self.cycles, n=100, method="inclusive")[int(q * 100) - 1]


def _micros(times: pd.Series) -> np.ndarray:
    t = pd.to_datetime(times)
    if t.dt.tz is not None:
        t = t.dt.tz_convert("UTC").dt.tz_localize(None)
    return t.astype("datetime64[us]").to_numpy().astype(np.int64)


def expand_intervals(frame: pd.DataFrame, columns: list[str], slide_s: int) -> pd.DataFrame:
    """Interval elements ``[_ts, _te)`` as one row per multiple ``w`` of ``slide_s`` they
    cover (the snapshots a window ending there sees).
    """
    slide = np.int64(slide_s * 1_000_000)
    ts, te = (_micros(frame[c]) for c in ("_ts", "_te"))
    first = -(-ts // slide) * slide
    count = np.maximum(0, -(-(te - first) // slide))
    rows = frame.loc[frame.index.repeat(count), columns].reset_index(drop=True)
    offsets = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    w = np.repeat(first, count) + offsets * slide
    return rows.assign(w=pd.to_datetime(w, unit="us"))[["w", *columns]]


def sparkcq_output(eng: Engine, wl: Workload) -> pd.DataFrame:
    frames = []
    for i in range(wl.queries):
        frame = eng.results(f"q{i}")
        if wl.sparkcq_slide_s:
            frame = expand_intervals(frame, [c for c in wl.columns if c != "w"],
                                     wl.sparkcq_slide_s)
        elif wl.sparkcq_time:
            frame = frame.rename(columns={"_ts": wl.sparkcq_time})
        frames.append(frame[list(wl.columns)])
    return pd.concat(frames, ignore_index=True)


def run_sparkcq(spark: SparkSession, wl: Workload, inputs: dict[str, Input],
                hosts_path: str) -> Run:
    """The workload as sparkcq queries over files streams, one file of each per cycle."""
    eng = sparkcq_engine(spark, wl, inputs, hosts_path)
    return run_cycles(eng, wl.name, sum(i.events for i in inputs.values()),
                      lambda: sparkcq_output(eng, wl))


def sparkcq_engine(spark: SparkSession, wl: Workload, inputs: dict[str, Input],
                   hosts_path: str, files_per_cycle: int | None = 1) -> Engine:
    """An engine with the workload's streams (files, one per cycle, or with None as many as
    a cycle finds), table and queries.
    """
    eng = Engine(spark=spark, trusted=True)  # our own harness, reading its own input files
    per_cycle = "" if files_per_cycle is None else f", files_per_cycle='{files_per_cycle}'"
    for name, inp in inputs.items():
        eng.execute(f"CREATE STREAM {name} ({SCHEMA}) WITH (event_time='ts', "
                    "lateness='1 SECOND', source='files', format='csv', header='false', "
                    f"path='{inp.chunks_path}', bounded='true'{per_cycle})")
    if wl.table:
        eng.execute(f"CREATE TABLE hosts ({HOSTS_SCHEMA}) WITH (format='csv', "
                    f"header='false', path='{hosts_path}')")
    for i, body in enumerate(wl.sparkcq):
        eng.execute(f"CREATE QUERY q{i} AS {body}")
    return eng


def run_cycles(eng: Engine, name: str, events: int,
               output: Callable[[], pd.DataFrame]) -> Run:
    """Cycle ``eng`` until its bounded input is drained, timing all but the first cycle
    (start-up: planning, code generation, Python workers); ``output`` reads the results.
    """
    first = eng.run_cycle()
    group = f"sparkcq-bench-{name}-{time.monotonic_ns()}"
    with job_group(eng.spark, group):
        began = time.time()
        while eng.has_pending_input():
            eng.run_cycle()
        ended = time.time()
    elapsed = ended - began
    work = spark_work(eng.spark, [group], since=began, until=ended)
    reports = eng.reports[1:]
    out = output()
    eng.stop()
    return Run("sparkcq", name, events, first.seconds, elapsed,
               sum(r.rows_in for r in reports), [r.seconds for r in reports if r.rows_in], out,
               work)


def collect_garbage(spark: SparkSession) -> None:
    """Start a run on a heap without the last run's garbage: sparkcq and Spark SS share the
    session's JVM, and a run would otherwise pay for collecting what the one before left
    (Python's objects first, which release the JVM objects they hold).
    """
    gc.collect()
    jvm = spark._jvm
    assert jvm is not None
    jvm.System.gc()


def run_spark(spark: SparkSession, wl: Workload, inputs: dict[str, Input],
              hosts_path: str) -> Run:
    """The workload as Structured Streaming queries (one per sparkcq query), one file of
    each stream per micro-batch; the table, if any, read from the CSV the others read.
    """
    assert wl.spark is not None
    frames = {name: spark.readStream.schema(SCHEMA).option("header", "false")
              .option("maxFilesPerTrigger", 1).csv(inp.chunks_path)
              for name, inp in inputs.items()}
    if wl.table:
        frames["hosts"] = spark.read.schema(HOSTS_SCHEMA).option("header", "false") \
            .csv(hosts_path)
    return run_structured_streaming(spark, wl.name, wl.spark(frames), list(wl.columns),
                                    sum(i.events for i in inputs.values()))


RECENT_PROGRESS = 100_000  # progress reports a Structured Streaming query keeps


def run_structured_streaming(spark: SparkSession, name: str, frames: list[DataFrame],
                             columns: list[str], events: int,
                             finish: Callable[[DataFrame], DataFrame] | None = None) -> Run:
    """Run streaming ``frames`` (one query each) to the end of their files (``availableNow``)
    in append mode, into the memory sink, or through ``finish`` applied to each micro-batch
    in ``foreachBatch``; their outputs, concatenated, as ``columns``.

    Start-up lasts until every query has finished its first micro-batch (it plans,
    compiles and starts the state store), as sparkcq's first cycle runs every query on the
    first file. The timed interval runs from then to the end; throughput is the events of
    the later batches, averaged over the queries (each reads every event), over its length.
    With several queries some second batches begin before every first one has ended, so
    this errs in Spark's favour. Spark's work is read for the same interval.
    """
    checkpoints: list[str] = []
    queries = []
    batches: list[pd.DataFrame] = []
    # a query keeps its last 100 progress reports by default: past 100 batches the first
    # ones were gone, and the timed interval began at the 100th-last batch
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(RECENT_PROGRESS))
    began = time.time()
    for i, frame in enumerate(frames):
        checkpoints.append(tempfile.mkdtemp(prefix="sparkcq-bench-ss-"))
        writer = frame.writeStream.outputMode("append") \
            .option("checkpointLocation", checkpoints[-1]).trigger(availableNow=True)
        if finish is not None:
            def each_batch(df: DataFrame, _batch_id: int,
                           finish: Callable[[DataFrame], DataFrame] = finish) -> None:
                batches.append(finish(df).toPandas())

            writer = writer.foreachBatch(each_batch)
        else:
            writer = writer.format("memory").queryName(f"bench_{name.replace('-', '_')}_{i}")
        queries.append(writer.start())
    for query in queries:
        query.awaitTermination()
    ended = time.time()
    if any(q.recentProgress[0]["batchId"] != 0 for q in queries if q.recentProgress):
        msg = f"more than {RECENT_PROGRESS} micro-batches: their first progress reports are gone"
        raise RuntimeError(msg)
    progress = [[p for p in q.recentProgress if p["numInputRows"] > 0] for q in queries]
    warm = max(_batch_start(ps[0]) + _batch_seconds(ps[0]) for ps in progress if ps)
    timed = [ps[1:] for ps in progress]
    work = spark_work(spark, [str(q.runId) for q in queries], since=warm, until=ended)
    if finish is not None:
        out = pd.concat(batches, ignore_index=True) if batches else \
            pd.DataFrame(columns=columns)
    else:
        out = pd.concat([spark.table(q.name).toPandas() for q in queries], ignore_index=True)
        for query in queries:
            spark.catalog.dropTempView(query.name)
    for checkpoint in checkpoints:
        shutil.rmtree(checkpoint, ignore_errors=True)
    # Spark keeps an ended query's state stores loaded until its maintenance task next runs
    # (every 60 s): runs closer together than that held every earlier run's state, and the
    # third repetition of hop-10s-100k's larger size (2,000 MB of old generation) ran at a
    # fifth of the first's rate, then out of heap (2026-11-30). Unloaded here, after the
    # timed interval; the next query starts the maintenance again.
    jvm = spark._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()
    return Run("spark", name, events, warm - began, ended - warm,
               round(events * statistics.mean(
                   _share(later, ps) for later, ps in zip(timed, progress, strict=True))),
               [_batch_seconds(p) for ps in timed for p in ps], out[columns], work)


def _share(part: list[dict], batches: list[dict]) -> float:
    """The share of a query's input rows its batches ``part`` read (Spark counts the rows
    its scan returns, after filters pushed into it, so rows are not events).
    """
    total = sum(p["numInputRows"] for p in batches)
    return sum(p["numInputRows"] for p in part) / total if total else 0.0


def _batch_start(progress: dict) -> float:
    """When a micro-batch began (seconds since the epoch), from its progress report."""
    return dt.datetime.fromisoformat(progress["timestamp"]).timestamp()


def _batch_seconds(progress: dict) -> float:
    return progress["durationMs"]["triggerExecution"] / 1000


def run_flink(python: str, wl: Workload, inputs: dict[str, Input], hosts_path: str) -> Run:
    """The workload as Flink SQL in a local mini-cluster, one source reader per lane file
    (``data.py``), results to CSV files; several queries run as one job (a statement set).
    """
    parallelism = next(iter(inputs.values())).lanes
    work = tempfile.mkdtemp(prefix="sparkcq-bench-flink-")
    out_dir = os.path.join(work, "out")
    statements = [f"CREATE TABLE {name} ({FLINK_SCHEMA}) WITH ('connector'='filesystem', "
                  f"'path'='{inp.lanes_path}', 'format'='csv')" for name, inp in inputs.items()]
    if wl.table:
        statements.append(f"CREATE TABLE hosts ({HOSTS_SCHEMA}) WITH "
                          f"('connector'='filesystem', 'path'='{hosts_path}', 'format'='csv')")
    inserts = []
    for i, select in enumerate(wl.flink):
        statements.append(f"CREATE TABLE results{i} ({wl.flink_sink}) WITH ("
                          f"'connector'='filesystem', 'path'='{out_dir}/q{i}', "
                          "'format'='csv')")
        inserts.append(f"INSERT INTO results{i} {select}")
    timing = run_flink_job(python, f"sparkcq-bench-{wl.name}", parallelism, statements,
                           inserts, work)
    out = read_flink_output(out_dir, list(wl.columns), list(wl.times))
    shutil.rmtree(work, ignore_errors=True)
    events = sum(i.events for i in inputs.values())
    return Run("flink", wl.name, events, timing["startup_s"], timing["run_s"], events, [], out)


def run_flink_job(python: str, name: str, parallelism: int, statements: list[str],
                  inserts: list[str], work: str) -> dict[str, float]:
    """Run ``statements`` then ``inserts`` (one job) with ``flink_job.py`` in Flink's own
    Python; its timing: ``startup_s`` (the table environment) and ``run_s`` (the job, its
    submission and deployment included). Removes ``work`` when the job fails.
    """
    job = {"name": name, "parallelism": parallelism, "statements": statements,
           "inserts": inserts, "checkpoint_dir": os.path.join(work, "checkpoints")}
    spec = os.path.join(work, "job.json")
    with open(spec, "w", encoding="utf-8") as f:
        json.dump(job, f)
    script = os.path.join(os.path.dirname(__file__), "flink_job.py")
    try:
        done = subprocess.run([python, script, spec], capture_output=True, text=True,
                              check=False, timeout=FLINK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        shutil.rmtree(work, ignore_errors=True)
        msg = f"Flink job did not finish in {FLINK_TIMEOUT_S} s"
        raise RuntimeError(msg) from None
    if done.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        msg = f"Flink job failed:\n{done.stderr[-3000:]}"
        raise RuntimeError(msg)
    return json.loads(done.stdout.strip().splitlines()[-1])


def read_flink_output(out_dir: str, columns: list[str], times: list[str]) -> pd.DataFrame:
    """The rows a Flink job's filesystem sinks wrote under ``out_dir`` (CSV, no header)."""
    parts = [os.path.join(d, n) for d, _, names in os.walk(out_dir) for n in names
             if not n.startswith(".")]
    frames = [pd.read_csv(p, names=columns) for p in parts]
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    for column in times:
        out[column] = pd.to_datetime(out[column], format="ISO8601")
    return out

