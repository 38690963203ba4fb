"""Run a workload on each engine over the same CSV files; time it and collect its output.

Each runner returns a ``Run``: start-up apart from throughput (sparkcq's and Spark's first
cycle/batch plans, compiles and starts workers; Flink's start-up is the mini-cluster's and
the job's), per-cycle latencies where the engine has cycles, and the output rows.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import pandas as pd
from pyspark.sql import SparkSession

from benchmarks.suite.data import Input
from benchmarks.suite.workloads import Workload
from sparkcq import Engine

SCHEMA = "k INT, v DOUBLE, ts TIMESTAMP"
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


def run_sparkcq(spark: SparkSession, wl: Workload, inp: Input) -> Run:
    """The workload as a sparkcq query over a files stream, one file per cycle."""
    eng = Engine(spark=spark)
    eng.execute(f"CREATE STREAM events ({SCHEMA}) WITH (event_time='ts', lateness='1 SECOND', "
                f"source='files', format='csv', header='false', path='{inp.chunks_path}', "
                "bounded='true', files_per_cycle='1')")
    eng.execute(f"CREATE QUERY q AS {wl.sparkcq}")
    first = eng.run_cycle()
    began = time.monotonic()
    while eng.has_pending_input():
        eng.run_cycle()
    elapsed = time.monotonic() - began
    reports = eng.reports[1:]
    frame = eng.results("q")
    out = frame.rename(columns={"_ts": "w"})[list(wl.columns)]
    eng.stop()
    return Run("sparkcq", wl.name, inp.events, first.seconds, elapsed,
               sum(r.rows_in for r in reports), [r.seconds for r in reports if r.rows_in],
               out)


def run_spark(spark: SparkSession, wl: Workload, inp: Input) -> Run:
    """The workload as a Structured Streaming query, one file per micro-batch
    (``availableNow``), results to the memory sink.
    """
    name = f"bench_{wl.name}"
    source = (spark.readStream.schema(SCHEMA).option("header", "false")
              .option("maxFilesPerTrigger", 1).csv(inp.chunks_path))
    checkpoint = tempfile.mkdtemp(prefix="sparkcq-bench-ss-")
    began = time.monotonic()
    query = (wl.spark(source).writeStream.outputMode("append").format("memory")
             .queryName(name).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    total = time.monotonic() - began
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    startup = total - sum(durations[1:])
    out = spark.table(name).toPandas()[list(wl.columns)]
    spark.catalog.dropTempView(name)
    shutil.rmtree(checkpoint, ignore_errors=True)
    return Run("spark", wl.name, inp.events, startup, sum(durations[1:]),
               sum(p["numInputRows"] for p in progress[1:]), durations[1:], out)


def run_flink(python: str, wl: Workload, inp: Input) -> Run:
    """The workload as Flink SQL in a local mini-cluster, one source reader per lane file
    (``data.py``), results to CSV files.
    """
    parallelism = inp.lanes
    work = tempfile.mkdtemp(prefix="sparkcq-bench-flink-")
    out_dir = os.path.join(work, "out")
    job = {
        "name": f"sparkcq-bench-{wl.name}",
        "parallelism": parallelism,
        "statements": [
            f"CREATE TABLE events ({FLINK_SCHEMA}) WITH ('connector'='filesystem', "
            f"'path'='{inp.lanes_path}', 'format'='csv')",
            f"CREATE TABLE results ({wl.flink_sink}) WITH ('connector'='filesystem', "
            f"'path'='{out_dir}', 'format'='csv')",
        ],
        "insert": f"INSERT INTO results {wl.flink}",
    }
    spec = os.path.join(work, "job.json")
    with open(spec, "w", encoding="utf-8") as f:
        json.dump(job, f)
    script = os.path.join(os.path.dirname(__file__), "flink_job.py")
    done = subprocess.run([python, script, spec], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        msg = f"Flink job failed:\n{done.stderr[-3000:]}"
        raise RuntimeError(msg)
    timing = json.loads(done.stdout.strip().splitlines()[-1])
    parts = [os.path.join(d, n) for d, _, names in os.walk(out_dir) for n in names
             if not n.startswith(".")]
    frames = [pd.read_csv(p, names=list(wl.columns)) for p in parts]
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=wl.columns)
    out["w"] = pd.to_datetime(out["w"])
    shutil.rmtree(work, ignore_errors=True)
    return Run("flink", wl.name, inp.events, timing["startup_s"], timing["run_s"],
               inp.events, [], out)
