"""What Spark did for a run: jobs, tasks, task time and shuffled records of one job group.

The suite runs each engine under a job group (sparkcq: every cycle after the first;
Structured Streaming: its queries' run ids, which Spark sets itself) and reads the jobs of
its timed interval (after start-up) from Spark's own status store: the same numbers Spark's
UI shows, so where a run's time goes is measured, not guessed. ``busy_s`` is the wall
time during which at least one of the group's jobs ran; in the rest of a run's wall time
the driver worked alone (building and analysing plans, planning micro-batches) or waited.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from sparkcq.runtime.spark_work import JobRun, SparkWork, StageRun, read_jobs


def jobs_run(spark: SparkSession, groups: Iterable[str], since: float = 0.0,
             until: float = float("inf")) -> list[JobRun]:
    """The jobs in ``groups`` that began in ``[since, until]`` (seconds since the epoch),
    in order, read once Spark's listeners have caught up (``read_jobs``).
    """
    tracker = spark.sparkContext.statusTracker()
    ids = [j for group in groups for j in tracker.getJobIdsForGroup(group)]
    return read_jobs(spark, ids, since, until)


def spark_work(spark: SparkSession, groups: Iterable[str], since: float = 0.0,
               until: float = float("inf")) -> SparkWork:
    """Totals over ``jobs_run(spark, groups, since, until)``; busy time clipped to it."""
    return SparkWork.of(jobs_run(spark, groups, since, until))


@contextmanager
def job_group(spark: SparkSession, group: str) -> Iterator[None]:
    """Run the block's Spark jobs (from this thread) under job group ``group``."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        yield
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


__all__ = ["JobRun", "SparkWork", "StageRun", "job_group", "jobs_run", "spark_work"]
