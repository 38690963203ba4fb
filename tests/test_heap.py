"""The cycle loops of the CLI and the server keep the engine's long-lived objects out of
Python's full collections (sparkcq/heap.py), after collecting what is garbage, and give
them back when they end."""

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


def _live_cycle() -> _Node:
    node = _Node()
    node.other = node
    return node


def _collected_by_gc(obj: object) -> bool:
    """Whether the collector's walks see ``obj`` (a frozen object is left out of them)."""
    return any(o is obj for o in gc.get_objects())


def test_a_freeze_collects_garbage_first_and_freezes_what_lives():
    heap = FrozenHeap(after=(1, 3))
    enabled = gc.isenabled()
    gc.disable()  # no collection but the freezes' own
    kept = _live_cycle()
    gone = _garbage_cycle()
    assert gone() is not None  # only a collection frees a cycle
    try:
        assert _collected_by_gc(kept) and gone() is not None
        heap.after_cycle()  # the first
        assert gone() is None  # collected, not frozen with the rest
        assert not _collected_by_gc(kept) and gc.get_freeze_count() > 0
        made_since = _live_cycle()
        later = _garbage_cycle()
        heap.after_cycle()  # the second: no freeze between the given cycles
        assert _collected_by_gc(made_since) and later() is not None
        heap.after_cycle()  # the third
        assert later() is None and not _collected_by_gc(made_since)
    finally:
        heap.release()
        if enabled:
            gc.enable()
    assert gc.get_freeze_count() == 0
    assert _collected_by_gc(kept) and _collected_by_gc(made_since)
    heap.release()  # releasing twice changes nothing
    assert gc.get_freeze_count() == 0
