"""Rule: an aggregate, a join or a Top-N over relations that change only at multiples of a
step (hopping and chunk windows' aggregates, joins of such) is evaluated at those instants,
as an ``AlignedAggregate``, ``AlignedJoin`` or ``AlignedTopN``, instead of from the inputs'
changes.

Before (NEXMark q5: per slide, the auctions with the most bids)::

    Join ON c.num = t.top
      Project `auction` AS _0__auction, `num` AS _0__num
        SlicedAggregate count(*) AS num BY auction <- Window [RANGE 10 SECONDS SLIDE 5 SECONDS]
      Project `top` AS _1__top
        Aggregate max(num) AS top
          Project num
            SlicedAggregate count(*) AS num BY auction <- ...

After::

    AlignedJoin ON c.num = t.top at each 5 SECONDS
      Project `auction` AS _0__auction, `num` AS _0__num
        SlicedAggregate count(*) AS num BY auction <- ...
      Project `top` AS _1__top
        AlignedAggregate max(num) AS top at each 5 SECONDS
          Project num
            SlicedAggregate ...

A sliced aggregate's rows change only where a pane enters or leaves its window, at
multiples of the window's slide (or chunk length), so its snapshot at a multiple ``m``
holds over ``[m, m + slide)``; an aggregate, a join or a ranking of such snapshots does as
well, and is computed once per multiple, from the inputs' segments, with no state
(``runtime/operators/aligned_aggregate.py``, ``aligned_join.py``, ``aligned_top_n.py``).
The general operators instead keep their inputs' elements and rebuild them from +1/-1
changes every cycle. A join's inputs must change on the same step: a sliced aggregate gives
no segments in a cycle that holds no multiple of its own step (nothing changes), so on a
finer grid the join would miss its rows at the instants between.

Applies to aggregates of ``count``, ``sum``, ``avg``, ``min`` and ``max`` (not DISTINCT, not
a user's), to joins of any kind and to Top-N and rankings, whose inputs are such relations
through filters and projections. A relation whose rows hold for many steps costs a row per
step here: the rule leaves per-event windows (no slide) alone. Runs after
``slice_window_aggregates`` and ``join_aligned_chunks``, which make the relations it reads,
and before ``outer_joins_from_inner``: an outer join of such relations is the SQL outer
join of each instant's snapshots, with no counting of pairs.
"""

from __future__ import annotations

from collections.abc import Collection

from sparkcq.model.aggregate_functions import BUILTIN
from sparkcq.plan.nodes import (
    Aggregate,
    Aligned,
    AlignedAggregate,
    AlignedJoin,
    AlignedTopN,
    ChunkJoin,
    CutSpec,
    EdgeKind,
    Filter,
    Join,
    PlanNode,
    Project,
    RangeSpec,
    SlicedAggregate,
    TopN,
    transform_up,
)


def evaluate_at_slides(plan: PlanNode, *, running: Collection[PlanNode] = ()) -> PlanNode:
    """``plan`` with every aggregate and join over relations that change on a grid of
    instants evaluated at those instants.
    """
    return transform_up(plan, _aligned)


def _aligned(node: PlanNode) -> PlanNode:
    if isinstance(node, Aggregate):
        step = change_grid(node.child)
        if step is None or any(a.uda is not None or a.distinct or a.func not in BUILTIN
                               for a in node.aggs):
            return node
        return AlignedAggregate(node.child, node, step)
    if isinstance(node, TopN):
        step = change_grid(node.child)
        return node if step is None else AlignedTopN(node.child, node, step)
    if isinstance(node, Join):
        step = change_grid(node.left)
        if step is None or change_grid(node.right) != step:
            return node
        return AlignedJoin(node.left, node.right, node, step)
    return node


def change_grid(node: PlanNode) -> int | None:
    """The step at whose multiples ``node``'s relation can change, when its slices carry
    its content as segments (``Slice.segments``) on that grid; None otherwise.
    """
    while isinstance(node, Filter | Project) and node.kind is not EdgeKind.TABLE:
        node = node.child
    if isinstance(node, Aligned):
        return node.step
    if isinstance(node, ChunkJoin):
        return node.by
    if isinstance(node, SlicedAggregate):
        spec = node.window.spec
        if isinstance(spec, CutSpec):
            return spec.by
        if isinstance(spec, RangeSpec) and spec.slide is not None and spec.slide > 1:
            return spec.slide
    return None
