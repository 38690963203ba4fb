"""Rule: an outer, semi or anti join of two relations is the inner join and, for each kept
side, that side's rows counted against their pairs: a row is unmatched at an instant
exactly when it has copies then and no pair (snapshot by snapshot).

Before::

    Join LEFT ON a.k = b.k
      (left)
      (right)

After::

    Union ALL
      Join ON a.k = b.k                                   the pairs
        (left)
        (right)
      Project `_0__k`, `_0__v`, CAST(NULL AS STRING) AS _1__k, ...  padded with NULLs
        Expand _copies copies
          Filter `_copies` > 0
            Project `_0__k`, `_0__v`, `_rows` AS _copies
              Filter `_pairs` = 0
                Aggregate count(_rows_tag) AS _rows, count(_pairs_tag) AS _pairs BY _0__k, _0__v
                  Union ALL
                    Project `_0__k`, `_0__v`, 1 AS _rows_tag, NULL AS _pairs_tag    each left row
                      (left)
                    Project `_0__k`, `_0__v`, NULL, 1                     each pair's left row
                      Project `_0__k`, `_0__v`
                        Join ON a.k = b.k

A left value v with n copies and m partners at an instant has n copies and n * m pairs
there: it is unmatched where the pairs are 0, and then all n copies are. Every node is an
ordinary relational operator (``plan/counting.py``), so the result is exact, final at the
slower input's watermark and the same whatever the cycles: a row appears, vanishes while a
partner is valid and appears again exactly where the snapshots say. The inner join is one
node, so the global plan computes it once for the pairs and for the counts (and the
interval-join rule makes it an ``IntervalJoin`` when both sides are time windows). A semi
join keeps the values with pairs, an anti join those without, each as its copies.

Joins with a table keep their own operator: each change of the relation meets the static
table as Spark's outer, semi or anti join does (``runtime/operators/join.py``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from sparkcq.plan.counting import copies, counts_per_input, quote
from sparkcq.plan.nodes import EdgeKind, Join, JoinHow, PlanNode, Union, project_sql, transform_up


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
        return _values(node.left, inner, "`_pairs` > 0" if node.how is JoinHow.SEMI
                       else "`_pairs` = 0")
    parts: list[PlanNode] = [inner]
    for i, side in enumerate(node.children):
        if node.how.padded(i):
            parts.append(_padded(_values(side, inner, "`_pairs` = 0"), node, side))
    return Union(tuple(parts))


def _values(side: PlanNode, inner: Join, keep: str) -> PlanNode:
    """The copies of ``side``'s rows whose count of pairs in ``inner`` satisfies ``keep``."""
    own = tuple((f.name, quote(f.name)) for f in side.schema.fields)
    counted = counts_per_input((side, project_sql(inner, own, side.schema)), ("_rows", "_pairs"))
    return copies(counted, "`_rows`", keep)


def _padded(unmatched: PlanNode, join: Join, side: PlanNode) -> PlanNode:
    """``side``'s unmatched rows in the join's columns, the other side's NULL."""
    own = {f.name for f in side.schema.fields}
    exprs = tuple((f.name, quote(f.name) if f.name in own else
                   f"CAST(NULL AS {f.dataType.simpleString()})") for f in join.schema.fields)
    return project_sql(unmatched, exprs, join.schema)
