"""``CREATE STREAM name AS SELECT ...``: a derived stream, the result of a query that other
queries read as if it were a stream (its plan is inlined into theirs, so equal parts are
shared as usual).
"""

from __future__ import annotations

from sparkcq.catalog import StreamInfo
from sparkcq.language.sql.statements import CreateStreamAs
from sparkcq.plan.binder import bind_select
from sparkcq.statements.context import StatementContext


def create_stream_as(stmt: CreateStreamAs, text: str, ctx: StatementContext) -> None:
    """Add a derived stream to the catalog."""
    bound = bind_select(stmt.select, text, ctx.catalog, ctx.spark, trusted=ctx.policy.trusted)
    ctx.catalog.add_stream(StreamInfo(
        stmt.name, bound.plan.schema, None, None, bound.plan.time_kind, dict(stmt.options),
        bound.plan, derived=True))
