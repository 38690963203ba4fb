"""Relational operators built from counts: what DISTINCT, set operations and outer joins
mean on a snapshot, written with an aggregate over a tagged union.

Every one of them decides, per row value and instant, how many copies of the value the
result holds from how many each input holds then: DISTINCT keeps one of any, INTERSECT
one when both inputs hold some, EXCEPT ALL the difference, an anti join the copies of a
value with no pair. An ``Aggregate`` counts them exactly on every snapshot, and
``Expand`` turns a count back into copies, so these operators inherit the aggregate's
exactness, finality and sharing instead of needing operators of their own.
"""

from __future__ import annotations

from pyspark.sql.types import LongType, StructField, StructType

from sparkcq.plan.nodes import (
    AggCall,
    Aggregate,
    Expand,
    PlanNode,
    Union,
    filter_sql,
    project_sql,
)

COPIES = "_copies"  # how many copies of a value the result holds


def quote(name: str) -> str:
    """A back-quoted column name for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def distinct(plan: PlanNode) -> Aggregate:
    """One copy of every row ``plan`` holds at an instant (GROUP BY all its columns)."""
    names = tuple(f.name for f in plan.schema.fields)
    return Aggregate(plan, names, (), plan.schema)


def counts_per_input(inputs: tuple[PlanNode, ...], counts: tuple[str, ...]) -> Aggregate:
    """Per row value (the columns of the first input, the others matched by position) and
    instant, how many copies input ``i`` holds, in column ``counts[i]`` (0 included: a
    value is in the result while any input holds it).
    """
    fields = list(inputs[0].schema.fields)
    names = [f.name for f in fields]
    tags = [StructField(f"{c}_tag", LongType()) for c in counts]
    schema = StructType([*fields, *tags])
    tagged = []
    for i, node in enumerate(inputs):
        own = [(n, quote(f.name)) for n, f in zip(names, node.schema.fields, strict=True)]
        marks = [(t.name, "CAST(1 AS BIGINT)" if j == i else "CAST(NULL AS BIGINT)")
                 for j, t in enumerate(tags)]
        tagged.append(project_sql(node, (*own, *marks), schema))
    calls = tuple(AggCall("count", t.name, False, c) for t, c in zip(tags, counts, strict=True))
    return Aggregate(Union(tuple(tagged)), tuple(names), calls,
                     StructType([*fields, *[StructField(c, LongType(), False) for c in counts]]))


def copies(counted: Aggregate, how_many: str, keep: str | None = None) -> PlanNode:
    """The values of ``counted`` (where ``keep`` holds), each as ``how_many`` copies (a
    Spark SQL expression over the counts; a value with none is not in the result).
    """
    node: PlanNode = counted if keep is None else filter_sql(counted, keep)
    values = [f for f in counted.schema.fields if f.name in counted.keys]
    exprs = (*[(f.name, quote(f.name)) for f in values], (COPIES, how_many))
    counted_values = project_sql(node, exprs,
                                 StructType([*values, StructField(COPIES, LongType())]))
    return Expand(filter_sql(counted_values, f"{quote(COPIES)} > 0"), COPIES)
