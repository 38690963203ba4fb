"""The z of every shedding join that adapts it, decided before each cycle.

A join's z follows a model of what its cycles cost: a fixed part, a part per input row and
a part per partner its probers meet, fitted to its recent cycles
(``runtime/operators/shedding.py``: ``fit_cycle_cost``, ``next_z``). The input waiting for
a cycle is known before it runs, and with it the work it brings
(``IntervalJoinOperator.coming_load``), so a burst lowers z before the cycle that would
run over, not after. z is decided on the driver and handed to the cycle with its input
(``CycleInput.throttles``), so the journal can log it with the input and a cycle redone
after a crash sheds exactly as it did (``recovery.py``): the pairs a join emitted must
stay the same ones.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkcq.plan.nodes import PlanNode
from sparkcq.plan.options import ShedControl
from sparkcq.runtime.cycle_input import CycleInput
from sparkcq.runtime.operators.base import Operator
from sparkcq.runtime.operators.interval_join import IntervalJoinOperator
from sparkcq.runtime.operators.shedding import (
    NOTABLE,
    RECENT,
    CycleLoad,
    fit_cycle_cost,
    next_z,
    ratio_z,
)

#: the key of a cycle's z in its journal entry (no stream can have it as its name)
JOURNAL_KEY = "@throttles"


class Throttles:
    """The current z of each adapting join, by plan node (1 until a cycle runs late), and
    the load and time of its recent cycles.
    """

    def __init__(self) -> None:
        self.current: dict[PlanNode, float] = {}
        self.rows: dict[PlanNode, int | None] = {}  # each join's rows in the last cycle
        self.history: dict[PlanNode, list[tuple[CycleLoad, float]]] = {}
        self.compiled: set[PlanNode] = set()  # joins whose first cycle with work ran

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
            coming = op.coming_load(waiting)
            if last_seconds is not None:
                if how.control is ShedControl.RATIO:
                    new, why = ratio_z(z, self.rows.get(node),
                                       None if coming is None else coming.rows)
                else:
                    met = op.progress.met
                    self.remember(node, self.rows.get(node), met, last_seconds)
                    new, why = next_z(z, last_seconds, how.budget_seconds,
                                      cost=fit_cycle_cost(self.history.get(node, [])),
                                      met=met, coming=coming)
                if abs(new - z) > NOTABLE * z:
                    notes[node] = f"z {z:.2f} -> {new:.2f}: {why}"
                z = new
            decided[node] = z
            self.rows[node] = None if coming is None else coming.rows
        self.current = dict(decided)
        for kept in (self.rows, self.history):
            for gone in [n for n in kept if n not in decided]:
                del kept[gone]
        return decided, notes

    def remember(self, node: PlanNode, rows: int | None, met: float, seconds: float) -> None:
        """Add a cycle of ``node`` to its history (known rows only); its first cycle
        with work is left out: the JVM compiles the join's code in it.
        """
        if rows is None or rows == 0:
            return
        if node not in self.compiled:
            self.compiled.add(node)
            return
        history = self.history.setdefault(node, [])
        history.append((CycleLoad(rows, met), seconds))
        del history[:-RECENT]

    def adopt(self, logged: Mapping[PlanNode, float]) -> None:
        """Take the z a redone cycle ran with (from the journal) as the current ones."""
        self.current.update(logged)
