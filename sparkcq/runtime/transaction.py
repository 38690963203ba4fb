"""A cycle as a transaction over operator state: commit, or roll back as if it never ran.

Building a cycle mutates operators: state frames are replaced by lazy new ones, watermarks
advance, counters grow. If the cycle's action fails (a user function raising, bad data in
one query's expression), the engine must put every operator back where it was, keep the
polled input for the retry, and find out which queries failed. ``CycleTransaction`` records
the driver-side values each operator (and each helper it names in ``cycle_parts``) declares
in ``CYCLE_FIELDS`` and the frames its states pointed to; ``rollback`` restores them and
frees the frames the failed attempt made.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pyspark.sql import DataFrame

from sparkcq.runtime.frames import Runtime, StateFrame, unpersist_checkpoint


class CycleParticipant:
    """Anything a cycle changes: the driver-side fields it names in ``CYCLE_FIELDS``
    (restored by a rollback), the helpers it owns (``cycle_parts``: an aggregate family
    behind its members, a union's input alignment) and its state frames.

    A field set between statements (the members of a family, an operator's node) is not a
    cycle field: no statement runs inside a cycle.
    """

    CYCLE_FIELDS: ClassVar[tuple[str, ...]] = ()

    def cycle_parts(self) -> tuple[CycleParticipant, ...]:
        """The helpers this object owns whose fields a cycle changes too."""
        return ()

    def cycle_states(self) -> list[StateFrame]:
        """The state frames a cycle may replace."""
        return []


def _participants(obj: CycleParticipant, seen: set[int]) -> Iterator[CycleParticipant]:
    """``obj`` and the helpers it owns, each once."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    yield obj
    for part in obj.cycle_parts():
        yield from _participants(part, seen)


@dataclass
class CycleTransaction:
    """What the operators looked like before a cycle, to undo it."""

    rt: Runtime
    fields: list[tuple[CycleParticipant, dict[str, Any]]] = field(default_factory=list)
    frames: list[tuple[StateFrame, DataFrame | None, int, int | None]] = field(
        default_factory=list)

    @classmethod
    def begin(cls, rt: Runtime, participants: Iterable[CycleParticipant]) -> CycleTransaction:
        """Record what a cycle may change in ``participants`` (each once) before it runs."""
        tx = cls(rt)
        seen: set[int] = set()
        for top in participants:
            for obj in _participants(top, seen):
                tx.fields.append((obj, {name: getattr(obj, name) for name in obj.CYCLE_FIELDS}))
                tx.frames += [(s, s.df, s.rows, s.min_t) for s in obj.cycle_states()]
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
        for obj, values in self.fields:
            for name, value in values.items():
                setattr(obj, name, value)
        self.rt.abort_cycle()
