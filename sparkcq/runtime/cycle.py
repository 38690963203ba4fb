"""The cycle engine: executes the compiled plan once per cycle.

A statement changes what runs; after it the running queries are compiled into a
``CompiledPlan``: which operators step, how many read each node's change edge (an edge read
more than once is cached for the cycle), whose records come straight from an aggregate family
(fused tails) and which nodes no one then reads, how the shared formatter's records decode.
Each cycle only executes that, on its input, and returns what it produced:

    compiled = compile_plan(plan, queries, scans, tables)       # after each statement
    result = cycles.execute(compiled, cycle_input, deliver)      # once per cycle

A cycle is one transaction (``CycleTransaction``): if its action fails, every operator is
rolled back, each query is tried alone to find who failed, and the caller stops those
(``QueriesFailedError``) and executes again for the others with the same input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame

from sparkcq.errors import ExecutionError, SinkError, SparkDiedError
from sparkcq.model.clock import Clock, SystemClock
from sparkcq.plan.nodes import (
    IntervalJoin,
    OverAggregate,
    PlanNode,
    SlicedAggregate,
    StreamScan,
    TableScan,
    walk,
)
from sparkcq.runtime.cycle_cost import Phase
from sparkcq.runtime.cycle_input import CycleInput
from sparkcq.runtime.failures import describe_failure
from sparkcq.runtime.families import Family
from sparkcq.runtime.frames import RowCounting, Runtime, Slice, TaggedRecords
from sparkcq.runtime.fused_outputs import (
    QueryTail,
    find_tail,
    sliced_tail_changes,
    tail_changes,
)
from sparkcq.runtime.fused_snapshots import (
    SnapshotQuery,
    find_snapshot_tail,
    snapshot_records,
)
from sparkcq.runtime.fused_streams import (
    STREAMED_SID_BASE,
    StreamedQuery,
    find_stream_tail,
    shape_columns,
    stream_records,
)
from sparkcq.runtime.global_plan import GlobalPlan
from sparkcq.runtime.operators.base import CycleContext, Operator
from sparkcq.runtime.operators.element_intervals import element_source, pair_span
from sparkcq.runtime.operators.outputs import SinkFormatter
from sparkcq.runtime.operators.scan import ScanOperator
from sparkcq.runtime.operators.shared_output import (
    OutputShape,
    QueryElements,
    SharedIntervalFormatter,
    SlicedRuns,
    decode,
    encode,
    encode_elements,
    output_shapes,
    split_by_query,
)
from sparkcq.runtime.operators.table import TableRows
from sparkcq.runtime.seeding import starts as cycle_starts
from sparkcq.runtime.sliced_runs import keeps_group, sliced_runs
from sparkcq.runtime.table_switching import replace_tables
from sparkcq.runtime.transaction import CycleParticipant, CycleTransaction
from sparkcq.session import spark_alive


@dataclass(frozen=True)
class CompiledQuery:
    """A running query as the cycle executes it."""

    name: str
    plan: PlanNode
    formatter: SinkFormatter  # its own records, or only its start when ``qid`` is set
    timestamps: bool  # its records' ``_ts`` / ``_te`` are timestamps
    qid: int | None = None  # interval records formatted by the shared formatter
    # the steps from an aggregate family member up to the root, when its records can come
    # straight from the family's result (``fused_outputs.py``)
    tail: QueryTail | None = None
    # the interval join whose elements, with their ends, its records come from when it
    # started from nothing (``element_intervals.py``)
    elements: IntervalJoin | None = None

    def waits(self, plan: GlobalPlan) -> bool:
        """Whether a start of this query's is not due yet: its formatter's, or one of the
        operators of its tail (its records then take their own path until it is).
        """
        if self.formatter.progress.waiting:
            return True
        return self.tail is not None and any(
            plan.ops[n].progress.waiting for n in (*self.tail.steps, self.tail.member.node))


@dataclass(frozen=True)
class CompiledPlan:
    """What a cycle executes, fixed between statements."""

    queries: tuple[CompiledQuery, ...]
    nodes: frozenset[PlanNode]  # the nodes the queries read, each stepped once
    stepped: tuple[Operator, ...]  # their operators, in plan order
    idle_scans: tuple[ScanOperator, ...]  # streams no query reads: they still advance
    shapes: tuple[OutputShape, ...]  # how the shared formatter's records decode
    edge_readers: Counter[PlanNode]  # operators and queries reading each node's change edge
    # the rows the catalog holds for each table the queries read: a cycle switches a
    # table's operator to them if they replaced the rows it serves (``replace_tables``)
    tables: Mapping[PlanNode, TableRows] = field(default_factory=dict)
    # queries whose records come straight from their family's result, and the nodes no
    # one reads then (their output is not built)
    fused: Mapping[str, QueryTail] = field(default_factory=dict)
    unread: frozenset[PlanNode] = frozenset()
    # nodes whose change edge nothing reads (``CycleContext.edges_unread``)
    edges_unread: frozenset[PlanNode] = frozenset()
    # stream queries whose records come out of one projection of their edge
    # (``fused_streams.py``), and the commit column of each one's records
    streamed: Mapping[str, StreamedQuery] = field(default_factory=dict)
    # RSTREAM queries whose records come out of one generator over their sliced family's
    # segments (``fused_snapshots.py``)
    snapshots: Mapping[str, SnapshotQuery] = field(default_factory=dict)
    tagged_columns: Mapping[str, str] = field(default_factory=dict)
    # scans whose batch one operator reads once (``CycleContext.read_once``)
    read_once: frozenset[PlanNode] = frozenset()

    @property
    def tagged_ids(self) -> dict[str, int]:
        """The commit id of each streamed or snapshot query's records."""
        return {name: STREAMED_SID_BASE - i
                for i, name in enumerate([*self.streamed, *self.snapshots])}

    def participants(self, plan: GlobalPlan,
                     intervals: SharedIntervalFormatter) -> list[CycleParticipant]:
        """Everything this plan's cycle may change, for its transaction."""
        return [*plan.operators(self.nodes), *self.idle_scans,
                *[q.formatter for q in self.queries], intervals]

    def fusion_now(self, plan: GlobalPlan) -> tuple[Mapping[str, QueryTail],
                                                    frozenset[PlanNode]]:
        """The fused tails and unread nodes of this cycle: as compiled, unless a start
        of a fused query is not due yet (right after a statement, rarely longer).
        """
        waiting = {q.name for q in self.queries if q.name in self.fused and q.waits(plan)}
        if not waiting:
            return self.fused, self.unread
        fused = {n: t for n, t in self.fused.items() if n not in waiting}
        return fused, unread_steps(plan, self.queries, fused, self.streamed, self.snapshots,
                                   self.nodes)


def compile_plan(plan: GlobalPlan, queries: Iterable[CompiledQuery],
                 scans: Iterable[ScanOperator],
                 tables: Mapping[str, TableRows] | None = None) -> CompiledPlan:
    """The plan a cycle executes for ``queries``; ``scans`` no query reads still advance;
    ``tables`` are the catalog's rows by lower-case table name.
    """
    queries = tuple(query if query.qid is None
                    else replace(query, tail=find_tail(query.plan, plan.ops, query.qid),
                                 elements=element_source(query.plan))
                    for query in queries)
    nodes = frozenset(n for query in queries for n in walk(query.plan))
    stepped = tuple(op for node, op in plan.ops.items() if node in nodes)
    idle = tuple(s for s in scans if s.node not in plan.ops)
    shapes = tuple(output_shapes((q.qid, q.name, q.plan.schema, q.timestamps)
                                 for q in queries if q.qid is not None))
    tables = tables or {}
    rows: dict[PlanNode, TableRows] = {
        n: tables[n.name.lower()] for n in nodes
        if isinstance(n, TableScan) and n.name.lower() in tables}
    fused = {q.name: q.tail for q in queries if q.tail is not None}
    snapshots = snapshot_queries(queries, plan) if plan.fuse else {}
    streamed = streamed_queries(q for q in queries
                                if q.name not in snapshots) if plan.fuse else {}
    unread = unread_steps(plan, queries, fused, streamed, snapshots, nodes)
    roots = Counter(q.plan for q in queries)
    readers = plan.consumers() + roots
    edge_readers = plan.edge_readers(nodes, roots)
    edges = frozenset(n for n in nodes if edge_readers[n] == 0)
    columns = shape_columns([(s.name, s.schema, s.timestamps) for s in streamed.values()]
                            + [(s.name, s.schema, s.timestamps) for s in snapshots.values()])
    # a stream's batch read by one window aggregate, or by the members of one family of
    # them (which reads it once for all), through its arrivals (its edge unread): that
    # plan reads them once (an interval join's shedding reads its new elements twice)
    by_window: dict[PlanNode, list[object]] = {}
    for node, op in plan.ops.items():
        if isinstance(node, SlicedAggregate | OverAggregate):
            reader = op.family if op.family is not None else node
            for child in node.children:
                by_window.setdefault(child, []).append(reader)
    once = frozenset(n for n in nodes if isinstance(n, StreamScan) and n in edges
                     and n in by_window and readers[n] == len(by_window[n])
                     and all(r is by_window[n][0] for r in by_window[n]))
    return CompiledPlan(queries, nodes, stepped, idle, shapes, edge_readers, rows, fused,
                        unread, edges, streamed, snapshots, columns, read_once=once)


def streamed_queries(queries: Iterable[CompiledQuery]) -> dict[str, StreamedQuery]:
    """The stream queries whose records come out of one projection of their edge: those
    reaching an edge through Filter and Project steps only, where the edge has two or more.
    """
    found: dict[PlanNode, list[StreamedQuery]] = {}
    for query in queries:
        if query.qid is not None or query.formatter.relation:
            continue
        tail = find_stream_tail(query.plan)
        if tail is not None:
            found.setdefault(tail.base, []).append(
                StreamedQuery(query.name, tail, query.plan.schema, query.timestamps))
    return {s.name: s for group in found.values() if len(group) > 1 for s in group}


def snapshot_queries(queries: Iterable[CompiledQuery],
                     plan: GlobalPlan) -> dict[str, SnapshotQuery]:
    """The RSTREAM queries whose records come out of one generator over their sliced
    family's segments: those with a period above a member through Filter and Project
    steps only, where the family has two or more.
    """
    found: dict[int, list[SnapshotQuery]] = {}
    for query in queries:
        if query.qid is not None:
            continue
        tail = find_snapshot_tail(query.plan, plan.ops)
        if tail is not None:
            found.setdefault(id(tail.member.family), []).append(
                SnapshotQuery(query.name, tail, query.plan.schema, query.timestamps))
    return {s.name: s for group in found.values() if len(group) > 1 for s in group}


def unread_steps(plan: GlobalPlan, queries: Iterable[CompiledQuery],
                 fused: Mapping[str, QueryTail], streamed: Mapping[str, StreamedQuery],
                 snapshots: Mapping[str, SnapshotQuery],
                 nodes: frozenset[PlanNode]) -> frozenset[PlanNode]:
    """The steps of fused, streamed and snapshot queries that nothing else reads (see
    ``GlobalPlan.unread``).
    """
    steps = {n for t in fused.values() for n in (*t.steps, t.member.node)}
    steps |= {n for s in streamed.values() for n in s.tail.steps}
    steps |= {n for s in snapshots.values() for n in s.tail.nodes}
    own = [q.plan for q in queries
           if q.name not in fused and q.name not in streamed and q.name not in snapshots]
    return plan.unread(steps, set(own), nodes)


@dataclass(frozen=True)
class CycleResult:
    """What one committed cycle produced: every query's records, per operator the driver
    seconds spent on its part of the plan and its output rows (None: not counted), and the
    driver's seconds by phase (``cycle_cost.Phase``).
    """

    tables: dict[str, pa.Table]
    seconds: Mapping[PlanNode, float] = field(default_factory=dict)
    rows: Mapping[PlanNode, int | None] = field(default_factory=dict)
    fused: frozenset[PlanNode] = frozenset()
    phases: Mapping[Phase, float] = field(default_factory=dict)  # the driver's seconds
    state_rows_written: int = 0  # rows of the states the commit materialised


class QueriesFailedError(ExecutionError):
    """Some queries failed the cycle on their own; the cycle was rolled back."""

    def __init__(self, failures: list[tuple[CompiledQuery, BaseException]]):
        self.failures = failures
        names = ", ".join(q.name for q, _e in failures)
        super().__init__(f"queries failed this cycle: {names}")


Deliver = Callable[[dict[str, pa.Table]], None]


@dataclass
class CycleEngine:
    """Runs a compiled plan's cycles over the global plan's operators."""

    rt: Runtime
    plan: GlobalPlan
    intervals: SharedIntervalFormatter  # most queries' sink records
    count_rows: RowCounting = RowCounting.CACHED
    clock: Clock = field(default_factory=SystemClock)  # times the cycle's phases

    def execute(self, compiled: CompiledPlan, cycle_input: CycleInput,
                deliver: Deliver | None = None) -> CycleResult:
        """Evaluate and commit one cycle on ``cycle_input``: every query's records by
        query name, handed to ``deliver`` (the sinks) before the cycle counts as done.

        Raises ``QueriesFailedError`` naming the queries that fail on their own (rolled
        back: stop them, compile again and execute again), ``SinkError`` when ``deliver``
        could not commit the records (rolled back), ``SparkDiedError`` when Spark is gone
        and ``ExecutionError`` for a failure no single query explains.
        """
        try:
            result = self.attempt(compiled, cycle_input, full=True, deliver=deliver)
        except SinkError:
            raise  # the sink says what failed; evaluating the queries alone would not
        except Exception as first:  # noqa: BLE001 - any failure is isolated per query
            number = cycle_input.number
            if not spark_alive(self.rt.spark):  # no query is to blame; the input stays
                msg = f"cycle {number} failed: Spark is gone: {describe_failure(first)}"
                raise SparkDiedError(msg) from first
            failed = self.isolate_failures(compiled, cycle_input)
            if not failed:
                msg = (f"cycle {number} failed (input kept for the next cycle): "
                       f"{describe_failure(first)}")
                raise ExecutionError(msg) from first
            raise QueriesFailedError(failed) from first
        self.plan.record_cycle(result.seconds, result.rows, result.fused)
        return result

    def isolate_failures(self, compiled: CompiledPlan, cycle_input: CycleInput,
                         ) -> list[tuple[CompiledQuery, BaseException]]:
        """Try each query's part of the cycle alone (rolled back after) to find who fails."""
        failed: list[tuple[CompiledQuery, BaseException]] = []
        for query in compiled.queries:
            alone = compile_plan(self.plan, [query], ())  # its part of the cycle only
            alone = replace(alone, tables={n: rows for n, rows in compiled.tables.items()
                                           if n in alone.nodes})
            try:
                tx = CycleTransaction.begin(self.rt, alone.participants(self.plan,
                                                                        self.intervals))
                try:
                    self.attempt(alone, cycle_input, full=False)
                finally:
                    tx.rollback()
            except Exception as e:  # noqa: BLE001 - user code may raise anything
                failed.append((query, e))
        return failed

    def attempt(self, compiled: CompiledPlan, cycle_input: CycleInput, full: bool,
                deliver: Deliver | None = None) -> CycleResult:
        """Evaluate ``compiled``, commit it and ``deliver`` its records; on failure roll
        back and raise.

        ``full`` also advances streams no query reads; a partial attempt (one query, to
        find who fails) evaluates just that query's operators.
        """
        tx = CycleTransaction.begin(self.rt, compiled.participants(self.plan, self.intervals))
        try:
            cycle = CycleContext(cycle_input, compiled.nodes, edges_unread=compiled.edges_unread,
                                 read_once=compiled.read_once)
            result = self._evaluate(compiled, cycle, full)
            if deliver is not None:
                began = self.clock.monotonic()
                deliver(result.tables)
                result = replace(result, phases={
                    **result.phases, Phase.DELIVER: self.clock.monotonic() - began})
            return result
        except BaseException:
            tx.rollback()
            raise

    def _evaluate(self, compiled: CompiledPlan, cycle: CycleContext,
                  full: bool) -> CycleResult:
        plan, queries = self.plan, compiled.queries
        began = self.clock.monotonic()
        for scan in compiled.idle_scans if full else ():  # tells a first consumer its position
            scan.advance([], cycle, {})
        seeded = [(op, op.input_nodes()) for op in compiled.stepped if op.progress.waiting]
        seeded += [(q.formatter, (q.plan,)) for q in queries if q.formatter.progress.waiting]
        starts = cycle_starts(plan, seeded, compiled.nodes)
        cycle = replace(cycle, family_starts=starts.families)
        replace_tables(plan, compiled.tables, compiled.nodes)  # after the starts: old rows
        fused, unread = compiled.fusion_now(plan)
        # queries whose records may come from their elements: those that start from nothing
        # now, their join with them (before the cycle moves either)
        fresh = {q.name for q in queries if q.elements is not None
                 and q.formatter.progress.position is None and not q.formatter.progress.waiting
                 and plan.ops[q.elements].progress.position is None}
        slices, seconds = plan.run_cycle(cycle, compiled.edge_readers, starts.inputs, unread)
        outputs: dict[str, DataFrame] = {}
        encoded: list[DataFrame] = []
        elements: list[QueryElements] = []
        tails: dict[int, list[QueryTail]] = {}  # by family, see runtime/fused_outputs.py
        families: dict[int, Family] = {}
        streamed: dict[PlanNode, list[CompiledQuery]] = {}  # by the edge they read
        snapshots: dict[int, list[SnapshotQuery]] = {}  # by family
        for query in queries:
            if query.name in compiled.snapshots:
                query.formatter.advance([slices[query.plan]], cycle, starts.inputs,
                                        unread=True)
                snapshot = compiled.snapshots[query.name]
                snapshots.setdefault(id(snapshot.tail.member.family), []).append(snapshot)
                continue
            if query.name in compiled.streamed:
                query.formatter.advance([slices[query.plan]], cycle, starts.inputs,
                                        unread=True)
                base = compiled.streamed[query.name].tail.base
                streamed.setdefault(base, []).append(query)
                continue
            changes = query.formatter.with_start(slices[query.plan], 0, starts.inputs)
            tail = fused.get(query.name)
            if tail is not None:
                query.formatter.advance([slices[query.plan]], cycle, starts.inputs,
                                        unread=True)
                families[id(tail.member.family)] = tail.member.family
                tails.setdefault(id(tail.member.family), []).append(tail)
            elif query.qid is not None:
                query.formatter.advance([slices[query.plan]], cycle, starts.inputs,
                                        unread=True)
                if query.elements is not None and self.intervals.takes_elements(
                        query.qid, query.name in fresh):
                    out = slices[query.plan]
                    elements.append(QueryElements(
                        query.qid, query.plan.schema, out.lo, out.hi,
                        None if out.elements is None
                        else encode_elements(out.elements, query.plan.schema, query.qid),
                        pair_span(query.elements)))
                elif changes.df is not None:
                    encoded.append(encode(changes.df, query.plan.schema, query.qid))
            elif (records := query.formatter.advance([slices[query.plan]], cycle,
                                                     starts.inputs).df) is not None:
                outputs[query.name] = records
        tagged = self._stream_records(compiled, streamed, slices, cycle, outputs)
        tagged += self._snapshot_records(compiled, snapshots, slices, cycle, outputs)
        counted = {i: df for i, op in enumerate(compiled.stepped)
                   if (df := slices[op.node].df) is not None and self._counts(df)}
        runs: list[SlicedRuns] = []
        for key, family in families.items():
            run = cycle.evaluations.get(key)
            sliced = family.as_sliced()
            if sliced is not None:
                keyed = [t for t in tails[key] if keeps_group(t, sliced)]
                if keyed and run is not None and run.segments.segments is not None:
                    held = self.intervals.held_runs(
                        sliced.runs_name, (t.qid for t in keyed if t.qid is not None),
                        list(compiled.shapes))
                    runs.append(sliced_runs(sliced, run.segments, keyed, held))
                rest = [t for t in tails[key] if t not in keyed]
                changed = sliced_tail_changes(sliced, run, rest) if rest else None
            elif (aggregates := family.as_fused()) is not None:
                changed = None if run is None else tail_changes(aggregates, run, tails[key])
            if changed is not None:
                encoded.append(changed)
        plan.families.finish_cycle(cycle)
        shapes = list(compiled.shapes)
        shared = self.intervals.step(encoded, shapes, runs, elements)
        bundle = None if shared is None else decode(shared, shapes)
        timestamped = frozenset(q.name for q in queries if q.timestamps)
        committing = self.clock.monotonic()
        committed = self.rt.commit_cycle(outputs, counted, bundle, tagged, timestamped,
                                         self.clock)
        tables, counts = committed.tables, committed.counts
        phases = {Phase.OPERATORS: committing - began,
                  Phase.COMMIT: self.clock.monotonic() - committing,
                  Phase.COMMIT_PLANNING: committed.planning_s}
        split_by_query(tables, shapes)
        rows: dict[PlanNode, int | None] = {}
        if self.count_rows is not RowCounting.OFF:
            for i, op in enumerate(compiled.stepped):
                inline = i not in counted and (slices[op.node].df is not None
                                               or op.node in compiled.edges_unread)
                rows[op.node] = None if inline else counts.get(i, 0)
        return CycleResult(tables, seconds, rows, unread, phases,
                           committed.state_rows_written)

    def _stream_records(self, compiled: CompiledPlan,
                        streamed: Mapping[PlanNode, list[CompiledQuery]],
                        slices: Mapping[PlanNode, Slice], cycle: CycleContext,
                        outputs: dict[str, DataFrame]) -> list[TaggedRecords]:
        """The records of the streamed queries, one projection per edge (and output
        schema). An edge whose projection Spark cannot analyse (a function it cannot run
        in a generator) gives its queries' records their own way, through their steps.
        """
        tagged: list[TaggedRecords] = []
        sids = compiled.tagged_ids
        for base, group in streamed.items():
            edge = slices[base].df
            if edge is None:
                continue
            try:
                tagged += stream_records(edge, [compiled.streamed[q.name] for q in group],
                                         sids, dict(compiled.tagged_columns))
            except AnalysisException:
                for query in group:
                    step = slices[base]
                    for node in compiled.streamed[query.name].tail.steps:
                        step = self.plan.ops[node].step([step], cycle)
                    records = query.formatter.step([step], cycle).df
                    if records is not None:
                        outputs[query.name] = records
        return tagged

    def _snapshot_records(self, compiled: CompiledPlan,
                          snapshots: Mapping[int, list[SnapshotQuery]],
                          slices: Mapping[PlanNode, Slice], cycle: CycleContext,
                          outputs: dict[str, DataFrame]) -> list[TaggedRecords]:
        """The records of the snapshot queries, one generator per family (and output
        schema); as ``_stream_records``, a family's generator Spark cannot analyse gives
        its queries' records their own way.
        """
        tagged: list[TaggedRecords] = []
        for group in snapshots.values():
            family = group[0].tail.member.family
            run = cycle.evaluations.get(id(family))
            try:
                tagged += snapshot_records(family, run, group, compiled.tagged_ids,
                                           dict(compiled.tagged_columns))
            except AnalysisException:
                for snapshot in group:
                    member = self.plan.ops[snapshot.tail.member.node]
                    step = member.step([slices[c] for c in member.input_nodes()], cycle)
                    for node in (*snapshot.tail.steps, snapshot.tail.root):
                        step = self.plan.ops[node].step([step], cycle)
                    query = next(q for q in compiled.queries if q.name == snapshot.name)
                    records = query.formatter.step([step], cycle).df
                    if records is not None:
                        outputs[query.name] = records
        return tagged

    def _counts(self, df: DataFrame) -> bool:
        """Whether the commit counts an operator output's rows (see ``RowCounting``)."""
        return self.count_rows is RowCounting.ALL or (
            self.count_rows is RowCounting.CACHED and self.rt.is_cycle_frame(df))


__all__ = ["CompiledPlan", "CompiledQuery", "CycleEngine", "CycleResult", "QueriesFailedError",
           "Slice", "compile_plan"]
