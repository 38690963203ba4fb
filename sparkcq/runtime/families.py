"""The families of the global plan: aggregates of many queries computed as one.

Two kinds behind one protocol (``Family``): an ``AggregateFamily`` fuses the aggregates
over one relation and keys into one operator (``runtime/fusion.py``); a ``SlicedFamily``
computes the window aggregates over one stream from one set of panes
(``runtime/sliced_family.py``). The global plan asks this registry for a new node's member
operator and hands it a dropped member; it never asks which kind a family is. A member
operator names its family (``Operator.family``), which holds the state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sparkcq.plan.nodes import PlanNode, SlicedAggregate
from sparkcq.runtime.frames import Runtime
from sparkcq.runtime.fusion import AggregateFamily, FamilyMemberOperator, FusionKey, fusion_key
from sparkcq.runtime.operators.base import Operator
from sparkcq.runtime.seeding import can_seed, history_of, partial_windows_note
from sparkcq.runtime.sliced_family import (
    SlicedFamily,
    SlicedKey,
    SlicedMemberOperator,
    sliced_key,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sparkcq.runtime.global_plan import GlobalPlan
    from sparkcq.runtime.operators.base import CycleContext


class Family(Protocol):
    """What the plan and the cycle ask of a family, whatever its kind."""

    @property
    def members(self) -> Mapping[Any, Any]:
        """The member nodes, each with the columns it reads of the family's result."""
        ...

    def operators(self) -> list[Operator]:
        """The operators holding the family's state."""
        ...

    def finish_cycle(self, run: Any) -> None:
        """The cycle's plans are built: what the family keeps of this cycle's evaluation."""
        ...

    def resumed(self) -> None:
        """Its state was restored from a checkpoint: carry on, do not start fresh."""
        ...

    def seeded_from(self) -> PlanNode | None:
        """The running relation a rebuilt family starts from this cycle, or None."""
        ...

    def as_sliced(self) -> SlicedFamily | None:
        """The family as a sliced one, whose records may come as runs of segments."""
        ...

    def as_fused(self) -> AggregateFamily | None:
        """The family as an aggregate family, whose records are its result's changes."""
        ...


@dataclass
class Families:
    """The plan's families by what their members share (one input and keys; one stream)."""

    rt: Runtime
    fuse: bool = True  # False: one operator per query, no family
    fused: dict[FusionKey, list[AggregateFamily]] = field(default_factory=dict)
    sliced: dict[SlicedKey, list[SlicedFamily]] = field(default_factory=dict)

    def member(self, node: PlanNode, plan: GlobalPlan) -> tuple[Operator, list[str]] | None:
        """The member operator of a new ``node`` in a family that takes it (joined or
        new), with notes for its query's log; None when no family computes such a node.
        """
        if not self.fuse:
            return None
        if isinstance(node, SlicedAggregate):
            sliced = self.sliced_family_for(node, plan)
            op: Operator = SlicedMemberOperator(node, sliced)
            # over a window that already runs, from its reach (``seeding.history_of``)
            history = history_of(plan, node.children[0], node)
            sliced.add(node, history[1] if history is not None else 0)
            partial = partial_windows_note(plan, node.children[0], node, history)
            return op, [partial] if partial is not None else []
        key = fusion_key(node)
        if key is None:
            return None
        family = self.family_for(key, plan)
        op = FamilyMemberOperator(node, family)  # type: ignore[arg-type]
        family.add(node)  # type: ignore[arg-type]
        if can_seed(plan, family.base):
            return op, []
        return op, [f"starts with the changes after its start: {family.base.label()} "
                    "cannot tell its current contents"]

    def sliced_family_for(self, node: SlicedAggregate, plan: GlobalPlan) -> SlicedFamily:
        """The sliced family a new sliced aggregate joins: one that can take it, or a new
        one.
        """
        families = self.sliced.setdefault(sliced_key(node), [])
        for family in families:
            if family.can_take(node):
                return family
        stream = node.children[0]
        families.append(SlicedFamily(sliced_key(node), stream, plan.ops[stream], self.rt))
        return families[-1]

    def family_for(self, key: FusionKey, plan: GlobalPlan) -> AggregateFamily:
        """The family a new aggregate joins: one that can take it in, or a new one."""
        families = self.fused.setdefault(key, [])
        for family in families:
            if not family.has_run or can_seed(plan, family.base):
                return family
        families.append(AggregateFamily(key, self.rt))
        return families[-1]

    def leave(self, member: Operator, plan: GlobalPlan) -> None:
        """Take a dropped member out of its family (an aggregate family is rebuilt without
        its calls if its input can tell its contents); forget the family once empty.
        """
        family = member.family
        if isinstance(family, SlicedFamily):
            assert isinstance(member.node, SlicedAggregate)
            family.remove(member.node)
            if not family.members:
                self.sliced = {k: kept for k, v in self.sliced.items()
                               if (kept := [f for f in v if f is not family])}
            return
        assert isinstance(family, AggregateFamily)
        family.remove(member.node, can_seed(plan, family.base))  # type: ignore[arg-type]
        if not family.members:
            self.fused = {k: left for k, v in self.fused.items()
                          if (left := [f for f in v if f is not family])}

    def fused_families(self) -> list[AggregateFamily]:
        """Every aggregate family."""
        return [f for fams in self.fused.values() for f in fams]

    def sliced_families(self) -> list[SlicedFamily]:
        """Every sliced family."""
        return [f for fams in self.sliced.values() for f in fams]

    def all(self) -> list[Family]:
        """Every family, of either kind."""
        return [*self.fused_families(), *self.sliced_families()]

    def finish_cycle(self, cycle: CycleContext) -> None:
        """The cycle's plans are built: families forget their seed once it is spent."""
        for family in self.all():
            family.finish_cycle(cycle.evaluations.get(id(family)))

    def resumed(self) -> None:
        """State was restored from a checkpoint: every family continues where it was."""
        for family in self.all():
            family.resumed()
