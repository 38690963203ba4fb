"""Rule: an inner join of two time-windowed streams becomes an ``IntervalJoin`` that pairs
elements by their intervals instead of rebuilding them from +1/-1 changes.

Before::

    Join ON a.k = b.k
      Project `k` AS _0__k, `ts` AS _0__ts
        Window [RANGE 5 SECONDS]
          StreamScan events
      Project `k` AS _1__k, `ts` AS _1__ts
        Window [RANGE 5 SECONDS]
          StreamScan other

After::

    IntervalJoin ON a.k = b.k <- Window [RANGE 5 SECONDS] x Window [RANGE 5 SECONDS]
      StreamScan events
      StreamScan other

An element of a RANGE (with or without SLIDE), NOW or CUT window knows its end when its event
arrives, and a pair of such an interval join knows its end when it is found, so each side's
state is its elements that have not ended, and each pair is found once, when the later of
the two starts (``runtime/operators/interval_join.py``). Applies when both inputs are such
windows over streams or an interval join's pairs (a join of three streams: the first two's
pairs with the third), with only filters and projections between them and the join, and
neither already runs (a query added late over a running window or join starts from its
contents), unless the same join already runs as an IntervalJoin (then it is shared).
UNBOUNDED and ROWS windows keep the general join: their elements' ends are not known on
arrival.
"""

from __future__ import annotations

from collections.abc import Collection

from sparkcq.plan.nodes import (
    CutSpec,
    EdgeKind,
    Filter,
    IntervalJoin,
    Join,
    JoinHow,
    PlanNode,
    Project,
    RangeSpec,
    Window,
    transform_up,
)


def join_windowed_streams(plan: PlanNode, *, running: Collection[PlanNode] = ()) -> PlanNode:
    """``plan`` with every join of two time-windowed streams made an IntervalJoin."""
    return transform_up(plan, lambda node: _pair(node, running))


def _pair(node: PlanNode, running: Collection[PlanNode]) -> PlanNode:
    if not isinstance(node, Join) or node.how is not JoinHow.INNER:
        return node
    windows = [timed_window(child) or pairs_below(child) for child in node.children]
    if any(w is None for w in windows):
        return node
    names = [f.name for c in node.children for f in c.schema.fields]
    if len(set(names)) < len(names):  # the condition could not tell the sides apart
        return node
    left, right = (w.child if isinstance(w, Window) else w for w in windows if w is not None)
    if not any(isinstance(r, IntervalJoin) and r.join == node for r in running) and any(
            w in running for w in windows):
        return node  # an equal join already running is shared, whatever else runs
    return IntervalJoin(left, right, node)


def pairs_below(node: PlanNode) -> IntervalJoin | None:
    """The interval join below ``node`` (through filters and projections): its pairs'
    intervals are known when they are found, so a join of its pairs with a third windowed
    stream is an interval join too (and sheds too, when its query sheds).
    """
    while isinstance(node, Filter | Project):
        node = node.child
    return node if isinstance(node, IntervalJoin) else None


def timed_window(node: PlanNode) -> Window | None:
    """The window below ``node`` (through filters and projections) if its elements' ends
    are known when their events arrive.
    """
    while isinstance(node, Filter | Project):
        node = node.child
    if not isinstance(node, Window) or node.child.kind is not EdgeKind.STREAM:
        return None
    return node if isinstance(node.spec, RangeSpec | CutSpec) else None
