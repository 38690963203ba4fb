"""The z of every shedding join that adapts it, decided before each cycle (DESIGN 4.4).

A join's z follows the cycle times against its query's latency budget and the input waiting
for the next cycle (``runtime/operators/shedding.py``, ``next_z``). It is decided on the
driver before the cycle runs and handed to the cycle with its input
(``CycleInput.throttles``), so the journal can log it with the input and a cycle redone
after a crash sheds exactly as it did (``recovery.py``): the pairs a join emitted must
stay the same ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sparkcq.plan.nodes import IntervalJoin, PlanNode
from sparkcq.runtime.operators.shedding import NOTABLE, next_z

#: the key of a cycle's z in its journal entry (no stream can have it as its name)
JOURNAL_KEY = "@throttles"


class Throttles:
    """The current z of each adapting join, by plan node (1 until a cycle runs late)."""

    def __init__(self) -> None:
        self.current: dict[PlanNode, float] = {}

    def decide(self, nodes: Iterable[PlanNode], last_seconds: float | None,
               last_rows: int | None = None, waiting: int | None = None,
               ) -> tuple[dict[PlanNode, float], dict[PlanNode, str]]:
        """The z of each adapting join among ``nodes`` for the next cycle, after one that
        took ``last_seconds`` (None: none ran yet) for ``last_rows`` input rows, with
        ``waiting`` rows for the next (None: not known), and the reason of each notable
        change.
        """
        decided: dict[PlanNode, float] = {}
        notes: dict[PlanNode, str] = {}
        for node in nodes:
            how = node.shedding if isinstance(node, IntervalJoin) else None
            if how is None or how.throttle is not None:
                continue
            z = self.current.get(node, 1.0)
            if last_seconds is not None:
                new, why = next_z(z, last_seconds, how.budget_seconds, last_rows, waiting)
                if abs(new - z) > NOTABLE * z:
                    notes[node] = f"z {z:.2f} -> {new:.2f}: {why}"
                z = new
            decided[node] = z
        self.current = dict(decided)
        return decided, notes

    def adopt(self, logged: Mapping[PlanNode, float]) -> None:
        """Take the z a redone cycle ran with (from the journal) as the current ones."""
        self.current.update(logged)
