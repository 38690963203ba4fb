"""What a cycle cost, for a user asking why it is slow (``EXPLAIN ANALYZE``).

A cycle's wall time splits into the driver's phases, timed as the cycle runs, and the
Spark work it ran, read afterwards from Spark's status store by the cycle's job tag:

    cycle 41: 6,949 rows in 1.00 s (input taken in 0.01 s before it), 1 partition
      driver: operators 0.45 s, commit 0.53 s (planning 0.08 s), deliver 0.01 s; no job
        running 0.70 s
      Spark: 1 job, 1 stage, 1 task, 0.25 s of tasks, 0.30 s running, 0 records shuffled
      state: 93,021 rows written

``operators`` is the operators building (and, for the frames they keep, planning) the
cycle's Spark plans; ``commit`` the cycle's one Spark action: planning its union (in
parentheses), the job, and its records' way to Python; ``deliver`` the sinks. While no job
of the cycle runs (its time less Spark's ``running``) the driver works alone. ``state``
is what the cycle wrote of its operators' state: the rows of every state frame its commit
materialised (a state rewritten whole writes all its rows, every cycle).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from sparkcq.runtime.spark_work import SparkWork


class Phase(StrEnum):
    """A part of a cycle's time on the driver."""

    INPUT = "input"  # polling the sources
    OPERATORS = "operators"  # the operators' steps: building and planning the frames
    COMMIT = "commit"  # the cycle's Spark action, planning included
    COMMIT_PLANNING = "commit planning"  # of which: optimising and planning its union
    DELIVER = "deliver"  # handing the records to the sinks


def cycle_tag(run: str, cycle: int) -> str:
    """The Spark job tag of a cycle's jobs (``run`` tells engines sharing a session apart)."""
    return f"sparkcq-{run}-cycle-{cycle}"


@dataclass(frozen=True)
class CycleCost:
    """One cycle's cost: its wall time, the driver's phases and the Spark work it ran."""

    cycle: int
    seconds: float
    rows_in: int
    partitions: int
    phases: dict[Phase, float]
    work: SparkWork
    state_rows_written: int = 0

    @property
    def driver_alone(self) -> float:
        """Seconds in which no Spark job of the cycle ran."""
        return max(self.seconds - self.work.busy_s, 0.0)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def render_costs(costs: Sequence[CycleCost]) -> str:
    """The cycles' costs as text, one block per cycle (see the module)."""
    if not costs:
        return "no cycle has run yet"
    lines = []
    for c in costs:
        p = c.phases
        w = c.work
        lines.append(f"cycle {c.cycle}: {c.rows_in:,} rows in {c.seconds:.2f} s "
                     f"(input taken in {p.get(Phase.INPUT, 0.0):.2f} s before it), "
                     f"{_plural(c.partitions, 'partition')}")
        lines.append(
            f"  driver: operators {p.get(Phase.OPERATORS, 0.0):.2f} s, "
            f"commit {p.get(Phase.COMMIT, 0.0):.2f} s "
            f"(planning {p.get(Phase.COMMIT_PLANNING, 0.0):.2f} s), "
            f"deliver {p.get(Phase.DELIVER, 0.0):.2f} s; no job running {c.driver_alone:.2f} s")
        lines.append(
            f"  Spark: {_plural(w.jobs, 'job')}, {_plural(w.stages, 'stage')}, "
            f"{_plural(w.tasks, 'task')}, {w.task_s:.2f} s of tasks, {w.busy_s:.2f} s running, "
            f"{_plural(w.shuffled, 'record')} shuffled")
        lines.append(f"  state: {_plural(c.state_rows_written, 'row')} written")
    return "\n".join(lines)
