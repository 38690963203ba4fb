"""Streams fed over the network: what HEADER, STOP and REMOVE do to the catalog and the
queries (DESIGN 4.5). Rows and heartbeats go straight to the stream's ``FeedSource``.

A feed stream is created with ``CREATE STREAM s WITH (source='feed')``: it is in the
catalog with no columns (``not connected``) and a query naming it is refused until the
feed's first HEADER gives its schema. A HEADER equal to the schema in force changes
nothing; one that differs while no query reads the stream replaces it; while queries read
it, each query is checked against the new columns (``schema_change``).

STOP pauses the queries that read the stream (status ``paused``, a line in their logs)
until data comes again; REMOVE stops them (status ``stopped``, the reason in their logs)
and takes the stream, its queue and its spool away.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import StructField, StructType, _parse_datatype_string

from sparkcq.catalog import QueryStatus
from sparkcq.errors import AnalysisError, FeedError, Location
from sparkcq.io.feed_source import FeedSource
from sparkcq.plan.nodes import walk
from sparkcq.runtime.operators.scan import ScanOperator

if TYPE_CHECKING:
    from sparkcq.engine import Engine

log = logging.getLogger("sparkcq.feeds")


class FeedStreams:
    """The engine's feed streams: their headers, pauses and removals."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.paused: set[str] = set()  # streams whose STOP the queries' logs tell

    def source(self, stream: str) -> FeedSource:
        """The feed source of ``stream``; FeedError if it is not a feed stream."""
        info = self.engine.catalog.stream(stream)
        source = self.engine.sources.get(info.name.lower())
        if not isinstance(source, FeedSource):
            kind = "derived from a query" if info.derived else \
                f"fed by the {info.options.get('source', 'memory')} source"
            msg = (f"stream {info.name!r} is {kind}; a feed connects only to a stream created "
                   "WITH (source='feed')")
            raise FeedError(msg)
        return source

    def state(self, stream: str) -> str:
        """``not connected``, ``connected`` or ``stopped`` (a feed stream), else ``ready``."""
        source = self.engine.sources.get(stream.lower())
        if not isinstance(source, FeedSource):
            return "ready"
        if source.stopped:
            return "stopped"
        return "connected" if source.connected and source.connections else "not connected"

    def readers(self, stream: str) -> list[str]:
        """The running (or paused) queries reading ``stream``."""
        info = self.engine.catalog.stream(stream)
        return [r.info.name for r in self.engine.running.values() if info.plan in walk(r.info.plan)]

    # -- HEADER ---------------------------------------------------------------------------
    def header(self, stream: str, columns: Sequence[tuple[str, str]],
               options: Mapping[str, str]) -> dict[str, Any]:
        """Apply a feed's HEADER: ``{"schema": ..., "change": "connected" | "unchanged" |
        "replaced"}``. FeedError says what is wrong with it.
        """
        eng = self.engine
        source = self.source(stream)
        info = eng.catalog.stream(stream)
        schema = schema_of(columns)
        cols = ", ".join(f"{n} {t}" for n, t in columns)
        opts = ", ".join(f"{k}='{v}'" for k, v in options.items())
        text = f"CREATE STREAM {info.name} ({cols}) WITH (source='feed', {opts})"
        try:
            node, lateness = eng._stream_scan(info.name, schema, options, text,
                                               Location.of_span(text, 0, len(text)))
        except AnalysisError as e:
            msg = f"HEADER for {info.name!r}: {e.message}"
            raise FeedError(msg) from None
        if info.connected and node == info.plan:
            return {"schema": schema.simpleString(), "change": "unchanged"}
        readers = self.readers(info.name) if info.connected else []
        if readers:
            msg = (f"HEADER changes the schema of {info.name!r} from {info.schema.simpleString()} "
                   f"to {schema.simpleString()} while queries read it ({', '.join(readers)}); "
                   "drop them first, or keep the columns")
            raise FeedError(msg)
        change = "replaced" if info.connected else "connected"
        key = info.name.lower()
        if key in eng.scans:
            eng.scans.pop(key).release()
        info.schema, info.plan = schema, node
        info.time_col, info.end_col, info.time_kind = node.time_col, node.end_col, node.time_kind
        info.options = {**info.options, **options}
        source.set_schema(schema, node.time_col, lateness)
        eng.scans[key] = ScanOperator(node, eng.rt, lateness,
                                      eng.ingest_limits.max_dead_letters)
        eng._compile()
        if eng.recovery is not None:
            eng.recovery.journal({"header": info.name, "columns": [list(c) for c in columns],
                                  "options": dict(options)})
        log.info("stream %s: %s, schema %s", info.name, change, schema.simpleString())
        return {"schema": schema.simpleString(), "change": change}

    # -- STOP and resumption --------------------------------------------------------------
    def stop(self, stream: str) -> list[str]:
        """Pause the queries reading ``stream`` until data comes again; their names."""
        source = self.source(stream)
        info = self.engine.catalog.stream(stream)
        source.stopped = True
        paused = []
        for run in self.engine.running.values():
            if info.plan in walk(run.info.plan) and run.info.status is QueryStatus.RUNNING:
                run.info.status = QueryStatus.PAUSED
                run.info.log.append(f"cycle {self.engine.cycle}: paused: its feed stopped "
                                    f"stream {info.name!r} (STOP)")
                paused.append(run.info.name)
        self.paused.add(info.name.lower())
        return paused

    def resume_fed(self) -> None:
        """Resume the queries of the stopped streams whose data came again (each cycle)."""
        for key in list(self.paused):
            source = self.engine.sources.get(key)
            if isinstance(source, FeedSource) and source.stopped:
                continue
            self.paused.discard(key)
            info = self.engine.catalog.streams.get(key)
            for run in self.engine.running.values():
                if run.info.status is not QueryStatus.PAUSED:
                    continue
                if info is not None and info.plan not in walk(run.info.plan):
                    continue
                if any(self.state(s.name) == "stopped" for s in
                       self.engine.catalog.streams.values() if s.plan in walk(run.info.plan)):
                    continue  # another stream it reads is still stopped
                run.info.status = QueryStatus.RUNNING
                run.info.log.append(f"cycle {self.engine.cycle}: resumed: data came again on "
                                    f"stream {info.name if info else key!r}")

    # -- REMOVE ---------------------------------------------------------------------------
    def remove(self, stream: str, reason: str = "its feed removed it (REMOVE)") -> list[str]:
        """Stop every query reading ``stream`` (the reason in its log), drop the streams
        derived from it, then the stream with its queue and spool; the queries stopped.
        """
        eng = self.engine
        source = self.source(stream)
        info = eng.catalog.stream(stream)
        stopped = []
        for run in list(eng.running.values()):
            if info.plan not in walk(run.info.plan):
                continue
            run.info.status = QueryStatus.STOPPED
            run.info.log.append(f"cycle {eng.cycle}: stopped: stream {info.name!r} was "
                                f"removed: {reason}")
            eng._release_query(run)
            eng.stopped[run.info.name.lower()] = run
            stopped.append(run.info.name)
        for derived in [s for s in eng.catalog.streams.values()
                        if s.derived and info.plan in walk(s.plan)]:
            del eng.catalog.streams[derived.name.lower()]
        key = info.name.lower()
        del eng.catalog.streams[key]
        if key in eng.scans:
            eng.scans.pop(key).release()
        eng.sources.pop(key)
        source.delete()
        self.paused.discard(key)
        eng._compile()
        if eng.recovery is not None:
            eng.recovery.journal({"remove": info.name, "reason": reason})
        log.info("stream %s removed (%s); stopped %s", info.name, reason, stopped or "nothing")
        return stopped


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

