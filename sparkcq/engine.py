"""The Engine: a sparkcq system on one Spark session, behind one small API.

    from sparkcq import Engine
    eng = Engine()
    eng.execute("CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    eng.execute("CREATE QUERY q AS SELECT k, avg(v) AS a FROM s [RANGE 10] GROUP BY k")
    eng.push("s", [{"k": "a", "v": 1.0, "t": 3}], watermark=5)
    eng.run_until_idle()
    eng.results("q")

It is a facade: it wires the catalog, the statement handlers (``statements/``), the running
queries and the cycle driver (``runtime/``), sources and sinks (``io/``) and recovery, and
passes each call on. Nothing below it imports it.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, StructField, StructType

from sparkcq.catalog import Catalog, TableSource
from sparkcq.errors import QueryTextError, SourceError, UnknownNameError
from sparkcq.gateway import fewer_round_trips
from sparkcq.io import push as pushing
from sparkcq.io.delivery import Sinks
from sparkcq.io.feed_source import FeedSource
from sparkcq.io.postgres import PostgresSink, parse_databases
from sparkcq.io.sinks import ConsoleSink, FilesSink, MemorySink, Sink
from sparkcq.io.sources import IngestLimits, PushReceipt, Source
from sparkcq.language.apas.parser import quote_query
from sparkcq.language.query_text import query_statement, within_query_text
from sparkcq.language.sql.parser import parse_script_located
from sparkcq.language.sql.statements import ExplainFormat, ObjectKind, ShowTarget
from sparkcq.model.clock import Clock, SystemClock
from sparkcq.plan.nodes import StreamScan
from sparkcq.plan.options import ShedMode
from sparkcq.recovery import (
    AggregateEntry,
    DropEntry,
    FunctionEntry,
    HeaderEntry,
    JournalEntry,
    Recovery,
    RemoveEntry,
    ScriptEntry,
    TableFunctionEntry,
    importable_name,
)
from sparkcq.runtime.checkpoint import CheckpointStore
from sparkcq.runtime.cycle_cost import CycleCost
from sparkcq.runtime.driver import CycleDriver, CycleReport
from sparkcq.runtime.frames import RowCounting, Runtime
from sparkcq.runtime.functions import ensure_data_type
from sparkcq.runtime.global_plan import GlobalPlan
from sparkcq.runtime.partitioning import SmallCycles, large_cycle_conf
from sparkcq.runtime.queries import RunningQueries
from sparkcq.runtime.scans import StreamScans
from sparkcq.runtime.state import SavedState, StagedState, restore_state, save_state, stage_state
from sparkcq.session import configured_partitions, make_session
from sparkcq.statements import run_statement
from sparkcq.statements.context import Policy, StatementContext
from sparkcq.statements.create_aggregate import add_aggregate
from sparkcq.statements.create_function import create_function
from sparkcq.statements.create_table_function import add_table_function
from sparkcq.statements.drop import drop
from sparkcq.statements.feeds import FeedHeader, FeedRemove, FeedStop, feed_source
from sparkcq.statements.remove import Removal, release_removed
from sparkcq.statements.script import run_script
from sparkcq.statements.stop import resume_paused
from sparkcq.statements.tables import Tables, table_rows

log = logging.getLogger("sparkcq.engine")

__all__ = ["CycleReport", "Engine"]


class Engine:
    """A sparkcq system on one Spark session: define streams, run continuous queries."""

    def __init__(self, spark: SparkSession | None = None, master: str | None = None,
                 shuffle_partitions: int = 4,
                 count_rows: RowCounting | str = RowCounting.CACHED,
                 fuse: bool = True, allow_udf_modules: Sequence[str] = (),
                 trusted: bool = False, data_roots: Sequence[str] = (),
                 ingest_limits: IngestLimits | None = None,
                 databases: Mapping[str, str] | None = None, engine_id: str | None = None,
                 checkpoint_dir: str | None = None, checkpoint_every: int = 1,
                 checkpoint_in_background: bool = True,
                 sinks: Mapping[str, Sink] | None = None, feed_dir: str | None = None,
                 max_spool_bytes: int = 1 << 30, clock: Clock | None = None,
                 shedding: ShedMode = ShedMode.OFF, small_cycles: SmallCycles | None = None):
        self.owns_session = spark is None and SparkSession.getActiveSession() is None
        self.spark = spark or make_session(master, shuffle_partitions=shuffle_partitions)
        fewer_round_trips(self.spark)  # a session made elsewhere too
        self.rt = Runtime(self.spark, partitions=configured_partitions(self.spark),
                          large_conf=large_cycle_conf(self.spark))
        self.clock = clock or SystemClock()
        self.catalog = Catalog()
        self.plan = GlobalPlan(self.rt, fuse=fuse)  # fuse=False: one operator per query
        limits = ingest_limits or IngestLimits()
        catalog = self.catalog
        self.queries = RunningQueries(self.rt, self.plan,
                                      StreamScans(self.rt, limits.max_dead_letters),
                                      lambda: table_rows(catalog))
        self.sources: dict[str, Source] = {}
        # names its commits in transactional sinks, kept by the checkpoint directory
        store = CheckpointStore(checkpoint_dir) if checkpoint_dir else None
        self.engine_id = engine_id or uuid.uuid4().hex[:16]
        if store is not None:
            self.engine_id = store.engine_id(self.engine_id)
        # the databases statements may name (database='name'); URLs and passwords stay here
        known = parse_databases(databases or {})
        self.sinks = Sinks({"memory": MemorySink(), "console": ConsoleSink(),
                            "files": FilesSink(),
                            "postgres": PostgresSink(known, self.engine_id, trusted)})
        for name, sink in (sinks or {}).items():
            self.sinks.register(name, sink)
        # feed streams spool what they acknowledge under ``feed_dir`` (by default in the
        # checkpoint directory, which makes the spool useful after a crash)
        policy = Policy(trusted, tuple(os.path.realpath(r) for r in data_roots),
                        tuple(allow_udf_modules), known, limits,
                        feed_dir or (os.path.join(checkpoint_dir, "feed") if checkpoint_dir
                                     else None), max_spool_bytes, shedding)
        self.tables = Tables(self.spark, self.catalog, self.queries, self.clock)
        # a checkpoint directory journals the catalog and each cycle's input (recovery.py)
        self.recovery = (Recovery(store, self.sources, checkpoint_every,
                                  checkpoint_in_background)
                         if store is not None else None)
        self.driver = CycleDriver(self.rt, self.queries, self.sources, RowCounting(count_rows),
                                  self.recovery, self.clock,
                                  small_cycles or SmallCycles.parse(
                                      os.environ.get("SPARKCQ_SMALL_CYCLES", "auto")))
        self.trusted = trusted  # statements may use everything (docs/sandbox.md)
        self.scans: StreamScans = self.queries.scans  # each source stream's scan, by name
        self.reports: list[CycleReport] = self.driver.reports  # what each cycle did
        self.context = StatementContext(self.spark, self.catalog, self.queries, self.sources,
                                        self.sinks, policy, lambda: self.driver.cycle,
                                        self.tables, self.clock,
                                        reports=self.driver.reports)
        if self.recovery is not None:
            redone = self.recovery.recover(self)
            if redone or self.cycle:
                log.info("recovered from %s at cycle %d (%d cycles redone)",
                         checkpoint_dir, self.cycle, redone)

    # -- what the engine holds -----------------------------------------------------------
    @property
    def cycle(self) -> int:
        """The number of the next cycle."""
        return self.driver.cycle

    def _journal(self, entry: JournalEntry) -> None:
        if self.recovery is not None:
            self.recovery.record(entry, self.cycle)

    # -- statements ----------------------------------------------------------------------
    def execute(self, sql: str) -> Any:
        """Run one statement or a script, all or nothing; returns the last statement's result
        (``statements/script.py`` says what "all or nothing" means with DROP).
        """
        located = parse_script_located(sql)
        try:
            result = run_script(self.context, sql, located, run_statement)
        finally:
            self.tables.free_retired()  # a failed script has put back what it replaced
        self._journal(ScriptEntry(sql))
        return result

    def create_query(self, name: str, text: str, language: str = "sql",
                     options: Mapping[str, str] | None = None) -> str:
        """Start query ``name`` from ``text``: a SELECT (``language='sql'``) or a StreamAPAS
        query (``'apas'``, docs/apas.md); ``options`` as in ``CREATE QUERY ... WITH``. An
        error in ``text`` points at its line and column in ``text``.
        """
        statement, start = query_statement(name, text, language, options or {})
        try:
            return str(self.execute(statement))
        except QueryTextError as e:
            raise within_query_text(e, statement, start, text) from None

    def drop(self, kind: str, name: str) -> None:
        """Drop a query (freeing operators no one else uses), a stream, a table or an
        aggregate; refused while something else uses it.
        """
        drop(self.context, ObjectKind(kind.upper()), name)
        self._journal(DropEntry(kind.upper(), name))

    def create_aggregate(self, name: str, cls: type,
                         arg_types: Sequence[str | DataType] | Mapping[str, str | DataType],
                         return_type: str | DataType) -> None:
        """Make the aggregate class ``cls`` (``plus``, ``minus``, ``value``, as in
        ``sparkcq.aggregates.user``) callable as ``name(...)`` by queries submitted from now
        on; ``arg_types`` lists its arguments' types (a mapping names them).
        """
        items = (list(arg_types.items()) if isinstance(arg_types, Mapping)
                 else [(f"x{i + 1}" if len(arg_types) > 1 else "x", t)
                       for i, t in enumerate(arg_types)])
        params = [(n, ensure_data_type(t)) for n, t in items]
        returns = ensure_data_type(return_type)
        ref = importable_name(cls) if self.recovery is not None else ""
        add_aggregate(self.context, name, cls, params, returns)
        self._journal(AggregateEntry(name, ref, tuple((n, t.simpleString()) for n, t in params),
                                     returns.simpleString()))

    def create_function(self, name: str, fn: Callable[..., Any], return_type: str | DataType,
                        vectorized: bool = False) -> None:
        """Make ``fn`` callable as ``name(...)`` by queries submitted from now on: plain
        values in and out, or pandas Series (``vectorized``); rows go through Arrow; an
        exception it raises fails only the queries calling it.
        """
        ref = importable_name(fn) if self.recovery is not None else ""
        create_function(self.context, name, fn, return_type, vectorized)
        self._journal(FunctionEntry(name, ref, ensure_data_type(return_type).simpleString(),
                                    vectorized))

    def create_table_function(self, name: str, cls: type,
                              params: Mapping[str, str | DataType],
                              columns: Mapping[str, str | DataType]) -> None:
        """Make the table-function class ``cls`` (``process``, optional ``begin_chunk`` and
        ``end_chunk``, as in ``sparkcq.table_functions.user``) readable by queries submitted
        from now on as ``FROM name(TABLE s ..., args)``: ``params`` are its constructor's
        arguments, ``columns`` the rows it emits, each with its type.
        """
        typed = [(n, ensure_data_type(t)) for n, t in params.items()]
        out = StructType([StructField(n, ensure_data_type(t)) for n, t in columns.items()])
        ref = importable_name(cls) if self.recovery is not None else ""
        add_table_function(self.context, name, cls, typed, out)
        self._journal(TableFunctionEntry(name, ref, tuple((n, t.simpleString()) for n, t in typed),
                                         tuple((f.name, f.dataType.simpleString()) for f in out)))

    def register_library(self, prefix: str, module: str) -> None:
        """Make the annotated functions of ``module`` callable from StreamAPAS queries as
        ``prefix.name(...)`` (``CREATE LIBRARY prefix USING 'module'``); only modules the
        engine allows (``allow_udf_modules``) may load.
        """
        self.execute(f"CREATE LIBRARY {prefix} USING {quote_query(module)}")

    def aggregate_users(self, name: str) -> list[str]:
        """The running queries and derived streams whose plans call aggregate ``name``."""
        return self.context.view().aggregate_users(name)

    # -- tables --------------------------------------------------------------------------
    def register_table(self, name: str, data: Any, schema: StructType | None = None, *,
                       source: TableSource | None = None) -> None:
        """Register a table from a Spark DataFrame, pandas frame or rows (``source``: where
        they were read, for ``refresh_table``). Rows for a table running queries read
        replace its rows from the next cycle (docs/semantics.md, "Tables that change").
        """
        self.tables.register(name, data, schema, source=source, cycle=self.cycle)
        if self.recovery is not None and source is None:
            info = self.catalog.tables[name.lower()]
            self._journal(self.recovery.table_entry(info.name, info.dataframe))

    def load_table(self, name: str, rows: Any) -> None:
        """Replace a table's contents (rows as pandas or a list) keeping its schema; see
        ``register_table`` for a table running queries read.
        """
        info = self.catalog.tables.get(name.lower())
        if info is None:
            msg = f"unknown table {name!r}"
            raise UnknownNameError(msg)
        self.register_table(info.name, rows, info.schema)

    def insert_rows(self, name: str, rows: Any) -> int:
        """Add rows (dicts, or tuples in column order) to a table as its next version, as
        ``INSERT INTO name VALUES`` does; how many. Running queries switch to it in the
        next cycle. Rows pass the typed door of pushes: one that does not fit refuses all.
        """
        added = self.tables.append(name, list(rows), cycle=self.cycle)
        if self.recovery is not None and added:
            info = self.catalog.tables[name.lower()]
            self._journal(self.recovery.table_entry(info.name, info.dataframe))
        return added

    def refresh_table(self, name: str) -> None:
        """Read table ``name`` again from where it came from (``REFRESH TABLE name``)."""
        self.tables.refresh(name, self.cycle)

    # -- sources, sinks, input -----------------------------------------------------------
    def attach_source(self, stream: str, source: Source) -> None:
        """Feed a source stream from ``source`` instead of its current one."""
        info = self.catalog.stream(stream)
        if info.derived:
            msg = f"stream {stream!r} is derived from a query; it takes no source"
            raise SourceError(msg)
        attach = getattr(source, "attach", None)
        if attach is not None:
            attach(self.spark, info.schema, info.name)
        self.sources.pop(info.name.lower()).close()
        self.sources[info.name.lower()] = source

    def register_sink(self, name: str, sink: Sink) -> None:
        """Make ``sink`` available to queries as ``INTO name``."""
        self.sinks.register(name, sink)

    def push(self, stream: str, rows: Any, watermark: Any = None,
             end: bool = False, deletes: Any = None) -> PushReceipt:
        """Queue rows for a memory-source stream; ``watermark`` W promises that no later
        event has event time < W; ``end`` marks the end of its input; ``deletes`` (a keyed
        stream's) give key columns and event time, e.g. ``{"k": 1, "t": 7}``.

        Thread-safe. The receipt counts the rows accepted and lists those refused (also
        kept as dead letters); BackpressureError when the stream's queue is full.
        """
        return pushing.push(self.catalog, self.sources, stream, rows, watermark, end, deletes)

    def delete(self, stream: str, keys: Any, watermark: Any = None) -> PushReceipt:
        """End rows of a keyed stream: ``keys`` give key columns and the end's event time."""
        return self.push(stream, None, watermark, deletes=keys)

    def import_table(self, stream: str, table: Any, at: Any = None) -> PushReceipt:
        """Import a table (a catalog table's name, or rows without the event time) into a
        keyed memory-source stream: its rows become the keys' current rows, valid from
        ``at`` (by default the stream's watermark now) until replaced or deleted.
        """
        return pushing.import_table(self.catalog, self.sources, stream, table, at)

    def end_input(self, stream: str) -> None:
        """Declare a memory stream complete: its watermark becomes +inf."""
        self.push(stream, None, end=True)

    # -- feeds (docs/feed.md) ------------------------------------------------------------
    def feed_source(self, stream: str) -> FeedSource:
        """The feed source of ``stream`` (FeedError: not a feed stream)."""
        return feed_source(self.context, stream)

    def feed_header(self, stream: str, columns: Sequence[tuple[str, str]],
                    options: Mapping[str, str]) -> dict[str, Any]:
        """Apply a feed's HEADER: ``{"schema": ..., "change": "connected" | "unchanged" |
        "changed"}`` (and the queries ``kept`` and ``stopped`` by a change).
        """
        pairs = tuple((name, type_sql) for name, type_sql in columns)
        answer = run_statement(FeedHeader(stream, pairs, dict(options)), "", self.context)
        if answer.change != "unchanged":
            self._journal(HeaderEntry(stream, pairs, dict(options)))
        return answer.as_json()  # type: ignore[no-any-return]

    def feed_stop(self, stream: str) -> list[str]:
        """Pause the queries reading ``stream`` until data comes again; their names."""
        return run_statement(FeedStop(stream), "", self.context)  # type: ignore[no-any-return]

    def feed_remove(self, stream: str, reason: str = "its feed removed it (REMOVE)",
                    ) -> Removal:
        """Remove ``stream``: the queries reading it stop, or, created with
        ``on_remove='keep'``, see its input end and go on (``statements/remove.py``).
        """
        removal: Removal = run_statement(FeedRemove(stream, reason), "", self.context)
        self._journal(RemoveEntry(stream, reason))
        return removal

    # -- cycles --------------------------------------------------------------------------
    def has_pending_input(self) -> bool:
        """Whether any source has input the next cycle would take."""
        return self.driver.has_pending_input()

    def run_cycle(self) -> CycleReport:
        """Refresh due tables, resume fed streams, drain sources, evaluate the compiled
        plan once, commit every sink, rewind (``runtime/driver.py``).
        """
        self.tables.refresh_due(self.cycle)
        resume_paused(self.context)
        release_removed(self.context)
        self.driver.take_input()
        return self.driver.run(self.sinks.deliver)

    def run_until_idle(self, max_cycles: int = 1_000_000) -> int:
        """Run cycles while any source has pending input; returns the number of cycles."""
        n = 0
        while self.has_pending_input() and n < max_cycles:
            self.run_cycle()
            n += 1
        return n

    def run(self, duration: float | None = None, interval: float = 1.0) -> None:
        """Run cycles every ``interval`` seconds (processing time) for ``duration`` seconds
        or until interrupted.
        """
        clock = self.clock
        deadline = None if duration is None else clock.monotonic() + duration
        while deadline is None or clock.monotonic() < deadline:
            began = clock.monotonic()
            self.run_cycle()
            rest = interval - (clock.monotonic() - began)
            if rest > 0:
                clock.sleep(rest if deadline is None
                            else min(rest, max(0.0, deadline - clock.monotonic())))

    def redo_cycle(self, number: int, offsets: Mapping[str, list[dict[str, Any]]]) -> None:
        """Run cycle ``number`` again on the input a journal described (recovery)."""
        self.driver.resume_at(number)
        self.driver.take_logged(offsets)
        self.driver.run(self.sinks.deliver)

    def resume_at(self, cycle: int) -> None:
        """Number the next cycle ``cycle`` (recovery)."""
        self.driver.resume_at(cycle)

    # -- state at a cycle boundary --------------------------------------------------------
    def save_state(self, path: str, as_name: str | None = None) -> None:
        """Write every operator's state and every stream's watermark under ``path``
        (between cycles), for an engine given the same statements to ``restore_state``.
        A folder that will be ``as_name`` beside states saved before (a checkpoint
        directory's) writes only the runs of state made since, and names the others.
        """
        save_state(path, self.queries, SavedState(self.cycle, self.engine_id), as_name)

    def stage_state(self, path: str, as_name: str | None = None,
                    inputs_logged: bool = False) -> StagedState:
        """``save_state`` in two steps: the state taken now, its frames written by the
        result's ``write`` (in any thread, while cycles run), then ``done``.
        ``inputs_logged``: the checkpoint directory logged every cycle's input, so the
        events streams hold are named by cycle, not written (``CycleDriver.reread``).
        """
        return stage_state(path, self.queries, SavedState(self.cycle, self.engine_id),
                           as_name, inputs_logged)

    def wait_for_checkpoint(self) -> None:
        """Return once the checkpoint being written in the background, if any, is
        written (or failed: ``recovery.failed_checkpoints``).
        """
        if self.recovery is not None:
            self.recovery.settle(wait=True)

    def restore_state(self, path: str) -> None:
        """Load what ``save_state`` wrote; the same streams and queries must exist."""
        logged = None
        if self.recovery is not None:  # events held, named by the logged cycle taking them
            store, driver = self.recovery.store, self.driver

            def logged(scan: StreamScan, cycle: int) -> DataFrame | None:
                return driver.reread(scan, store.offsets(cycle) or {})

        saved = restore_state(path, self.queries, self.engine_id, logged)
        self.driver.resume_at(saved.cycle)
        self.engine_id = saved.engine_id
        self.sinks.resume(self.engine_id)

    # -- what the system shows -----------------------------------------------------------
    def results(self, query: str) -> pd.DataFrame:
        """A query's results so far (memory sink): user columns plus ``_ts`` and ``_te``."""
        return self.context.view().results(query)

    def query_log(self, query: str) -> list[str]:
        """The query's log: compile, start, failures (with the reason), in order."""
        return list(self.catalog.query(query).log)

    def dead_letters(self, stream: str) -> pd.DataFrame:
        """Rows of ``stream`` that were rejected (late, null time, ...) with the reason."""
        return self.context.view().dead_letters(stream)

    def explain(self, query: str) -> str:
        """The plan of one query; nodes shared with other queries are marked."""
        return self.context.view().explain(query)

    def explain_global(self, fmt: str = ExplainFormat.TEXT) -> str:
        """The shared DAG (``fmt='dot'``: as Graphviz DOT)."""
        return self.context.view().explain_global(fmt)

    def show(self, what: str) -> pd.DataFrame:
        """SHOW STREAMS | TABLES | QUERIES | FUNCTIONS | AGGREGATES as a small table."""
        return self.context.view().show(ShowTarget(what.upper()))

    def cycle_costs(self, last: int = 10) -> list[CycleCost]:
        """What the last ``last`` cycles cost: the driver's time by phase and the Spark
        jobs, stages, tasks, task time and shuffled records each ran (``EXPLAIN ANALYZE``).
        """
        return self.context.view().cycle_costs(self.spark, last)

    def metrics(self) -> dict[str, Any]:
        """Cycles, state rows, user aggregate instances, dead letters and watermarks."""
        return self.context.view().metrics(self.cycle, self.reports)

    def stop(self) -> None:
        """Release every operator; stop the Spark session if this engine started it.

        The queries are released, not dropped: a restart from the checkpoint directory
        runs them again.
        """
        self.wait_for_checkpoint()
        for name in list(self.queries.running):
            drop(self.context, ObjectKind.QUERY, name)
        for source in self.sources.values():
            source.close()
        self.sinks.close()
        if self.owns_session:
            self.spark.stop()
