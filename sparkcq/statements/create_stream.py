"""``CREATE STREAM name (columns) WITH (event_time='t', ...)``: a source stream.

The stream gets a source (``source='memory' | 'feed' | 'generator' | 'files'``) and a scan
(event time, watermark, late data). A feed stream may leave its columns out: it is then in
the catalog with no columns until its feed's HEADER (``header.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.types import StructType

from sparkcq.catalog import StreamInfo
from sparkcq.errors import AnalysisError, SourceError
from sparkcq.io.files import FilesSource
from sparkcq.io.generator import GeneratorSource
from sparkcq.io.ingest import EPOCH_UNITS
from sparkcq.io.sources import MemorySource, Source
from sparkcq.language.sql.statements import CreateStream, value_at
from sparkcq.model.time import TimeKind
from sparkcq.plan.definitions import bind_stream, declared_schema
from sparkcq.plan.nodes import StreamScan
from sparkcq.plan.options import SourceKind, StreamOptions
from sparkcq.statements.context import StatementContext
from sparkcq.statements.feeds import new_feed_source


def create_stream(stmt: CreateStream, text: str, ctx: StatementContext) -> None:
    """Add a source stream to the catalog, with its source and scan."""
    options = StreamOptions.parse(stmt.options, text, stmt.loc)
    key = stmt.name.lower()
    if options.source is SourceKind.FEED and not stmt.columns:
        feed = new_feed_source(ctx, stmt.name)
        ctx.catalog.add_stream(StreamInfo(
            stmt.name, StructType([]), None, None, TimeKind.TIMESTAMP, dict(stmt.options),
            StreamScan(stmt.name, StructType([]), "", None, TimeKind.TIMESTAMP)))
        ctx.sources[key] = feed
        return
    if not stmt.columns:
        msg = ("CREATE STREAM needs its columns, as in (pid BIGINT, t TIMESTAMP); only a "
               "stream with source='feed' may take them from its feed's HEADER")
        raise AnalysisError(msg, text, stmt.loc)
    schema = declared_schema(stmt.columns, text)
    bound = bind_stream(stmt.name, schema, options, text, stmt.loc)
    node, policy = bound.node, ctx.policy
    source: Source
    try:
        if options.source is SourceKind.MEMORY:
            source = MemorySource(ctx.spark, stmt.name, schema, node.time_col, bound.lateness,
                                  policy.ingest_limits, node.key,
                                  epoch_unit(options.options, stmt, text))
        elif options.source is SourceKind.FEED:
            feed = new_feed_source(ctx, stmt.name)
            feed.set_schema(schema, node.time_col, bound.lateness, node.key)
            source = feed
        elif options.source is SourceKind.GENERATOR:
            policy.ensure_allowed_expressions(ctx.spark, ctx.catalog, options.options, text,
                                              stmt.loc)
            source = GeneratorSource(ctx.spark, stmt.name, schema, node.time_col,
                                     dict(options.options),
                                     numeric_time=node.time_kind is TimeKind.NUMERIC)
        else:
            source = FilesSource(ctx.spark, stmt.name, schema,
                                 policy.data_path(options.options, text, stmt.loc),
                                 roots=None if policy.trusted else policy.data_roots)
    except SourceError as e:
        raise AnalysisError(str(e), text, stmt.loc) from None
    ctx.catalog.add_stream(StreamInfo(stmt.name, schema, node.time_col, node.end_col,
                                      node.time_kind, dict(stmt.options), node, key=node.key))
    ctx.sources[key] = source
    scan = ctx.queries.scans.add(node, bound.lateness)
    if bound.retention:
        scan.retain(bound.retention)
    ctx.queries.compile()


def epoch_unit(options: Mapping[str, str], stmt: CreateStream, text: str) -> int | None:
    """``epoch_unit``: what a number given for a TIMESTAMP column counts since the epoch
    (microseconds per unit); None when not declared (numbers are then refused).
    """
    unit = options.get("epoch_unit")
    if unit is None:
        return None
    if unit.lower() not in EPOCH_UNITS:
        msg = (f"epoch_unit {unit!r}: expected one of {', '.join(map(repr, EPOCH_UNITS))}")
        raise AnalysisError(msg, text, value_at(stmt.options, "epoch_unit", stmt.loc))
    return EPOCH_UNITS[unit.lower()]
