"""Rule: a join of a stream's time chunks with an aggregate over the same chunks becomes a
``ChunkJoin``, which pairs each chunk's rows with the chunk's aggregate once, when the chunk
ends, instead of rebuilding both sides' elements from changes.

Before (NEXMark q7: each 10 s chunk's bids with the chunk's highest price)::

    Join ON b.price = t.top
      Project `auction` AS _0__auction, `price` AS _0__price, ...
        Window [CUT BY 10 SECONDS]
          StreamScan bid
      Project `top` AS _1__top
        SlicedAggregate max(price) AS top <- Window [CUT BY 10 SECONDS]
          StreamScan bid

After::

    ChunkJoin ON b.price = t.top <- Window [CUT BY 10 SECONDS] x its chunks' aggregate
      StreamScan bid
      Project `top` AS _1__top
        SlicedAggregate max(price) AS top <- Window [CUT BY 10 SECONDS]
          StreamScan bid

A chunk's rows all hold over ``[cut, cut + by)`` and so does the aggregate of that chunk
(one segment per group), so on every snapshot the join is the join of one chunk's rows with
that chunk's aggregate rows; both are complete when the chunk's cut passes the watermark.
The join takes the stream's events as they arrive and keeps those of chunks not yet ended
(``runtime/operators/chunk_join.py``). Applies to inner joins whose left input is a
``[CUT BY by]`` window (one chunk) of a stream and whose right input is a sliced aggregate
over the same chunks of a stream (the same one, NEXMark q7, or another: q8's persons with
the chunk's sellers of auctions), through filters and projections on both sides, when the
streams do not run yet: a query added later over a running stream has not seen the events
of the chunk under way, and the general join starts it from what runs. Runs after
``slice_window_aggregates``, which makes the sliced aggregate.
"""

from __future__ import annotations

from collections.abc import Collection

from sparkcq.plan.nodes import (
    ChunkJoin,
    CutSpec,
    EdgeKind,
    Filter,
    Join,
    JoinHow,
    PlanNode,
    Project,
    SlicedAggregate,
    Window,
    transform_up,
)


def join_aligned_chunks(plan: PlanNode, *, running: Collection[PlanNode] = ()) -> PlanNode:
    """``plan`` with every join of a chunk window with an aggregate over the same chunks a
    ChunkJoin.
    """
    return transform_up(plan, lambda node: _pair(node, running))


def _pair(node: PlanNode, running: Collection[PlanNode]) -> PlanNode:
    if not isinstance(node, Join) or node.how is not JoinHow.INNER:
        return node
    window, aggregate = below(node.left), below(node.right)
    if not (isinstance(window, Window) and isinstance(aggregate, SlicedAggregate)):
        return node
    spec = window.spec
    if (not isinstance(spec, CutSpec) or spec.chunks != 1 or window.child.kind
            is not EdgeKind.STREAM or aggregate.window.spec != spec
            or aggregate.window.child.kind is not EdgeKind.STREAM):
        return node
    if window.child in running or aggregate.window.child in running:
        return node  # a late query over a running stream starts in the general join
    return ChunkJoin(window.child, node.right, node, spec.by)


def below(node: PlanNode) -> PlanNode:
    """The node under ``node``'s filters and projections."""
    while isinstance(node, Filter | Project):
        node = node.child
    return node
