"""The optimizer: rewrite rules applied to a bound query plan before it joins the global plan.

Each rule is a function ``rule(plan, *, running) -> plan`` in a module of its own, with a
before/after example in its docstring; ``RULES`` lists them in the order they run.
``running`` holds the nodes the global plan runs already, for rules whose choice depends on
what a new query can share.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from sparkcq.plan.nodes import PlanNode
from sparkcq.plan.rules.aggregate_before_table_joins import aggregate_before_table_joins
from sparkcq.plan.rules.evaluate_at_slides import evaluate_at_slides
from sparkcq.plan.rules.join_aligned_chunks import join_aligned_chunks
from sparkcq.plan.rules.join_windowed_streams import join_windowed_streams
from sparkcq.plan.rules.outer_joins_from_inner import outer_joins_from_inner
from sparkcq.plan.rules.prune_top_candidates import prune_top_candidates
from sparkcq.plan.rules.slice_window_aggregates import slice_window_aggregates

Rule = Callable[..., PlanNode]

RULES: tuple[Rule, ...] = (aggregate_before_table_joins, slice_window_aggregates,
                           join_aligned_chunks, evaluate_at_slides, outer_joins_from_inner,
                           join_windowed_streams, prune_top_candidates)


def optimize(plan: PlanNode, running: Collection[PlanNode] = (),
             rules: tuple[Rule, ...] = RULES) -> PlanNode:
    """``plan`` rewritten by every rule in turn."""
    for rule in rules:
        plan = rule(plan, running=running)
    return plan
