"""The z of every shedding join that adapts it, decided before each cycle (DESIGN 4.4).

A join's z follows its cycles' times against its query's latency budget, from a model of
what a cycle costs: a fixed part, and a part that grows with the partners the join meets
(``runtime/operators/shedding.py``, ``next_z``). The work the waiting input brings is
known before the cycle runs (``IntervalJoinOperator.expected_work``), so a burst lowers z
before the cycle that would run over, not after. z is decided on the driver and handed to
the cycle with its input (``CycleInput.throttles``), so the journal can log it with the
input and a cycle redone after a crash sheds exactly as it did (``recovery.py``): the pairs
a join emitted must stay the same ones.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkcq.plan.nodes import PlanNode
from sparkcq.runtime.cycle_input import CycleInput
from sparkcq.runtime.operators.base import Operator
from sparkcq.runtime.operators.interval_join import IntervalJoinOperator
from sparkcq.runtime.operators.shedding import NOTABLE, RECENT, fixed_seconds, next_z

#: the key of a cycle's z in its journal entry (no stream can have it as its name)
JOURNAL_KEY = "@throttles"


class Throttles:
    """The current z of each adapting join, by plan node (1 until a cycle runs late), and
    the recent times of its cycles that did join work.
    """

    def __init__(self) -> None:
        self.current: dict[PlanNode, float] = {}
        self.recent: dict[PlanNode, list[float]] = {}

    def decide(self, ops: Mapping[PlanNode, Operator], last_seconds: float | None,
               waiting: CycleInput) -> tuple[dict[PlanNode, float], dict[PlanNode, str]]:
        """The z of each adapting join among ``ops`` for the next cycle, after one that
        took ``last_seconds`` (None: none ran yet), with ``waiting`` its input; and the
        reason of each notable change.
        """
        decided: dict[PlanNode, float] = {}
        notes: dict[PlanNode, str] = {}
        for node, op in ops.items():
            if not isinstance(op, IntervalJoinOperator):
                continue
            how = op.shedding
            if how is None or how.throttle is not None:
                continue
            z = self.current.get(node, 1.0)
            if last_seconds is not None:
                met = op.progress.met
                recent = self.recent.setdefault(node, [])
                if met > 0:
                    recent.append(last_seconds)
                    del recent[:-RECENT]
                new, why = next_z(z, last_seconds, how.budget_seconds,
                                  fixed=fixed_seconds(recent), met=met,
                                  expected=op.expected_work(waiting))
                if abs(new - z) > NOTABLE * z:
                    notes[node] = f"z {z:.2f} -> {new:.2f}: {why}"
                z = new
            decided[node] = z
        self.current = dict(decided)
        self.recent = {n: r for n, r in self.recent.items() if n in decided}
        return decided, notes

    def adopt(self, logged: Mapping[PlanNode, float]) -> None:
        """Take the z a redone cycle ran with (from the journal) as the current ones."""
        self.current.update(logged)
