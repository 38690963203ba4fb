"""The Python heap of a process that runs the engine for long (``sparkcq run``, ``demo``,
``serve``).

Python's collector walks every object it tracks on each full collection. In the demo's
process that is about 110,000 objects (PySpark's, py4j's, the engine's plans and their
templates), 70-110 ms a walk, once every 20 to 30 cycles, and the walk lands inside a
cycle. Nearly all of those objects live as long as the engine: frozen (``gc.freeze``) they
are left out of every later walk, which then takes 5-10 ms (measured 2026-11-30, 2 cores).

A frozen object is still freed when its last reference goes; only one caught in a
reference cycle that becomes garbage later stays. So garbage is collected just before each
freeze, which comes after the first cycle (the session, the plan and its first frames) and
again after the warm-up cycles (the templates of the operators' texts), and ``release``
gives the objects back to the collector when the loop ends (a caller running the loop in
its own process, a test, is left as it was). A library user's own loop around
``Engine.run_cycle`` is left alone: freezing changes how the whole process collects.
"""

from __future__ import annotations

import gc

# after these many cycles the objects made so far are frozen: the first cycle builds the
# plans, the next ones the templates of texts run with new frames
FREEZE_AFTER_CYCLES = (1, 10)


class FrozenHeap:
    """Freezes the engine's long-lived objects as a cycle loop goes, and lets them go."""

    def __init__(self, after: tuple[int, ...] = FREEZE_AFTER_CYCLES):
        self.after = after
        self.cycles = 0  # cycles the loop has run
        self.frozen = False

    def after_cycle(self) -> None:
        """Called after each cycle of the loop: freeze when it is time."""
        self.cycles += 1
        if self.cycles in self.after:
            gc.collect()
            gc.freeze()
            self.frozen = True

    def release(self) -> None:
        """Hand every frozen object back to the collector (the process's, whoever froze
        it: the loop owns its process while it runs).
        """
        if self.frozen:
            gc.unfreeze()
            self.frozen = False
