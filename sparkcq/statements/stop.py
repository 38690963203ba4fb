"""A feed's STOP: the queries reading the stream pause (status ``paused``, a line in their
logs) until data comes again on it; each cycle resumes those whose streams all flow again.
"""

from __future__ import annotations

from sparkcq.catalog import QueryStatus
from sparkcq.inspection import StreamState
from sparkcq.statements.context import StatementContext
from sparkcq.statements.feeds import FeedStop, feed_source, reads


def stop(stmt: FeedStop, text: str, ctx: StatementContext) -> list[str]:
    """Pause the queries reading the stream; their names."""
    source = feed_source(ctx, stmt.stream)
    info = ctx.catalog.stream(stmt.stream)
    source.stop()
    paused = []
    for run in ctx.queries.running.values():
        if run.info.status is QueryStatus.RUNNING and reads(run.info.plan, info.name):
            run.info.status = QueryStatus.PAUSED
            run.info.log.append(f"cycle {ctx.cycle()}: paused: its feed stopped "
                                f"stream {info.name!r} (STOP)")
            paused.append(run.name)
    ctx.paused.add(info.name.lower())
    return paused


def resume_paused(ctx: StatementContext) -> None:
    """Resume the queries of the stopped streams whose data came again (before a cycle)."""
    for key in list(ctx.paused):
        view = ctx.view()
        if view.stream_state(key) is StreamState.STOPPED:
            continue
        ctx.paused.discard(key)
        info = ctx.catalog.streams.get(key)
        for run in ctx.queries.running.values():
            if run.info.status is not QueryStatus.PAUSED or not reads(run.info.plan, key):
                continue
            if any(view.stream_state(s.name) is StreamState.STOPPED
                   for s in ctx.catalog.streams.values() if reads(run.info.plan, s.name)):
                continue  # another stream it reads is still stopped
            run.info.status = QueryStatus.RUNNING
            run.info.log.append(f"cycle {ctx.cycle()}: resumed: data came again on "
                                f"stream {info.name if info else key!r}")
