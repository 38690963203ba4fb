"""What Spark ran for a cycle (or any set of jobs): jobs, stages, tasks, task time and
shuffled records, read from Spark's own status store.

These are the numbers Spark's UI shows, so where a cycle's time goes is measured, not
guessed: a cycle's jobs carry a job tag of its own (``cycle_tag``), and its work is read
back when someone asks (``EXPLAIN ANALYZE``), never on the cycle's path. ``busy_s`` is the
wall time during which at least one of the jobs ran; in the rest of a cycle's time the
driver worked alone (building, analysing and planning the cycle's frames, moving results).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

# how long a reader waits for Spark's listeners to record jobs that just ended
_LISTENER_WAIT_MS = 2_000


@dataclass(frozen=True)
class StageRun:
    """One stage as it ran for a job."""

    stage_id: int
    name: str  # Spark's call site: the action, or the operation that made the shuffle
    tasks: int
    task_s: float
    wall_s: float
    shuffled: int  # records written to shuffles


@dataclass(frozen=True)
class JobRun:
    """One Spark job: when it ran (ms since the epoch) and the stages it ran itself."""

    job_id: int
    name: str
    start_ms: float
    end_ms: float
    stages: tuple[StageRun, ...]


@dataclass(frozen=True)
class SparkWork:
    """Totals over some Spark jobs."""

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
                   busy_ms((job.start_ms, job.end_ms) for job in jobs) / 1000,
                   sum(st.shuffled for st in stages))

    def per(self, events: int, unit: int = 100_000) -> dict[str, float]:
        """Every figure per ``unit`` events."""
        scale = unit / events if events else 0.0
        return {"jobs": self.jobs * scale, "stages": self.stages * scale,
                "tasks": self.tasks * scale, "task_s": self.task_s * scale,
                "busy_s": self.busy_s * scale, "shuffled": self.shuffled * scale}


def busy_ms(intervals: Iterable[tuple[float, float]]) -> float:
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


def _millis(option: Any) -> int | None:
    return option.get().getTime() if option.isDefined() else None


def caught_up(spark: SparkSession) -> Any:
    """Spark's status store, once its listeners have recorded the jobs that ended (or
    ``_LISTENER_WAIT_MS`` passed: the store then lacks the last moments' jobs).
    """
    jsc = spark.sparkContext._jsc
    assert jsc is not None
    try:
        jsc.sc().listenerBus().waitUntilEmpty(_LISTENER_WAIT_MS)
    except Py4JJavaError:  # a timeout: what is recorded so far
        pass
    return jsc.sc().statusStore()


def read_jobs(spark: SparkSession, job_ids: Iterable[int], since: float = 0.0,
              until: float = float("inf"), wait: bool = True) -> list[JobRun]:
    """The jobs ``job_ids`` that began in ``[since, until]`` (seconds since the epoch), in
    order, each with the stages it ran (a stage whose shuffle output an earlier job made
    is skipped, and not listed again). A job Spark no longer keeps is left out, and so is
    one its listeners have not recorded as ended (without ``wait``: not waiting for them).
    """
    jsc = spark.sparkContext._jsc
    assert jsc is not None
    store = caught_up(spark) if wait else jsc.sc().statusStore()
    lo, hi = since * 1000, until * 1000
    seen: set[int] = set()
    out = []
    for job_id in sorted(job_ids):
        try:
            job = store.job(job_id)
        except Py4JJavaError:  # dropped from the store (``spark.ui.retainedJobs``)
            continue
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
            except Py4JJavaError:  # a skipped stage was never attempted
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


def tagged_work(spark: SparkSession, tag: str, wait: bool = True) -> SparkWork:
    """The work of the jobs Spark ran under job tag ``tag`` (see ``read_jobs`` for
    ``wait``).
    """
    jsc = spark.sparkContext._jsc
    assert jsc is not None
    ids = jsc.sc().statusTracker().getJobIdsForTag(tag)
    return SparkWork.of(read_jobs(spark, list(ids), wait=wait))
