"""A feed's HEADER: defines a feed stream's schema, or changes it.

A HEADER equal to the schema in force changes nothing; one that differs takes effect at once
for new queries, and each running query reading the stream is judged against it: one that
compiles with the columns both schemas share (same name, same type) keeps running with its
state, on its old scan, fed the new rows projected to its columns; another is stopped with
the reason in its log, unless it was created ``WITH (on_schema_change='keep')`` (then NULL
for the missing or changed columns).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field, replace
from enum import StrEnum

from pyspark.sql.types import StructType

from sparkcq.catalog import QueryInfo, QueryStatus, StreamInfo
from sparkcq.errors import AnalysisError, FeedError, Location, SparkcqError
from sparkcq.language.sql.parser import parse_script_located
from sparkcq.language.sql.statements import CreateQuery
from sparkcq.plan.binder import bind_query
from sparkcq.plan.definitions import bind_stream
from sparkcq.plan.nodes import StreamScan, walk
from sparkcq.plan.options import SchemaChange, StreamOptions
from sparkcq.statements.context import StatementContext
from sparkcq.statements.feeds import FeedHeader, feed_source, reads, schema_of

log = logging.getLogger("sparkcq.feeds")


class HeaderChange(StrEnum):
    """What a HEADER did to its stream (the feed's answer says it)."""

    CONNECTED = "connected"  # the stream's first schema
    UNCHANGED = "unchanged"  # the schema in force, sent again
    CHANGED = "changed"  # a new schema: running queries were kept or stopped


@dataclass(frozen=True)
class HeaderAnswer:
    """The answer to a HEADER: the schema in force, what changed, and for a changed schema
    the queries kept and those stopped.
    """

    schema: str
    change: HeaderChange
    kept: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        """The answer as the feed protocol sends it."""
        out: dict[str, object] = {"schema": self.schema, "change": self.change.value}
        if self.change is HeaderChange.CHANGED:
            out |= {"kept": self.kept, "stopped": self.stopped}
        return out


def header_text(stmt: FeedHeader) -> str:
    """The HEADER written out, for the positions of errors in it."""
    cols = ", ".join(f"{n} {t}" for n, t in stmt.columns)
    opts = ", ".join(f"{k}='{v}'" for k, v in stmt.options.items())
    return f"HEADER {stmt.stream} ({cols}) WITH ({opts})"


def header(stmt: FeedHeader, text: str, ctx: StatementContext) -> HeaderAnswer:
    """Apply a feed's HEADER; FeedError says what is wrong with it."""
    source = feed_source(ctx, stmt.stream)
    info = ctx.catalog.stream(stmt.stream)
    schema = schema_of(stmt.columns)
    written = header_text(stmt)
    try:
        options = StreamOptions.parse(stmt.options, written, None)
        bound = bind_stream(info.name, schema, options, written,
                            Location.of_span(written, 0, len(written)))
    except AnalysisError as e:
        msg = f"HEADER for {info.name!r}: {e.message}"
        raise FeedError(msg) from None
    node = bound.node
    if info.connected and node == info.plan:
        return HeaderAnswer(schema.simpleString(), HeaderChange.UNCHANGED)
    kept: list[str] = []
    stopped: list[str] = []
    if info.connected:
        kept, stopped = change_schema(ctx, info, node)
    change = HeaderChange.CHANGED if info.connected else HeaderChange.CONNECTED
    plan = ctx.queries.plan
    ctx.queries.scans.replace(node, bound.lateness, lambda old: old in plan.ops)
    ctx.catalog.streams[info.name.lower()] = replace(
        info, schema=schema, plan=node, key=node.key, time_col=node.time_col,
        end_col=node.end_col, time_kind=node.time_kind,
        options={**info.options, **stmt.options})
    source.set_schema(schema, node.time_col, bound.lateness, node.key)
    ctx.queries.compile()
    log.info("stream %s: %s, schema %s", info.name, change.value, schema.simpleString())
    return HeaderAnswer(schema.simpleString(), change, kept, stopped)


def change_schema(ctx: StatementContext, info: StreamInfo,
                  node: StreamScan) -> tuple[list[str], list[str]]:
    """Judge each query reading the stream against the new schema (see the module); the
    queries kept and those stopped.
    """
    old = info.plan
    assert isinstance(old, StreamScan)
    derived = [s.name for s in ctx.catalog.streams.values()
               if s.derived and old in walk(s.plan)]
    if derived:
        msg = (f"HEADER changes the schema of {info.name!r}, which the derived stream(s) "
               f"{', '.join(derived)} read; drop them first, or keep the columns")
        raise FeedError(msg)
    same_time = (old.time_col, old.end_col, old.time_kind, old.time_unit, old.key) == \
        (node.time_col, node.end_col, node.time_kind, node.time_unit, node.key)
    kept, stopped = [], []
    cycle = ctx.cycle()
    for run in [r for r in ctx.queries.running.values() if reads(r.info.plan, info.name)]:
        problem = problem_with(ctx, run.info, info, node) if same_time else \
            "its event time or key changed"
        keep = run.info.options.get("on_schema_change", SchemaChange.STOP).lower() \
            == SchemaChange.KEEP
        where = (f"cycle {cycle}: stream {info.name!r} changed its schema to "
                 f"{node.schema.simpleString()}")
        if problem is None or (keep and same_time):
            how = "it keeps running" if problem is None else \
                f"it keeps the old columns (on_schema_change='keep'; {problem})"
            run.info.log.append(f"{where}: {how}")
            kept.append(run.name)
            continue
        ctx.queries.stop(run.name, QueryStatus.STOPPED, f"{where}: stopped: {problem}")
        stopped.append(run.name)
    return kept, stopped


def problem_with(ctx: StatementContext, query: QueryInfo, info: StreamInfo,
                 node: StreamScan) -> str | None:
    """Why ``query`` does not compile with the columns the old and the new schema of
    ``info`` share (None: it does).
    """
    new = {f.name.lower(): f.dataType for f in node.schema.fields}
    both = StructType([f for f in info.schema.fields if new.get(f.name.lower()) == f.dataType])
    statement = next((s for s, _ in parse_script_located(query.text)
                      if isinstance(s, CreateQuery) and s.name.lower() == query.name.lower()),
                     None)
    if statement is None:
        return "its text could not be checked against the new columns"
    trial = copy.copy(ctx.catalog)  # the catalog with the stream on the shared columns
    trial.streams = {**ctx.catalog.streams, info.name.lower(): replace(
        info, schema=both, plan=StreamScan(info.name, both, node.time_col, node.end_col,
                                           node.time_kind, node.time_unit, node.key))}
    try:
        bind_query(statement.select, query.text, trial, ctx.spark,
                    trusted=ctx.policy.trusted)
    except SparkcqError as e:
        return str(e).splitlines()[0]
    return None
