"""Runs one workload's Flink SQL in a local Flink mini-cluster (PyFlink), timing it.

Run by the suite with the Flink virtual environment's Python (PyFlink pins its own numpy,
pandas and pyarrow, so it never shares sparkcq's environment):

    .venv-flink/bin/python benchmarks/suite/flink_job.py JOB.json

``JOB.json`` holds ``parallelism``, ``statements`` (DDL, run in order), ``inserts`` (the
INSERT INTOs, run as one job whose completion is timed) and ``checkpoint_dir``. Prints one
JSON line: start-up and run seconds.

Checkpoints go to files, as in any Flink deployment: Flink's default keeps them in the
JobManager's memory, at most 5 MiB, and a larger one (NEXMark q8's window join held 13 to 41
MB at a checkpoint) failed, so the job failed over and replayed from its last checkpoint in
some runs and not in others. Failing over is also switched off: a job that fails fails its
run, never a slower run that looks like a clean one.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        job = json.load(f)
    began = time.monotonic()
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("parallelism.default", str(job["parallelism"]))
    conf.set("pipeline.name", job.get("name", "sparkcq-bench"))
    # the filesystem sink commits its files at checkpoints; with none, a bounded job's
    # output stays in hidden in-progress files (the final checkpoint commits the rest)
    conf.set("execution.checkpointing.interval", job.get("checkpoint_interval", "10 s"))
    conf.set("execution.checkpointing.storage", "filesystem")
    conf.set("execution.checkpointing.dir", "file://" + job["checkpoint_dir"])
    conf.set("restart-strategy.type", "none")
    for statement in job["statements"]:
        env.execute_sql(statement)
    started = time.monotonic()
    inserts = env.create_statement_set()
    for insert in job["inserts"]:
        inserts.add_insert_sql(insert)
    inserts.execute().wait()
    done = time.monotonic()
    print(json.dumps({"startup_s": started - began, "run_s": done - started}))


if __name__ == "__main__":
    main()
