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
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession


@dataclass(frozen=True)
class SparkWork:
    """Totals over the Spark jobs of one run."""

    jobs: int
    stages: int  # stages that ran (skipped ones, whose shuffle output was reused, not)
    tasks: int
    task_s: float  # executor run time summed over the tasks
    busy_s: float  # wall time with at least one job running
    shuffled: int  # records written to shuffles

    @classmethod
    def of(cls, jobs: list[JobRun]) -> SparkWork:
        """Totals over ``jobs``; busy time is the union of their intervals."""
        stages = [st for job in jobs for st in job.stages]
        return cls(len(jobs), len(stages), sum(st.tasks for st in stages),
                   sum(st.task_s for st in stages),
                   _busy_ms((job.start_ms, job.end_ms) for job in jobs) / 1000,
                   sum(st.shuffled for st in stages))

    def per(self, events: int, unit: int = 100_000) -> dict[str, float]:
        """Every figure per ``unit`` events."""
        scale = unit / events if events else 0.0
        return {"jobs": self.jobs * scale, "stages": self.stages * scale,
                "tasks": self.tasks * scale, "task_s": self.task_s * scale,
                "busy_s": self.busy_s * scale, "shuffled": self.shuffled * scale}


def _millis(option: Any) -> int | None:
    return option.get().getTime() if option.isDefined() else None


def _busy_ms(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of ``[start, end)`` intervals."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


@dataclass(frozen=True)
class StageRun:
    """One stage as it ran for a job."""

    stage_id: int
    name: str  # Spark's call site: the action, or the operation that made the shuffle
    tasks: int
    task_s: float
    wall_s: float
    shuffled: int


@dataclass(frozen=True)
class JobRun:
    """One Spark job: when it ran (ms since the epoch) and the stages it ran itself."""

    job_id: int
    name: str
    start_ms: float
    end_ms: float
    stages: tuple[StageRun, ...]


def jobs_run(spark: SparkSession, groups: Iterable[str], since: float = 0.0,
             until: float = float("inf")) -> list[JobRun]:
    """The jobs in ``groups`` that began in ``[since, until]`` (seconds since the epoch),
    in order, read once Spark's listeners have caught up; each with the stages it ran (a
    stage whose shuffle output an earlier job made is skipped, and not listed again).
    """
    sc = spark.sparkContext
    jsc = sc._jsc
    assert jsc is not None
    jsc.sc().listenerBus().waitUntilEmpty()
    store = jsc.sc().statusStore()
    tracker = sc.statusTracker()
    lo, hi = since * 1000, until * 1000
    seen: set[int] = set()
    out = []
    ids = sorted(j for group in groups for j in tracker.getJobIdsForGroup(group))
    for job_id in ids:
        job = store.job(job_id)
        start, end = _millis(job.submissionTime()), _millis(job.completionTime())
        if start is None or end is None or not lo <= start <= hi:
            continue
        stages = []
        stage_ids = job.stageIds()
        for i in range(stage_ids.size()):
            stage_id = stage_ids.apply(i)
            if stage_id in seen:
                continue
            try:
                stage = store.lastStageAttempt(stage_id)
            except Exception:  # noqa: BLE001 - a skipped stage was never attempted
                continue
            ran, done = _millis(stage.submissionTime()), _millis(stage.completionTime())
            if str(stage.status()) != "COMPLETE" or ran is None or ran < start:
                continue  # not run by this job: its output was reused
            seen.add(stage_id)
            stages.append(StageRun(stage_id, stage.name(), stage.numCompleteTasks(),
                                   stage.executorRunTime() / 1000,
                                   ((done or ran) - ran) / 1000, stage.shuffleWriteRecords()))
        out.append(JobRun(job_id, job.name(), start, min(end, hi), tuple(stages)))
    return out


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
