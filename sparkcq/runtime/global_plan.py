"""The global plan: one shared DAG of operators for all queries.

Plan nodes compare by value, so a query's node equal to one already running is the same
operator: it is computed once per cycle and reference-counted; dropping a query frees only
the operators no other query uses. An operator added above a shared relation (a window, an
aggregate) starts from that relation's current contents (``runtime/seeding.py``), so a new
query's first results are already complete; above a plain stream it sees only events after
its start. Aggregates of many queries join families (``runtime/families.py``); tables
replaced while queries run switch in ``runtime/table_switching.py``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from sparkcq.plan.nodes import PlanNode, walk
from sparkcq.runtime.families import Families
from sparkcq.runtime.frames import Runtime, Slice
from sparkcq.runtime.operators.base import CycleContext, Operator, Starts
from sparkcq.runtime.seeding import seedable, want_history


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



@dataclass
class GlobalPlan:
    """Operators by plan node, in an order where inputs come before their consumers."""

    rt: Runtime
    fuse: bool = True  # fuse aggregates over one input and keys into families
    ops: dict[PlanNode, Operator] = field(default_factory=dict)
    refs: Counter[PlanNode] = field(default_factory=Counter)
    users: dict[PlanNode, set[str]] = field(default_factory=dict)
    stats: dict[PlanNode, OperatorStats] = field(default_factory=dict)
    families: Families = field(init=False)

    def __post_init__(self) -> None:
        self.families = Families(self.rt, self.fuse)

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
                    member = self.families.member(node, self)
                    if member is not None:
                        op, more = member
                    else:
                        op = make(node)
                        seeded, more = seedable(self, node.children, node)
                        op.await_starts(seeded)
                    want_history(self, node)
                    notes += more
                    self.ops[node] = op
                self.refs[node] += 1
                self.users.setdefault(node, set()).add(query)
                merged.append(node)
        except BaseException:
            for node in reversed(merged):  # a node failed to build: leave no trace
                self._release(node, query)
            raise
        return notes

    def resume(self) -> None:
        """State was restored from a checkpoint: every operator continues where the saved
        one was, none starts fresh (a fresh sliced aggregate would emit again the segments
        the saved run emitted).
        """
        self.families.resumed()
        for op in self.ops.values():
            op.resumed()

    def state_holders(self) -> list[Operator]:
        """Every operator holding state, each once (family members share their family's)."""
        own = [op for op in self.ops.values() if op.family is None]
        return own + [op for f in self.families.all() for op in f.operators()]

    def operators(self, nodes: Iterable[PlanNode]) -> list[Operator]:
        """The operators of ``nodes`` and the family operators behind any members."""
        out: list[Operator] = []
        for node in nodes:
            op = self.ops[node]
            out.append(op)
            if op.family is not None:
                out += op.family.operators()
        return out

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
        if op.family is not None:
            self.families.leave(op, self)
        del self.refs[node]
        self.users.pop(node, None)
        return op

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

    def record_cycle(self, seconds: Mapping[PlanNode, float],
                     rows: Mapping[PlanNode, int | None], fused: frozenset[PlanNode]) -> None:
        """Add a committed cycle to the operators' stats (``rows``: None where the output
        was built inside its consumers' plans and not counted).
        """
        for node, spent in seconds.items():
            if node in self.ops:
                self.stats[node] = self.stats.get(node, OperatorStats()).then(
                    spent, rows.get(node), node in fused)
