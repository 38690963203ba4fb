"""The cycle driver: takes the sources' input, has the cycle engine execute the compiled
plan on it, and commits.

    driver.take_input()          # each source's new batch joins the pending input
    report = driver.run(deliver) # one cycle on it; ``deliver`` hands records to the sinks

Input taken from the sources stays pending until a cycle that took it commits: a cycle
that fails for a reason no query explains runs again, next time, on the same input and
whatever came since. Queries that fail a cycle on their own are stopped (status
``failed``, the reason in their log) and the cycle runs again at once for the others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql import DataFrame

from sparkcq.model.clock import Clock, SystemClock
from sparkcq.model.time import show_instant
from sparkcq.plan.nodes import PlanNode, StreamScan, TableScan
from sparkcq.runtime.cycle import CycleEngine, CycleResult, QueriesFailedError
from sparkcq.runtime.cycle_cost import Phase
from sparkcq.runtime.cycle_input import NO_BATCH, CycleInput, SourceBatch, idle
from sparkcq.runtime.frames import RowCounting, Runtime, union_all
from sparkcq.runtime.partitioning import SmallCycles
from sparkcq.runtime.queries import RunningQueries
from sparkcq.runtime.state import fingerprint
from sparkcq.runtime.table_switching import switched_at, table_versions
from sparkcq.runtime.throttles import JOURNAL_KEY, Throttles

#: times a cycle runs again after queries skipped the rows they raised on
#: (``on_error='skip'``); a query still failing after that stops
SKIP_ATTEMPTS = 3

@dataclass
class CycleReport:
    """What one cycle did: for the console, metrics and benchmarks."""

    cycle: int
    seconds: float
    rows_in: int
    jobs: int
    watermarks: dict[str, int] = field(default_factory=dict)
    tables: dict[str, int] = field(default_factory=dict)  # the version of each table it read
    rows_out: dict[str, int] = field(default_factory=dict)  # records committed, by query
    partitions: int = 0  # the partitions it ran in: 1 for a small cycle
    phases: dict[Phase, float] = field(default_factory=dict)  # the driver's seconds
    job_tag: str | None = None  # of its Spark jobs (``spark_work.tagged_work``)
    state_rows_written: int = 0  # rows of the states its commit materialised


class InputSource(Protocol):
    """What the driver asks of a source (``sparkcq.io.sources.Source``)."""

    def poll(self) -> SourceBatch:
        """The input since the last poll."""
        ...

    def has_pending(self) -> bool:
        """Whether the next poll would bring something."""
        ...

    def position(self) -> dict[str, Any]:
        """Where the source stands: what a checkpoint keeps."""
        ...

    def release_before(self, position: dict[str, Any]) -> None:
        """Input before ``position`` is committed: no restart needs it."""
        ...

    def describe(self, batch: SourceBatch, folder: str) -> dict[str, Any]:
        """How to take ``batch`` again after a crash (written before its cycle runs)."""
        ...

    def replay(self, described: dict[str, Any]) -> SourceBatch:
        """The batch ``describe`` described."""
        ...


class CycleJournal(Protocol):
    """Where the driver logs each cycle's input and tells of commits (``recovery.py``)."""

    def record_input(self, stream: str, describe: Callable[[str], dict[str, Any]],
                     cycle: int) -> None:
        """A source delivered a batch to cycle ``cycle``; ``describe(folder)`` describes it."""
        ...

    def before_cycle(self, cycle: int) -> None:
        """The cycle is about to run on its recorded input."""
        ...

    def after_cycle(self, cycle: int) -> None:
        """The cycle committed."""
        ...

    def record_throttles(self, throttles: dict[str, float]) -> None:
        """The z of each adapting shedding join in the coming cycle, by fingerprint."""
        ...


Deliver = Callable[[int, dict[str, pa.Table]], None]


class CycleDriver:
    """Runs cycle after cycle over the running queries (see the module)."""

    def __init__(self, rt: Runtime, queries: RunningQueries,
                 sources: Mapping[str, InputSource],
                 count_rows: RowCounting = RowCounting.CACHED,
                 journal: CycleJournal | None = None, clock: Clock | None = None,
                 small_cycles: SmallCycles | None = None):
        self.rt = rt
        self.small_cycles = small_cycles or SmallCycles()
        self.queries = queries
        self.sources = sources
        self.journal = journal
        self.clock = clock or SystemClock()  # times the cycles (shedding adapts to them)
        self.engine = CycleEngine(rt, queries.plan, queries.intervals, count_rows, self.clock)
        self.cycle = 0  # the number of the next cycle
        self.reports: list[CycleReport] = []
        # the rows each stream's scan took in the last cycle (``rows_taken``)
        self.last_rows: dict[StreamScan, int] = {}
        self.pending = CycleInput()  # taken from the sources, not yet in a committed cycle
        self.throttles = Throttles()
        self.logged_throttles: dict[PlanNode, float] | None = None  # of a redone cycle
        self.input_seconds = 0.0  # taking the pending input, since the last cycle

    def has_pending_input(self) -> bool:
        """Whether any source has input the next cycle would take."""
        return any(s.has_pending() for s in self.sources.values())

    def take_input(self) -> None:
        """Add each source's new batch to the pending input (and log it for recovery)."""
        began = self.clock.monotonic()
        scans = self.queries.scans
        for key, source in self.sources.items():
            if key not in scans:
                continue  # a feed stream before its HEADER
            batch = source.poll()
            if self.journal is not None and not idle(batch, scans[key].watermark):
                self.journal.record_input(key, partial(source.describe, batch), self.cycle)
            self.hand(key, batch)
        self.input_seconds += self.clock.monotonic() - began

    def take_logged(self, offsets: Mapping[str, list[dict[str, Any]]]) -> None:
        """Take the batches a cycle took before a crash, as its journal described them,
        and the z its shedding joins ran with.
        """
        if JOURNAL_KEY in offsets:
            by_print = {fingerprint(n): n for n in self.queries.plan.ops}
            [logged] = offsets[JOURNAL_KEY]
            self.logged_throttles = {by_print[p]: z for p, z in logged.items()
                                     if p in by_print}
        for key, described in offsets.items():
            if key == JOURNAL_KEY:
                continue
            for one in described:
                self.hand(key, self.sources[key].replay(one))

    def reread(self, scan: StreamScan, offsets: Mapping[str, list[dict[str, Any]]],
               ) -> DataFrame | None:
        """The raw batch ``scan`` took in a cycle whose input was logged as ``offsets``,
        read again (the events a checkpoint named by that cycle); None: not logged.
        Reading moves the source's position: a restart seeks it to the checkpoint's after.
        """
        key = scan.name.lower()  # a source's key, and its input's in the log
        if key not in offsets or key not in self.sources:
            return None
        return union_all([self.queries.scans.batches(key, self.sources[key].replay(one))
                          .get(scan, NO_BATCH).df for one in offsets[key]])

    def hand(self, stream: str, batch: SourceBatch) -> None:
        """Add a stream's batch to the pending input (for each of its scans)."""
        batches = self.queries.scans.batches(stream, batch)
        self.pending = self.pending.then(CycleInput(self.cycle, batches))

    def resume_at(self, cycle: int) -> None:
        """Number the next cycle ``cycle`` (after a restart, from the checkpoint)."""
        self.cycle = cycle

    def run(self, deliver: Deliver) -> CycleReport:
        """Run one cycle on the pending input: evaluate, commit, deliver, rewind."""
        start = self.clock.monotonic()
        scans = self.queries.scans
        jobs_before = self.rt.jobs
        before = {s.scan: s.rows_in for s in scans.values()}
        throttles = self.decide_throttles()
        if self.journal is not None:
            if throttles:
                self.journal.record_throttles({fingerprint(n): z for n, z in throttles.items()})
            self.journal.before_cycle(self.cycle)
        plan = self.queries.plan
        served = table_versions(plan)
        taken = replace(self.pending, number=self.cycle, throttles=throttles)
        rows = self.rows_taken(taken)
        held = sum(op.state_rows for op in plan.state_holders())
        single = self.small_cycles.single(rows, self.rt.single, held)
        self.rt.run_in_one_partition(single, self.small_cycles.interpreted(rows))
        tag = self.rt.label_jobs(taken.number)

        delivered: dict[str, int] = {}

        def commit(tables: dict[str, pa.Table]) -> None:
            deliver(taken.number, tables)
            delivered.clear()
            delivered.update({name: t.num_rows for name, t in tables.items()})

        try:
            attempts = 0
            while True:
                try:
                    result = self.engine.execute(self.queries.compiled, taken, commit)
                    break
                except QueriesFailedError as failed:
                    # each failing query stops, or skips the rows it raised on
                    # (``on_error='skip'``) a few times at most; the cycle runs again
                    attempts += 1
                    for query, error in failed.failures:
                        if attempts > SKIP_ATTEMPTS or not self.queries.skip_rows(
                                query.name, error, taken, self.cycle):
                            self.queries.fail(query.name, error, self.cycle)
            self.pending = CycleInput()
        finally:
            self.rt.end_cycle()
            self.rt.label_jobs(None)
        phases = {Phase.INPUT: self.input_seconds, **result.phases}
        self.input_seconds = 0.0
        self.log_table_switches(served)
        self.last_rows = {s.scan: s.rows_in - before.get(s.scan, 0) for s in scans.values()}
        report = CycleReport(
            self.cycle, self.clock.monotonic() - start, sum(self.last_rows.values()),
            self.rt.jobs - jobs_before,
            {k: s.watermark for k, s in scans.items()},
            {n.name: v for n, v in table_versions(plan).items()
             if isinstance(n, TableScan)}, delivered, self.rt.cycle_partitions, phases, tag,
            result.state_rows_written)
        self.reports.append(report)
        self.cycle += 1
        if self.journal is not None:
            self.journal.after_cycle(self.cycle - 1)
        else:  # committed: no restart can use the input taken so far
            for source in self.sources.values():
                source.release_before(source.position())
        return report

    def rows_taken(self, taken: CycleInput) -> int:
        """The rows a cycle takes: counted where the driver holds them (pushed rows) or the
        source counted them (a generator's ids), else as ``SmallCycles.uncounted_rows``
        decides from the stream's last cycle and its source's estimate (files).
        """
        total = 0
        for scan in taken.batches:
            n = taken.rows_of(scan)
            total += n if n is not None else self.small_cycles.uncounted_rows(
                self.last_rows.get(scan, 0), taken.estimated_rows_of(scan))
        return total

    def decide_throttles(self) -> dict[PlanNode, float]:
        """The z of each adapting shedding join for the coming cycle: as logged for a
        redone cycle, otherwise from the last cycle's time and work and the input waiting;
        notable changes are logged in the queries that read the join.
        """
        if self.logged_throttles is not None:
            logged, self.logged_throttles = self.logged_throttles, None
            self.throttles.adopt(logged)
            return logged
        last = self.reports[-1].seconds if self.reports else None
        decided, notes = self.throttles.decide(self.queries.plan.ops, last, self.pending)
        for node, note in notes.items():
            for run in self.queries.reading(lambda n, node=node: n == node):  # type: ignore[misc]
                run.info.log.append(f"cycle {self.cycle}: shedding {note}")
        return decided

    def log_table_switches(self, served: Mapping[PlanNode, int]) -> None:
        """Say in each query's log where its joins switched to a table's new rows."""
        plan = self.queries.plan
        for node, version in table_versions(plan).items():
            if served.get(node, version) == version or not isinstance(node, TableScan):
                continue
            for run in self.queries.reading(lambda n, node=node: n == node):  # type: ignore[misc]
                kind = run.info.plan.time_kind
                where = ", ".join(show_instant(at, kind) for at in
                                  switched_at(plan, run.info.plan, node, version))
                run.info.log.append(
                    f"cycle {self.cycle}: table {node.name!r} version {version} "
                    + (f"in effect from {where}" if where else "in effect from its start"))


__all__ = ["CycleDriver", "CycleJournal", "CycleReport", "CycleResult", "Deliver", "InputSource"]
