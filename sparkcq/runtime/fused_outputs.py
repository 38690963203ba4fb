"""The sink changes of all queries over one aggregate family, from one projection.

After fusion, fifty queries over one family still differ in a few stateless steps (HAVING,
the SELECT list) before their rows reach the shared interval formatter. Computing each as
its own branch of a union makes every task of that stage carry all fifty plans; here each
query's steps are composed into expressions over the family's per-(group, instant) result
and all queries' encoded changes come out of one ``inline(array(...))`` over it: one scan,
rows only where a query's own values changed and its filters hold.

A query qualifies when its root is reached from a family member through Filter and Project
nodes only (``find_tail``); others keep their own path to the formatter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sqlglot
import sqlglot.expressions as exp
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from sparkcq.plan.nodes import Aggregate, Filter, PlanNode, Project
from sparkcq.runtime.frames import D, T, q
from sparkcq.runtime.fusion import AggregateFamily, FamilyMemberOperator
from sparkcq.runtime.operators.aggregate import seed_time_sql
from sparkcq.runtime.operators.shared_output import QID, ROW, json_options_sql, normalised_sql


@dataclass(frozen=True)
class QueryTail:
    """A query's stateless steps above a family member, bottom up."""

    qid: int
    member: FamilyMemberOperator
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
    if not isinstance(op, FamilyMemberOperator):
        return None
    return QueryTail(qid, op, tuple(reversed(steps)), root.schema)


def substitute(sql: str, mapping: dict[str, str]) -> str:
    """``sql`` with each column reference replaced by its expression in ``mapping``."""
    tree = sqlglot.parse_one(sql, read="spark")

    def replace(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.table and node.name in mapping:
            return exp.Paren(this=sqlglot.parse_one(mapping[node.name], read="spark"))
        return node

    return tree.transform(replace).sql(dialect="spark")


def tail_changes_sql(family: AggregateFamily, tails: list[QueryTail]) -> str:
    """One generator expression producing (query, row text, instant, change) for ``tails``."""
    assert family.op is not None
    parts = []
    options = json_options_sql()
    for tail in tails:
        member = tail.member.node
        assert isinstance(member, Aggregate)
        columns = family.members[member]
        keys = set(family.op.keys)
        changed = family.op.changed_sql([src for _out, src in columns if src not in keys])
        t, when_time = seed_time_sql(family.seed_at, member in family.fresh)
        for sign, present, prefix in ((-1, "`_pn` > 0", "_p"), (1, "`_n` > 0", "")):
            mapping = {out: q(src) if src in keys else q(prefix + src) for out, src in columns}
            conds = [f"({changed})", present]
            for step in tail.steps:
                if isinstance(step, Filter):
                    conds.append(f"coalesce({substitute(step.predicate, mapping)}, false)")
                else:
                    mapping = {name: substitute(e, mapping) for name, e in step.exprs}
            row = ", ".join(f"{normalised_sql(mapping[f.name], f.dataType)} AS {q(f.name)}"
                            for f in tail.schema.fields)
            record = (f"named_struct('{QID}', {tail.qid}, '{ROW}', "
                      f"to_json(struct({row}), {options}), '{T}', {t}, "
                      f"'{D}', CAST({sign} AS BIGINT))")
            parts.append(f"CASE WHEN {' AND '.join(conds)}{when_time} THEN {record} END")
    return f"inline(filter(array({', '.join(parts)}), x -> x IS NOT NULL))"


def tail_changes(family: AggregateFamily, run: DataFrame, tails: list[QueryTail]) -> DataFrame:
    """All ``tails``' encoded changes of this cycle from the family's result ``run``."""
    return run.selectExpr(tail_changes_sql(family, tails))
