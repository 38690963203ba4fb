"""The sink changes of all queries over one aggregate family, from one projection.

After fusion, fifty queries over one family still differ in a few stateless steps (HAVING,
the SELECT list) before their rows reach the shared interval formatter. Computing each as
its own branch of a union makes every task of that stage carry all fifty plans; here each
query's steps are composed into expressions over the family's per-(group, instant) result
and all queries' encoded changes come out of one ``inline(array(...))`` over it (one per
output schema: an array holds records of one type): one scan,
rows only where a query's own values changed and its filters hold.

A query qualifies when its root is reached from a family member through Filter and Project
nodes only (``find_tail``); others keep their own path to the formatter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import sqlglot
import sqlglot.expressions as exp
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from sparkcq.model.columns import FROM, QID, TO, WINDOW_TAG, D, N, T
from sparkcq.model.time import TIME_MIN
from sparkcq.plan.nodes import Aggregate, Filter, PlanNode, Project, SlicedAggregate
from sparkcq.runtime.frames import bound_sql, project, q, union_by_name
from sparkcq.runtime.fusion import AggregateFamily, FamilyMemberOperator, FamilyRun
from sparkcq.runtime.operators.aggregate import seed_time_sql
from sparkcq.runtime.operators.shared_output import row_column, row_sql
from sparkcq.runtime.sliced_family import SlicedFamily, SlicedMemberOperator, SlicedRun


@dataclass(frozen=True)
class QueryTail:
    """A query's stateless steps above a family member, bottom up."""

    qid: int
    member: FamilyMemberOperator | SlicedMemberOperator
    steps: tuple[Filter | Project, ...]
    schema: StructType


def find_tail(root: PlanNode, ops: Mapping[PlanNode, object], qid: int) -> QueryTail | None:
    """The query's steps from a family member up to its root, if only Filter/Project."""
    steps: list[Filter | Project] = []
    node = root
    while isinstance(node, Filter | Project):
        steps.append(node)
        node = node.child
    op = ops.get(node)
    if not isinstance(op, FamilyMemberOperator | SlicedMemberOperator):
        return None
    return QueryTail(qid, op, tuple(reversed(steps)), root.schema)


def _record(tail: QueryTail, mapping: dict[str, str], conds: list[str], t: str,
            sign: int) -> str:
    """One encoded change of ``tail``'s query (see ``tail_changes_records``), or NULL."""
    mapping = compose_steps(tail.steps, mapping, conds)
    record = (f"named_struct('{QID}', {tail.qid}, '{row_column(tail.schema)}', "
              f"{row_sql(tail.schema, mapping)}, '{T}', {t}, '{D}', CAST({sign} AS BIGINT))")
    return f"CASE WHEN {' AND '.join(conds)} THEN {record} END"


def generated_structs(source: DataFrame, records: dict[str, list[str]]) -> DataFrame:
    """The encoded changes of ``records`` (by row column), generated from ``source``: one
    generator per row column, as one array holds records of one type.
    """
    frames = [project(source, f"inline(filter(array({', '.join(parts)}), x -> x IS NOT NULL))")
              for parts in records.values()]
    return frames[0] if len(frames) == 1 else union_by_name(frames, allow_missing=True)


def sliced_tail_changes(family: SlicedFamily, run: SlicedRun | None,
                        tails: list[QueryTail]) -> DataFrame | None:
    """All ``tails``' encoded changes of this cycle from a sliced family's segments (its
    ``run``): +1 where a segment starts in the cycle, -1 where it ends (as
    ``changes_sql``), where the query's filters hold.
    """
    if run is None or run.segments.segments is None:
        return None
    lo, hi = run.segments.lo, run.segments.hi
    parts: dict[str, list[str]] = {}
    for tail in tails:
        member = tail.member.node
        assert isinstance(member, SlicedAggregate)
        mapping = {out: q(src) for out, src in family.members[member]}
        fresh = member in family.fresh and lo != TIME_MIN
        low, high = bound_sql(lo), bound_sql(hi)
        start = f"greatest({q(FROM)}, {low})" if fresh else q(FROM)
        tag = family.window_tag(member)
        own = [] if tag is None else [f"{q(WINDOW_TAG)} = {tag}"]
        # a fresh member's segments still open (``TO`` NULL) start in the cycle too
        begins = [*own, f"({q(TO)} IS NULL OR {q(TO)} > {low})" if fresh
                  else f"{q(FROM)} >= {low}"]
        ends = [*own, f"{q(TO)} IS NOT NULL", f"{q(TO)} < {high}",
                *([f"{q(TO)} > {low}"] if fresh else [])]
        own_parts = parts.setdefault(row_column(tail.schema), [])
        own_parts.append(_record(tail, mapping, begins, start, 1))
        own_parts.append(_record(tail, mapping, ends, q(TO), -1))
    return generated_structs(run.segments.segments, parts)


def compose_steps(steps: tuple[Filter | Project, ...], mapping: dict[str, str],
                  conds: list[str]) -> dict[str, str]:
    """Filter and Project steps (bottom up) composed over the columns ``mapping`` names:
    each filter's condition is appended to ``conds``, and the returned mapping gives the
    top step's columns as expressions over the bottom's.
    """
    for step in steps:
        if isinstance(step, Filter):
            conds.append(f"coalesce({substitute(step.predicate.sql, mapping)}, false)")
        else:
            mapping = {name: substitute(e.sql, mapping) for name, e in step.exprs}
    return mapping


def substitute(sql: str, mapping: dict[str, str]) -> str:
    """``sql`` with each column reference replaced by its expression in ``mapping`` (a
    path into a struct column, ``s.median``, starts from the column's expression).

    Remembered: a query's steps and its family's columns are the same every cycle, and
    parsing them again cost fifty queries about 30 ms of each cycle.
    """
    return _substitute(sql, tuple(mapping.items()))


@lru_cache(maxsize=8192)
def _substitute(sql: str, items: tuple[tuple[str, str], ...]) -> str:
    mapping = dict(items)
    tree = sqlglot.parse_one(sql, read="spark")

    def replace(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            head, *fields = [p.name for p in node.parts]
            if head in mapping:
                value = exp.Paren(this=sqlglot.parse_one(mapping[head], read="spark"))
                if not fields:
                    return value
                return exp.Dot.build([value, *[exp.to_identifier(f, quoted=True)
                                               for f in fields]])
        return node

    return tree.transform(replace).sql(dialect="spark")


def tail_changes_records(family: AggregateFamily, seed_at: int | None,
                         tails: list[QueryTail]) -> dict[str, list[str]]:
    """The records (query, row, instant, change) of ``tails``' changes, by row column: each
    a struct expression, or NULL where the query's row did not change.
    """
    assert family.op is not None
    parts: dict[str, list[str]] = {}
    for tail in tails:
        member = tail.member.node
        assert isinstance(member, Aggregate)
        columns = family.members[member]
        keys = set(family.op.keys)
        changed = family.op.changed_sql([src for _out, src in columns if src not in keys])
        t, when_time = seed_time_sql(seed_at, member in family.fresh)
        for sign, present, prefix in ((-1, "`_pn` > 0", "_p"), (1, f"{q(N)} > 0", "")):
            mapping = {out: q(src) if src in keys else q(prefix + src) for out, src in columns}
            conds = [f"({changed})", present]
            if when_time:
                conds.append(when_time.removeprefix(" AND "))
            parts.setdefault(row_column(tail.schema), []).append(
                _record(tail, mapping, conds, t, sign))
    return parts


def tail_changes(family: AggregateFamily, run: FamilyRun,
                 tails: list[QueryTail]) -> DataFrame | None:
    """All ``tails``' encoded changes of this cycle from the family's evaluation ``run``."""
    if run.run.df is None:
        return None
    return generated_structs(run.run.df, tail_changes_records(family, run.seed_at, tails))
