"""Rule: a Top-N over a per-event ``[RANGE w]`` window ranks only the elements that can
still be among its first ``n`` (a ``TopCandidates`` below it), not every live row.

Before (the three highest values of the last five seconds)::

    TopN ROW_NUMBER <= 3 ORDER BY `v` DESC
      Project k, v, id
        Window [RANGE 5 SECONDS]
          StreamScan s

After::

    TopN ROW_NUMBER <= 3 ORDER BY `v` DESC
      TopCandidates 3 ORDER BY `v` DESC
        Project k, v, id
          Window [RANGE 5 SECONDS]
            StreamScan s

Every element of a ``[RANGE w]`` window holds for ``w`` from its event, so an element that
arrived no earlier than ``e`` outlives it. Once ``n`` such elements ranking above ``e``
(in the same partition) have arrived, ``e`` is never again among the first ``n``: it
leaves the candidates then, and the Top-N above gives the same rows at every instant while
ranking a few candidates (about ``n`` times the log of the live rows, for values in random
order) instead of every live row, at every instant where one arrives or leaves. Applies to
``ROW_NUMBER`` (and ``LIMIT``) and ``RANK`` with a bound, over a RANGE window without slide
of a stream, through filters and projections (``runtime/operators/top_candidates.py``),
when the window does not run yet (a query added later starts from the window's contents,
whose elements' starts are gone).
"""

from __future__ import annotations

from collections.abc import Collection

from sparkcq.plan.nodes import (
    EdgeKind,
    Filter,
    PlanNode,
    Project,
    RangeSpec,
    RankKind,
    TopCandidates,
    TopN,
    Window,
    transform_up,
)


def prune_top_candidates(plan: PlanNode, *, running: Collection[PlanNode] = ()) -> PlanNode:
    """``plan`` with a ``TopCandidates`` under every bounded Top-N of a RANGE window."""
    return transform_up(plan, lambda node: _pruned(node, running))


def _pruned(node: PlanNode, running: Collection[PlanNode]) -> PlanNode:
    if (not isinstance(node, TopN) or node.n is None
            or node.rank not in (RankKind.ROW_NUMBER, RankKind.RANK)
            or isinstance(node.child, TopCandidates)):
        return node
    below = node.child
    while isinstance(below, Filter | Project) and below.kind is not EdgeKind.TABLE:
        below = below.child
    if not (isinstance(below, Window) and isinstance(below.spec, RangeSpec)
            and below.spec.slide is None and below.child.kind is EdgeKind.STREAM):
        return node
    if below in running:  # its elements' starts are behind it: a new query ranks them all
        return node
    candidates = TopCandidates(node.child, node.partition, node.order, node.n,
                               node.rank is RankKind.ROW_NUMBER, below.spec.size)
    return TopN(candidates, node.partition, node.order, node.n, node.rank, node.rank_column)
