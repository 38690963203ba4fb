"""Streams fed over the network (``docs/feed.md``): the catalog changes a feed asks for,
as statements, and what the HEADER, STOP and REMOVE handlers share.

A feed stream is created with ``CREATE STREAM s WITH (source='feed')``: it is in the
catalog with no columns (``not connected``) and a query naming it is refused until the
feed's first HEADER gives its schema (``header.py``). STOP pauses the queries that read the
stream until data comes again (``stop.py``); REMOVE stops them and takes the stream, its
queue and its spool away (``remove.py``). Rows and heartbeats go straight to the stream's
``FeedSource``, not through statements.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql.types import StructField, StructType, _parse_datatype_string

from sparkcq.errors import FeedError
from sparkcq.io.feed_source import FeedSource
from sparkcq.io.spool import Spool
from sparkcq.plan.nodes import PlanNode, StreamScan, walk
from sparkcq.statements.context import StatementContext


@dataclass(frozen=True)
class FeedHeader:
    """A feed's HEADER: the stream's columns (name, type) and options (event time, ...)."""

    stream: str
    columns: tuple[tuple[str, str], ...]
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FeedStop:
    """A feed's STOP: pause the queries the stream feeds until its data comes again."""

    stream: str


@dataclass(frozen=True)
class FeedRemove:
    """A feed's REMOVE: the stream leaves the catalog; its queries stop, with ``reason``."""

    stream: str
    reason: str = "its feed removed it (REMOVE)"


def new_feed_source(ctx: StatementContext, name: str) -> FeedSource:
    """The source of a new feed stream, spooling under the policy's feed folder."""
    folder = ctx.policy.feed_dir
    spool = Spool(os.path.join(folder, name.lower())) if folder else None
    return FeedSource(ctx.spark, name, spool, ctx.policy.ingest_limits,
                      ctx.policy.max_spool_bytes)


def feed_source(ctx: StatementContext, stream: str) -> FeedSource:
    """The feed source of ``stream``; FeedError if it is not a feed stream."""
    info = ctx.catalog.stream(stream)
    source = ctx.sources.get(info.name.lower())
    if not isinstance(source, FeedSource):
        kind = "derived from a query" if info.derived else \
            f"fed by the {info.options.get('source', 'memory')} source"
        msg = (f"stream {info.name!r} is {kind}; a feed connects only to a stream created "
               "WITH (source='feed')")
        raise FeedError(msg)
    if info.removed is not None:
        msg = (f"stream {info.name!r} was removed ({info.removed}); queries that kept it "
               "still read what it sent, and a feed cannot connect to it again")
        raise FeedError(msg)
    return source



def reads(plan: PlanNode, stream: str) -> bool:
    """Whether ``plan`` scans ``stream`` (with its current schema or an earlier one)."""
    return any(isinstance(n, StreamScan) and n.name.lower() == stream.lower()
               for n in walk(plan))


def schema_of(columns: Sequence[tuple[str, str]]) -> StructType:
    """A HEADER's columns as a Spark schema; FeedError names a column whose type is unknown."""
    fields = []
    seen: set[str] = set()
    for name, type_sql in columns:
        if name.lower() in seen:
            msg = f"HEADER names column {name!r} twice"
            raise FeedError(msg)
        seen.add(name.lower())
        text = "TIMESTAMP" if type_sql.upper() == "DATETIME" else type_sql
        try:
            dtype = _parse_datatype_string(text)
        except Exception:  # noqa: BLE001 - Spark raises several kinds of parse errors
            msg = (f"HEADER: unknown type {type_sql!r} for column {name!r}; use a Spark SQL "
                   "type such as BIGINT, DOUBLE, STRING, TIMESTAMP, STRUCT<x: DOUBLE>")
            raise FeedError(msg) from None
        fields.append(StructField(name, dtype))
    if not fields:
        msg = "HEADER has no columns"
        raise FeedError(msg)
    return StructType(fields)
