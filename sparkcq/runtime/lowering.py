"""Pick the physical operator for each logical plan node."""

from __future__ import annotations

from pyspark.sql import DataFrame

from sparkcq.errors import PlanError
from sparkcq.model.time import TIME_MAX, TIME_MIN
from sparkcq.plan.nodes import (
    Aggregate,
    CountCutSpec,
    Filter,
    IntervalJoin,
    Join,
    KeyCutSpec,
    PlanNode,
    Project,
    RowsSpec,
    SlicedAggregate,
    StreamScan,
    TableScan,
    ToStream,
    Union,
    Window,
)
from sparkcq.runtime.frames import Runtime, Slice
from sparkcq.runtime.operators.aggregate import AggregateOperator
from sparkcq.runtime.operators.base import Operator
from sparkcq.runtime.operators.chunk_cut import ChunkCutOperator
from sparkcq.runtime.operators.interval_join import IntervalJoinOperator
from sparkcq.runtime.operators.join import JoinOperator
from sparkcq.runtime.operators.outputs import ToStreamOperator
from sparkcq.runtime.operators.scan import ScanOperator
from sparkcq.runtime.operators.stateless import FilterOperator, ProjectOperator
from sparkcq.runtime.operators.union import UnionOperator
from sparkcq.runtime.operators.window import RowsWindowOperator, TimeWindowOperator
from sparkcq.runtime.sliced_family import sliced_operator


class TableOperator(Operator):
    """A static table: the same cached DataFrame every cycle.

    ``cache=False`` for a frame that is already a materialised snapshot (a PostgreSQL
    table's local checkpoint, which the catalog owns): caching it again would hold its rows
    twice, and unpersisting it would not free them.
    """

    def __init__(self, node: TableScan, rt: Runtime, df: DataFrame, cache: bool = True):
        super().__init__(node, rt)
        self.cache = cache
        self.df = df.persist() if cache else df

    def step(self, inputs: list[Slice]) -> Slice:  # noqa: D102
        return Slice(self.df, TIME_MIN, TIME_MAX)

    def release(self) -> None:  # noqa: D102
        if self.cache:
            self.df.unpersist()


def lower(node: PlanNode, rt: Runtime, *, lateness: int = 0,
          table: DataFrame | None = None, cache: bool = True) -> Operator:
    """The operator that executes ``node`` (``table``, ``cache``: a table's frame)."""
    if isinstance(node, StreamScan):
        return ScanOperator(node, rt, lateness)
    if isinstance(node, TableScan):
        assert table is not None
        return TableOperator(node, rt, table, cache)
    if isinstance(node, Window):
        if isinstance(node.spec, RowsSpec):
            return RowsWindowOperator(node, rt)
        if isinstance(node.spec, CountCutSpec | KeyCutSpec):
            return ChunkCutOperator(node, rt)
        return TimeWindowOperator(node, rt)
    if isinstance(node, Filter):
        return FilterOperator(node, rt)
    if isinstance(node, Project):
        return ProjectOperator(node, rt)
    if isinstance(node, Join):
        return JoinOperator(node, rt)
    if isinstance(node, IntervalJoin):
        return IntervalJoinOperator(node, rt)
    if isinstance(node, Aggregate):
        return AggregateOperator(node, rt)
    if isinstance(node, SlicedAggregate):
        return sliced_operator(node, rt)
    if isinstance(node, Union):
        return UnionOperator(node, rt)
    if isinstance(node, ToStream):
        return ToStreamOperator(node, rt)
    msg = f"no physical operator for {type(node).__name__}"
    raise PlanError(msg)
