"""The records of many stream queries over one edge, from one projection.

Fifty dashboards filtering one stream (``SELECT ... FROM s WHERE v > 50``, ``... WHERE
v > 52``, ...) each cost a filter, a projection, a formatter and a branch of the commit's
union: a dozen calls into the JVM per query and per cycle, before Spark runs anything. A
query whose root is reached from a stream edge through Filter and Project steps only
(``find_stream_tail``) has records that are a pure function of each row of that edge: here
every such query over one edge is composed into one expression over the edge's columns,
and all of them come out of one ``inline(filter(array(...)))`` over it, tagged with the
query's id for the commit (``TaggedRecords``):

    edge (v, _t)       query a: WHERE v > 1      query b: SELECT v * 2 AS w WHERE v < 3
    (2, 10)            a: (2, 10, 10, I)         b: (4, 10, 10, I)
    (5, 11)            a: (5, 11, 11, I)         -

A query's steps are the same SQL its operators would run, substituted into one another
(``fused_outputs.substitute``); each filter guards the values above it (``CASE WHEN``), so
a projection is never evaluated on a row a filter below it dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from sparkcq.model.columns import OP, TE, TS, T
from sparkcq.plan.nodes import EdgeKind, Filter, PlanNode, Project
from sparkcq.runtime.frames import TaggedRecords, project, q, sql_literal
from sparkcq.runtime.fused_outputs import compose_steps

#: the commit ids of streamed queries' records: apart from every other part of the commit
STREAMED_SID_BASE = -(1 << 20)

Tail = TypeVar("Tail")


@dataclass(frozen=True)
class StreamTail:
    """A stream query's stateless steps above the stream edge it reads, bottom up."""

    base: PlanNode
    steps: tuple[Filter | Project, ...]


def find_stream_tail(root: PlanNode) -> StreamTail | None:
    """The steps from a stream edge up to a stream query's root, if only Filter/Project."""
    steps: list[Filter | Project] = []
    node = root
    while isinstance(node, Filter | Project) and node.kind is EdgeKind.STREAM:
        steps.append(node)
        node = node.child
    if node.kind is not EdgeKind.STREAM:
        return None
    return StreamTail(node, tuple(reversed(steps)))


@dataclass(frozen=True)
class FusedQuery(Generic[Tail]):
    """A query whose records come out of one generator with others', tagged by query:
    over its stream edge (``StreamTail``) or its sliced family (``fused_snapshots.py``).
    """

    name: str
    tail: Tail
    schema: StructType  # its records' user columns
    timestamps: bool  # its ``_ts`` / ``_te`` are timestamps


StreamedQuery = FusedQuery[StreamTail]


def record_sql(query: StreamedQuery, edge: StructType, sid: int, column: str) -> str:
    """The query's record from one row of its edge (columns of ``edge``), or NULL."""
    mapping = {f.name: q(f.name) for f in edge.fields}
    conds = ["true"]
    mapping = compose_steps(query.tail.steps, mapping, conds)
    t = f"timestamp_micros({q(T)})" if query.timestamps else q(T)
    fields = [f"{sql_literal(f.name)}, {mapping[f.name]}" for f in query.schema.fields]
    fields += [f"{sql_literal(TS)}, {t}", f"{sql_literal(TE)}, {t}", f"{sql_literal(OP)}, 'I'"]
    record = (f"named_struct('_sid', CAST({sid} AS BIGINT), "
              f"{sql_literal(column)}, named_struct({', '.join(fields)}))")
    return f"CASE WHEN {' AND '.join(conds)} THEN {record} END"


def shape_columns(queries: Iterable[tuple[str, StructType, bool]]) -> dict[str, str]:
    """The commit column of the records of each query (name, schema, timestamps): one
    per output schema (``_e0``, ...).
    """
    shapes: dict[tuple[str, bool], str] = {}
    return {name: shapes.setdefault((schema.json(), timestamps), f"_e{len(shapes)}")
            for name, schema, timestamps in queries}


def stream_records(edge: DataFrame, queries: list[StreamedQuery], sids: dict[str, int],
                   columns: dict[str, str]) -> list[TaggedRecords]:
    """The records of ``queries`` (all over ``edge``): one projection per output schema,
    each record tagged with its query's commit id (``sids``) in its shape's column.
    """
    by_column: dict[str, list[StreamedQuery]] = {}
    for s in queries:
        by_column.setdefault(columns[s.name], []).append(s)
    out = []
    for column, group in by_column.items():
        parts = [record_sql(s, edge.schema, sids[s.name], column) for s in group]
        text = f"inline(filter(array({', '.join(parts)}), x -> x IS NOT NULL))"
        out.append(TaggedRecords(project(edge, text),
                                 {s.name: (sids[s.name], column) for s in group}))
    return out
