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

from sparkcq.language.sql.statements import OutputForm
from sparkcq.model.columns import FROM, OP, TE, TO, TS
from sparkcq.plan.nodes import Filter, PlanNode, Project, SlicedAggregate, ToStream
from sparkcq.runtime.frames import TaggedRecords, bound_sql, q
from sparkcq.runtime.fused_outputs import compose_steps
from sparkcq.runtime.fused_streams import FusedQuery, sql_literal
from sparkcq.runtime.sliced_family import SlicedFamily, SlicedMemberOperator, SlicedRun


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


def snapshot_sql(query: SnapshotQuery, family: SlicedFamily, lo: int, hi: int,
                 sid: int) -> str:
    """The query's row values and evaluation instants from one family segment, or NULL:
    as ``rstream_segments`` over the member's segments through the query's steps.
    """
    member = query.tail.member.node
    assert isinstance(member, SlicedAggregate) and query.tail.root.period is not None
    mapping = {out: q(src) for out, src in family.members[member]}
    conds: list[str] = []
    mapping = compose_steps(query.tail.steps, mapping, conds)
    period = query.tail.root.period
    start = f"greatest({q(FROM)}, {bound_sql(lo)})"
    end = f"least(coalesce({q(TO)}, {bound_sql(hi)}), {bound_sql(hi)})"
    first = f"({start} + pmod(-{start}, {period}))"
    conds.append(f"{first} < {end}")
    values = ", ".join(f"{sql_literal(f.name)}, {mapping[f.name]}"
                       for f in query.schema.fields)
    record = (f"named_struct('_sid', CAST({sid} AS BIGINT), '_v', named_struct({values}), "
              f"'_at', sequence({first}, {end} - 1, {period}))")
    return f"CASE WHEN {' AND '.join(conds)} THEN {record} END"


def snapshot_records(family: SlicedFamily, run: SlicedRun | None,
                     queries: Iterable[SnapshotQuery], sids: dict[str, int],
                     columns: dict[str, str]) -> list[TaggedRecords]:
    """The records of ``queries`` (all over ``family``) this cycle, from the family's
    evaluation ``run``: one generator per output schema.
    """
    if run is None or run.segments.segments is None:
        return []
    segments: DataFrame = run.segments.segments
    lo, hi = run.segments.lo, run.segments.hi
    by_column: dict[str, list[SnapshotQuery]] = {}
    for s in queries:
        by_column.setdefault(columns[s.name], []).append(s)
    out = []
    for column, group in by_column.items():
        parts = [snapshot_sql(s, family, lo, hi, sids[s.name]) for s in group]
        rows = segments.selectExpr(
            f"inline(filter(array({', '.join(parts)}), x -> x IS NOT NULL))")
        at = "timestamp_micros(`_t`)" if group[0].timestamps else "`_t`"
        fields = [f"{sql_literal(f.name)}, `_v`.{q(f.name)}" for f in group[0].schema.fields]
        fields += [f"{sql_literal(TS)}, {at}", f"{sql_literal(TE)}, {at}",
                   f"{sql_literal(OP)}, 'I'"]
        records = rows.selectExpr("_sid", "_v", "explode(_at) AS _t").selectExpr(
            "_sid", f"named_struct({', '.join(fields)}) AS {q(column)}")
        out.append(TaggedRecords(records, {s.name: (sids[s.name], column) for s in group}))
    return out
