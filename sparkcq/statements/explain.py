"""``EXPLAIN name``, ``EXPLAIN SELECT ...`` and ``EXPLAIN GLOBAL [DOT]``: a query's plan with
the nodes it shares marked, a plan before it runs, and the shared DAG (DESIGN 4.2).
"""

from __future__ import annotations

from sparkcq.errors import CatalogError
from sparkcq.language.sql.statements import Explain, ExplainFormat
from sparkcq.plan.binder import bind_select
from sparkcq.plan.nodes import render_tree, walk
from sparkcq.plan.rules import optimize
from sparkcq.runtime.explain import explain_global_dot, explain_global_text
from sparkcq.statements.context import StatementContext


def explain_statement(stmt: Explain, text: str, ctx: StatementContext) -> str:
    """What the EXPLAIN asks for, as text."""
    if stmt.select is not None:
        bound = bind_select(stmt.select, text, ctx.catalog, ctx.spark,
                            trusted=ctx.policy.trusted)
        return render_tree(optimize(bound.plan, running=ctx.queries.plan.ops))
    if stmt.glob or stmt.name is None:
        return explain_global(ctx, stmt.fmt)
    return explain_query(ctx, stmt.name)


def explain_query(ctx: StatementContext, query: str) -> str:
    """The plan of one query; nodes shared with other queries are marked."""
    info = ctx.catalog.query(query)
    marks = {}
    for node in walk(info.plan):
        users = ctx.queries.plan.users.get(node, set()) - {info.name}
        if users:
            marks[node] = f"  (shared with {', '.join(sorted(users))})"
    return render_tree(info.plan, marks)


def explain_global(ctx: StatementContext, fmt: str = ExplainFormat.TEXT) -> str:
    """The shared DAG: each operator, the queries using it, its reference count, state
    rows, rows per cycle and plan-building time; ``dot`` gives Graphviz DOT.
    """
    try:
        fmt = ExplainFormat(fmt)
    except ValueError:
        msg = f"unknown EXPLAIN format {fmt!r}; use 'text' or 'dot'"
        raise CatalogError(msg) from None
    if fmt is ExplainFormat.DOT:
        return explain_global_dot(ctx.queries.plan)
    return explain_global_text(ctx.queries.plan)
