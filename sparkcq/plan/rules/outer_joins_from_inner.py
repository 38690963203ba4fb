"""Rule: an outer, semi or anti join of two relations is the inner join and, for each kept
side, that side's rows counted against their pairs: a row is unmatched at an instant
exactly when it has copies then and no pair (DESIGN 2.1, snapshot by snapshot).

Before::

    Join LEFT ON `a__k` = `b__k`
      (left)
      (right)

After::

    Union ALL
      Join ON `a__k` = `b__k`                                   the pairs
        (left)
        (right)
      Project `a__k`, `a__v`, CAST(NULL AS STRING) AS b__k, ...  padded with NULLs
        Expand _copies copies
          Project `a__k`, `a__v`, `_copies`
            Filter `_pairs` = 0
              Aggregate count(_copy) AS _copies, count(_pair) AS _pairs BY a__k, a__v
                Union ALL
                  Project `a__k`, `a__v`, 1 AS _copy, NULL AS _pair     each left row
                    (left)
                  Project `a__k`, `a__v`, NULL AS _copy, 1 AS _pair     each pair's left row
                    Join ON `a__k` = `b__k`

A left value v with n copies and m partners at an instant has n copies and n * m pairs
there: it is unmatched where the pairs are 0, and then all n copies are. Every node is an
ordinary relational operator, so the result is exact, final at the slower input's
watermark and the same whatever the cycles: a row appears, vanishes while a partner is
valid and appears again exactly where the snapshots say. The inner join is one node, so
the global plan computes it once for the pairs and for the counts (and the interval-join
rule makes it an ``IntervalJoin`` when both sides are time windows). A semi join keeps the
values with pairs, an anti join those without, each as its copies.

Joins with a table keep their own operator: each change of the relation meets the static
table as Spark's outer, semi or anti join does (``runtime/operators/join.py``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from pyspark.sql.types import LongType, StructField, StructType

from sparkcq.plan.nodes import (
    AggCall,
    Aggregate,
    EdgeKind,
    Expand,
    Filter,
    Join,
    JoinHow,
    PlanNode,
    Project,
    Union,
    transform_up,
)

COPY, PAIR = "_copy", "_pair"  # one per row of a side, one per pair it is in
COPIES, PAIRS = "_copies", "_pairs"  # their counts per value of the side at an instant


def outer_joins_from_inner(plan: PlanNode, *, running: Collection[PlanNode] = ()) -> PlanNode:
    """``plan`` with every outer, semi and anti join of two relations made of inner ones."""
    return transform_up(plan, _rewrite)


def _rewrite(node: PlanNode) -> PlanNode:
    if not isinstance(node, Join) or node.how is JoinHow.INNER:
        return node
    if any(c.kind is EdgeKind.TABLE for c in node.children):
        return node
    inner = replace(node, how=JoinHow.INNER)
    if node.how in (JoinHow.SEMI, JoinHow.ANTI):
        return _values(node.left, inner, 0, f"`{PAIRS}` > 0" if node.how is JoinHow.SEMI
                       else f"`{PAIRS}` = 0")
    parts: list[PlanNode] = [inner]
    for side in (0, 1):
        if node.how.padded(side):
            unmatched = _values(node.children[side], inner, side, f"`{PAIRS}` = 0")
            parts.append(_padded(unmatched, node, side))
    return Union(tuple(parts))


def _values(side: PlanNode, inner: Join, i: int, keep: str) -> PlanNode:
    """The copies of side ``i``'s rows whose pair count satisfies ``keep``."""
    fields = list(side.schema.fields)
    names = [f.name for f in fields]
    tags = [StructField(COPY, LongType()), StructField(PAIR, LongType())]
    own = [(n, _q(n)) for n in names]
    schema = StructType([*fields, *tags])
    rows = Project(side, (*own, (COPY, "CAST(1 AS BIGINT)"), (PAIR, "CAST(NULL AS BIGINT)")),
                   schema)
    pairs = Project(inner, (*own, (COPY, "CAST(NULL AS BIGINT)"), (PAIR, "CAST(1 AS BIGINT)")),
                    schema)
    counts = Aggregate(Union((rows, pairs)), tuple(names),
                       (AggCall("count", COPY, False, COPIES), AggCall("count", PAIR, False, PAIRS)),
                       StructType([*fields, StructField(COPIES, LongType(), False),
                                   StructField(PAIRS, LongType(), False)]))
    kept = Filter(counts, keep)
    return Expand(Project(kept, (*own, (COPIES, _q(COPIES))),
                          StructType([*fields, StructField(COPIES, LongType(), False)])), COPIES)


def _padded(unmatched: PlanNode, join: Join, side: int) -> PlanNode:
    """Side ``side``'s unmatched rows in the join's columns, the other side's NULL."""
    own = {f.name for f in join.children[side].schema.fields}
    exprs = tuple((f.name, _q(f.name) if f.name in own else
                   f"CAST(NULL AS {f.dataType.simpleString()})") for f in join.schema.fields)
    return Project(unmatched, exprs, join.schema)


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
