"""Streams fed over the network: what HEADER, STOP and REMOVE do to the catalog and the
queries (DESIGN 4.5). Rows and heartbeats go straight to the stream's ``FeedSource``.

A feed stream is created with ``CREATE STREAM s WITH (source='feed')``: it is in the
catalog with no columns (``not connected``) and a query naming it is refused until the
feed's first HEADER gives its schema. A HEADER equal to the schema in force changes
nothing; one that differs takes effect at once for new queries, and each running query
reading the stream is judged against it (``_change_schema``): kept, on its old columns
and with its state, or stopped with the reason in its log.

STOP pauses the queries that read the stream (status ``paused``, a line in their logs)
until data comes again; REMOVE stops them (status ``stopped``, the reason in their logs)
and takes the stream, its queue and its spool away.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import StructField, StructType, _parse_datatype_string

from sparkcq.catalog import QueryInfo, QueryStatus, StreamInfo
from sparkcq.errors import AnalysisError, FeedError, Location, SparkcqError
from sparkcq.io.feed_source import FeedSource
from sparkcq.language.sql.parser import parse_script_located
from sparkcq.language.sql.statements import CreateQuery
from sparkcq.plan.binder import bind_select
from sparkcq.plan.nodes import PlanNode, StreamScan, walk
from sparkcq.runtime.operators.scan import ScanOperator

if TYPE_CHECKING:
    from sparkcq.engine import Engine, _Running

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

    def readers(self, stream: str) -> list[_Running]:
        """The running (or paused) queries reading ``stream``, with any of its schemas."""
        return [r for r in self.engine.running.values() if reads(r.info.plan, stream)]

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
        outcome: dict[str, list[str]] = {}
        if info.connected:
            outcome = self._change_schema(info, node)
        change = "changed" if info.connected else "connected"
        key = info.name.lower()
        if key in eng.scans:
            old = eng.scans.pop(key)
            if old.node in eng.plan.ops:  # queries keep reading it, with the old columns
                eng.old_scans.setdefault(key, []).append(old)
            else:
                old.release()
        info.schema, info.plan, info.key = schema, node, node.key
        info.time_col, info.end_col, info.time_kind = node.time_col, node.end_col, node.time_kind
        info.options = {**info.options, **options}
        source.set_schema(schema, node.time_col, lateness, node.key)
        eng.scans[key] = ScanOperator(node, eng.rt, lateness,
                                      eng.ingest_limits.max_dead_letters)
        eng._compile()
        if eng.recovery is not None:
            eng.recovery.journal({"header": info.name, "columns": [list(c) for c in columns],
                                  "options": dict(options)})
        log.info("stream %s: %s, schema %s", info.name, change, schema.simpleString())
        return {"schema": schema.simpleString(), "change": change, **outcome}

    def _change_schema(self, info: StreamInfo, node: StreamScan) -> dict[str, list[str]]:
        """Judge each query reading the stream against the new schema: one that compiles
        with the columns both schemas have (same name, same type) keeps running; another
        stops, unless it asked ``WITH (on_schema_change='keep')``: it then keeps the old
        columns, NULL where a new row has no such column. Both keep their state: they read
        the old scan, fed with the new rows projected to the old columns.
        """
        eng = self.engine
        old = info.plan
        assert isinstance(old, StreamScan)
        derived = [s.name for s in eng.catalog.streams.values()
                   if s.derived and old in walk(s.plan)]
        if derived:
            msg = (f"HEADER changes the schema of {info.name!r}, which the derived stream(s) "
                   f"{', '.join(derived)} read; drop them first, or keep the columns")
            raise FeedError(msg)
        same_time = (old.time_col, old.end_col, old.time_kind, old.time_unit, old.key) == \
            (node.time_col, node.end_col, node.time_kind, node.time_unit, node.key)
        kept, stopped = [], []
        for run in self.readers(info.name):
            problem = self._problem(run.info, info, node) if same_time else \
                "its event time or key changed"
            keep = run.info.options.get("on_schema_change", "stop").lower() == "keep"
            where = f"cycle {eng.cycle}: stream {info.name!r} changed its schema to " \
                f"{node.schema.simpleString()}"
            if problem is None or (keep and same_time):
                how = "it keeps running" if problem is None else \
                    f"it keeps the old columns (on_schema_change='keep'; {problem})"
                run.info.log.append(f"{where}: {how}")
                kept.append(run.info.name)
                continue
            self._stop_query(run, f"{where}: stopped: {problem}")
            stopped.append(run.info.name)
        return {"kept": kept, "stopped": stopped}

    def _problem(self, query: QueryInfo, info: StreamInfo, node: StreamScan) -> str | None:
        """Why ``query`` does not compile with the columns the old and the new schema of
        ``info`` share (None: it does).
        """
        eng = self.engine
        new = {f.name.lower(): f.dataType for f in node.schema.fields}
        both = StructType([f for f in info.schema.fields
                           if new.get(f.name.lower()) == f.dataType])
        statement = next((s for s, _ in parse_script_located(query.text)
                          if isinstance(s, CreateQuery) and s.name.lower() == query.name.lower()),
                         None)
        if statement is None:
            return "its text could not be checked against the new columns"
        saved = info.schema, info.plan
        info.schema = both
        info.plan = StreamScan(info.name, both, node.time_col, node.end_col, node.time_kind,
                               node.time_unit, node.key)
        try:
            bind_select(statement.select, query.text, eng.catalog, eng.spark,
                        trusted=eng.trusted)
        except SparkcqError as e:
            return str(e).splitlines()[0]
        finally:
            info.schema, info.plan = saved
        return None

    # -- STOP and resumption --------------------------------------------------------------
    def stop(self, stream: str) -> list[str]:
        """Pause the queries reading ``stream`` until data comes again; their names."""
        source = self.source(stream)
        info = self.engine.catalog.stream(stream)
        source.stopped = True
        paused = []
        for run in self.readers(info.name):
            if run.info.status is QueryStatus.RUNNING:
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
                if not reads(run.info.plan, key):
                    continue
                if any(self.state(s.name) == "stopped" for s in
                       self.engine.catalog.streams.values() if reads(run.info.plan, s.name)):
                    continue  # another stream it reads is still stopped
                run.info.status = QueryStatus.RUNNING
                run.info.log.append(f"cycle {self.engine.cycle}: resumed: data came again on "
                                    f"stream {info.name if info else key!r}")

    def _stop_query(self, run: _Running, line: str) -> None:
        """Stop one query for its stream's sake (status ``stopped``, ``line`` in its log)."""
        run.info.status = QueryStatus.STOPPED
        run.info.log.append(line)
        self.engine._release_query(run)
        self.engine.stopped[run.info.name.lower()] = run

    # -- REMOVE ---------------------------------------------------------------------------
    def remove(self, stream: str, reason: str = "its feed removed it (REMOVE)") -> list[str]:
        """Stop every query reading ``stream`` (the reason in its log), drop the streams
        derived from it, then the stream with its queue and spool; the queries stopped.
        """
        eng = self.engine
        source = self.source(stream)
        info = eng.catalog.stream(stream)
        stopped = []
        for run in self.readers(info.name):
            self._stop_query(run, f"cycle {eng.cycle}: stopped: stream {info.name!r} was "
                                  f"removed: {reason}")
            stopped.append(run.info.name)
        for derived in [s for s in eng.catalog.streams.values()
                        if s.derived and reads(s.plan, info.name)]:
            del eng.catalog.streams[derived.name.lower()]
        key = info.name.lower()
        del eng.catalog.streams[key]
        scans = [eng.scans.pop(key)] if key in eng.scans else []
        for scan in [*scans, *eng.old_scans.pop(key, [])]:
            scan.release()
        eng.sources.pop(key)
        source.delete()
        self.paused.discard(key)
        eng._compile()
        if eng.recovery is not None:
            eng.recovery.journal({"remove": info.name, "reason": reason})
        log.info("stream %s removed (%s); stopped %s", info.name, reason, stopped or "nothing")
        return stopped


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

