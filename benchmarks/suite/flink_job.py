"""Runs one workload's Flink SQL in a local Flink mini-cluster (PyFlink), timing it.

Run by the suite with the Flink virtual environment's Python (PyFlink pins its own numpy,
pandas and pyarrow, so it never shares sparkcq's environment):

    .venv-flink/bin/python benchmarks/suite/flink_job.py JOB.json

``JOB.json`` holds ``parallelism``, ``statements`` (DDL, run in order) and ``inserts`` (the
INSERT INTOs, run as one job whose completion is timed). Prints one JSON line: start-up
and run seconds.
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
