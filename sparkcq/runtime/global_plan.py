"""The global plan: one shared DAG of operators for all queries.

Plan nodes compare by value, so a query's node equal to one already running is the same
operator: it is computed once per cycle and reference-counted; dropping a query frees only
the operators no other query uses. An operator added above a shared relation (a window, an
aggregate) starts from that relation's current contents, so a new query's first results are
already complete; above a plain stream it sees only events after its start.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame

from sparkcq.model.columns import T
from sparkcq.plan.nodes import (
    EdgeKind,
    IntervalJoin,
    Join,
    PlanNode,
    SlicedAggregate,
    TableScan,
    Window,
    walk,
    window_reach,
)
from sparkcq.runtime.frames import Runtime, Slice, col
from sparkcq.runtime.fusion import AggregateFamily, FamilyMemberOperator, FusionKey, fusion_key
from sparkcq.runtime.operators.base import (
    ContentsUnknownError,
    CycleContext,
    Operator,
    Start,
    Starts,
)
from sparkcq.runtime.operators.join import JoinOperator
from sparkcq.runtime.operators.scan import ScanOperator
from sparkcq.runtime.operators.table import TableOperator, TableRows
from sparkcq.runtime.sliced_family import (
    SlicedFamily,
    SlicedKey,
    SlicedMemberOperator,
    sliced_key,
)


@dataclass(frozen=True)
class OperatorStats:
    """What the committed cycles did at one operator, for EXPLAIN GLOBAL and the console."""

    plan_seconds: float = 0.0  # building its part of the last cycle's plan (driver side)
    rows_out: int | None = 0  # rows of the last cycle's output (None: not counted, inline)
    rows_total: int = 0  # rows of every counted cycle
    cycles: int = 0  # cycles whose rows were counted
    fused: bool = False  # its output was not built: its queries read its family's result

    def then(self, seconds: float, rows: int | None, fused: bool) -> OperatorStats:
        """These stats after one more cycle."""
        counted = rows is not None
        return OperatorStats(seconds, rows, self.rows_total + (rows or 0),
                             self.cycles + counted, fused)


@dataclass(frozen=True)
class CycleStarts:
    """The contents new consumers start from this cycle, taken before any operator steps:
    seeded inputs by (id of the operator, input index), rebuilt families by id.
    """

    inputs: Starts
    families: Mapping[int, Start]



@dataclass
class GlobalPlan:
    """Operators by plan node, in an order where inputs come before their consumers."""

    rt: Runtime
    ops: dict[PlanNode, Operator] = field(default_factory=dict)
    refs: Counter[PlanNode] = field(default_factory=Counter)
    users: dict[PlanNode, set[str]] = field(default_factory=dict)
    families: dict[FusionKey, list[AggregateFamily]] = field(default_factory=dict)
    sliced: dict[SlicedKey, list[SlicedFamily]] = field(default_factory=dict)
    fuse: bool = True  # fuse aggregates over one input and keys into families
    stats: dict[PlanNode, OperatorStats] = field(default_factory=dict)

    def add(self, root: PlanNode, query: str,
            make: Callable[[PlanNode], Operator]) -> list[str]:
        """Merge a query's plan bottom-up, sharing every node already present.

        Returns notes for the query's log about new operators that cannot start from a
        shared relation's contents (they then see only changes after their start).
        """
        notes = []
        merged: list[PlanNode] = []
        try:
            for node in walk(root):
                if node not in self.ops:
                    key = fusion_key(node) if self.fuse else None
                    op: Operator
                    if self.fuse and isinstance(node, SlicedAggregate):
                        sliced = self.sliced_family_for(node)
                        op = SlicedMemberOperator(node, sliced)
                        # over a window that already runs, from its reach (``history_of``)
                        history = self.history_of(node.children[0], node)
                        sliced.add(node, history[1] if history is not None else 0)
                        self.want_history(node)
                    elif key is not None:
                        family = self.family_for(key)
                        op = FamilyMemberOperator(node, family)  # type: ignore[arg-type]
                        family.add(node)  # type: ignore[arg-type]
                        if not self.can_seed(family.base):
                            notes.append(f"starts with the changes after its start: "
                                         f"{family.base.label()} cannot tell its current "
                                         "contents")
                    else:
                        op = make(node)
                        seeded, missing = self.seedable(node.children, node)
                        op.await_starts(seeded)
                        self.want_history(node)
                        notes += missing
                    self.ops[node] = op
                self.refs[node] += 1
                self.users.setdefault(node, set()).add(query)
                merged.append(node)
        except BaseException:
            for node in reversed(merged):  # a node failed to build: leave no trace
                self._release(node, query)
            raise
        return notes

    def want_history(self, node: PlanNode) -> None:
        """A sliced aggregate's window keeps no elements: its stream keeps the recent
        events for it, for a window added later to start from (``ScanOperator.history``).
        """
        reach = window_reach(node.window.spec) if isinstance(node, SlicedAggregate) else None
        scan = self.ops.get(node.children[0]) if reach else None
        if isinstance(scan, ScanOperator) and reach:
            scan.want_history(reach)

    def sliced_family_for(self, node: SlicedAggregate) -> SlicedFamily:
        """The sliced family a new sliced aggregate joins: one that can take it, or a new
        one.
        """
        key = sliced_key(node)
        families = self.sliced.setdefault(key, [])
        for family in families:
            if family.can_take(node):
                return family
        stream = node.children[0]
        families.append(SlicedFamily(key, stream, self.ops[stream], self.rt))
        return families[-1]

    def family_for(self, key: FusionKey) -> AggregateFamily:
        """The family a new aggregate joins: one that can take it in, or a new one."""
        families = self.families.setdefault(key, [])
        for family in families:
            if not family.has_run or self.can_seed(family.base):
                return family
        families.append(AggregateFamily(key, self.rt))
        return families[-1]

    def can_seed(self, node: PlanNode) -> bool:
        """Whether a running node can tell its contents (a rebuilt family starts from them)."""
        op = self.ops.get(node)
        if op is None or op.position is None:
            return True
        try:
            self.contents(node, op.position)
        except ContentsUnknownError:
            return False
        return True

    def all_families(self) -> list[AggregateFamily]:
        """Every aggregate family in the plan."""
        return [f for fams in self.families.values() for f in fams]

    def resume(self) -> None:
        """State was restored from a checkpoint: every operator continues where the saved
        one was, none starts fresh (a fresh sliced aggregate would emit again the segments
        the saved run emitted).
        """
        for family in self.all_sliced_families():
            family.resumed()
        for op in self.ops.values():
            op.resumed()

    def all_sliced_families(self) -> list[SlicedFamily]:
        """Every sliced family in the plan."""
        return [f for fams in self.sliced.values() for f in fams]

    def state_holders(self) -> list[Operator]:
        """Every operator holding state, each once (family members share their family's)."""
        own = [op for op in self.ops.values()
               if not isinstance(op, FamilyMemberOperator | SlicedMemberOperator)]
        return (own + [op for f in self.all_families() for op in f.operators()]
                + [op for g in self.all_sliced_families() for op in g.operators()])

    def operators(self, nodes: Iterable[PlanNode]) -> list[Operator]:
        """The operators of ``nodes`` and the family operators behind any members."""
        out: list[Operator] = []
        for node in nodes:
            op = self.ops[node]
            out.append(op)
            if isinstance(op, FamilyMemberOperator | SlicedMemberOperator):
                out += op.family.operators()
        return out

    def seedable(self, children: Iterable[PlanNode], consumer: PlanNode | None = None,
                 ) -> tuple[frozenset[int], list[str]]:
        """Which inputs (running relations) a new consumer starts from, and which it cannot.

        A new sliced aggregate over a running stream (``consumer``) starts from the
        stream's recent events when its scan kept them for an earlier one.
        """
        seeded, notes = set(), []
        for i, child in enumerate(children):
            op = self.ops.get(child)
            if op is None or op.position is None:
                continue
            if child.kind is EdgeKind.STREAM:
                if consumer is not None and self.history_of(child, consumer) is not None:
                    seeded.add(i)
                continue
            if child.kind is not EdgeKind.RELATION:
                continue
            try:
                self.contents(child, op.position)
            except ContentsUnknownError as e:
                notes.append(f"starts with the changes after its start: {e}")
                continue
            seeded.add(i)
        return frozenset(seeded), notes

    def history_of(self, stream: PlanNode, consumer: PlanNode,
                   ) -> tuple[ScanOperator, int] | None:
        """The scan of ``stream`` and how far back before its position a new ``consumer``
        of its arrivals (``Slice.arrivals``) starts from the events it holds
        (``ScanOperator.history``): a sliced aggregate over a window that already runs
        (``computes``) from the window's reach when the scan kept it, otherwise (and an
        interval join always) from the events that arrived ahead of the watermark, which
        the consumer would never see as arrivals. A new time
        window that a running sliced aggregate computes from panes (so there is no window
        operator to share) starts from the window's reach, which the scan keeps for that
        aggregate: its elements still live at the position, so a query added later over
        the same window starts complete, as it would over a shared window operator.
        """
        op = self.ops[stream]
        position = op.position
        if position is None or not isinstance(op, ScanOperator):
            return None
        if isinstance(consumer, Window):
            reach = window_reach(consumer.spec)
            return (op, reach) if (self.computes(consumer, consumer) and reach is not None
                                   and op.covers(position, reach)) else None
        if not isinstance(consumer, SlicedAggregate | IntervalJoin):
            return None
        reach = (window_reach(consumer.window.spec)
                 if isinstance(consumer, SlicedAggregate)
                 and self.computes(consumer.window, consumer) else None)
        return (op, reach) if reach is not None and op.covers(position, reach) else (op, 0)

    def computes(self, window: Window, consumer: PlanNode) -> bool:
        """Whether ``window``'s relation already runs for someone other than ``consumer``:
        as a window operator, or as the panes of a sliced aggregate that has stepped (a
        family member's through its family's operator). A window no one computes yet is a
        new relation, so a new consumer of it sees only the events after its start, as
        every query added with it in the same cycle does.
        """
        for node, op in self.ops.items():
            if node == consumer or not op.has_run:
                continue
            if node == window or (isinstance(node, SlicedAggregate) and node.window == window):
                return True
        return False

    def contents(self, node: PlanNode, at: int) -> DataFrame | None:
        """The current contents of a running relation node as +n changes at ``at``."""
        op = self.ops[node]
        kids: list[DataFrame | None] = []
        if op.contents_from_inputs:
            kids = [self.contents(c, at) if c.kind is EdgeKind.RELATION else
                    self.table(c) if c.kind is EdgeKind.TABLE else None for c in node.children]
        return op.contents(kids, at)

    def table(self, node: PlanNode) -> DataFrame | None:
        """The rows of a static (table-kind) node; its operators are stateless maps."""
        op = self.ops[node]
        inputs = [Slice(self.table(c), 0, 0) for c in node.children]
        return op.step(inputs, CycleContext()).df

    def table_readers(self, table: PlanNode) -> tuple[list[Join], list[PlanNode]]:
        """The joins that read ``table`` with a relation (through filters, projections and
        joins of tables, which are tables too), and the other nodes that read it: an
        aggregate or a union of a table, which nothing switches to new rows.
        """
        static = {n for n in self.ops if n.kind is EdgeKind.TABLE and table in walk(n)}
        joins: list[Join] = []
        others: list[PlanNode] = []
        for node in self.ops:
            if node.kind is EdgeKind.TABLE or not static.intersection(node.children):
                continue
            if isinstance(node, Join) and sum(c.kind is EdgeKind.TABLE
                                              for c in node.children) == 1:
                joins.append(node)
            else:
                others.append(node)
        return joins, others

    def table_versions(self) -> dict[PlanNode, int]:
        """The version of the rows each table operator serves."""
        return {n: op.version for n, op in self.ops.items() if isinstance(op, TableOperator)}

    def switched_at(self, query_plan: PlanNode, table: TableScan, version: int) -> list[int]:
        """Where the joins of a query's plan switched to ``version`` of ``table``'s rows."""
        nodes = set(walk(query_plan))
        joins = [op for join in self.table_readers(table)[0]
                 if join in nodes and isinstance(op := self.ops[join], JoinOperator)]
        return sorted({at for op in joins for t, v, at in op.tables
                       if t == table.name and v == version})

    def replacement_problems(self, table: str) -> list[tuple[str, str]]:
        """Why running queries could not follow new rows of the table called ``table``:
        ``(query, reason)`` for each node that reads it other than in a join with a
        relation, and for each join whose relation keeps no copy of the rows it joined.
        """
        problems: list[tuple[str, str]] = []
        scans = [n for n in self.ops
                 if isinstance(n, TableScan) and n.name.lower() == table.lower()]
        for scan in scans:
            joins, others = self.table_readers(scan)
            for node in others:
                why = (f"it reads the table in {node.label()!r}, which would keep what it "
                       "read of the old rows (only a join with a stream or relation "
                       "switches to new rows)")
                problems += [(q, why) for q in sorted(self.users.get(node, ()))]
            for join in joins:
                try:
                    self.switch_contents(join)
                except ContentsUnknownError as e:
                    why = (f"it joins the table with rows of which no copy is kept ({e}), "
                           "so what it joined with the old rows cannot be joined with the "
                           "new ones; a time window on the stream ([RANGE ...], [NOW], "
                           "[ROWS n]) would let it switch")
                    problems += [(q, why) for q in sorted(self.users.get(join, ()))]
        return problems

    def switch_contents(self, join: Join) -> DataFrame | None:
        """What a running join emitted of its dynamic input, as the contents at its
        position that a switch to a replaced table's new rows re-joins (None: nothing to
        switch, it has not started); raises ContentsUnknownError when the input keeps no
        copy of its rows.
        """
        op = self.ops[join]
        assert isinstance(op, JoinOperator)
        if op.position is None or op.dynamic in op.progress.waiting:
            return None  # its dynamic input starts later, joined with the rows then served
        if join.children[op.dynamic].kind is EdgeKind.STREAM:
            return None  # events: each met the rows served when it came, none is still live
        return self.contents(join.children[op.dynamic], op.position)

    def replace_tables(self, tables: Mapping[PlanNode, TableRows],
                       nodes: frozenset[PlanNode] | None = None) -> None:
        """Switch every table (of ``nodes``) whose rows the catalog replaced to its new
        ``tables`` rows, in the cycle's transaction, before any operator steps.

        Each running join reading a switched table emits at its position ``p`` (the
        instant before which it emitted everything) -(its dynamic input's contents at
        ``p`` ⋈ the old rows) +(... ⋈ the new rows); its changes from ``p`` on meet the
        new rows. The contents are taken before the switch, as consumers' starts are.
        """
        ops = {n: op for n, op in self.ops.items() if nodes is None or n in nodes}
        for op in ops.values():
            if isinstance(op, TableOperator):
                op.retire()
        due = [n for n, rows in tables.items()
               if isinstance(table := ops.get(n), TableOperator) and not table.serves(rows)]
        if not due:
            return
        joins = [j for j in dict.fromkeys(j for n in due for j in self.table_readers(n)[0])
                 if j in ops]
        before = {join: (self.switch_contents(join), self.table(self.static_side(join)))
                  for join in joins}
        for node in due:
            table_op = self.ops[node]
            assert isinstance(table_op, TableOperator)
            table_op.switch(tables[node])
        for join in joins:
            op = self.ops[join]
            assert isinstance(op, JoinOperator)
            contents, old = before[join]
            static = self.static_side(join)
            new = self.table(static)
            if op.position is None or old is None or new is None:
                continue
            versions = tuple((n.name, served.version) for n in walk(static)
                             if isinstance(n, TableScan)
                             and isinstance(served := self.ops[n], TableOperator))
            op.replace_table(contents, old, new, op.position, versions)

    def static_side(self, join: Join) -> PlanNode:
        """The table input of a join of a relation with a table."""
        return join.children[0] if join.children[0].kind is EdgeKind.TABLE else join.children[1]

    def starts(self, consumers: Iterable[tuple[Operator, tuple[PlanNode, ...]]],
               nodes: frozenset[PlanNode] | None = None) -> CycleStarts:
        """Contents for every seeded input of ``consumers`` (operators and the nodes they
        read) and for every rebuilt family among ``nodes``, taken before any operator steps
        this cycle.
        """
        families: dict[int, Start] = {}
        for family in self.all_families():
            if not family.needs_seed or (nodes is not None and not set(family.members) & nodes):
                continue
            position = self.ops[family.base].position
            if position is not None:
                try:
                    df = self.contents(family.base, position)
                except ContentsUnknownError:  # a new family over an UNBOUNDED window: it
                    df = None  # starts from the changes after its start (see ``add``)
                families[id(family)] = Start(None if df is None
                                             else self.rt.cache_for_cycle(df), position)
        out: dict[tuple[int, int], Start] = {}
        for op, children in consumers:
            for i in op.progress.waiting:
                child = children[i]
                position = self.ops[child].position
                assert position is not None
                if child.kind is EdgeKind.STREAM:  # a window's events (see ``seedable``)
                    found = self.history_of(child, op.node)
                    if found is None:
                        continue
                    df = found[0].history(position, found[1])
                    if df is not None and isinstance(op.node, Window):
                        df = df.where(col(T) < position)  # later ones come on its edge
                else:
                    df = self.contents(child, position)
                out[(id(op), i)] = Start(None if df is None else self.rt.cache_for_cycle(df),
                                         position)
        return CycleStarts(out, families)

    def remove(self, root: PlanNode, query: str) -> list[Operator]:
        """Lower the query's reference counts; return (and forget) operators left unused."""
        freed = []
        for node in reversed(walk(root)):
            op = self._release(node, query)
            if op is not None:
                freed.append(op)
        return freed

    def _release(self, node: PlanNode, query: str) -> Operator | None:
        """Lower one node's reference count for ``query``; its operator if now unused."""
        self.refs[node] -= 1
        self.users.get(node, set()).discard(query)
        if self.refs[node] > 0:
            return None
        op = self.ops.pop(node)
        if isinstance(op, FamilyMemberOperator):
            self.leave_family(op)
        if isinstance(op, SlicedMemberOperator):
            assert isinstance(node, SlicedAggregate)
            op.family.remove(node)
            if not op.family.members:
                self.sliced = {k: [f for f in v if f is not op.family]
                               for k, v in self.sliced.items()}
                self.sliced = {k: v for k, v in self.sliced.items() if v}
        del self.refs[node]
        self.users.pop(node, None)
        return op

    def leave_family(self, member: FamilyMemberOperator) -> None:
        """Take a dropped aggregate out of its family (rebuilt without its calls if the
        family's input can tell its contents); forget the family once empty.
        """
        family = member.family
        family.remove(member.node, self.can_seed(family.base))  # type: ignore[arg-type]
        if not family.members:
            for fams in self.families.values():
                if family in fams:
                    fams.remove(family)
            self.families = {k: v for k, v in self.families.items() if v}

    def edge_readers(self, nodes: frozenset[PlanNode],
                     roots: Counter[PlanNode]) -> Counter[PlanNode]:
        """How many read each node's change edge (``Slice.df``) in a cycle stepping
        ``nodes``: the queries whose root it is (``roots``), and each operator of ``nodes``
        reading it (``Operator.reads_edge``: not one that takes only its input's arrivals
        or segments, nor a stateless one whose own edge nothing reads). No reader: the
        edge need not be built; two or more: it is cached for the cycle.
        """
        count: Counter[PlanNode] = Counter(roots)
        for node in reversed(list(self.ops)):  # consumers before their inputs
            if node not in nodes:
                continue
            op = self.ops[node]
            for i, child in enumerate(op.input_nodes()):
                if op.reads_edge(i, count[node] > 0):
                    count[child] += 1
        return count

    def consumers(self) -> Counter[PlanNode]:
        """How many operators read each node (queries are counted by the caller)."""
        count: Counter[PlanNode] = Counter()
        for node in self.ops:
            for child in node.children:
                count[child] += 1
        return count

    def unread(self, fused: set[PlanNode], read: set[PlanNode],
               only: set[PlanNode] | frozenset[PlanNode] | None = None) -> frozenset[PlanNode]:
        """The ``fused`` nodes (query steps whose results are computed from a family's
        result) that neither a query (``read``) nor an operator stepping in the cycle reads:
        they need not build their output.
        """
        needed, unread = set(read), set()
        for node in reversed(list(self.ops)):  # consumers before their inputs
            if only is not None and node not in only:
                continue
            op = self.ops[node]
            if node in fused and node not in needed:
                unread.add(node)
                if not op.reads_inputs_unread:
                    continue
            needed.update(op.input_nodes())
        return frozenset(unread)

    def run_cycle(self, cycle: CycleContext, edge_readers: Counter[PlanNode], starts: Starts,
                  unread: frozenset[PlanNode]) -> tuple[dict[PlanNode, Slice],
                                                        dict[PlanNode, float]]:
        """Step every operator of ``cycle.only`` (or all) once, in order: each node's
        output slice, and the driver seconds spent building it. Change edges read more
        than once (``edge_readers``) are cached; seeded inputs get their ``starts`` before
        the cycle's changes; ``unread`` operators only pass the cycle
        (``Operator.pass_unread``).
        """
        out: dict[PlanNode, Slice] = {}
        seconds: dict[PlanNode, float] = {}
        for node, op in self.ops.items():
            if cycle.only is not None and node not in cycle.only:
                continue
            began = time.perf_counter()
            result = op.advance([out[c] for c in op.input_nodes()], cycle, starts,
                                unread=node in unread)
            if result.df is not None and edge_readers[node] > 1:
                result = replace(result, df=self.rt.cache_for_cycle(result.df))
            seconds[node] = time.perf_counter() - began
            out[node] = result
        return out, seconds

    def finish_families(self, cycle: CycleContext) -> None:
        """The cycle's plans are built: families forget their seed once it is spent."""
        for family in self.all_families():
            family.finish_cycle(cycle.evaluations.get(id(family)))
        for sliced in self.all_sliced_families():
            sliced.finish_cycle(cycle.evaluations.get(id(sliced)))

    def record_cycle(self, seconds: Mapping[PlanNode, float],
                     rows: Mapping[PlanNode, int | None], fused: frozenset[PlanNode]) -> None:
        """Add a committed cycle to the operators' stats (``rows``: None where the output
        was built inside its consumers' plans and not counted).
        """
        for node, spent in seconds.items():
            if node in self.ops:
                self.stats[node] = self.stats.get(node, OperatorStats()).then(
                    spent, rows.get(node), node in fused)
