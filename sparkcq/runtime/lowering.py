"""Pick the physical operator for each logical plan node."""

from __future__ import annotations

from sparkcq.errors import PlanError
from sparkcq.plan.nodes import (
    Aggregate,
    AlignedAggregate,
    AlignedJoin,
    AlignedTopN,
    ChunkJoin,
    CountCutSpec,
    Expand,
    Filter,
    InstantAggregate,
    IntervalJoin,
    Join,
    KeyCutSpec,
    KeyedSpec,
    OverAggregate,
    PlanNode,
    Project,
    Quarantine,
    RowsSpec,
    SessionSpec,
    SlicedAggregate,
    StreamScan,
    TableFunction,
    TableScan,
    TopCandidates,
    TopN,
    ToStream,
    Union,
    Window,
)
from sparkcq.runtime.frames import Runtime
from sparkcq.runtime.operators.aggregate import AggregateOperator
from sparkcq.runtime.operators.aligned_aggregate import AlignedAggregateOperator
from sparkcq.runtime.operators.aligned_join import AlignedJoinOperator
from sparkcq.runtime.operators.aligned_top_n import AlignedTopNOperator
from sparkcq.runtime.operators.base import Operator
from sparkcq.runtime.operators.chunk_cut import ChunkCutOperator
from sparkcq.runtime.operators.chunk_join import ChunkJoinOperator
from sparkcq.runtime.operators.instant_aggregate import InstantAggregateOperator
from sparkcq.runtime.operators.interval_join import IntervalJoinOperator
from sparkcq.runtime.operators.join import JoinOperator
from sparkcq.runtime.operators.outputs import ToStreamOperator
from sparkcq.runtime.operators.over_aggregate import OverAggregateOperator
from sparkcq.runtime.operators.quarantine import QuarantineOperator
from sparkcq.runtime.operators.scan import ScanOperator
from sparkcq.runtime.operators.stateless import ExpandOperator, FilterOperator, ProjectOperator
from sparkcq.runtime.operators.table import TableOperator, TableRows
from sparkcq.runtime.operators.table_function import TableFunctionOperator
from sparkcq.runtime.operators.top_candidates import TopCandidatesOperator
from sparkcq.runtime.operators.top_n import TopNOperator
from sparkcq.runtime.operators.union import UnionOperator
from sparkcq.runtime.operators.window import (
    KeyedWindowOperator,
    RowsWindowOperator,
    SessionWindowOperator,
    TimeWindowOperator,
)
from sparkcq.runtime.sliced_family import sliced_operator


def lower(node: PlanNode, rt: Runtime, *, lateness: int = 0,
          table: TableRows | None = None) -> Operator:
    """The operator that executes ``node`` (a table's, serving ``table``)."""
    if isinstance(node, StreamScan):
        return ScanOperator(node, rt, lateness)
    if isinstance(node, TableScan):
        assert table is not None
        return TableOperator(node, rt, table)
    if isinstance(node, Window):
        if isinstance(node.spec, RowsSpec):
            return RowsWindowOperator(node, rt)
        if isinstance(node.spec, KeyedSpec):
            return KeyedWindowOperator(node, rt)
        if isinstance(node.spec, CountCutSpec | KeyCutSpec):
            return ChunkCutOperator(node, rt)
        if isinstance(node.spec, SessionSpec):
            return SessionWindowOperator(node, rt)
        return TimeWindowOperator(node, rt)
    if isinstance(node, Filter):
        return FilterOperator(node, rt)
    if isinstance(node, Quarantine):
        return QuarantineOperator(node, rt)
    if isinstance(node, TableFunction):
        return TableFunctionOperator(node, rt)
    if isinstance(node, Project):
        return ProjectOperator(node, rt)
    if isinstance(node, Expand):
        return ExpandOperator(node, rt)
    if isinstance(node, Join):
        return JoinOperator(node, rt)
    if isinstance(node, IntervalJoin):
        return IntervalJoinOperator(node, rt)
    if isinstance(node, ChunkJoin):
        return ChunkJoinOperator(node, rt)
    if isinstance(node, AlignedJoin):
        return AlignedJoinOperator(node, rt)
    if isinstance(node, AlignedAggregate):
        return AlignedAggregateOperator(node, rt)
    if isinstance(node, AlignedTopN):
        return AlignedTopNOperator(node, rt)
    if isinstance(node, Aggregate):
        return AggregateOperator(node, rt)
    if isinstance(node, SlicedAggregate):
        return sliced_operator(node, rt)
    if isinstance(node, OverAggregate):
        return OverAggregateOperator(node, rt)
    if isinstance(node, InstantAggregate):
        return InstantAggregateOperator(node, rt)
    if isinstance(node, Union):
        return UnionOperator(node, rt)
    if isinstance(node, TopN):
        return TopNOperator(node, rt)
    if isinstance(node, TopCandidates):
        return TopCandidatesOperator(node, rt)
    if isinstance(node, ToStream):
        return ToStreamOperator(node, rt)
    msg = f"no physical operator for {type(node).__name__}"
    raise PlanError(msg)
