"""A cycle as a transaction over operator state: commit, or roll back as if it never ran.

Building a cycle changes operators: state frames are replaced by lazy new ones, watermarks
advance, positions move. If the cycle's action fails (a user function raising, bad data in
one query's expression), the engine must put every operator back where it was and find out
which queries failed, then run the cycle again on the same input.

Every participant keeps what a cycle changes on the driver in one frozen record, its
``progress``, which only the participant itself replaces; its Spark state lives in state
frames. ``CycleTransaction.begin`` takes one ``CycleSnapshot`` of them all: the records
(kept by reference, as they never change) and each frame's ``FrameState``. ``rollback``
puts every record and frame state back whole and frees the frames the failed attempt made.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sparkcq.runtime.frames import HeldState, Runtime


class CycleParticipant:
    """Anything a cycle changes: its ``progress`` record (frozen, replaced whole by the
    participant's own methods), the helpers it owns (``cycle_parts``: an aggregate family
    behind its members, the operators of a family) and its state frames.

    What is set between statements (the members of a family, an operator's node) is not
    progress: no statement runs inside a cycle.
    """

    progress: Any = None

    def restore_progress(self, progress: Any) -> None:
        """Take ``progress`` back (a failed cycle is rolled back)."""
        self.progress = progress

    def cycle_parts(self) -> tuple[CycleParticipant, ...]:
        """The helpers this object owns that a cycle changes too."""
        return ()

    def cycle_states(self) -> Sequence[HeldState]:
        """The states (frames, runs) a cycle may change."""
        return []


def _participants(obj: CycleParticipant, seen: set[int]) -> Iterator[CycleParticipant]:
    """``obj`` and the helpers it owns, each once."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    yield obj
    for part in obj.cycle_parts():
        yield from _participants(part, seen)


@dataclass(frozen=True)
class CycleSnapshot:
    """Every participant's progress record and every state frame's contents before a
    cycle: one record, restored whole.
    """

    progress: tuple[tuple[CycleParticipant, Any], ...]
    frames: tuple[tuple[HeldState, Any], ...]  # each state with its snapshot

    @classmethod
    def of(cls, participants: Iterable[CycleParticipant]) -> CycleSnapshot:
        """The snapshot of ``participants`` and the helpers they own, each once."""
        seen: set[int] = set()
        progress: list[tuple[CycleParticipant, Any]] = []
        frames: list[tuple[HeldState, Any]] = []
        for top in participants:
            for obj in _participants(top, seen):
                progress.append((obj, obj.progress))
                frames += [(s, s.snapshot()) for s in obj.cycle_states()]
        return cls(tuple(progress), tuple(frames))


@dataclass(frozen=True)
class CycleTransaction:
    """What the operators looked like before a cycle, to undo it."""

    rt: Runtime
    before: CycleSnapshot

    @classmethod
    def begin(cls, rt: Runtime, participants: Iterable[CycleParticipant]) -> CycleTransaction:
        """Record what a cycle may change in ``participants`` (each once) before it runs."""
        return cls(rt, CycleSnapshot.of(participants))

    def rollback(self) -> None:
        """Undo the cycle: old frames and records back, frames built by the attempt freed."""
        kept = {id(df) for _held, state in self.before.frames for df in state.frames}
        made = {id(df): df for df in self.rt.released if id(df) not in kept}
        for held, state in self.before.frames:
            made |= {id(df): df for df in held.frames() if id(df) not in kept}
            held.restore(state)
        self.rt.free(list(made.values()))
        for obj, progress in self.before.progress:
            obj.restore_progress(progress)
        self.rt.abort_cycle()
