"""A cycle as a transaction over operator state: commit, or roll back as if it never ran.

Building a cycle mutates operators: state frames are replaced by lazy new ones, watermarks
advance, counters grow. If the cycle's action fails (a user function raising, bad data in
one query's expression), the engine must put every operator back where it was, keep the
polled input for the retry, and find out which queries failed. ``CycleTransaction`` records
the driver-side values of each operator (and of its helper objects) and the frames its
states pointed to; ``rollback`` restores them and frees the frames the failed attempt made.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyspark.sql import DataFrame

from sparkcq.plan.nodes import PlanNode
from sparkcq.runtime.frames import Runtime, SqlViews, StateFrame, unpersist_checkpoint
from sparkcq.runtime.operators.base import Operator


class HasStates(Protocol):
    """Anything holding state frames across cycles (operators, the shared formatter)."""

    states: list[StateFrame]


_SHARED_TYPES = (Runtime, SqlViews, StateFrame, Operator, PlanNode, DataFrame)


def _owned_objects(obj: object, seen: set[int]) -> Iterator[object]:
    """``obj`` and the runtime helper objects it owns (input buffers, element trackers)."""
    seen.add(id(obj))
    yield obj
    for value in vars(obj).values():
        if isinstance(value, _SHARED_TYPES) or id(value) in seen:
            continue
        if type(value).__module__.startswith("sparkcq.runtime") and hasattr(value, "__dict__"):
            yield from _owned_objects(value, seen)


@dataclass
class CycleTransaction:
    """What the operators looked like before a cycle, to undo it."""

    rt: Runtime
    attributes: list[tuple[object, dict[str, Any]]] = field(default_factory=list)
    frames: list[tuple[StateFrame, DataFrame | None, int, int | None]] = field(
        default_factory=list)

    @classmethod
    def begin(cls, rt: Runtime, operators: Iterable[Operator | HasStates]) -> CycleTransaction:
        """Record the state of ``operators`` (each once) before the cycle changes it."""
        tx = cls(rt)
        seen: set[int] = set()
        for op in operators:
            if id(op) in seen:
                continue
            for obj in _owned_objects(op, seen):
                tx.attributes.append((obj, dict(vars(obj))))
            tx.frames += [(s, s.df, s.rows, s.min_t) for s in op.states]
        return tx

    def rollback(self) -> None:
        """Undo the cycle: old frames and values back, frames built by the attempt freed."""
        kept = {id(df) for _frame, df, _rows, _min in self.frames}
        for middle in self.rt.released:  # replaced twice in the attempt
            if id(middle) not in kept:
                unpersist_checkpoint(middle)
        for frame, old, rows, min_t in self.frames:
            if frame.df is not None and frame.df is not old:
                unpersist_checkpoint(frame.df)
            frame.df, frame.rows, frame.min_t = old, rows, min_t
        for obj, values in self.attributes:
            vars(obj).update(values)
        self.rt.abort_cycle()
