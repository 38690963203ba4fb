"""What Spark did for a run: jobs, tasks, task time and shuffled records of one job group.

The suite runs each engine's timed part under a job group (sparkcq: every cycle after the
first; Structured Streaming: its queries' run ids, which Spark sets itself, without batch
0), then reads Spark's own status store: the same numbers Spark's UI shows, so where a
run's time goes is measured, not guessed. ``busy_s`` is the wall time during which at
least one of the group's jobs ran; the rest of a run's wall time the driver worked alone
(building and analysing plans, planning micro-batches) or waited.
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


def _busy_ms(intervals: Iterable[tuple[int, int]]) -> int:
    """The length of the union of ``[start, end)`` intervals."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def spark_work(spark: SparkSession, groups: Iterable[str], skip_batch_zero: bool = False
               ) -> SparkWork:
    """The work of every job in ``groups``, read once Spark's listeners have caught up.

    ``skip_batch_zero`` leaves out Structured Streaming's first micro-batch (its start-up),
    recognised by the job description Spark gives each batch (``... batch = 0``).
    """
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
            description = job.description().get() if job.description().isDefined() else ""
            if skip_batch_zero and description.rstrip().endswith("batch = 0"):
                continue
            start, end = _millis(job.submissionTime()), _millis(job.completionTime())
            if start is None or end is None:
                continue
            jobs += 1
            intervals.append((start, end))
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
