"""Where a sparkcq cycle's time goes, for one workload of the suite.

    .venv/bin/python -m benchmarks.suite.cycle_profile tumble            # 1M events, 10 cycles
    .venv/bin/python -m benchmarks.suite.cycle_profile join --events 200000 --show 2
    .venv/bin/python -m benchmarks.suite.cycle_profile nexmark-q7 --events 1800000

Runs the workload's sparkcq queries over the suite's CSV files (a NEXMark query over the
generator's files, as ``make bench`` writes them) as ``make bench`` does and
prints, for each cycle after the first (start-up): its wall time, the time no Spark job
ran (the driver alone), its Spark jobs, tasks and task time, and the driver's time by
phase (input, operators, commit and its planning, deliver); then each operator's median
driver time per cycle building its part of the plan (``plan_ms`` of ``EXPLAIN GLOBAL``; a
scan's includes its statistics job); then every Spark job of cycle ``--show`` with the
stages it ran, named by Spark's call site.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from pyspark.sql import SparkSession

from benchmarks.nexmark.bench import sparkcq_engine as nexmark_engine
from benchmarks.nexmark.generator import Config, write_input
from benchmarks.nexmark.queries import QUERIES
from benchmarks.suite.__main__ import HERE, NEXMARK_RATE, prepare_inputs, write_hosts
from benchmarks.suite.engines import sparkcq_engine
from benchmarks.suite.spark_work import JobRun, SparkWork, job_group, jobs_run
from benchmarks.suite.workloads import WORKLOADS
from sparkcq import Engine
from sparkcq.session import make_session


def print_jobs(jobs: list[JobRun]) -> None:
    """Every job with its stages: tasks, task time, wall time, shuffled records, call site."""
    for job in jobs:
        print(f"  job {job.job_id}: {(job.end_ms - job.start_ms) / 1000:.2f} s, "
              f"{len(job.stages)} stages  {job.name[:70]}")
        for st in job.stages:
            print(f"    stage {st.stage_id}: {st.tasks} tasks, {st.task_s:.2f} s of tasks, "
                  f"{st.wall_s:.2f} s wall, {st.shuffled:,} shuffled  {st.name[:60]}")


def profiled_engine(spark: SparkSession, workload: str, events: int, data_dir: str) -> Engine:
    """The engine ``make bench`` runs for ``workload`` over its inputs of ``events`` events."""
    if workload.startswith("nexmark-"):
        files = max(4, events // 100_000)
        cfg = Config(events, NEXMARK_RATE, 0, 42)
        query = QUERIES[workload.removeprefix("nexmark-")]
        inp = write_input(spark, os.path.join(
            data_dir, f"nexmark-{cfg.events}-{files}-{cfg.rate}-{cfg.jitter_ms}-{cfg.seed}"),
            cfg, files, query.streams)
        return nexmark_engine(spark, query, inp)
    wl = WORKLOADS[workload]
    inputs = prepare_inputs(wl, events, data_dir)
    return sparkcq_engine(spark, wl, inputs, write_hosts(data_dir))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite.cycle_profile")
    parser.add_argument("workload", choices=sorted(WORKLOADS) + sorted(
        f"nexmark-{q}" for q in QUERIES))
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--show", type=int, default=5, help="the cycle whose jobs to list")
    args = parser.parse_args()
    data_dir = os.path.join(HERE, ".data")
    spark = make_session(None, app_name="sparkcq-profile",
                         conf={"spark.sql.session.timeZone": "UTC"})
    eng = profiled_engine(spark, args.workload, args.events, data_dir)
    first = eng.run_cycle()
    print(f"cycle 0 (start-up): {first.seconds:.2f} s, {first.rows_in:,} events")
    labels = {node: f"#{i} {node.label()[:60]}" for i, node in enumerate(eng.plan.ops)}
    plan_ms: dict[str, list[float]] = {}
    shown: list[JobRun] = []
    while eng.has_pending_input():
        group = f"sparkcq-profile-{eng.cycle}"
        with job_group(spark, group):
            began = time.time()
            report = eng.run_cycle()
        jobs = jobs_run(spark, [group], began, time.time())
        work = SparkWork.of(jobs)
        print(f"cycle {report.cycle}: {report.seconds:.2f} s, {report.rows_in:,} events; "
              f"driver alone {report.seconds - work.busy_s:.2f} s; {work.jobs} jobs, "
              f"{work.stages} stages, {work.tasks} tasks, {work.task_s:.2f} s of tasks, "
              f"{work.shuffled:,} shuffled")
        print("  driver phases: " + ", ".join(f"{phase} {seconds:.2f} s"
                                              for phase, seconds in report.phases.items()))
        for node, stats in eng.plan.stats.items():
            plan_ms.setdefault(labels.get(node, node.label()), []).append(
                stats.plan_seconds * 1e3)
        if report.cycle == args.show:
            shown = jobs
    print("driver time per cycle building each operator's plan (median):")
    for label, values in plan_ms.items():
        print(f"  {statistics.median(values):7.1f} ms  {label}")
    if shown:
        print(f"the Spark jobs of cycle {args.show}:")
        print_jobs(shown)
    eng.stop()
    spark.stop()


if __name__ == "__main__":
    main()
