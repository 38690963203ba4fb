"""``EXPLAIN name``, ``EXPLAIN SELECT ...``, ``EXPLAIN LANGUAGE apas '...'``, ``EXPLAIN
GLOBAL [DOT]`` and ``EXPLAIN ANALYZE``: a query's plan with the nodes it shares marked, a
plan before it runs (in either language), the shared DAG, and the shared DAG with what the
last cycles cost.
"""

from __future__ import annotations

from sparkcq.language.sql.statements import Explain
from sparkcq.plan.binder import bind_query
from sparkcq.plan.labels import user_labels
from sparkcq.plan.nodes import render_tree
from sparkcq.plan.rules import optimize
from sparkcq.statements.context import StatementContext


def explain_statement(stmt: Explain, text: str, ctx: StatementContext) -> str:
    """What the EXPLAIN asks for, as text (``inspection.py`` draws running plans)."""
    if stmt.select is not None:
        bound = bind_query(stmt.select, text, ctx.catalog, ctx.spark,
                            trusted=ctx.policy.trusted)
        plan = optimize(bound.plan, running=ctx.queries.plan.ops)
        return render_tree(plan, labels=user_labels([plan]))
    if stmt.analyze:
        return ctx.view().explain_analyze(ctx.spark)
    if stmt.glob or stmt.name is None:
        return ctx.view().explain_global(stmt.fmt)
    return ctx.view().explain(stmt.name)
