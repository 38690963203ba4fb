"""The global plan: one shared DAG of operators for all queries (DESIGN 4.2).

Plan nodes compare by value, so a query's node equal to one already running is the same
operator: it is computed once per cycle and reference-counted; dropping a query frees only
the operators no other query uses.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkcq.plan.nodes import PlanNode, walk
from sparkcq.runtime.frames import Runtime, Slice
from sparkcq.runtime.operators.base import Operator


@dataclass
class GlobalPlan:
    """Operators by plan node, in an order where inputs come before their consumers."""

    rt: Runtime
    ops: dict[PlanNode, Operator] = field(default_factory=dict)
    refs: Counter[PlanNode] = field(default_factory=Counter)
    users: dict[PlanNode, set[str]] = field(default_factory=dict)

    def add(self, root: PlanNode, query: str, make: Callable[[PlanNode], Operator]) -> None:
        """Merge a query's plan bottom-up, sharing every node already present."""
        for node in walk(root):
            if node not in self.ops:
                self.ops[node] = make(node)
            self.refs[node] += 1
            self.users.setdefault(node, set()).add(query)

    def remove(self, root: PlanNode, query: str) -> list[Operator]:
        """Lower the query's reference counts; return (and forget) operators left unused."""
        freed = []
        for node in reversed(walk(root)):
            self.refs[node] -= 1
            self.users.get(node, set()).discard(query)
            if self.refs[node] <= 0:
                freed.append(self.ops.pop(node))
                del self.refs[node]
                self.users.pop(node, None)
        return freed

    def consumers(self) -> Counter[PlanNode]:
        """How many operators (and queries, counted by the caller) read each node."""
        count: Counter[PlanNode] = Counter()
        for node in self.ops:
            for child in node.children:
                count[child] += 1
        return count

    def run_cycle(self, extra_readers: Counter[PlanNode],
                  only: set[PlanNode] | None = None) -> dict[PlanNode, Slice]:
        """Step every operator (or those of ``only``) once, in order; cache outputs read
        more than once.
        """
        readers = self.consumers() + extra_readers
        out: dict[PlanNode, Slice] = {}
        for node, op in self.ops.items():
            if only is not None and node not in only:
                continue
            began = time.perf_counter()
            result = op.step([out[c] for c in node.children])
            op.plan_seconds = time.perf_counter() - began
            if result.df is not None and readers[node] > 1:
                result = Slice(self.rt.cache_for_cycle(result.df), result.lo, result.hi)
            out[node] = result
        return out
