"""Starting new operators from what runs: a query added late starts complete.

An operator added above a shared relation (a window, an aggregate, a join) starts from that
relation's contents at its position, so the new query's first results are those of a query
that ran from the beginning. A new window aggregate or interval join over a running stream
starts from the events the stream's scan kept for it (its history). Above a plain stream a
new operator sees only the events after its start.

Functions of the global plan they read (``runtime/global_plan.py``), taken before any
operator steps in the cycle: what a consumer starts from must not include the cycle's own
changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from sparkcq.model.columns import T
from sparkcq.model.time import TIME_MIN, show_instant
from sparkcq.plan.nodes import (
    EdgeKind,
    IntervalJoin,
    OverAggregate,
    PlanNode,
    SlicedAggregate,
    Window,
    window_reach,
)
from sparkcq.runtime.frames import Slice, col
from sparkcq.runtime.operators.base import ContentsUnknownError, CycleContext, Operator, Start
from sparkcq.runtime.operators.scan import ScanOperator

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sparkcq.runtime.global_plan import GlobalPlan
    from sparkcq.runtime.operators.base import Starts


@dataclass(frozen=True)
class CycleStarts:
    """The contents new consumers start from this cycle, taken before any operator steps:
    seeded inputs by (id of the operator, input index), rebuilt families by id.
    """

    inputs: Starts
    families: Mapping[int, Start]


def contents(plan: GlobalPlan, node: PlanNode, at: int) -> DataFrame | None:
    """The current contents of a running relation node as +n changes at ``at``."""
    op = plan.ops[node]
    kids: list[DataFrame | None] = []
    if op.contents_from_inputs:
        kids = [contents(plan, c, at) if c.kind is EdgeKind.RELATION else
                table_rows(plan, c) if c.kind is EdgeKind.TABLE else None
                for c in node.children]
    return op.contents(kids, at)


def table_rows(plan: GlobalPlan, node: PlanNode) -> DataFrame | None:
    """The rows of a static (table-kind) node; its operators are stateless maps."""
    op = plan.ops[node]
    inputs = [Slice(table_rows(plan, c), 0, 0) for c in node.children]
    return op.step(inputs, CycleContext()).df


def can_seed(plan: GlobalPlan, node: PlanNode) -> bool:
    """Whether a running node can tell its contents (a rebuilt family starts from them)."""
    op = plan.ops.get(node)
    if op is None or op.position is None:
        return True
    try:
        contents(plan, node, op.position)
    except ContentsUnknownError:
        return False
    return True


def seedable(plan: GlobalPlan, children: Iterable[PlanNode], consumer: PlanNode | None = None,
             ) -> tuple[frozenset[int], list[str]]:
    """Which inputs (running relations) a new consumer starts from, and which it cannot.

    A new sliced aggregate over a running stream (``consumer``) starts from the stream's
    recent events when its scan kept them for an earlier one.
    """
    seeded, notes = set(), []
    for i, child in enumerate(children):
        op = plan.ops.get(child)
        if op is None or op.position is None:
            continue
        if child.kind is EdgeKind.STREAM:
            found = history_of(plan, child, consumer) if consumer is not None else None
            if found is not None:
                seeded.add(i)
            partial = partial_windows_note(plan, child, consumer, found)
            if partial is not None:
                notes.append(partial)
            continue
        if child.kind is not EdgeKind.RELATION:
            continue
        try:
            contents(plan, child, op.position)
        except ContentsUnknownError as e:
            notes.append(f"starts with the changes after its start: {e}")
            continue
        seeded.add(i)
    return frozenset(seeded), notes


def history_of(plan: GlobalPlan, stream: PlanNode, consumer: PlanNode,
               ) -> tuple[ScanOperator, int] | None:
    """The scan of ``stream`` and how far back before its position a new ``consumer`` of
    its arrivals (``Slice.arrivals``) starts from the events it holds
    (``ScanOperator.history``): a sliced aggregate over a window that already runs
    (``computes``) from the window's reach when the scan kept it, otherwise (and an interval
    join or an OVER window always) from the events that arrived ahead of the watermark,
    which the consumer would never see as arrivals. A new time window that a running sliced
    aggregate computes from panes (so there is no window operator to share) starts from the
    window's reach, which the scan keeps for that aggregate: its elements still live at the
    position, so a query added later over the same window starts complete, as it would over
    a shared window operator.
    """
    scan = plan.ops[stream]
    position = scan.position
    if position is None or not isinstance(scan, ScanOperator):
        return None
    if isinstance(consumer, Window):
        reach = window_reach(consumer.spec)
        known = computes(plan, consumer, consumer) or scan.retains(reach)
        return (scan, reach) if (known and reach is not None
                                 and scan.covers(position, reach)) else None
    if not isinstance(consumer, SlicedAggregate | IntervalJoin | OverAggregate):
        return None
    reach = None
    if isinstance(consumer, SlicedAggregate):
        reach = window_reach(consumer.window.spec)
        if not (computes(plan, consumer.window, consumer) or scan.retains(reach)):
            reach = None
    return (scan, reach) if reach is not None and scan.covers(position, reach) else (scan, 0)


def partial_windows_note(plan: GlobalPlan, stream: PlanNode, consumer: PlanNode | None,
                         found: tuple[ScanOperator, int] | None) -> str | None:
    """The log's note for a time window that starts over a stream without the events
    before its start: its windows that began before hold only the events from then on.
    """
    if isinstance(consumer, SlicedAggregate):
        consumer = consumer.window
    if not isinstance(consumer, Window) or window_reach(consumer.spec) is None:
        return None
    scan = plan.ops[stream]
    if (not isinstance(scan, ScanOperator) or scan.position in (None, TIME_MIN)
            or (found is not None and found[1] > 0)):
        return None
    at = show_instant(scan.position, stream.time_kind)
    return (f"its window {consumer.label().removeprefix('Window ')} starts at {at}, the "
            "stream's watermark: the windows that began before hold only the events from "
            "then on (declare the stream WITH (retain = '<its window's length>') to start "
            "complete)")


def want_history(plan: GlobalPlan, node: PlanNode) -> None:
    """A sliced aggregate's window keeps no elements: its stream keeps the recent events
    for it, for a window added later to start from (``ScanOperator.history``).
    """
    reach = window_reach(node.window.spec) if isinstance(node, SlicedAggregate) else None
    scan = plan.ops.get(node.children[0]) if reach else None
    if isinstance(scan, ScanOperator) and reach:
        scan.want_history(reach)


def computes(plan: GlobalPlan, window: Window, consumer: PlanNode) -> bool:
    """Whether ``window``'s relation already runs for someone other than ``consumer``: as a
    window operator, or as the panes of a sliced aggregate that has stepped (a family
    member's through its family's operator). A window no one computes yet is a new
    relation, so a new consumer of it sees only the events after its start, as every query
    added with it in the same cycle does.
    """
    for node, op in plan.ops.items():
        if node == consumer or not op.has_run:
            continue
        if node == window or (isinstance(node, SlicedAggregate) and node.window == window):
            return True
    return False


def starts(plan: GlobalPlan, consumers: Iterable[tuple[Operator, tuple[PlanNode, ...]]],
           nodes: frozenset[PlanNode] | None = None) -> CycleStarts:
    """Contents for every seeded input of ``consumers`` (operators and the nodes they read)
    and for every rebuilt family among ``nodes``, taken before any operator steps this
    cycle.
    """
    families: dict[int, Start] = {}
    for family in plan.families.all():
        base = family.seeded_from()
        if base is None or (nodes is not None and not set(family.members) & nodes):
            continue
        position = plan.ops[base].position
        if position is not None:
            try:
                df = contents(plan, base, position)
            except ContentsUnknownError:  # a new family over an UNBOUNDED window: it
                df = None  # starts from the changes after its start (``Families.member``)
            families[id(family)] = Start(None if df is None else plan.rt.cache_for_cycle(df),
                                         position)
    out: dict[tuple[int, int], Start] = {}
    for op, children in consumers:
        for i in op.progress.waiting:
            child = children[i]
            position = plan.ops[child].position
            assert position is not None
            if child.kind is EdgeKind.STREAM:  # a window's events (see ``seedable``)
                found = history_of(plan, child, op.node)
                if found is None:
                    continue
                df = found[0].history(position, found[1])
                if df is not None and isinstance(op.node, Window):
                    df = df.where(col(T) < position)  # later ones come on its edge
            else:
                df = contents(plan, child, position)
            out[(id(op), i)] = Start(None if df is None else plan.rt.cache_for_cycle(df),
                                     position)
    return CycleStarts(out, families)
