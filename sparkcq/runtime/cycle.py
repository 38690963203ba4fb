"""The cycle engine: executes the compiled plan once per cycle (DESIGN 2.5, 3).

A statement changes what runs; after it the running queries are compiled into a
``CompiledPlan`` (which operators step, which query reads which node, whose records come
straight from an aggregate family, how the shared formatter's records decode), and each
cycle only executes that. A cycle is one transaction (``CycleTransaction``): if its action
fails, every operator is rolled back, each query is tried alone to find who failed, and the
caller stops those (``QueriesFailedError``) and runs the cycle again for the others with the
same input.

    compiled = compile_plan(plan, queries, scans)        # after each statement
    tables = cycles.execute(compiled, cycle=7)           # once per cycle
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkcq.errors import ExecutionError, SinkError, SparkDiedError
from sparkcq.plan.nodes import PlanNode, TableScan, walk
from sparkcq.runtime.failures import describe_failure
from sparkcq.runtime.frames import RowCounting, Runtime
from sparkcq.runtime.fused_outputs import (
    QueryTail,
    find_tail,
    sliced_tail_changes,
    tail_changes,
)
from sparkcq.runtime.fusion import AggregateFamily
from sparkcq.runtime.global_plan import GlobalPlan, waiting_starts, with_start
from sparkcq.runtime.operators.base import Operator
from sparkcq.runtime.operators.outputs import TE, TS, SinkFormatter
from sparkcq.runtime.operators.scan import ScanOperator
from sparkcq.runtime.operators.shared_output import (
    OutputShape,
    SharedIntervalFormatter,
    decode,
    encode,
    output_shapes,
    split_by_query,
)
from sparkcq.runtime.operators.table import TableRows
from sparkcq.runtime.sliced_family import SlicedFamily
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


@dataclass(frozen=True)
class CompiledPlan:
    """What a cycle executes, fixed between statements."""

    queries: tuple[CompiledQuery, ...]
    nodes: frozenset[PlanNode]  # the nodes the queries read, each stepped once
    stepped: tuple[Operator, ...]  # their operators, in plan order
    idle_scans: tuple[ScanOperator, ...]  # streams no query reads: they still advance
    shapes: tuple[OutputShape, ...]  # how the shared formatter's records decode
    roots: Counter[PlanNode]  # how many queries read each root (a reader each)
    # the rows the catalog holds for each table the queries read: a cycle switches a
    # table's operator to them if they replaced the rows it serves (``replace_tables``)
    tables: Mapping[PlanNode, TableRows] = field(default_factory=dict)

    def participants(self, plan: GlobalPlan,
                     intervals: SharedIntervalFormatter) -> list[CycleParticipant]:
        """Everything this plan's cycle may change, for its transaction."""
        return [*plan.operators(self.nodes), *self.idle_scans,
                *[q.formatter for q in self.queries], intervals]


def compile_plan(plan: GlobalPlan, queries: Iterable[CompiledQuery],
                 scans: Iterable[ScanOperator],
                 tables: Mapping[str, TableRows] | None = None) -> CompiledPlan:
    """The plan a cycle executes for ``queries``; ``scans`` no query reads still advance;
    ``tables`` are the catalog's rows by lower-case table name.
    """
    queries = tuple(query if query.qid is None
                    else replace(query, tail=find_tail(query.plan, plan.ops, query.qid))
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
    return CompiledPlan(queries, nodes, stepped, idle, shapes,
                        Counter(q.plan for q in queries), rows)


class QueriesFailedError(ExecutionError):
    """Some queries failed the cycle on their own; the cycle was rolled back."""

    def __init__(self, failures: list[tuple[CompiledQuery, BaseException]]):
        self.failures = failures
        names = ", ".join(q.name for q, _e in failures)
        super().__init__(f"queries failed this cycle: {names}")


@dataclass
class CycleEngine:
    """Runs a compiled plan's cycles over the global plan's operators."""

    rt: Runtime
    plan: GlobalPlan
    intervals: SharedIntervalFormatter  # most queries' sink records
    count_rows: RowCounting = RowCounting.CACHED

    def execute(self, compiled: CompiledPlan, cycle: int,
                deliver: Callable[[dict[str, pa.Table]], None] | None = None,
                ) -> dict[str, pa.Table]:
        """Evaluate and commit one cycle: every query's records by query name, handed to
        ``deliver`` (the sinks) before the cycle counts as done.

        Raises ``QueriesFailedError`` naming the queries that fail on their own (rolled
        back: stop them, compile again and execute again), ``SinkError`` when ``deliver``
        could not commit the records (rolled back, input kept), ``SparkDiedError`` when
        Spark is gone and ``ExecutionError`` for a failure no single query explains.
        """
        try:
            return self.attempt(compiled, full=True, deliver=deliver)
        except SinkError:
            raise  # the sink says what failed; evaluating the queries alone would not
        except Exception as first:  # noqa: BLE001 - any failure is isolated per query
            if not spark_alive(self.rt.spark):  # no query is to blame; the input stays
                msg = f"cycle {cycle} failed: Spark is gone: {describe_failure(first)}"
                raise SparkDiedError(msg) from first
            failed = self.isolate_failures(compiled)
            if not failed:
                msg = (f"cycle {cycle} failed (input kept for the next cycle): "
                       f"{describe_failure(first)}")
                raise ExecutionError(msg) from first
            raise QueriesFailedError(failed) from first

    def isolate_failures(self, compiled: CompiledPlan,
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
                    self.attempt(alone, full=False)
                finally:
                    tx.rollback()
            except Exception as e:  # noqa: BLE001 - user code may raise anything
                failed.append((query, e))
        return failed

    def attempt(self, compiled: CompiledPlan, full: bool,
                deliver: Callable[[dict[str, pa.Table]], None] | None = None,
                ) -> dict[str, pa.Table]:
        """Evaluate ``compiled``, commit it and ``deliver`` its records; on failure roll
        back and raise.

        ``full`` also advances streams no query reads; a partial attempt (one query, to
        find who fails) evaluates just that query's operators.
        """
        tx = CycleTransaction.begin(self.rt, compiled.participants(self.plan, self.intervals))
        try:
            tables = self._evaluate(compiled, full)
            if deliver is not None:
                deliver(tables)
            return tables
        except BaseException:
            tx.rollback()
            raise

    def _evaluate(self, compiled: CompiledPlan, full: bool) -> dict[str, pa.Table]:
        plan, queries, nodes = self.plan, compiled.queries, set(compiled.nodes)
        for scan in compiled.idle_scans if full else ():  # tells a first consumer its position
            scan.position = scan.step([]).hi
        seeded = [(plan.ops[n], n.children) for n in nodes if plan.ops[n].seeded_inputs]
        seeded += [(q.formatter, (q.plan,)) for q in queries if q.formatter.seeded_inputs]
        starts = plan.starts(seeded, nodes)
        plan.replace_tables(compiled.tables, nodes)  # after the starts: they hold the old rows
        fused = {q.name: q.tail for q in queries if q.tail is not None
                 and not q.formatter.seeded_inputs
                 and not any(plan.ops[n].seeded_inputs
                             for n in (*q.tail.steps, q.tail.member.node))}
        unread = plan.unread({n for tail in fused.values() for n in (*tail.steps,
                                                                      tail.member.node)},
                             {q.plan for q in queries if q.name not in fused}, nodes)
        slices = plan.run_cycle(compiled.roots, only=nodes, starts=starts, unread=unread)
        outputs: dict[str, DataFrame] = {}
        encoded: list[DataFrame] = []
        tails: dict[int, list[QueryTail]] = {}  # by family, see runtime/fused_outputs.py
        families: dict[int, AggregateFamily | SlicedFamily] = {}
        for query in queries:
            changes = with_start(slices[query.plan], query.formatter, 0, starts)
            query.formatter.seeded_inputs = waiting_starts([slices[query.plan]],
                                                           query.formatter, starts)
            tail = fused.get(query.name)
            if tail is not None:
                families[id(tail.member.family)] = tail.member.family
                tails.setdefault(id(tail.member.family), []).append(tail)
            elif query.qid is not None:
                if changes.df is not None:
                    encoded.append(encode(changes.df, query.plan.schema, query.qid))
            elif (records := query.formatter.step([changes]).df) is not None:
                if query.timestamps:
                    records = records.withColumn(TS, F.timestamp_micros(records[TS])) \
                        .withColumn(TE, F.timestamp_micros(records[TE]))
                outputs[query.name] = records
        counted = {i: df for i, op in enumerate(compiled.stepped)
                   if (df := slices[op.node].df) is not None and self._counts(df)}
        for key, family in families.items():
            if isinstance(family, SlicedFamily):
                if (sliced := sliced_tail_changes(family, tails[key])) is not None:
                    encoded.append(sliced)
            elif family.run is not None and family.run.df is not None:
                encoded.append(tail_changes(family, family.run.df, tails[key]))
        plan.finish_families()
        shapes = list(compiled.shapes)
        shared = self.intervals.step(encoded, [q for shape in shapes for q in shape.names])
        bundle = None if shared is None else decode(shared, shapes)
        tables, counts = self.rt.commit_cycle(outputs, counted, bundle)
        split_by_query(tables, shapes)
        if self.count_rows is not RowCounting.OFF:
            for i, op in enumerate(compiled.stepped):
                inline = i not in counted and slices[op.node].df is not None
                op.counted(None if inline else counts.get(i, 0))
        return tables

    def _counts(self, df: DataFrame) -> bool:
        """Whether the commit counts an operator output's rows (see ``RowCounting``)."""
        return self.count_rows is RowCounting.ALL or (
            self.count_rows is RowCounting.CACHED and self.rt.is_cycle_frame(df))
