"""The binder's pass over ORDER BY, LIMIT and ranking (ROW_NUMBER, RANK, DENSE_RANK in a
subquery filtered by rank): a Top-N node where they mean one.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

import sqlglot.expressions as exp

from sparkcq.errors import AnalysisError
from sparkcq.plan.counting import quote
from sparkcq.plan.nodes import (
    EdgeKind,
    PlanNode,
    Project,
    RankKind,
    SortKey,
    TopN,
    UnboundedSpec,
    Window,
)
from sparkcq.plan.scope import Scope, canonical_text, output_name

if TYPE_CHECKING:
    from sparkcq.plan.binder import Binder


def output_column(binder: Binder, item: exp.Expression, sel: exp.Select, plan: PlanNode,
                  clause: str, ordinals: bool = False) -> str:
    """The output column an ORDER BY or OVER item names: an output column's name, an
    ordinal (ORDER BY only), or an expression written as a SELECT item is.
    """
    names = [f.name for f in plan.schema.fields]
    if isinstance(item, exp.Column) and not item.table:
        for n in names:
            if n.lower() == item.name.lower():
                return n
    if ordinals and isinstance(item, exp.Literal) and item.is_int:
        i = int(item.this)
        if not 1 <= i <= len(names):
            msg = f"{clause} {i}: the SELECT list has {len(names)} items"
            raise binder.error(msg, item)
        return names[i - 1]
    written = canonical_text(item)
    items = [e for e in sel.expressions if not is_ranking(e.unalias())]
    for e in items:
        if canonical_text(e.unalias()) == written:
            return output_name(e)
    msg = (f"{clause} {item.sql(dialect='spark')}: a continuous query orders by a column "
           f"of its SELECT list; add it there with an alias and name the alias; "
           f"columns: {', '.join(names)}")
    raise binder.error(msg, item)


def sort_keys(binder: Binder, order: exp.Order, sel: exp.Select, plan: PlanNode, clause: str,
              ordinals: bool = False) -> tuple[SortKey, ...]:
    """The items of an ORDER BY as sort keys over ``plan``'s columns."""
    return tuple(SortKey(output_column(binder, o.this, sel, plan, clause, ordinals),
                         bool(o.args.get("desc")), o.args.get("nulls_first"))
                 for o in order.expressions)


def bind_order_limit(binder: Binder, sel: exp.Select, plan: PlanNode) -> PlanNode:
    """``ORDER BY ... LIMIT n``: a Top-N of every snapshot (a relation has no order of
    its own, so ORDER BY alone and LIMIT alone are refused, saying why).
    """
    order, limit = sel.args.get("order"), sel.args.get("limit")
    if order is None and limit is None:
        return plan
    if limit is None:
        msg = ("ORDER BY needs LIMIT n in a continuous query: results are ordered by "
               "time; ORDER BY ... LIMIT n keeps the first n rows of every snapshot")
        raise binder.keyword_error(msg, order, r"\bORDER\s+BY\s+")
    if order is None:
        msg = ("LIMIT needs ORDER BY: which n rows a snapshot keeps must not depend "
               "on arrival order")
        raise binder.keyword_error(msg, limit, r"\bLIMIT\s+")
    n = limit.expression
    if not (isinstance(n, exp.Literal) and n.is_int and int(n.this) > 0):
        msg = "LIMIT takes a whole number above 0"
        raise binder.keyword_error(msg, limit, r"\bLIMIT\s+")
    return TopN(plan, (), sort_keys(binder, order, sel, plan, "ORDER BY", ordinals=True),
                int(n.this))


def bind_ranking(binder: Binder, sel: exp.Select, ranked: list[exp.Expression]
                 ) -> tuple[PlanNode, int | None]:
    """A SELECT with ``ROW_NUMBER()``, ``RANK()`` or ``DENSE_RANK() OVER (PARTITION BY
    ... ORDER BY ...)``: the rest of the SELECT, numbered on every snapshot (a Top-N of
    every row; an outer ``WHERE rn <= n`` keeps n, ``fold_rank_limit``).
    """
    if len(ranked) > 1:
        msg = "one ranking function per SELECT; rank in a subquery to rank twice"
        raise binder.error(msg, ranked[1])
    item = ranked[0]
    window = item.unalias()
    for clause in ("order", "limit", "distinct"):
        if sel.args.get(clause) is not None:
            msg = (f"{clause.upper()} beside a ranking function: rank in a subquery "
                   "and write it in the outer SELECT")
            raise binder.error(msg, sel.args[clause])
    if window.args.get("spec") is not None:
        msg = "a ranking function takes no window frame (ROWS/RANGE BETWEEN)"
        raise binder.error(msg, window)
    rest = sel.copy()
    rest.set("expressions", [e.copy() for e in sel.expressions if e is not item])
    plan, period = binder.bind_select(rest)
    if plan.kind is EdgeKind.STREAM:  # ranked like any relation: [UNBOUNDED] by default
        plan = Window(plan, UnboundedSpec())
    order = window.args.get("order")
    if order is None:
        msg = f"{window.this.sql(dialect='spark')} needs ORDER BY in its OVER (...)"
        raise binder.error(msg, window)
    partition = tuple(output_column(binder, p, rest, plan, "PARTITION BY")
                      for p in window.args.get("partition_by") or [])
    keys = sort_keys(binder, order, rest, plan, "ORDER BY")
    name = output_name(item)
    if name in {f.name for f in plan.schema.fields}:
        msg = f"duplicate output column {name!r}; give the ranking another alias"
        raise binder.error(msg, item)
    kind = {exp.RowNumber: RankKind.ROW_NUMBER, exp.Rank: RankKind.RANK,
            exp.DenseRank: RankKind.DENSE_RANK}[type(window.this)]
    top: PlanNode = TopN(plan, partition, keys, None, kind, name)
    order_out = [output_name(e) for e in sel.expressions]
    if [f.name for f in top.schema.fields] != order_out:
        top = binder.project(top, [(n, quote(n)) for n in order_out], sel)
    return top, period


def fold_rank_limit(binder: Binder, plan: PlanNode, cond: exp.Expression,
                    scope: Scope) -> PlanNode | None:
    """``plan`` with a ranking below it keeping only the rows ``cond`` (``rn <= n``,
    ``rn < n`` or ``rn = 1`` on its rank column) allows, or None when ``cond`` is no
    such bound.
    """
    if not isinstance(cond, exp.LTE | exp.LT | exp.EQ):
        return None
    left, lit = cond.left, cond.args.get("expression")
    if not (isinstance(left, exp.Column) and isinstance(lit, exp.Literal) and lit.is_int):
        return None
    n = int(lit.this) - (1 if isinstance(cond, exp.LT) else 0)
    if isinstance(cond, exp.EQ) and n != 1:
        return None
    try:
        column = scope.resolve(left, binder)
    except AnalysisError:
        return None
    above: list[Project] = []
    node = plan
    while isinstance(node, Project):
        found = dict(node.exprs).get(column)
        renamed = re.fullmatch(r"`([^`]+)`", found.sql if found else "")
        if renamed is None:
            return None
        column = renamed[1]
        above.append(node)
        node = node.child
    if not (isinstance(node, TopN) and node.rank_column == column and node.n is None):
        return None
    if n < 1:
        msg = f"{cond.sql(dialect='spark')} keeps no row"
        raise binder.error(msg, cond)
    folded: PlanNode = replace(node, n=n)
    for p in reversed(above):
        folded = replace(p, child=folded)
    return folded


def is_ranking(e: exp.Expression) -> bool:
    """Whether ``e`` is ROW_NUMBER(), RANK() or DENSE_RANK() OVER (...)."""
    return isinstance(e, exp.Window) and isinstance(e.this, exp.RowNumber | exp.Rank
                                                    | exp.DenseRank)
