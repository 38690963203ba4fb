"""Processing time, behind one small interface so that tests can drive it.

Event time is data; processing time is the machine's. The engine reads the latter only
through a ``Clock`` (when a table's ``refresh`` interval is due, when a table was read,
how long ``Engine.run`` waits between cycles), so a test advances a ``ManualClock``
instead of sleeping.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    """Where processing time comes from."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (intervals, deadlines)."""
        ...

    def time(self) -> float:
        """Seconds since the epoch (what a user reads as a date)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...


class SystemClock:
    """The machine's clocks."""

    def monotonic(self) -> float:  # noqa: D102
        return time.monotonic()

    def time(self) -> float:  # noqa: D102
        return time.time()

    def sleep(self, seconds: float) -> None:  # noqa: D102
        time.sleep(seconds)


@dataclass
class ManualClock:
    """A clock that moves only when told to: ``advance(seconds)``, or ``sleep``.

    >>> clock = ManualClock()
    >>> clock.advance(61); clock.monotonic()
    61.0
    """

    now: float = 0.0
    epoch: float = 1_700_000_000.0  # what ``time()`` says at ``now`` 0

    def monotonic(self) -> float:  # noqa: D102
        return self.now

    def time(self) -> float:  # noqa: D102
        return self.epoch + self.now

    def sleep(self, seconds: float) -> None:  # noqa: D102
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass."""
        self.now += float(seconds)
