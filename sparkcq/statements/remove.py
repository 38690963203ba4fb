"""A feed's REMOVE: the stream leaves the catalog, with what each query reading it asked for.

A query created ``WITH (on_remove='stop')`` (the default) stops at once (status ``stopped``,
the reason in its log). One created ``WITH (on_remove='keep')`` sees the stream's input
end: what the feed sent before REMOVE is still processed, the stream's watermark then goes
to +inf, so its windows drain and their last results are emitted, and the query goes on
with the other streams it reads. Until no running query reads it, the stream stays in the
catalog as ``removed``: no new query may read it, no feed may connect to it, and its name
is taken; then it goes with its queue and spool (``release_removed``, before each cycle).
The streams derived from it are dropped at once (a query that kept it reads their plans,
not their names).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sparkcq.catalog import QueryStatus
from sparkcq.io.feed_source import FeedInput, FeedSource
from sparkcq.plan.options import InputRemoved
from sparkcq.statements.context import StatementContext
from sparkcq.statements.feeds import FeedRemove, feed_source, reads

log = logging.getLogger("sparkcq.feeds")


@dataclass(frozen=True)
class Removal:
    """What a REMOVE did: the queries it stopped and those that keep reading what the
    stream sent (``on_remove='keep'``).
    """

    stream: str
    stopped: list[str]
    kept: list[str]

    def as_json(self) -> dict[str, Any]:
        """The feed's answer."""
        return {"removed": self.stream, "stopped": self.stopped, "kept": self.kept}


def remove(stmt: FeedRemove, text: str, ctx: StatementContext) -> Removal:
    """Remove the stream; the queries it stopped and those that keep what it sent."""
    source = feed_source(ctx, stmt.stream)
    info = ctx.catalog.stream(stmt.stream)
    cycle = ctx.cycle()
    stopped, kept = [], []
    for run in [r for r in ctx.queries.running.values() if reads(r.info.plan, info.name)]:
        if run.info.options.get("on_remove", InputRemoved.STOP).lower() == InputRemoved.KEEP:
            run.info.log.append(
                f"cycle {cycle}: stream {info.name!r} was removed: {stmt.reason}: its input "
                "ends after what it sent, its windows drain, and the query goes on "
                "(on_remove='keep')")
            kept.append(run.name)
            continue
        ctx.queries.stop(run.name, QueryStatus.STOPPED,
                         f"cycle {cycle}: stopped: stream {info.name!r} was removed: "
                         f"{stmt.reason}")
        stopped.append(run.name)
    for derived in [s for s in ctx.catalog.streams.values()
                    if s.derived and reads(s.plan, info.name)]:
        del ctx.catalog.streams[derived.name.lower()]
    info.removed = stmt.reason
    if kept and not source.ended:  # once: a recovery replays REMOVE after the spool's end
        source.push_group([FeedInput(end=True)], None)
    if not release_removed(ctx):
        ctx.queries.compile()
    log.info("stream %s removed (%s); stopped %s, kept by %s", info.name, stmt.reason,
             stopped or "nothing", kept or "nothing")
    return Removal(info.name, stopped, kept)


def release_removed(ctx: StatementContext) -> list[str]:
    """Take the removed streams no running query reads any more out of the catalog, with
    their scans, queues and spools; their names.
    """
    released = []
    for info in [s for s in ctx.catalog.streams.values() if s.removed is not None]:
        if any(reads(r.info.plan, info.name) for r in ctx.queries.running.values()):
            continue
        key = info.name.lower()
        del ctx.catalog.streams[key]
        ctx.queries.scans.remove(key)
        source = ctx.sources.pop(key)
        source.close()
        if isinstance(source, FeedSource):
            source.delete()
        ctx.paused.discard(key)
        released.append(info.name)
    if released:
        ctx.queries.compile()
    return released
