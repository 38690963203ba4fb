"""The RSTREAM records of many queries over one sliced family, from its segments.

``RSTREAM SELECT k, max(v) FROM s [CUT ON t BY 10] GROUP BY k`` evaluates the snapshot at
every multiple of the period: from a sliced aggregate's segments (each row's value over
``[_from, _to)``) that is ``explode(sequence(first multiple, end - 1, period))`` per
segment (``ToStreamOperator.rstream_segments``), with no state. Twenty-five such dashboards
over five window sizes each still cost a member projection, their steps, the RSTREAM, a
formatter and a branch of the commit's union, built one by one on the driver. Here every
such query over one family (``find_snapshot_tail``: RSTREAM with a period, above a family
member through Filter and Project steps only) is one expression over the family's
segments, and all of them come out of one generator over them, tagged with the query's id
for the commit:

    family segments (_k0, _c1, _from, _to)   query a: max every 10    query b: HAVING _c1 > 5
    ('x', 7, 0, 20)                          a: ('x', 7) at 0, 10     b: ('x', 7) at 0, 10
    ('y', 3, 10, 20)                         a: ('y', 3) at 10        -
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from sparkcq.language.sql.statements import OutputForm
from sparkcq.model.columns import FROM, OP, TE, TO, TS, WINDOW_TAG
from sparkcq.plan.nodes import Filter, PlanNode, Project, SlicedAggregate, ToStream
from sparkcq.runtime.frames import TaggedRecords, bound_sql, project, q, sql_literal
from sparkcq.runtime.fused_outputs import compose_steps
from sparkcq.runtime.fused_streams import FusedQuery
from sparkcq.runtime.sliced_family import SlicedFamily, SlicedMemberOperator, SlicedRun

AT = "`_sparkcq_at`"  # the evaluation instant, a lambda variable no column name shadows


@dataclass(frozen=True)
class SnapshotTail:
    """An RSTREAM query's steps from a sliced family member up to its RSTREAM, bottom up."""

    root: ToStream
    member: SlicedMemberOperator
    steps: tuple[Filter | Project, ...]

    @property
    def nodes(self) -> tuple[PlanNode, ...]:
        """The nodes whose output the fused records replace."""
        return (self.member.node, *self.steps, self.root)


def find_snapshot_tail(root: PlanNode, ops: Mapping[PlanNode, object]) -> SnapshotTail | None:
    """The tail of an RSTREAM query with a period over a sliced family member, if its
    steps in between are Filter and Project only.
    """
    if not (isinstance(root, ToStream) and root.form is OutputForm.RSTREAM
            and root.period is not None):
        return None
    steps: list[Filter | Project] = []
    node = root.child
    while isinstance(node, Filter | Project):
        steps.append(node)
        node = node.child
    op = ops.get(node)
    if not isinstance(op, SlicedMemberOperator):
        return None
    return SnapshotTail(root, op, tuple(reversed(steps)))


#: an RSTREAM query whose records come out of its family's one generator
SnapshotQuery = FusedQuery[SnapshotTail]


# a segment's part of the cycle's slice, computed once for all the family's queries: each
# bound is written where it is used, and Spark analyses every copy
START, END = "_sparkcq_start", "_sparkcq_end"


def snapshot_sql(query: SnapshotQuery, family: SlicedFamily,
                 sid: int, own: str, nulls: Mapping[str, str]) -> str:
    """The query's records from one family segment, an array with one per evaluation
    instant (as ``rstream_segments`` over the member's segments through the query's steps),
    or NULL; each record a struct of ``_sid`` and one field per commit column of ``nulls``
    (column -> the typed NULL of its records), the query's ``own`` one filled. The segment's
    part of the slice is in columns ``START`` and ``END`` (``snapshot_records``).
    """
    member = query.tail.member.node
    assert isinstance(member, SlicedAggregate) and query.tail.root.period is not None
    mapping = {out: q(src) for out, src in family.members[member]}
    tag = family.window_tag(member)
    conds: list[str] = [] if tag is None else [f"{q(WINDOW_TAG)} = {tag}"]
    mapping = compose_steps(query.tail.steps, mapping, conds)
    period = query.tail.root.period
    start, end = q(START), q(END)
    first = f"({start} + pmod(-{start}, {period}))"
    conds.append(f"{first} < {end}")
    at = f"timestamp_micros({AT})" if query.timestamps else AT
    fields = [f"{sql_literal(f.name)}, {mapping[f.name]}" for f in query.schema.fields]
    fields += [f"{sql_literal(TS)}, {at}", f"{sql_literal(TE)}, {at}", f"{sql_literal(OP)}, 'I'"]
    columns = ", ".join(
        f"{sql_literal(column)}, "
        + (f"named_struct({', '.join(fields)})" if column == own else null)
        for column, null in nulls.items())
    record = f"named_struct('_sid', CAST({sid} AS BIGINT), {columns})"
    return (f"CASE WHEN {' AND '.join(conds)} THEN "
            f"transform(sequence({first}, {end} - 1, {period}), {AT} -> {record}) END")


def snapshot_records(family: SlicedFamily, run: SlicedRun | None,
                     queries: Iterable[SnapshotQuery], sids: dict[str, int],
                     columns: dict[str, str]) -> list[TaggedRecords]:
    """The records of ``queries`` (all over ``family``) this cycle, from the family's
    evaluation ``run``: one generator, each query's records in its output schema's column.
    """
    if run is None or run.segments.segments is None:
        return []
    segments: DataFrame = run.segments.segments
    lo, hi = run.segments.lo, run.segments.hi
    group = list(queries)
    nulls: dict[str, str] = {}
    for s in group:
        nulls.setdefault(columns[s.name], typed_null(record_schema(s)))
    parts = [snapshot_sql(s, family, sids[s.name], columns[s.name], nulls) for s in group]
    segments = project(
        segments,
        "*", f"greatest({q(FROM)}, {bound_sql(lo)}) AS {q(START)}",
        f"least(coalesce({q(TO)}, {bound_sql(hi)}), {bound_sql(hi)}) AS {q(END)}")
    rows = project(
        segments,
        f"inline(flatten(filter(array({', '.join(parts)}), x -> x IS NOT NULL)))")
    return [TaggedRecords(rows, {s.name: (sids[s.name], columns[s.name]) for s in group})]


def record_schema(query: SnapshotQuery) -> StructType:
    """The schema of the query's records: its columns, ``_ts``, ``_te`` and ``_op``."""
    at = TimestampType() if query.timestamps else LongType()
    return StructType([*query.schema.fields, StructField(TS, at), StructField(TE, at),
                       StructField(OP, StringType())])


_TYPED_NULLS: dict[str, str] = {}


def typed_null(schema: StructType) -> str:
    """SQL for a NULL struct of ``schema`` (memoised: the DDL is a call into the JVM)."""
    key = schema.json()
    if key not in _TYPED_NULLS:
        _TYPED_NULLS[key] = f"CAST(NULL AS STRUCT<{schema.toDDL()}>)"
    return _TYPED_NULLS[key]
