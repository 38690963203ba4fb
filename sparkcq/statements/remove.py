"""A feed's REMOVE: every query reading the stream stops (status ``stopped``, the reason in
its log), the streams derived from it are dropped, then the stream with its queue and spool.
"""

from __future__ import annotations

import logging

from sparkcq.catalog import QueryStatus
from sparkcq.statements.context import StatementContext
from sparkcq.statements.feeds import FeedRemove, feed_source, reads

log = logging.getLogger("sparkcq.feeds")


def remove(stmt: FeedRemove, text: str, ctx: StatementContext) -> list[str]:
    """Remove the stream; the queries it stopped."""
    source = feed_source(ctx, stmt.stream)
    info = ctx.catalog.stream(stmt.stream)
    stopped = []
    for run in [r for r in ctx.queries.running.values() if reads(r.info.plan, info.name)]:
        ctx.queries.stop(run.name, QueryStatus.STOPPED,
                         f"cycle {ctx.cycle()}: stopped: stream {info.name!r} was removed: "
                         f"{stmt.reason}")
        stopped.append(run.name)
    for derived in [s for s in ctx.catalog.streams.values()
                    if s.derived and reads(s.plan, info.name)]:
        del ctx.catalog.streams[derived.name.lower()]
    key = info.name.lower()
    del ctx.catalog.streams[key]
    ctx.queries.scans.remove(key)
    ctx.sources.pop(key)
    source.delete()
    ctx.paused.discard(key)
    ctx.queries.compile()
    log.info("stream %s removed (%s); stopped %s", info.name, stmt.reason,
             stopped or "nothing")
    return stopped
