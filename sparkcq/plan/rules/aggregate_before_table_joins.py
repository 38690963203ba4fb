"""Rule: an aggregate over a time-windowed stream joined with tables aggregates the stream
first, per group and join key, and combines those partial results after the join (eager
aggregation), so the stream side takes the pane path: its events are summed per group and
pane before the shuffle.

Before::

    Aggregate sum(_a0) AS _x0, count(*) AS _x1 BY _g0
      Project `_1__name` AS _g0, `_0__v` AS _a0
        Join ON e.k = h.k
          Project `k` AS _0__k, `v` AS _0__v
            Window [CUT BY 1 MINUTE]
              StreamScan events
          Project `k` AS _1__k, `name` AS _1__name
            TableScan hosts

After::

    Aggregate sum(_q0) AS _x0, sum(_q1) AS _x1 BY _g0
      Project `_1__name` AS _g0, `_q0`, `_q1`
        Join ON e.k = h.k
          Aggregate sum(_a0) AS _q0, count(*) AS _q1 BY _0__k
            Project `_0__k`, `_0__v` AS _a0
              Project `k` AS _0__k, `v` AS _0__v
                Window [CUT BY 1 MINUTE]
                  StreamScan events
          Project `k` AS _1__k, `name` AS _1__name
            TableScan hosts

The inner aggregate is then sliced (``slice_window_aggregates``): the window's events are
summed into (key, pane) partials and never buffered. Exact on every snapshot: an inner
join of a relation with tables, grouped by keys that include the stream's join columns,
gives each stream-side group the same table rows, so a sum over its rows joined with a
table row is the stream-side group's sum, once per table row it meets (duplicate table rows
count twice, as in the join); count becomes a sum of counts, min and max of minimums and
maximums, avg a sum over a count. The join and the combining aggregate keep the general
operators, so a table replaced while the query runs switches as any join with a relation
does (docs/semantics.md, "Tables that change").

Under RSTREAM with a period the combining needs no relation at all: the stream side's
snapshots at each evaluation instant (RSTREAM of the inner aggregate, read from its
segments) are joined with the tables as events and grouped per (keys, instant) by an
``InstantAggregate``, which keeps no state::

    RSTREAM every 5 <- Aggregate ... <- Join <- (inner aggregate)       becomes
    InstantAggregate sum(_q0) AS _x0 BY _g0 <- Project <- Join <- RSTREAM every 5 <- (inner)

Applies when every call is count, sum, avg, min or max without DISTINCT, over a stream
column of an integral or floating type (or ``*``); below the aggregate lie its projection,
filters, and joins each of which joins the stream side with a table; the stream side is a
time window that the pane path takes and no running query computes as a Window operator.
Group keys over stream columns only are computed before the join; any other stream column
that a group key, filter or join condition reads becomes a key of the inner aggregate.
Filters over stream columns only move below the inner aggregate.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

import sqlglot
import sqlglot.expressions as exp
from pyspark.sql.types import DataType, DoubleType, FloatType, LongType, StructField, StructType

from sparkcq.model.columns import (
    combined_count,
    combined_sum,
    partial_count,
    partial_key,
    partial_value,
)
from sparkcq.model.types import INTEGRAL_TYPES
from sparkcq.plan.expressions import conjuncts
from sparkcq.plan.nodes import (
    AggCall,
    Aggregate,
    EdgeKind,
    Filter,
    InstantAggregate,
    Join,
    JoinHow,
    OutputForm,
    PlanNode,
    Project,
    ToStream,
    filter_sql,
    project_sql,
    transform_up,
)
from sparkcq.plan.rules.slice_window_aggregates import SLICED_FUNCTIONS, sliceable_window

_NUMBERS = (*INTEGRAL_TYPES, FloatType, DoubleType)


def aggregate_before_table_joins(plan: PlanNode, *,
                                 running: Collection[PlanNode] = ()) -> PlanNode:
    """``plan`` with every aggregate over a windowed stream joined with tables split into a
    sliceable aggregate of the stream before the joins and a combining one after them.
    """
    plan = transform_up(plan, lambda node: _as_instants(node, running))
    return transform_up(plan, lambda node: _split_relation(node, running))


def _split_relation(node: PlanNode, running: Collection[PlanNode]) -> PlanNode:
    split = _split(node, running)
    return node if split is None else _as_relation(split)


def referenced(sql: str) -> set[str]:
    """The column names a Spark SQL expression reads."""
    return {c.name for c in sqlglot.parse_one(sql, read="spark").find_all(exp.Column)}


def _quote(name: str) -> str:
    return f"`{name}`"


def _stream_side(node: PlanNode) -> tuple[PlanNode, list[Join]] | None:
    """The relation below a chain of joins with tables, and the joins (top first)."""
    joins: list[Join] = []
    while isinstance(node, Join):
        kinds = [c.kind for c in node.children]
        if kinds.count(EdgeKind.TABLE) != 1 or node.how is not JoinHow.INNER:
            return None
        joins.append(node)
        node = node.right if kinds[0] is EdgeKind.TABLE else node.left
    if not joins or node.kind is not EdgeKind.RELATION:
        return None
    return node, joins


def _relink(joins: list[Join], below: PlanNode) -> PlanNode:
    """The chain of ``joins`` rebuilt over ``below`` in place of their stream side."""
    node = below
    for join in reversed(joins):
        node = (replace(join, right=node) if join.left.kind is EdgeKind.TABLE
                else replace(join, left=node))
    return node


def _sum_type(arg: DataType) -> DataType:
    return LongType() if isinstance(arg, INTEGRAL_TYPES) else DoubleType()


@dataclass(frozen=True)
class Split:
    """An aggregate over a windowed stream joined with tables, taken apart: the stream
    side's aggregate, the joins and filters over it, and how the query's rows combine.
    """

    inner: Aggregate  # the stream side, per (its keys, the columns read after it)
    joins: list[Join]  # top first, to rebuild over the inner aggregate (or its snapshots)
    kept: list[str]  # filters that read table columns, above the joins
    outer_exprs: tuple[tuple[str, str], ...]  # the query's keys and the partial columns
    outer_schema: StructType
    keys: tuple[str, ...]
    combine: tuple[AggCall, ...]  # over the partial columns
    combined_schema: StructType
    ratios: dict[str, tuple[str, str]]  # avg output -> (sum, count) columns
    schema: StructType  # the original aggregate's

    def over(self, below: PlanNode) -> PlanNode:
        """The joins and filters rebuilt over ``below``, and the projection to combine."""
        joined = _relink(self.joins, below)
        if self.kept:
            joined = filter_sql(joined, " AND ".join(f"({p})" for p in self.kept))
        return project_sql(joined, self.outer_exprs, self.outer_schema)

    def finish(self, combined: PlanNode) -> PlanNode:
        """The combined rows with each avg divided out."""
        if not self.ratios:
            return combined
        final = [(f.name, f"try_divide({_quote(self.ratios[f.name][0])}, "
                          f"{_quote(self.ratios[f.name][1])})"
                  if f.name in self.ratios else _quote(f.name)) for f in self.schema.fields]
        return project_sql(combined, final, self.schema)


def _as_relation(split: Split) -> PlanNode:
    return split.finish(Aggregate(split.over(split.inner), split.keys, split.combine,
                                  split.combined_schema))


def _as_instants(node: PlanNode, running: Collection[PlanNode]) -> PlanNode:
    """RSTREAM over the aggregate: the stream side's snapshots joined with the tables and
    combined per instant (stateless), instead of a combining aggregate kept as a relation.
    """
    if not (isinstance(node, ToStream) and node.form is OutputForm.RSTREAM and node.period):
        return node
    chain: list[Project | Filter] = []
    below = node.child
    while isinstance(below, Project | Filter):
        chain.append(below)
        below = below.child
    if not isinstance(below, Aggregate) or (split := _split(below, running)) is None:
        return node
    snapshots = ToStream(split.inner, OutputForm.RSTREAM, node.period)
    out = split.finish(InstantAggregate(split.over(snapshots), split.keys, split.combine,
                                        split.combined_schema))
    for above in reversed(chain):
        out = replace(above, child=out)
    return out


def _split(node: PlanNode, running: Collection[PlanNode]) -> Split | None:
    if not isinstance(node, Aggregate) or not isinstance(node.child, Project):
        return None
    if any(a.uda is not None or a.distinct or a.func not in SLICED_FUNCTIONS
           for a in node.aggs):
        return None
    pre = node.child
    below = pre.child
    filters: list[str] = []
    while isinstance(below, Filter):
        filters += [c.sql(dialect="spark") for c in conjuncts(below.predicate.tree)]
        below = below.child
    found = _stream_side(below)
    if found is None:
        return None
    stream, joins = found
    stream_cols = {f.name for f in stream.schema.fields}
    types = {f.name: f.dataType for f in [*pre.schema.fields, *stream.schema.fields]}
    exprs = {n: e.sql for n, e in pre.exprs}
    args = {a.arg for a in node.aggs if a.arg is not None}
    if any(not referenced(exprs[a]) <= stream_cols
           or not isinstance(types[a], _NUMBERS) for a in args):
        return None

    # what the stream side computes before the joins, and which of its columns they read
    reads = {k: referenced(exprs[k]) for k in node.keys}
    plain = {_quote(c) for c in stream_cols}  # a key that is a stream column is carried
    computed = [k for k in node.keys if reads[k] and reads[k] <= stream_cols
                and exprs[k] not in plain]
    pushed = [p for p in filters if (reads_p := referenced(p)) and reads_p <= stream_cols]
    kept = [p for p in filters if p not in pushed]
    after = [exprs[k] for k in node.keys if k not in computed] + kept
    after += [j.condition.sql for j in joins if j.condition]
    carried = sorted(set().union(*[referenced(s) for s in after]) & stream_cols)

    inner_input: PlanNode = stream
    if pushed:
        inner_input = filter_sql(inner_input, " AND ".join(f"({p})" for p in pushed))
    inner_exprs = [(partial_key(i), exprs[k]) for i, k in enumerate(node.keys) if k in computed]
    inner_exprs += [(c, _quote(c)) for c in carried]
    inner_exprs += [(a, exprs[a]) for a in sorted(args)]
    inner_types = {**{partial_key(i): types[k] for i, k in enumerate(node.keys) if k in computed},
                   **{c: types[c] for c in carried}, **{a: types[a] for a in args}}
    project = project_sql(inner_input, inner_exprs, StructType(
        [StructField(n, inner_types[n]) for n, _ in inner_exprs]))
    partial_calls: list[AggCall] = []
    final_calls: list[AggCall] = []
    ratios: dict[str, tuple[str, str]] = {}  # avg output -> (sum, count) columns
    for i, call in enumerate(node.aggs):
        if call.func == "avg":
            partial_calls += [AggCall("sum", call.arg, False, partial_value(i)),
                              AggCall("count", call.arg, False, partial_count(i))]
            final_calls += [AggCall("sum", partial_value(i), False, combined_sum(i)),
                            AggCall("sum", partial_count(i), False, combined_count(i))]
            ratios[call.name] = (combined_sum(i), combined_count(i))
        else:
            partial_calls.append(AggCall(call.func, call.arg, False, partial_value(i)))
            combine = "sum" if call.func == "count" else call.func
            final_calls.append(AggCall(combine, partial_value(i), False, call.name))
    inner_keys = tuple(n for n, _ in inner_exprs if n not in args)
    partial_types = {c.name: (LongType() if c.func == "count" else
                              _sum_type(inner_types[c.arg or ""]) if c.func == "sum" else
                              inner_types[c.arg or ""]) for c in partial_calls}
    inner = Aggregate(project, inner_keys, tuple(partial_calls), StructType(
        [*[StructField(k, inner_types[k]) for k in inner_keys],
         *[StructField(c.name, partial_types[c.name]) for c in partial_calls]]))
    window = sliceable_window(inner)
    if window is None or window in running:
        return None

    names = {k: partial_key(i) for i, k in enumerate(node.keys) if k in computed}
    outer_exprs = [(k, _quote(names[k]) if k in names else exprs[k]) for k in node.keys]
    outer_exprs += [(c.name, _quote(c.name)) for c in partial_calls]
    key_types = {k: types[k] for k in node.keys}
    outer_schema = StructType([*[StructField(k, key_types[k]) for k in node.keys],
                               *[StructField(c.name, partial_types[c.name])
                                 for c in partial_calls]])
    out_types = {f.name: f.dataType for f in node.schema.fields}
    final_types = {c.name: (out_types[c.name] if c.name in out_types
                            else partial_types[c.arg or ""]) for c in final_calls}
    combined_schema = StructType([*[StructField(k, key_types[k]) for k in node.keys],
                                  *[StructField(c.name, final_types[c.name])
                                    for c in final_calls]])
    return Split(inner, joins, kept, tuple(outer_exprs), outer_schema, node.keys,
                 tuple(final_calls), combined_schema, ratios, node.schema)
