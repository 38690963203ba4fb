"""EXPLAIN's lines in the user's words.

The binder names what an aggregate reads and computes with columns of its own: a key
``_g0``, an argument ``_a0``, a result ``_x0``. A projection below the aggregate computes
the first two, one above it gives the results the user's names. The plan keeps those
names, so that equal aggregates of different queries are one node; a reader of EXPLAIN
wants what they stand for::

    SELECT k, avg(v) AS a FROM s [RANGE 60 SLIDE 10] GROUP BY k

    the plan's own labels                          shown
    Project `_g0` AS k, `_x0` AS a                 Project k, a
      SlicedAggregate avg(_a0) AS _x0 BY _g0       SlicedAggregate avg(v) AS a BY k
        <- Project `k` AS _g0, `v` AS _a0            <- Window [RANGE 60 SLIDE 10]
        <- Window [RANGE 60 SLIDE 10]

A result no projection names (one only HAVING reads) is shown as its call alone; so is one
that two queries sharing the aggregate name differently, and each query's projection then
says which name it gives it (``avg(v) AS a``, ``avg(v) AS b``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from sqlglot import exp

from sparkcq.model.columns import GENERATED
from sparkcq.plan.expressions import Expr, parse_expression
from sparkcq.plan.nodes import (
    AggCall,
    Aggregate,
    AlignedAggregate,
    EdgeKind,
    Filter,
    InstantAggregate,
    Join,
    PlanNode,
    Project,
    SlicedAggregate,
    TopN,
    walk,
)
from sparkcq.plan.rules.slice_window_aggregates import sliceable_window

_Aggregating = Aggregate | InstantAggregate | SlicedAggregate | AlignedAggregate
#: a name that reads the same without quotes
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def user_labels(roots: Iterable[PlanNode]) -> dict[PlanNode, str]:
    """The EXPLAIN line of every node of the plans ``roots`` whose label names generated
    columns, in the user's words (see module); other nodes keep ``label()``.
    """
    parents: dict[PlanNode, list[PlanNode]] = {}
    nodes: dict[PlanNode, None] = {}
    for root in roots:
        for node in walk(root):
            if node in nodes:
                continue
            nodes[node] = None
            for child in node.children:
                parents.setdefault(child, []).append(node)
    names: dict[PlanNode, dict[str, str]] = {
        node: result_names(node, projections_above(node, parents)) for node in nodes
        if isinstance(node, _Aggregating)}
    labels: dict[PlanNode, str] = {}
    for node in nodes:
        if isinstance(node, _Aggregating):
            labels[node] = aggregate_label(node, names[node]) + general_path(node)
        elif isinstance(node, Join | TopN):
            labels[node] = node.label() + general_path(node)
        elif isinstance(node, Project):
            shown = project_label(node, names.get(below_filters(node.child), {}))
            if shown is not None:
                labels[node] = shown
    return labels


def projections_above(node: PlanNode, parents: Mapping[PlanNode, list[PlanNode]]
                      ) -> list[Project]:
    """The projections that read ``node``'s columns, through the filters between (HAVING)."""
    found: list[Project] = []
    for parent in parents.get(node, []):
        if isinstance(parent, Filter):
            found += projections_above(parent, parents)
        elif isinstance(parent, Project):
            found.append(parent)
    return found


def below_filters(node: PlanNode) -> PlanNode:
    """The first node under ``node`` and the filters right below it that is no filter."""
    while isinstance(node, Filter):
        node = node.child
    return node


def logical_aggregate(node: _Aggregating) -> Aggregate | InstantAggregate:
    """The aggregate an aggregating node computes (a sliced or aligned one keeps the one it
    replaces).
    """
    return node.aggregate if isinstance(node, SlicedAggregate | AlignedAggregate) else node


def calls_and_keys(node: _Aggregating) -> tuple[tuple[AggCall, ...], tuple[str, ...]]:
    """What an aggregating node computes, and by what."""
    agg = logical_aggregate(node)
    return agg.aggs, agg.keys


def inputs_shown(node: _Aggregating) -> dict[str, str]:
    """The generated columns the projection right below the aggregate computes, each as
    the user wrote it.
    """
    below = logical_aggregate(node).child
    if not isinstance(below, Project):
        return {}
    return {name: written(e) for name, e in below.exprs if GENERATED.fullmatch(name)}


def written(e: Expr) -> str:
    """``e`` as the user wrote it, if the binder kept that; else its SQL without the
    quotes the binder puts around every column.
    """
    return e.shown if e.shown != e.sql else unquoted(e.tree)


def unquoted(tree: exp.Expr) -> str:
    """``tree``'s Spark SQL with the quotes around plain names left out (``v + 1``, not
    ```v` + 1``): for reading, never for running.
    """
    tree = tree.copy()
    for ident in tree.find_all(exp.Identifier):
        if _PLAIN.fullmatch(ident.name):
            ident.set("quoted", False)
    return tree.sql(dialect="spark")


def call_shown(call: AggCall, inputs: Mapping[str, str]) -> str:
    """``avg(v)`` for a call of ``avg`` over the argument column that computes ``v``."""
    if call.arg is None:
        return f"{call.func}(*)"
    distinct = "DISTINCT " if call.distinct else ""
    return f"{call.func}({distinct}{inputs.get(call.arg, call.arg)})"


def results_shown(node: PlanNode) -> dict[str, str]:
    """Each generated column of an aggregating node's output as the user wrote it (its
    call, its key's expression); nothing for another node.
    """
    if not isinstance(node, _Aggregating):
        return {}
    inputs = inputs_shown(node)
    aggs, keys = calls_and_keys(node)
    shown = {k: inputs.get(k, k) for k in keys if GENERATED.fullmatch(k)}
    shown.update({c.name: call_shown(c, inputs) for c in aggs if GENERATED.fullmatch(c.name)})
    return shown


def result_names(node: PlanNode, projections: Iterable[Project]) -> dict[str, str]:
    """The user's name of each generated result column, from the ``projections`` above
    ``node`` that rename it; a column they name differently is left out.
    """
    names: dict[str, set[str]] = {}
    for parent in projections:
        for out, e in parent.exprs:
            src = column_read(e)
            if src is not None and GENERATED.fullmatch(src):
                names.setdefault(src, set()).add(out)
    return {src: next(iter(outs)) for src, outs in names.items() if len(outs) == 1}


def column_read(e: Expr) -> str | None:
    """The column ``e`` is, when it is a bare column."""
    return e.tree.name if isinstance(e.tree, exp.Column) and not e.tree.table else None


def aggregate_label(node: _Aggregating, names: Mapping[str, str]) -> str:
    """An aggregating node's line: its calls over what the user wrote, named as the user
    named them, its keys as written; a sliced one's steps without the projection the
    calls now show.
    """
    inputs = inputs_shown(node)
    aggs, keys = calls_and_keys(node)
    calls = []
    for call in aggs:
        text = call_shown(call, inputs)
        name = names.get(call.name, None if GENERATED.fullmatch(call.name) else call.name)
        calls.append(text if name is None else f"{text} AS {name}")
    shown = ", ".join(calls) + (f" BY {', '.join(inputs.get(k, k) for k in keys)}"
                                if keys else "")
    if isinstance(node, AlignedAggregate):
        return f"AlignedAggregate {shown}{node.path()}"
    if not isinstance(node, SlicedAggregate):
        return f"{type(node).__name__} {shown}"
    below = node.aggregate.child
    steps = [s for s in reversed(node.steps())
             if not (s is below and isinstance(s, Project) and set(inputs) == {
                 n for n, _e in s.exprs})]
    return (f"SlicedAggregate {shown}{''.join(f' <- {s.label()}' for s in steps)}"
            f" <- {node.window.label()}")


def project_label(node: Project, names: Mapping[str, str]) -> str | None:
    """A projection over an aggregate's results: a result by its name alone when the
    aggregate's line gives it that name (``names``, ``result_names``), a key by its name
    alone when it is written so, anything else as its expression over what the results
    stand for; a projection that only computes an aggregate's keys and arguments as what
    they are; None for any other projection.
    """
    child = below_filters(node.child)
    shown = results_shown(child)
    if not shown:
        if node.exprs and all(GENERATED.fullmatch(n) for n, _e in node.exprs):
            return f"Project {', '.join(dict.fromkeys(written(e) for _n, e in node.exprs))}"
        return None
    assert isinstance(child, _Aggregating)
    calls = {c.name for c in calls_and_keys(child)[0]}
    parts = []
    for out, e in node.exprs:
        src = column_read(e)
        if src is not None and src in shown:
            named = names.get(src) == out if src in calls else shown[src] == out
            parts.append(out if named else f"{shown[src]} AS {out}")
            continue
        text = substituted(e, shown)
        parts.append(out if text == out else f"{text} AS {out}")
    return f"Project {', '.join(parts)}"


def substituted(e: Expr, shown: Mapping[str, str]) -> str:
    """``e``'s text with each column of ``shown`` replaced by what it stands for."""
    if not any(c.name in shown for c in e.tree.find_all(exp.Column)):
        return written(e)

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name in shown:
            value = parse_expression(shown[node.name])
            return value if isinstance(value, exp.Func | exp.Column | exp.Literal | exp.Paren) \
                else exp.Paren(this=value)
        return node

    return unquoted(e.tree.copy().transform(swap))


def general_path(node: PlanNode) -> str:
    """Why an aggregate, join or Top-N takes the general path, from its inputs' +1/-1
    changes, as EXPLAIN says after its line (nothing for the other nodes, and for those on
    a path of their own, whose lines say which and why).
    """
    why = None
    if isinstance(node, Aggregate):
        if any(a.uda is not None or a.distinct for a in node.aggs):
            why = "a user aggregate or DISTINCT is not computed from panes or per slide"
        elif sliceable_window(node) is not None:
            why = "its window ran before the query came, so its panes are not there"
        else:
            why = ("its input is neither a stream's time window nor a relation that changes "
                   "only at slides")
    elif isinstance(node, Join) and node.kind is EdgeKind.RELATION:
        why = ("its inputs are not two time-windowed streams, a stream's chunks with their "
               "aggregate, nor relations that change only at the same slides")
    elif isinstance(node, TopN):
        why = ("its input is neither a stream's per-event RANGE window (with a bound) nor a "
               "relation that changes only at slides")
    return "" if why is None else f" (general: from +1/-1 changes; {why})"
