"""Rule: a built-in aggregate over a hopping, tumbling or chunk window becomes a
``SlicedAggregate`` that aggregates panes before the shuffle.

Before::

    Aggregate sum(_a0) AS _x0, count(*) AS _x1 BY _g0
      Project `k` AS _g0, `v` AS _a0
        Window [RANGE 1 MINUTE SLIDE 10 SECONDS]
          StreamScan events

After::

    SlicedAggregate sum(_a0) AS _x0, count(*) AS _x1 BY _g0 <- Project ... <- Window [...]
      StreamScan events

The window's elements never exist: each event is summed into its (group, pane) right after
the scan, and the window's values come from the panes (``runtime/operators/sliced_aggregate.py``).
Applies when every call is count, sum, avg, min or max without DISTINCT, only filters and
projections lie between window and aggregate, the window reads a stream, and its length is a
whole number of slides; over a per-event ``[RANGE w]`` window (no slide), when every call is
count, sum or avg (``runtime/operators/range_aggregate.py``: a log of the window's events
and each group's running sums). Other aggregates keep the general change-based operator, and so does
one whose window already runs as a Window operator: a query added late then starts from that
window's live elements.
"""

from __future__ import annotations

from collections.abc import Collection

from sparkcq.model.aggregate_functions import BUILTIN
from sparkcq.plan.nodes import (
    Aggregate,
    CutSpec,
    EdgeKind,
    Filter,
    PlanNode,
    Project,
    RangeSpec,
    SlicedAggregate,
    Window,
    transform_up,
)

SLICED_FUNCTIONS = frozenset(BUILTIN)
# over a per-event [RANGE w] window: those a running sum gives (from a log and a base)
RANGE_FUNCTIONS = frozenset(name for name, agg in BUILTIN.items() if agg.running)


def slice_window_aggregates(plan: PlanNode, *, running: Collection[PlanNode] = ()) -> PlanNode:
    """``plan`` with every aggregate that can be computed from panes made a SlicedAggregate."""
    return transform_up(plan, lambda node: _slice(node, running))


def _slice(node: PlanNode, running: Collection[PlanNode]) -> PlanNode:
    if (isinstance(node, Aggregate) and (window := sliceable_window(node)) is not None
            and window not in running):
        return SlicedAggregate(window.child, node)
    return node


def sliceable_window(node: Aggregate) -> Window | None:
    """The window below ``node`` if the aggregate can be computed from its panes."""
    if any(a.uda is not None or a.distinct or a.func not in SLICED_FUNCTIONS for a in node.aggs):
        return None
    below = node.child
    while isinstance(below, Filter | Project):
        below = below.child
    if not isinstance(below, Window) or below.child.kind is not EdgeKind.STREAM:
        return None
    spec = below.spec
    if isinstance(spec, CutSpec):
        return below
    if isinstance(spec, RangeSpec) and spec.slide and spec.size % spec.slide == 0:
        return below
    if (isinstance(spec, RangeSpec) and spec.slide is None
            and all(a.func in RANGE_FUNCTIONS for a in node.aggs)):
        return below
    return None
