"""A query's shedding, given to its windowed stream joins (``docs/shedding.md``).

Not one of ``RULES``: it runs after them, for a query written
``WITH (shedding='adaptive' | 'random', ...)``, and marks every ``IntervalJoin`` of the
query with that shedding. The mark is part of the node, so a join that sheds is never
shared with one that does not (or sheds otherwise): each query gets the results it asked
for.

Before::

    IntervalJoin ON a.k = b.k <- Window [RANGE 60] x Window [RANGE 60]

After (``WITH (shedding='adaptive', basic_windows='6')``)::

    IntervalJoin ON a.k = b.k <- Window [RANGE 60] x Window [RANGE 60]
      SHEDDING adaptive (6 sub-windows, budget 2 s)

A query that asks for shedding and has no such join is refused: its option would do
nothing (``ShedWhere.NOWHERE``), or its join runs on the general path because a window of
it already runs for another query and is shared (``ShedWhere.SHARED_WINDOW``).
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum

from sparkcq.plan.nodes import IntervalJoin, Join, PlanNode, transform_up, walk
from sparkcq.plan.options import Shedding
from sparkcq.plan.rules.join_windowed_streams import timed_window


class ShedWhere(Enum):
    """Where a query's shedding went."""

    JOINS = "joins"  # onto its windowed stream joins
    NOWHERE = "nowhere"  # the query joins no two streams in RANGE, NOW or CUT windows
    SHARED_WINDOW = "shared window"  # its join reads a window another query runs


def shed_window_joins(plan: PlanNode, shedding: Shedding) -> tuple[PlanNode, ShedWhere]:
    """``plan`` with ``shedding`` on each of its IntervalJoins, and where it went."""
    marked = transform_up(
        plan, lambda n: replace(n, shedding=shedding) if isinstance(n, IntervalJoin) else n)
    if any(isinstance(n, IntervalJoin) for n in walk(marked)):
        return marked, ShedWhere.JOINS
    if any(isinstance(n, Join) and all(timed_window(c) is not None for c in n.children)
           for n in walk(plan)):
        return plan, ShedWhere.SHARED_WINDOW
    return plan, ShedWhere.NOWHERE
