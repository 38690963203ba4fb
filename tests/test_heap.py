"""The CLI's cycle loop keeps the engine's long-lived objects out of Python's full
collections (sparkcq/heap.py), after collecting what is garbage, and gives them back."""

from __future__ import annotations

import gc
import weakref

from sparkcq.heap import FrozenHeap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _garbage_cycle() -> weakref.ref[_Node]:
    """A reference cycle nothing refers to any more, seen through a weak reference."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_a_freeze_collects_garbage_first_and_freezes_what_lives():
    heap = FrozenHeap(after=(1, 3))
    kept = _Node()
    kept.other = kept  # a cycle still referred to: it lives on, frozen
    gone = _garbage_cycle()
    assert gone() is not None  # only a collection frees a cycle
    try:
        heap.after_cycle(0)
        assert gc.get_freeze_count() == 0 and gone() is not None
        heap.after_cycle(1)
        assert gone() is None  # collected, not frozen with the rest
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert not any(o is kept for o in gc.get_objects())  # out of the collector's walks
        heap.after_cycle(2)
        assert gc.get_freeze_count() == frozen  # no freeze between the given cycles
        later = _garbage_cycle()
        heap.after_cycle(3)
        assert later() is None and gc.get_freeze_count() >= frozen
    finally:
        heap.release()
    assert gc.get_freeze_count() == 0
    assert any(o is kept for o in gc.get_objects())  # tracked by the collector again
    heap.release()  # releasing twice changes nothing
    assert gc.get_freeze_count() == 0
