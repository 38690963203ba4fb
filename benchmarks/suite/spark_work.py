"""What Spark did for a run: jobs, tasks, task time and shuffled records of one job group.

The suite runs each engine under a job group (sparkcq: every cycle after the first;
Structured Streaming: its queries' run ids, which Spark sets itself) and reads the jobs of
its timed interval (after start-up) from Spark's own status store: the same numbers Spark's
UI shows, so where a run's time goes is measured, not guessed. ``busy_s`` is the wall
time during which at least one of the group's jobs ran; in the rest of a run's wall time
the driver worked alone (building and analysing plans, planning micro-batches) or waited.
"""

from __future__ import annotations

from collections.abc import Iterable
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


def spark_work(spark: SparkSession, groups: Iterable[str], since: float = 0.0,
               until: float = float("inf")) -> SparkWork:
    """The work of the jobs in ``groups`` that began in ``[since, until]`` (seconds since
    the epoch), read once Spark's listeners have caught up; busy time is clipped to it.
    """
    lo, hi = since * 1000, until * 1000
    sc = spark.sparkContext
    jsc = sc._jsc
    assert jsc is not None
    jsc.sc().listenerBus().waitUntilEmpty()
    store = jsc.sc().statusStore()
    tracker = sc.statusTracker()
    jobs = stages = tasks = shuffled = 0
    task_ms = 0
    intervals = []
    seen: set[int] = set()  # a stage reused by a later job is listed there too (skipped)
    for group in groups:
        for job_id in sorted(tracker.getJobIdsForGroup(group)):
            job = store.job(job_id)
            start, end = _millis(job.submissionTime()), _millis(job.completionTime())
            if start is None or end is None or not lo <= start <= hi:
                continue
            jobs += 1
            intervals.append((start, min(end, hi)))
            ids = job.stageIds()
            for i in range(ids.size()):
                stage_id = ids.apply(i)
                if stage_id in seen:
                    continue
                try:
                    stage = store.lastStageAttempt(stage_id)
                except Exception:  # noqa: BLE001 - a skipped stage was never attempted
                    continue
                ran = _millis(stage.submissionTime())
                if str(stage.status()) != "COMPLETE" or ran is None or ran < start:
                    continue  # not run by this job: its output was reused
                seen.add(stage_id)
                stages += 1
                tasks += stage.numCompleteTasks()
                task_ms += stage.executorRunTime()
                shuffled += stage.shuffleWriteRecords()
    return SparkWork(jobs, stages, tasks, task_ms / 1000, _busy_ms(intervals) / 1000, shuffled)
