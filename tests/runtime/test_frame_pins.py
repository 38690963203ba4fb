"""``FramePins``: a frame a background checkpoint reads is freed only once it is written,
whatever the cycles meanwhile release (no Spark: frames are named by identity).
"""

from __future__ import annotations

from sparkcq.runtime.frames import FramePins


class Frame:
    """Stands for a checkpointed DataFrame: only its identity counts."""


def test_a_frame_freed_while_pinned_is_freed_when_its_last_write_ends():
    pins = FramePins()
    kept, other = Frame(), Frame()
    pins.pin([kept])
    pins.pin([kept])  # two checkpoints read it
    assert pins.free_now([kept, other]) == [other]  # a cycle replaced both
    assert pins.unpin([kept]) == []  # one write is still reading it
    assert pins.unpin([kept]) == [kept]  # the last: free it now
    assert pins.free_now([kept]) == [kept]  # no pin left: freed at once


def test_a_pinned_frame_nobody_freed_is_not_freed_by_its_unpin():
    pins = FramePins()
    held = Frame()
    pins.pin([held])
    assert pins.unpin([held]) == []  # still the state's: its owner frees it later
    assert pins.free_now([held]) == [held]


def test_without_pins_every_frame_is_freed_at_once():
    frames = [Frame(), Frame()]
    assert FramePins().free_now(frames) == frames
