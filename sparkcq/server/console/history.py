"""Health over time: one sample per committed cycle, kept for the last ``size`` cycles, and
the figures the console shows from them (cycles per second, cycle latency p50/p99, input
rate).
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any

from py4j.protocol import Py4JError

from sparkcq.engine import Engine
from sparkcq.runtime.spark_work import tagged_work
from sparkcq.server.console.snapshot import finite

SAMPLES = 600  # cycles kept: ten minutes at one cycle per second
RECENT = 60  # cycles the summary figures are taken over


class HealthHistory:
    """The last cycles' samples, taken by the engine thread, read by the console."""

    def __init__(self, size: int = SAMPLES):
        self.samples: deque[dict[str, Any]] = deque(maxlen=size)
        self.last_checkpoint: dict[str, float] | None = None  # its wall time and seconds

    def record(self, engine: Engine) -> None:
        """Sample the cycle that just committed (once per cycle; repeated calls add none),
        and give the one before it the Spark work it ran.

        A cycle's Spark work is read from Spark's status store by its job tag a cycle later,
        when Spark's listeners have long recorded its jobs: read at once, the engine thread
        would wait for them (a few py4j calls either way).
        """
        report = engine.reports[-1] if engine.reports else None
        if report is None or (self.samples and self.samples[-1]["cycle"] == report.cycle):
            return
        if self.samples and self.samples[-1]["job_tag"] is not None:
            before = self.samples[-1]
            try:
                work = tagged_work(engine.spark, before["job_tag"], wait=False)
            except Py4JError:  # Spark is gone (the server says so): the cycle shows none
                pass
            else:
                before["spark"] = {"jobs": work.jobs, "stages": work.stages,
                                   "tasks": work.tasks, "task_seconds": work.task_s,
                                   "running_seconds": work.busy_s, "shuffled": work.shuffled}
        now = time.time()
        checkpoint = engine.recovery.last_checkpoint_seconds if engine.recovery else 0.0
        if checkpoint:
            self.last_checkpoint = {"at": now, "seconds": checkpoint}
        plan = engine.queries.plan
        scans = engine.queries.scans
        shedding = {}
        for i, (node, op) in enumerate(plan.ops.items()):
            if (report_ := op.shedding_report()) is not None:
                shedding[f"#{i} {node.label()}"] = {
                    "z": report_["z"],
                    "inputs": [{"processed": side["processed"], "shed": side["shed"]}
                               for side in report_["inputs"]]}
        self.samples.append({
            "cycle": report.cycle, "at": now, "seconds": report.seconds,
            "rows_in": report.rows_in, "jobs": report.jobs,
            "rows_out": sum(report.rows_out.values()),
            "watermarks": {k: finite(w) for k, w in report.watermarks.items()},
            "dead_letters": {k: s.dead_count for k, s in list(scans.items())},
            "instances": sum(op.live_instances or 0 for op in plan.ops.values()),
            "checkpoint_seconds": checkpoint or None, "shedding": shedding,
            "partitions": report.partitions, "job_tag": report.job_tag, "spark": None,
            "phases": {phase.value: seconds for phase, seconds in report.phases.items()}})

    def recent(self, n: int = RECENT) -> list[dict[str, Any]]:
        """The newest ``n`` samples, oldest first."""
        return list(self.samples)[-n:]


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-quantile (0..1) by the nearest-rank rule; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(len(ordered), rank) - 1]


def summary(samples: list[dict[str, Any]]) -> dict[str, float | None]:
    """Cycles per second, cycle latency p50/p99 and input rows per second over ``samples``."""
    seconds = [s["seconds"] for s in samples]
    span = samples[-1]["at"] - samples[0]["at"] if len(samples) > 1 else 0.0
    return {"cycles_per_second": (len(samples) - 1) / span if span > 0 else None,
            "latency_p50": percentile(seconds, 0.5), "latency_p99": percentile(seconds, 0.99),
            "rows_in_per_second": sum(s["rows_in"] for s in samples[1:]) / span
            if span > 0 else None,
            "cycles": float(len(samples))}
