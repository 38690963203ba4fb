"""A query that reads tables only, evaluated once (``INSERT INTO t SELECT ... FROM tables``).

Its plan is static (table-kind nodes: scans, filters, projections, joins and unions of
tables), so each operator maps its inputs' rows to its own, as the running plan's table
nodes do (``seeding.table_rows``); here the operators are built for this one evaluation,
read, and freed.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from sparkcq.plan.nodes import EdgeKind, PlanNode, TableScan
from sparkcq.runtime.frames import Runtime, Slice
from sparkcq.runtime.lowering import lower
from sparkcq.runtime.operators.base import CycleContext, Operator
from sparkcq.runtime.operators.table import TableRows


def table_query_rows(plan: PlanNode, rt: Runtime, tables: Mapping[str, TableRows]) -> pa.Table:
    """The rows of ``plan`` (table-kind) over the catalog's ``tables`` (by lower-case name)."""
    assert plan.kind is EdgeKind.TABLE, plan
    built: list[Operator] = []

    def rows(node: PlanNode) -> Slice:
        table = tables[node.name.lower()] if isinstance(node, TableScan) else None
        op = lower(node, rt, table=table)
        built.append(op)
        inputs = [rows(c) for c in node.children]
        return op.step(inputs, CycleContext())

    try:
        out = rows(plan).df
        assert out is not None
        return out.toArrow()
    finally:
        for op in built:
            op.release()
