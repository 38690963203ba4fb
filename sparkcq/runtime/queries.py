"""The running queries: merged into the global plan, compiled for the cycle engine, taken
out again when they are dropped, fail or lose their stream.

After every change here the queries are compiled again (``compile``): a cycle only
executes the ``CompiledPlan`` this keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from sparkcq.catalog import QueryInfo, QueryStatus
from sparkcq.language.sql.statements import OutputForm
from sparkcq.model.time import TimeKind
from sparkcq.plan.nodes import EdgeKind, PlanNode, StreamScan, TableScan, walk
from sparkcq.plan.options import OperatorError
from sparkcq.runtime.cycle import CompiledPlan, CompiledQuery, compile_plan
from sparkcq.runtime.cycle_input import CycleInput
from sparkcq.runtime.failures import describe_failure, user_traceback
from sparkcq.runtime.frames import Runtime
from sparkcq.runtime.global_plan import GlobalPlan
from sparkcq.runtime.lowering import lower
from sparkcq.runtime.operators.base import Operator
from sparkcq.runtime.operators.outputs import SinkFormatter
from sparkcq.runtime.operators.scan import ScanOperator
from sparkcq.runtime.operators.shared_output import SharedIntervalFormatter, encodable
from sparkcq.runtime.operators.table import TableRows
from sparkcq.runtime.scans import StreamScans
from sparkcq.runtime.seeding import seedable
from sparkcq.runtime.skipping import skip_failing_rows


@dataclass(frozen=True)
class RunningQuery:
    """A query in the global plan: its catalog entry and how its records are made."""

    info: QueryInfo
    formatter: SinkFormatter  # its own records, or just its start when ``qid`` is set
    qid: int | None = None  # interval records formatted by the shared formatter

    @property
    def name(self) -> str:
        """The query's name."""
        return self.info.name

    def reads(self, node: PlanNode) -> bool:
        """Whether the query's plan holds ``node``."""
        return node in walk(self.info.plan)


class RunningQueries(Mapping[str, RunningQuery]):
    """The queries in the global plan by lower-case name, and those taken out of it for
    a reason (failed, stopped: kept for their logs and results).

    ``table_rows`` gives the catalog's rows of every table by lower-case name, for the
    table operators of new queries and for a cycle to switch to replaced rows.
    """

    def __init__(self, rt: Runtime, plan: GlobalPlan, scans: StreamScans,
                 table_rows: Callable[[], Mapping[str, TableRows]]):
        self.rt = rt
        self.plan = plan
        self.scans = scans
        self.table_rows = table_rows
        self.intervals = SharedIntervalFormatter(rt)  # most queries' sink records
        self.running: dict[str, RunningQuery] = {}
        self.stopped: dict[str, RunningQuery] = {}
        self.compiled: CompiledPlan = compile_plan(plan, (), ())
        self.qids = 0

    def __getitem__(self, key: str) -> RunningQuery:
        return self.running[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.running)

    def __len__(self) -> int:
        return len(self.running)

    def of(self, name: str) -> RunningQuery:
        """A running or stopped query (KeyError: neither)."""
        key = name.lower()
        return self.running.get(key) or self.stopped[key]

    def start(self, info: QueryInfo, form: OutputForm, cycle: int) -> None:
        """Merge a bound query into the global plan and start it: shared nodes are reused,
        new operators start from shared relations' contents where they can; its log says
        how (``docs/semantics.md``, "Queries added while others run").
        """
        plan = info.plan
        nodes = walk(plan)
        shared = [n for n in nodes if n in self.plan.ops]
        root_shared = plan in self.plan.ops
        notes = self.plan.add(plan, info.name, self.operator_for)
        info.log.append(f"cycle {cycle}: compiled: {len(nodes)} operators, "
                        f"{len(shared)} shared with running queries")
        formatter = SinkFormatter(plan, self.rt, form, info.name)
        if root_shared:
            seeded, missing = seedable(self.plan, [plan])
            formatter.await_starts(seeded)
            notes += missing
        info.log.extend(f"cycle {cycle}: {note}" for note in notes)
        qid = None
        if (self.plan.fuse and plan.kind is EdgeKind.RELATION
                and form is OutputForm.INTERVALS and encodable(plan.schema)):
            self.qids += 1
            qid = self.qids
        self.running[info.name.lower()] = RunningQuery(info, formatter, qid)
        info.log.append(f"cycle {cycle}: started")
        self.compile()

    def operator_for(self, node: PlanNode) -> Operator:
        """The operator a new plan node gets: its stream's scan, its table's rows, or one
        of its own.
        """
        if isinstance(node, StreamScan):
            return self.scans.operator_for(node)
        if isinstance(node, TableScan):
            return lower(node, self.rt, table=self.table_rows()[node.name.lower()])
        return lower(node, self.rt)

    def compile(self) -> None:
        """Fix what the next cycles execute: after every change to the running queries."""
        queries = [CompiledQuery(r.name, r.info.plan, r.formatter,
                                 r.info.plan.time_kind is TimeKind.TIMESTAMP, r.qid)
                   for r in self.running.values()]
        self.compiled = compile_plan(self.plan, queries, self.scans.values(), self.table_rows())

    def release(self, name: str) -> RunningQuery | None:
        """Take a query out of the running plan and free what only it used."""
        run = self.running.pop(name.lower(), None)
        if run is None:
            return None
        for op in self.plan.remove(run.info.plan, run.name):
            if isinstance(op, ScanOperator):
                self.scans.unused(op)  # a stream's current scan stays
            else:
                op.release()
        run.formatter.release()
        if run.qid is not None and not any(r.qid is not None for r in self.running.values()):
            self.intervals.clear()  # the last query it formatted: nothing stays open
        self.compile()
        return run

    def stop(self, name: str, status: QueryStatus, *lines: str) -> None:
        """Take a query out of the plan for a reason (``status``, ``lines`` in its log); it
        stays visible with its log and results until dropped.
        """
        run = self.running[name.lower()]
        run.info.enter(status, *lines)
        self.release(name)
        self.stopped[name.lower()] = run

    def skip_rows(self, name: str, error: BaseException, taken: CycleInput,
                  cycle: int) -> bool:
        """For a query created ``WITH (on_error='skip')``: dead-letter and leave out the
        rows it raised on in the cycle ``taken`` (``runtime/skipping.py``), its log saying
        which; False when it has another policy or no row explains ``error``.
        """
        run = self.running[name.lower()]
        if run.info.options.get("on_error", OperatorError.STOP).lower() != OperatorError.SKIP:
            return False
        skipped = skip_failing_rows(run.name, run.info.plan, taken, self.plan.ops.__getitem__,
                                    self.rt.spark)
        if skipped is None:
            run.info.log.append(f"cycle {cycle}: on_error='skip' found no input row that "
                                f"alone raises {describe_failure(error)!r}; stopping")
            return False
        for s in skipped:
            run.info.log.append(
                f"cycle {cycle}: skipped {s.rows.num_rows} row(s) of {s.stream} it raised on, "
                f"now in its dead letters: {s.errors[0]}")
        return True

    def fail(self, name: str, error: BaseException, cycle: int) -> None:
        """Stop one query after a failure; its log says why, the others keep running."""
        lines = [f"cycle {cycle}: failed: {describe_failure(error)}"]
        frames = user_traceback(error)
        if frames:
            lines.append(f"cycle {cycle}: traceback (user code):\n" + "\n".join(frames))
        self.stop(name, QueryStatus.FAILED, *lines)

    def drop(self, name: str) -> None:
        """Forget a query, running or stopped, and free what only it used."""
        self.release(name)
        self.stopped.pop(name.lower(), None)

    def reading(self, predicate: Callable[[PlanNode], bool]) -> list[RunningQuery]:
        """The running queries whose plans hold a node ``predicate`` accepts."""
        return [r for r in self.running.values()
                if any(predicate(n) for n in walk(r.info.plan))]
