"""Backlog mode: every input file is there at the start; each engine picks its own batches.

    .venv/bin/python -m benchmarks.suite backlog-tumble --reps 3

Next to the file-per-cycle mode (a live stream at a steady rate), this is a stream that has
fallen behind, or a replay: sparkcq's files stream without ``files_per_cycle`` (a cycle takes
what is there, up to its ``max_bytes_per_cycle``), Spark Structured Streaming without
``maxFilesPerTrigger`` (``availableNow``), and the same computation as a plain Spark batch
job over the same files, the bound a streaming engine on Spark can approach. Each figure is
the whole run, start-up included (one cycle or batch is all there is to time), from
submitting the query to holding its output on the driver, after a first round of every
engine (not timed; its output is checked like the suite's) so that no engine pays for
warming up the JVM they share.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import SparkSession

from benchmarks.suite.compare import check_output
from benchmarks.suite.data import Input, read_events
from benchmarks.suite.engines import (
    HOSTS_SCHEMA,
    SCHEMA,
    run_structured_streaming,
    sparkcq_engine,
    sparkcq_output,
)
from benchmarks.suite.marginal import SizedRuns
from benchmarks.suite.spark_work import SparkWork, job_group, spark_work
from benchmarks.suite.workloads import Workload

BACKLOG_ENGINES = ("sparkcq", "spark", "spark-batch")


@dataclass
class BacklogRun:
    """One engine's run over the whole backlog."""

    engine: str
    seconds: float
    events: int
    cycles: int  # sparkcq's cycles / Spark SS's micro-batches with input; 1 for a batch job
    output: pd.DataFrame
    work: SparkWork | None = None

    @property
    def events_per_s(self) -> float:  # noqa: D102
        return self.events / self.seconds


def run_sparkcq_backlog(spark: SparkSession, wl: Workload, inputs: dict[str, Input],
                        hosts_path: str) -> BacklogRun:
    """The files streams with no per-cycle file count: each cycle takes the backlog."""
    began = time.time()
    group = f"sparkcq-backlog-{wl.name}-{time.monotonic_ns()}"
    with job_group(spark, group):
        eng = sparkcq_engine(spark, wl, inputs, hosts_path, files_per_cycle=None)
        cycles = eng.run_until_idle()
        out = sparkcq_output(eng, wl)
    ended = time.time()
    busy = sum(1 for r in eng.reports if r.rows_in)
    eng.stop()
    return BacklogRun("sparkcq", ended - began, sum(i.events for i in inputs.values()),
                      busy or cycles, out, spark_work(spark, [group], began, ended))


def run_spark_backlog(spark: SparkSession, wl: Workload, inputs: dict[str, Input],
                      hosts_path: str) -> BacklogRun:
    """Structured Streaming, ``availableNow`` with no file count per micro-batch."""
    assert wl.spark is not None
    frames = {name: spark.readStream.schema(SCHEMA).option("header", "false")
              .csv(inp.chunks_path) for name, inp in inputs.items()}
    if wl.table:
        frames["hosts"] = spark.read.schema(HOSTS_SCHEMA).option("header", "false") \
            .csv(hosts_path)
    events = sum(i.events for i in inputs.values())
    began = time.time()
    run = run_structured_streaming(spark, f"backlog_{wl.name}", wl.spark(frames),
                                   list(wl.columns), events)
    ended = time.time()
    return BacklogRun("spark", ended - began, events, len(run.cycles) + 1,
                      run.output if run.output is not None else pd.DataFrame())


def run_spark_batch(spark: SparkSession, wl: Workload, inputs: dict[str, Input],
                    hosts_path: str) -> BacklogRun:
    """The workload's Spark computation as one batch job over the same files."""
    assert wl.spark is not None
    began = time.time()
    group = f"spark-batch-{wl.name}-{time.monotonic_ns()}"
    with job_group(spark, group):
        frames = {name: spark.read.schema(SCHEMA).option("header", "false")
                  .csv(inp.chunks_path) for name, inp in inputs.items()}
        if wl.table:
            frames["hosts"] = spark.read.schema(HOSTS_SCHEMA).option("header", "false") \
                .csv(hosts_path)
        out = pd.concat([df.toPandas() for df in wl.spark(frames)], ignore_index=True)
    ended = time.time()
    return BacklogRun("spark-batch", ended - began, sum(i.events for i in inputs.values()), 1,
                      out[list(wl.columns)], spark_work(spark, [group], began, ended))


RUNNERS = {"sparkcq": run_sparkcq_backlog, "spark": run_spark_backlog,
           "spark-batch": run_spark_batch}


def backlog(spark: SparkSession, wl: Workload, inputs: dict[str, Input], hosts_path: str,
            reps: int, sized: SizedRuns | None = None) -> list[str]:
    """Run ``wl`` in backlog mode ``reps`` times on each engine; the report's lines.
    ``sized`` also records each timed run's whole seconds by input size (the marginal
    rate, ``marginal.py``).
    """
    raw = {stream: read_events(inp) for stream, inp in inputs.items()}
    runs: dict[str, list[BacklogRun]] = {}
    checks: dict[str, str] = {}
    for rep in range(-1, reps):  # the first round warms the JVM up for every engine
        for engine, runner in RUNNERS.items():
            run = runner(spark, wl, inputs, hosts_path)
            if rep < 0:
                # the batch job emits every window, as sparkcq does at the end of input
                as_engine = "sparkcq" if engine == "spark-batch" else engine
                checks[engine] = check_output(as_engine, run.output,
                                              wl.expected(raw, engine), wl, raw)
            else:
                runs.setdefault(engine, []).append(run)
                if sized is not None:
                    sized.add(engine, run.events, run.seconds)
            print(f"backlog-{wl.name} rep {rep + 1}/{reps} {engine}: {run.seconds:.2f} s, "
                  f"{run.events_per_s:,.0f} events/s, {run.cycles} cycle(s); output "
                  f"{checks[engine]}", flush=True)
    median = {e: statistics.median(r.seconds for r in rs) for e, rs in runs.items()}
    events = runs["sparkcq"][0].events
    lines = [f"## Backlog mode: {wl.title}", "",
             f"All {events:,} events in the files at the start; each engine takes them in "
             "batches of its own choosing (sparkcq: what a cycle finds, up to "
             "`max_bytes_per_cycle`; Spark SS: `availableNow`, no `maxFilesPerTrigger`); "
             "a plain Spark batch job computes the same over the same files. Whole run, "
             f"start-up included, median of {reps} after a round that warms the JVM up.", "",
             "| engine | seconds | events/s | sparkcq / engine | cycles | Spark jobs, stages, "
             "shuffled records | output |", "|---|---|---|---|---|---|---|"]
    for engine, rs in runs.items():
        work = rs[0].work
        spent = (f"{work.jobs}, {work.stages}, {work.shuffled:,}" if work is not None
                 else "-")
        lines.append(f"| {engine} | {median[engine]:.2f} | {events / median[engine]:,.0f} | "
                     f"{median[engine] / median['sparkcq']:.2f} | {rs[0].cycles} | {spent} | "
                     f"{checks[engine]} |")
    return lines
