"""The Engine: the catalog, the global plan and the cycle loop behind one small API.

from sparkcq import Engine
eng = Engine()
eng.execute("CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
eng.execute("CREATE QUERY q AS SELECT k, avg(v) AS a FROM s [RANGE 10] GROUP BY k")
eng.push("s", [{"k": "a", "v": 1.0, "t": 3}], watermark=5)
eng.run_until_idle()
eng.results("q")
"""

from __future__ import annotations

import datetime as dt
import hashlib
import inspect
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    _parse_datatype_string,
)

from sparkcq.aggregates.user import define_aggregate, load_aggregate_class
from sparkcq.catalog import (
    Catalog,
    FunctionInfo,
    QueryInfo,
    QueryStatus,
    StreamInfo,
    TableInfo,
    TableSource,
    ensure_identifier,
)
from sparkcq.errors import (
    AnalysisError,
    CatalogError,
    Location,
    QuerySyntaxError,
    ScriptError,
    SourceError,
    SparkcqError,
    UnknownNameError,
)
from sparkcq.feeds import FeedStreams
from sparkcq.io.feed_source import FeedSource
from sparkcq.io.files import FilesSource
from sparkcq.io.generator import GeneratorSource
from sparkcq.io.postgres import (
    PostgresSink,
    ensure_table_name,
    parse_databases,
    read_table,
    resolve_database,
)
from sparkcq.io.sinks import (
    ConsoleSink,
    FilesSink,
    MemorySink,
    QueryOutput,
    Retention,
    Sink,
)
from sparkcq.io.sources import IngestLimits, MemorySource, PushReceipt, Source, to_pandas
from sparkcq.io.spool import Spool
from sparkcq.language.sql.parser import parse_script_located
from sparkcq.language.sql.statements import (
    CreateAggregate,
    CreateQuery,
    CreateStream,
    CreateStreamAs,
    CreateTable,
    Drop,
    Explain,
    OutputForm,
    Refresh,
    Show,
    Statement,
)
from sparkcq.model.time import (
    TIME_MAX,
    TIME_MIN,
    TimeKind,
    parse_duration,
    show_instant,
    unit_micros,
)
from sparkcq.plan.binder import bind_select
from sparkcq.plan.nodes import (
    Aggregate,
    EdgeKind,
    PlanNode,
    StreamScan,
    TableScan,
    render_tree,
    walk,
)
from sparkcq.plan.rules import optimize
from sparkcq.plan.sandbox import (
    HOW_TO_TRUST,
    TABLE_FORMATS,
    database_refusal,
    ensure_data_path,
    find_refusal,
    locate,
)
from sparkcq.recovery import Recovery, importable_name
from sparkcq.runtime.checkpoint import CheckpointStore
from sparkcq.runtime.cycle import CompiledQuery, CycleEngine, QueriesFailedError, compile_plan
from sparkcq.runtime.explain import explain_global_dot, explain_global_text
from sparkcq.runtime.failures import describe_failure, user_traceback
from sparkcq.runtime.frames import RowCounting, Runtime, unpersist_checkpoint
from sparkcq.runtime.functions import (
    ensure_data_type,
    function_origin,
    register_python_function,
    ship_module_by_value,
)
from sparkcq.runtime.global_plan import GlobalPlan
from sparkcq.runtime.lowering import lower
from sparkcq.runtime.operators.base import Operator
from sparkcq.runtime.operators.outputs import OP, TE, TS, SinkFormatter
from sparkcq.runtime.operators.scan import (
    ScanOperator,
    SourceBatch,
    merge_batches,
    project_batch,
)
from sparkcq.runtime.operators.shared_output import (
    SharedIntervalFormatter,
    encodable,
)
from sparkcq.runtime.operators.table import TableOperator, TableRows
from sparkcq.scripts import CatalogNames, Created, script_failure, statement_head
from sparkcq.session import make_session

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)


@dataclass
class CycleReport:
    """What one cycle did: for the console, metrics and benchmarks."""

    cycle: int
    seconds: float
    rows_in: int
    jobs: int
    watermarks: dict[str, int] = field(default_factory=dict)
    tables: dict[str, int] = field(default_factory=dict)  # the version of each table it read


log = logging.getLogger("sparkcq.engine")

@dataclass
class _Running:
    info: QueryInfo
    formatter: SinkFormatter  # its own records, or just its start when ``qid`` is set
    output: QueryOutput
    qid: int | None = None  # interval records formatted by the shared formatter


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
                 sinks: Mapping[str, Sink] | None = None, feed_dir: str | None = None,
                 max_spool_bytes: int = 1 << 30):
        # stop() stops Spark only if this engine started it (not a session it was given)
        self.owns_session = spark is None and SparkSession.getActiveSession() is None
        self.spark = spark or make_session(master, shuffle_partitions=shuffle_partitions)
        partitions = int(self.spark.conf.get("spark.sql.shuffle.partitions") or 4)
        self.rt = Runtime(self.spark, partitions=partitions)
        self.catalog = Catalog()
        # aggregates over one input with the same keys run as one (runtime/fusion.py) and
        # interval records of all queries are formatted together (shared_output.py); off
        # only to compare against the one-operator-per-query path
        self.fuse = fuse
        self.plan = GlobalPlan(self.rt, fuse=fuse)
        self.sources: dict[str, Source] = {}
        self.scans: dict[str, ScanOperator] = {}
        # scans of a feed stream's earlier schemas, read by queries that kept running when
        # its HEADER changed the schema (feeds.py): fed the new rows projected to their columns
        self.old_scans: dict[str, list[ScanOperator]] = {}
        # PostgreSQL databases statements may name (database='name'): the only ones a
        # sandboxed engine's clients may use; their URLs and passwords stay here
        self.databases = parse_databases(databases or {})
        # names this engine's commits in transactional sinks; restore_state takes the saved
        # one, so a replayed cycle is recognised as committed; a checkpoint directory keeps
        # it from its first use, so even cycles redone before any checkpoint are
        store = CheckpointStore(checkpoint_dir) if checkpoint_dir else None
        self.engine_id = engine_id or uuid.uuid4().hex[:16]
        if store is not None:
            self.engine_id = store.engine_id(self.engine_id)
        self.sinks: dict[str, Sink] = {
            "memory": MemorySink(), "console": ConsoleSink(), "files": FilesSink(),
            "postgres": PostgresSink(self.databases, self.engine_id, trusted)}
        self.running: dict[str, _Running] = {}
        self.intervals = SharedIntervalFormatter(self.rt)  # most queries' sink records
        # which operators' output rows a cycle counts (in its one action) for EXPLAIN GLOBAL
        self.cycles = CycleEngine(self.rt, self.plan, self.intervals, RowCounting(count_rows))
        self.compiled = compile_plan(self.plan, (), ())
        self._qids = 0
        self.stopped: dict[str, _Running] = {}  # failed queries, kept for their logs
        self.cycle = 0
        self.reports: list[CycleReport] = []
        self._anon = 0
        self._tables: dict[str, DataFrame] = {}
        self._retired: list[DataFrame] = []  # snapshots of replaced tables, to free
        # packages CREATE AGGREGATE ... USING may load code from (besides sparkcq's own)
        self.allow_udf_modules = tuple(allow_udf_modules)
        # a sandboxed engine (the default; the server's) refuses functions that reach the
        # JVM or the file system and paths outside ``data_roots`` (plan/sandbox.py)
        self.trusted = trusted
        self.ingest_limits = ingest_limits or IngestLimits()  # of pushed streams
        self.data_roots = tuple(os.path.realpath(r) for r in data_roots)
        for name, sink in (sinks or {}).items():
            self.register_sink(name, sink)
        self._depth = 0  # statements being executed (their API calls are not journaled)
        # feed streams spool what they acknowledge under ``feed_dir`` (by default in the
        # checkpoint directory, which is what makes the spool useful after a crash)
        self.feed_dir = feed_dir or (os.path.join(checkpoint_dir, "feed")
                                     if checkpoint_dir else None)
        self.max_spool_bytes = max_spool_bytes
        self.feeds = FeedStreams(self)
        # with a checkpoint directory: the catalog is journaled, each cycle's input logged,
        # committed cycles checkpointed, and a restart resumes where the last one stopped
        self.recovery = Recovery(self, store, checkpoint_every) if store is not None else None
        if self.recovery is not None:
            redone = self.recovery.recover()
            if redone or self.cycle:
                log.info("recovered from %s at cycle %d (%d cycles redone)",
                         checkpoint_dir, self.cycle, redone)

    # -- statements ----------------------------------------------------------------------
    def execute(self, sql: str) -> Any:
        """Run one statement or a script, all or nothing; returns the last statement's result.

        The whole script is parsed first, so a syntax error anywhere runs nothing. Then the
        statements run in order; when one fails, what the statements before it (and the
        failing one, part way) created is undone in reverse order: created queries, streams,
        tables and aggregates are dropped, a table a CREATE TABLE replaced comes back. A
        script of one statement raises that statement's own error; a longer one raises a
        ScriptError that names the failing statement's line and says nothing was applied.

        A DROP cannot be undone (a dropped query's state is gone), so a script holding a
        DROP holds only DROPs, and they are all checked before the first runs: each names
        something that exists, and whatever uses it is dropped earlier in the script.
        """
        located = parse_script_located(sql)
        try:
            return self._execute_located(located, sql)
        finally:
            self._free_retired()  # a failed script has put back what it replaced

    def _execute_located(self, located: list[tuple[Statement, Location]], sql: str) -> Any:
        drops = [stmt for stmt, _ in located if isinstance(stmt, Drop)]
        if drops and len(drops) < len(located):
            first = next(loc for stmt, loc in located if isinstance(stmt, Drop))
            msg = ("a script with DROP must hold only DROP statements: a DROP cannot be "
                   "undone if a later statement fails; run the DROPs as a script of their own")
            raise AnalysisError(msg, sql, first)
        if drops:
            self._check_drops(located, sql)
        self._depth += 1
        try:
            result = self._run_statements(sql, located)
        finally:
            self._depth -= 1
        if self.recovery is not None:
            self.recovery.journal_script(sql)
        return result

    def _run_statements(self, sql: str, located: list[tuple[Statement, Location]]) -> Any:
        anon = self._anon  # numbers of unnamed queries, given back when the script is undone
        created: list[Created] = []
        result: Any = None
        for i, (stmt, loc) in enumerate(located):
            before = CatalogNames.of(self.catalog)
            try:
                result = self._run_statement(stmt, sql)
            except Exception as e:
                created.append(Created.since(before, self.catalog))
                problems = self._undo(created)
                if not problems:
                    self._anon = anon
                applied = [statement_head(sql, at) for done, at in located[:i]
                           if isinstance(done, Drop)]
                if len(located) == 1 and not problems:
                    raise
                failure = script_failure(sql, located, i, e, applied, problems)
                if not isinstance(e, SparkcqError):
                    e.add_note(failure)  # a bug, not a mistake in the script: keep its class
                    raise
                raise ScriptError(failure, e, loc.line) from e
            created.append(Created.since(before, self.catalog))
        return result

    def _check_drops(self, located: list[tuple[Statement, Location]], sql: str) -> None:
        """Check a script of DROPs as a whole before any of them runs (see ``execute``)."""
        dropped: set[tuple[str, str]] = set()
        for i, (stmt, loc) in enumerate(located):
            assert isinstance(stmt, Drop)
            try:
                self._check_drop(stmt.kind, stmt.name, frozenset(dropped))
            except SparkcqError as e:
                if len(located) == 1:
                    raise
                failure = script_failure(sql, located, i, e, [], [])
                raise ScriptError(failure, e, loc.line) from e
            dropped.add((stmt.kind.upper(), stmt.name.lower()))

    def _undo(self, created: list[Created]) -> list[str]:
        """Undo what statements created, last first; what could not be undone, as text."""
        problems = []
        for step in reversed(created):
            for kind, name in step.drops():
                try:
                    self.drop(kind, name)
                except Exception as e:  # noqa: BLE001 - reported with the script's error
                    problems.append(f"DROP {kind} {name} failed: {e}")
            for key, table in step.replaced_tables.items():
                current = self.catalog.tables.get(key)
                if current is not None and current.source is not None \
                        and current.source.snapshot:
                    self._retired.append(current.dataframe)
                self.catalog.tables[key] = table
                self._tables[key] = table.dataframe
            if step.replaced_tables:
                self._compile()  # a replacement not yet switched to is called off
        return problems

    def _run_statement(self, stmt: Statement, text: str) -> Any:
        _ensure_new_name(stmt, text)
        if isinstance(stmt, CreateStream):
            return self._create_stream(stmt, text)
        if isinstance(stmt, CreateTable):
            return self._create_table(stmt, text)
        if isinstance(stmt, CreateQuery):
            return self._create_query(stmt, text)
        if isinstance(stmt, CreateStreamAs):
            bound = bind_select(stmt.select, text, self.catalog, self.spark,
                                trusted=self.trusted)
            self.catalog.add_stream(StreamInfo(
                stmt.name, bound.plan.schema, None, None, bound.plan.time_kind, stmt.options,
                bound.plan, derived=True))
            return None
        if isinstance(stmt, CreateAggregate):
            return self._create_aggregate(stmt, text)
        if isinstance(stmt, Drop):
            return self.drop(stmt.kind, stmt.name)
        if isinstance(stmt, Refresh):
            return self.refresh_table(stmt.name)
        if isinstance(stmt, Explain):
            if stmt.select is not None:
                return render_tree(optimize(bind_select(
                    stmt.select, text, self.catalog, self.spark, trusted=self.trusted).plan,
                    running=self.plan.ops))
            if stmt.glob or stmt.name is None:
                return self.explain_global(stmt.fmt)
            return self.explain(stmt.name)
        if isinstance(stmt, Show):
            return self.show(stmt.what)
        msg = f"unsupported statement {type(stmt).__name__}"
        raise QuerySyntaxError(msg)

    def _schema(self, stmt: CreateStream | CreateTable, text: str) -> StructType:
        fields = []
        for c in stmt.columns:
            type_sql = c.type_sql
            if type_sql.upper() == "DATETIME":
                type_sql = "TIMESTAMP"
            try:
                dtype = _parse_datatype_string(type_sql)
            except Exception:  # noqa: BLE001 - Spark raises several kinds of parse errors
                msg = f"unknown type {c.type_sql!r} for column {c.name!r}"
                raise AnalysisError(msg, text, c.loc) from None
            fields.append(StructField(c.name, dtype))
        return StructType(fields)

    def _with_data_path(self, options: Mapping[str, str], text: str,
                        loc: Location | None) -> dict[str, str]:
        """``options`` with their ``path`` resolved inside the data roots (plan/sandbox.py),
        as is in a trusted engine.
        """
        out = dict(options)
        if not self.trusted and "path" in out:
            where = _option_loc(text, loc, out["path"])
            out["path"] = ensure_data_path(out["path"], self.data_roots, text, where)
        return out

    def _ensure_allowed_options(self, options: Mapping[str, str], text: str,
                                loc: Location) -> None:
        """Refuse, in an untrusted engine, a generator's ``expr_<column>`` that calls what a
        server client may not (plan/sandbox.py): Spark evaluates it like a query's SELECT.
        """
        if self.trusted:
            return
        own = {*self.catalog.functions, *self.catalog.aggregates}
        for key, sql in options.items():
            refusal = find_refusal(self.spark, sql, own, ("id", "rnd")) \
                if key.startswith("expr_") else None
            if refusal is not None:
                where = _option_loc(text, loc, sql) or loc
                spans = [(where.start, where.end)] if where is not loc else []
                msg = f"{key}: {refusal.message}"
                raise AnalysisError(msg, text, locate(refusal, text, spans, where))

    def _create_stream(self, stmt: CreateStream, text: str) -> None:
        opts = stmt.options
        source_kind = opts.get("source", "memory").lower()
        if source_kind == "feed" and not stmt.columns:
            feed = self._feed_source(stmt.name)
            self.catalog.add_stream(StreamInfo(
                stmt.name, StructType([]), None, None, TimeKind.TIMESTAMP, opts,
                StreamScan(stmt.name, StructType([]), "", None, TimeKind.TIMESTAMP)))
            self.sources[stmt.name.lower()] = feed
            return
        if not stmt.columns:
            msg = ("CREATE STREAM needs its columns, as in (pid BIGINT, t TIMESTAMP); only a "
                   "stream with source='feed' may take them from its feed's HEADER")
            raise AnalysisError(msg, text, stmt.loc)
        schema = self._schema(stmt, text)
        node, lateness = self._stream_scan(stmt.name, schema, opts, text, stmt.loc)
        source: Source
        try:
            if source_kind == "memory":
                source = MemorySource(self.spark, stmt.name, schema, node.time_col, lateness,
                                      self.ingest_limits, node.key)
            elif source_kind == "feed":
                source = self._feed_source(stmt.name)
                assert isinstance(source, FeedSource)
                source.set_schema(schema, node.time_col, lateness, node.key)
            elif source_kind == "generator":
                self._ensure_allowed_options(opts, text, stmt.loc)
                source = GeneratorSource(self.spark, stmt.name, schema, node.time_col, opts,
                                         numeric_time=node.time_kind is TimeKind.NUMERIC)
            elif source_kind == "files":
                source = FilesSource(self.spark, stmt.name, schema,
                                     self._with_data_path(opts, text, stmt.loc),
                                     roots=None if self.trusted else self.data_roots)
            else:
                msg = f"unknown source {source_kind!r}; available: memory, feed, generator, files"
                raise AnalysisError(msg, text, stmt.loc)
        except SourceError as e:
            raise AnalysisError(str(e), text, stmt.loc) from None
        self.catalog.add_stream(StreamInfo(stmt.name, schema, node.time_col, node.end_col,
                                           node.time_kind, opts, node, key=node.key))
        self.sources[stmt.name.lower()] = source
        self.scans[stmt.name.lower()] = ScanOperator(
            node, self.rt, lateness, self.ingest_limits.max_dead_letters)
        self._compile()

    def _feed_source(self, name: str) -> FeedSource:
        spool = Spool(os.path.join(self.feed_dir, name.lower())) if self.feed_dir else None
        return FeedSource(self.spark, name, spool, self.ingest_limits, self.max_spool_bytes)

    def _stream_scan(self, name: str, schema: StructType, opts: Mapping[str, str], text: str,
                     loc: Location) -> tuple[StreamScan, int]:
        """The scan node a source stream's definition gives, and its lateness in time units."""
        names = {f.name.lower(): f for f in schema.fields}
        time_col = opts.get("event_time")
        if time_col is None:
            msg = "CREATE STREAM needs WITH (event_time='column')"
            raise AnalysisError(msg, text, loc)
        kinds = []
        for opt in ("event_time", "end_time"):
            col_name = opts.get(opt)
            if col_name is None:
                continue
            f = names.get(col_name.lower())
            if f is None:
                msg = f"{opt} column {col_name!r} is not a column of {name!r}"
                raise AnalysisError(msg, text, _option_loc(text, loc, col_name) or loc)
            if isinstance(f.dataType, TimestampType | TimestampNTZType):
                kinds.append(TimeKind.TIMESTAMP)
            elif isinstance(f.dataType, _INTEGRAL):
                kinds.append(TimeKind.NUMERIC)
            else:
                msg = (f"{opt} column {col_name!r} is {f.dataType.simpleString()}; it must be "
                       "a TIMESTAMP or an integral number")
                raise AnalysisError(msg, text, _option_loc(text, loc, col_name) or loc)
        if len(set(kinds)) > 1:
            msg = "event_time and end_time must both be timestamps or both be numbers"
            raise AnalysisError(msg, text, loc)
        kind = kinds[0]
        unit = None
        if "time_unit" in opts:
            if kind is TimeKind.TIMESTAMP:
                msg = (f"time_unit applies to a numeric event time; {time_col!r} is a "
                       "timestamp, whose unit is known")
                raise AnalysisError(msg, text, _option_loc(text, loc, opts["time_unit"]))
            try:
                unit = unit_micros(opts["time_unit"])
            except ValueError as e:
                raise AnalysisError(str(e), text,
                                    _option_loc(text, loc, opts["time_unit"])) from None
        lateness = 0
        if "lateness" in opts:
            try:
                lateness = parse_duration(opts["lateness"]).to_units(kind, unit)
            except ValueError as e:
                msg = f"lateness: {e}"
                raise AnalysisError(msg, text, _option_loc(text, loc, opts["lateness"])
                                    or loc) from None
        end_col = names[opts["end_time"].lower()].name if "end_time" in opts else None
        key = self._key_option(name, opts, schema, text, loc)
        node = StreamScan(name, schema, names[time_col.lower()].name, end_col, kind, unit, key)
        return node, lateness

    @staticmethod
    def _key_option(name: str, options: Mapping[str, str], schema: StructType, text: str,
                    loc: Location) -> tuple[str, ...]:
        """The key columns of ``WITH (key='a, b')``, as the schema spells them (none: an
        append-only stream); an unknown, repeated or missing column is an AnalysisError
        pointing at the option.
        """
        raw = options.get("key")
        if raw is None:
            return ()
        where = _assignment_loc(text, loc, "key")
        names = {f.name.lower(): f.name for f in schema.fields}
        parts = [p.strip() for p in raw.split(",")]
        if not raw.strip() or any(not p for p in parts):
            msg = (f"key {raw!r}: name the key columns, separated by commas, e.g. "
                   f"key='{schema.fields[0].name}'")
            raise AnalysisError(msg, text, where)
        for p in parts:
            if p.lower() not in names:
                msg = (f"key column {p!r} is not a column of {name!r}; columns: "
                       f"{', '.join(names.values())}")
                raise AnalysisError(msg, text, where)
        if len({p.lower() for p in parts}) < len(parts):
            msg = f"key {raw!r} names a column twice"
            raise AnalysisError(msg, text, where)
        if "end_time" in options:
            msg = ("a keyed stream's rows are valid until their key's next row or delete; "
                   "it cannot also take end_time")
            raise AnalysisError(msg, text, where)
        return tuple(names[p.lower()] for p in parts)

    def _create_aggregate(self, stmt: CreateAggregate, text: str) -> None:
        params = []
        for p in stmt.params:
            try:
                params.append((p.name, ensure_data_type(p.type_sql)))
            except CatalogError:
                msg = f"unknown type {p.type_sql!r} for argument {p.name!r}"
                raise AnalysisError(msg, text, p.loc) from None
        try:
            cls = load_aggregate_class(stmt.using, stmt.name, self.allow_udf_modules)
            self._add_aggregate(stmt.name, cls, params, ensure_data_type(stmt.returns),
                                stmt.using)
        except CatalogError as e:
            raise AnalysisError(str(e), text, stmt.loc) from None

    def create_aggregate(self, name: str, cls: type,
                         arg_types: Sequence[str | DataType] | Mapping[str, str | DataType],
                         return_type: str | DataType) -> None:
        """Make the aggregate class ``cls`` callable from queries as ``name(...)``.

        ``cls`` follows the protocol of ``sparkcq.aggregates.user`` (``plus``, ``minus``,
        ``value``); ``arg_types`` lists its arguments' types (a mapping names them).
        Queries submitted from now on may call it; running queries go on untouched.
        """
        items = (list(arg_types.items()) if isinstance(arg_types, Mapping)
                 else [(f"x{i + 1}" if len(arg_types) > 1 else "x", t)
                       for i, t in enumerate(arg_types)])
        params = [(n, ensure_data_type(t)) for n, t in items]
        ref = importable_name(cls) if self.recovery is not None else None
        self._add_aggregate(name, cls, params, ensure_data_type(return_type))
        if self.recovery is not None:
            self.recovery.journal({"aggregate": name, "class": ref, "returns":
                                   ensure_data_type(return_type).simpleString(), "params":
                                   [[n, t.simpleString()] for n, t in params]})

    def _add_aggregate(self, name: str, cls: type, params: list[tuple[str, DataType]],
                       return_type: DataType, using: str | None = None) -> None:
        ensure_identifier(name, "aggregate")
        key = name.lower()
        if key in self.catalog.aggregates:
            msg = f"an aggregate named {name!r} already exists; DROP AGGREGATE {name} first"
            raise CatalogError(msg)
        if key in self.catalog.functions:
            msg = f"a function named {name!r} already exists; pick another name"
            raise CatalogError(msg)
        uda = define_aggregate(name, cls, params, return_type, using)
        ship_module_by_value(cls)
        self.catalog.aggregates[key] = uda

    def aggregate_users(self, name: str) -> list[str]:
        """The running queries and derived streams whose plans call aggregate ``name``."""
        def calls(plan: PlanNode) -> bool:
            return any(isinstance(n, Aggregate) and any(
                a.uda is not None and a.uda.name.lower() == name.lower() for a in n.aggs)
                for n in walk(plan))
        users = [r.info.name for r in self.running.values() if calls(r.info.plan)]
        return users + [s.name for s in self.catalog.streams.values()
                        if s.derived and calls(s.plan)]

    def _create_table(self, stmt: CreateTable, text: str) -> None:
        schema = self._schema(stmt, text)
        opts = stmt.options
        fmt = opts.get("format")
        if fmt is not None and fmt.lower() == "postgres":
            source = self._postgres_table(stmt, schema, text)
        elif not stmt.columns:
            msg = (f"CREATE TABLE {stmt.name} needs its columns: CREATE TABLE {stmt.name} "
                   "(name TYPE, ...); only a format='postgres' table takes the database's")
            raise AnalysisError(msg, text, stmt.loc)
        elif fmt is not None:
            path = opts.get("path")
            if path is None:
                msg = f"CREATE TABLE {stmt.name} WITH (format={fmt!r}) also needs path='...'"
                raise AnalysisError(msg, text, stmt.loc)
            if not self.trusted and fmt.lower() not in TABLE_FORMATS:
                msg = (f"format {fmt!r} is not allowed for server clients; tables read "
                       f"{', '.join(TABLE_FORMATS)} files, or format='postgres' from a "
                       f"configured database; {HOW_TO_TRUST}")
                raise AnalysisError(msg, text, _option_loc(text, stmt.loc, fmt))
            path = self._with_data_path(opts, text, stmt.loc)["path"]
            reader = self.spark.read.schema(schema)
            if fmt.lower() == "csv":
                reader = reader.option("header", opts.get("header", "true"))
            reader = reader.format(fmt.lower())
            source = TableSource(f"{fmt.lower()} {path}", lambda: reader.load(path),
                                 refresh_every=self._refresh_option(opts, text, stmt.loc))
        else:
            self.register_table(stmt.name, self.spark.createDataFrame([], schema), schema)
            return
        try:
            df = source.read()
        except ValueError as e:
            raise AnalysisError(str(e), text, stmt.loc) from None
        self.register_table(stmt.name, df, source=source)

    def _postgres_table(self, stmt: CreateTable, schema: StructType, text: str) -> TableSource:
        """How a ``format='postgres'`` table is read: ``database`` (configured) or, trusted,
        ``url`` [``user``, ``password``]; ``table`` or, trusted, ``query``; ``refresh``.
        """
        opts = stmt.options
        self._ensure_database_options(opts, text, stmt.loc)
        try:
            db = resolve_database(opts, self.databases, self.trusted)
        except CatalogError as e:
            raise AnalysisError(str(e), text, stmt.loc) from None
        table, query = opts.get("table"), opts.get("query")
        if (table is None) == (query is None):
            msg = (f"CREATE TABLE {stmt.name} WITH (format='postgres') reads table='name' "
                   "(or, in a trusted engine, query='SELECT ...')")
            raise AnalysisError(msg, text, stmt.loc)
        if table is not None:
            try:
                ensure_table_name(table)
            except ValueError as e:
                raise AnalysisError(str(e), text, _option_loc(text, stmt.loc, table)) from None
        where = f"{opts['database']}: " if "database" in opts else f"{db.label()} "
        origin = f"postgres {where}{table if table is not None else 'query'}"
        declared = schema if schema.fields else None
        spark = self.spark

        def read() -> DataFrame:
            return read_table(spark, db, declared, table=table, query=query)

        return TableSource(origin, read, snapshot=True,
                           refresh_every=self._refresh_option(opts, text, stmt.loc))

    def _ensure_database_options(self, options: Mapping[str, str], text: str,
                                 loc: Location | None) -> None:
        """Refuse, for server clients, database options other than a configured name."""
        if self.trusted:
            return
        refusal = database_refusal(options, list(self.databases))
        if refusal is not None:
            raw = next(k for k in ("url", "user", "password", "query") if k in options)
            raise AnalysisError(refusal, text, _option_loc(text, loc, options[raw]))

    @staticmethod
    def _refresh_option(options: Mapping[str, str], text: str, loc: Location) -> float | None:
        """A table's ``refresh='60 SECONDS'`` in seconds of processing time, or None."""
        every = options.get("refresh")
        if every is None:
            return None
        try:
            micros = parse_duration(every).to_units(TimeKind.TIMESTAMP)
        except ValueError as e:
            msg = f"refresh: {e}"
            raise AnalysisError(msg, text, _option_loc(text, loc, every)) from None
        if micros <= 0:
            msg = f"refresh: {every!r} is not a positive duration"
            raise AnalysisError(msg, text, _option_loc(text, loc, every))
        return micros / 1e6

    def register_table(self, name: str, data: Any, schema: StructType | None = None, *,
                       source: TableSource | None = None) -> None:
        """Register a static table from a Spark DataFrame, pandas frame or list of rows;
        ``source`` says where ``data`` was read from, so ``refresh_table`` can read it again.

        Rows registered under the name of a table that running queries read replace its
        rows from the next cycle on, and keep its schema (rows that are not a DataFrame
        take it): each of their joins with the table switches to the new rows at its
        position in that cycle, the table being a temporal relation whose old rows hold
        before that instant and new ones from it (docs/semantics.md, "Tables that
        change"). Raises CatalogError, naming the query, for new columns or a query that
        could not switch correctly.
        """
        ensure_identifier(name, "table")
        existing = self.catalog.tables.get(name.lower())
        readers = [] if existing is None else self._table_readers(existing.name)
        if existing is not None and readers:
            df = self._table_frame(data, existing.schema, existing.name)
            self._ensure_replaceable(existing, df, readers)
            self._replace_table(existing, df, readers, source)
            return
        df = self._table_frame(data, schema, name)
        version = node_version = 0
        if existing is not None:
            assert isinstance(existing.plan, TableScan)
            version, node_version = existing.version + 1, existing.plan.version + 1
            del self.catalog.tables[name.lower()]
            if existing.source is not None and existing.source.snapshot:
                self._retired.append(existing.dataframe)
        node = TableScan(name, df.schema, node_version)
        self._tables[name.lower()] = df
        self.catalog.add_table(self._table_info(name, df.schema, df, node, version, source))
        if self.recovery is not None and not self._depth and source is None:
            self.recovery.journal_table(name, df)

    @staticmethod
    def _table_info(name: str, schema: StructType, df: DataFrame, node: PlanNode,
                    version: int, source: TableSource | None) -> TableInfo:
        every = source.refresh_every if source is not None else None
        return TableInfo(name, schema, df, node, version, source, time.time(),
                         None if every is None else time.monotonic() + every)

    def refresh_table(self, name: str) -> None:
        """Read table ``name`` again from where it came from (``REFRESH TABLE name``) and
        replace it with that snapshot, as its next version (``register_table``).

        A table registered from data has nothing to re-read (CatalogError; ``load_table``
        replaces its rows); a failed read (SourceError) leaves the table as it was.
        """
        info = self.catalog.tables.get(name.lower())
        if info is None:
            known = ", ".join(sorted(self.catalog.tables)) or "none"
            msg = f"unknown table {name!r}; tables: {known}"
            raise UnknownNameError(msg)
        if info.source is None:
            msg = (f"table {info.name!r} was registered from data, so there is nothing to read "
                   "again; Engine.load_table replaces its rows")
            raise CatalogError(msg)
        try:
            df = info.source.read()
        except ValueError as e:
            version = info.version
            msg = f"REFRESH TABLE {info.name}: {e}; the table keeps version {version}"
            raise SourceError(msg) from None
        try:
            self.register_table(info.name, df, source=info.source)
        except BaseException:
            if info.source.snapshot:
                unpersist_checkpoint(df)
            raise

    def _refresh_due_tables(self) -> None:
        """Refresh the tables whose ``refresh`` interval has passed (before a cycle).

        A refresh that fails (the database is down, a running query still reads the table)
        keeps the version the table has, says why in SHOW TABLES, and is tried again one
        interval later.
        """
        now = time.monotonic()
        for info in list(self.catalog.tables.values()):
            if info.next_refresh is None or now < info.next_refresh:
                continue
            try:
                self.refresh_table(info.name)
            except SparkcqError as e:
                assert info.source is not None and info.source.refresh_every is not None
                info.note = f"refresh at cycle {self.cycle} failed: {e}"
                info.next_refresh = now + info.source.refresh_every
                log.warning("table %s: %s", info.name, info.note)
        self._free_retired()

    def _free_retired(self) -> None:
        """Free the snapshots of replaced tables that no table and no operator holds."""
        if not self._retired:
            return
        held = {id(t.dataframe) for t in self.catalog.tables.values()}
        held |= {id(df) for op in self.plan.ops.values() if isinstance(op, TableOperator)
                 for df in (op.df, op.retired) if df is not None}
        keep = []
        for df in self._retired:
            if id(df) in held:
                keep.append(df)
            else:
                unpersist_checkpoint(df)
        self._retired = keep

    def _table_frame(self, data: Any, schema: StructType | None, name: str) -> DataFrame:
        """``data`` as a DataFrame; rows that are not one take ``schema`` if given, their
        columns matched by name.
        """
        if isinstance(data, DataFrame):
            return data
        frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame.from_records(data)
        if schema is None:
            return self.spark.createDataFrame(frame)
        if frame.empty and len(frame.columns) == 0:
            return self.spark.createDataFrame([], schema)
        names = [f.name for f in schema.fields]
        if list(frame.columns) == list(range(len(names))):  # tuples: by position
            frame = frame.set_axis(names, axis=1)
        if sorted(map(str, frame.columns)) != sorted(names):
            msg = (f"rows for table {name!r} have columns {', '.join(map(str, frame.columns))}; "
                   f"the table has {', '.join(names)}")
            raise CatalogError(msg)
        return self.spark.createDataFrame(frame[names], schema=schema)  # type: ignore[arg-type]

    def _table_readers(self, name: str) -> list[str]:
        """The running queries that read the table called ``name``."""
        key = name.lower()
        return [r.info.name for r in self.running.values()
                if any(isinstance(n, TableScan) and n.name.lower() == key
                       for n in walk(r.info.plan))]

    def _ensure_replaceable(self, info: TableInfo, df: DataFrame, readers: list[str]) -> None:
        """Refuse new rows for a table that running queries read when they change its
        columns, or when a query could not switch to them correctly.
        """
        def columns(schema: StructType) -> str:
            return ", ".join(f"{f.name} {f.dataType.simpleString().upper()}"
                             for f in schema.fields)

        def shape(schema: StructType) -> list[tuple[str, DataType]]:
            return [(f.name.lower(), f.dataType) for f in schema.fields]

        if shape(df.schema) != shape(info.schema):
            msg = (f"table {info.name!r} is read by running queries {', '.join(readers)}; "
                   f"its new rows must keep its columns ({columns(info.schema)}), got "
                   f"({columns(df.schema)})")
            raise CatalogError(msg)
        problems = [(q, "its result is the table itself, valid at all times, which new "
                        "rows would contradict")
                    for q in readers
                    if self.running[q.lower()].info.plan.kind is EdgeKind.TABLE]
        problems += self.plan.replacement_problems(info.name)
        if problems:
            query, why = problems[0]
            msg = (f"table {info.name!r} cannot be replaced while query {query!r} runs: "
                   f"{why}; drop {query!r} first")
            raise CatalogError(msg)

    def _replace_table(self, info: TableInfo, df: DataFrame, readers: list[str],
                       source: TableSource | None) -> None:
        """Give a table read by running queries new rows: the next cycle switches to them."""
        key = info.name.lower()
        del self.catalog.tables[key]
        if info.source is not None and info.source.snapshot:
            self._retired.append(info.dataframe)
        self.catalog.add_table(self._table_info(info.name, info.schema, df, info.plan,
                                                info.version + 1, source))
        self._tables[key] = df
        for query in readers:
            self.catalog.query(query).log.append(
                f"cycle {self.cycle}: table {info.name!r} replaced (version "
                f"{info.version + 1}): its joins switch to the new rows in the next cycle")
        self._compile()

    def load_table(self, name: str, rows: Any) -> None:
        """Replace a table's contents (rows as pandas or a list) keeping its schema; see
        ``register_table`` for a table running queries read.
        """
        info = self.catalog.tables.get(name.lower())
        if info is None:
            msg = f"unknown table {name!r}"
            raise UnknownNameError(msg)
        self.register_table(info.name, rows, info.schema)

    def _create_query(self, stmt: CreateQuery, text: str) -> str:
        name = stmt.name
        if not name:
            self._anon += 1
            name = f"query_{self._anon}"
        self.catalog.ensure_free(name)
        bound = bind_select(stmt.select, text, self.catalog, self.spark, trusted=self.trusted)
        bound = replace(bound, plan=optimize(bound.plan, running=self.plan.ops))
        sink = stmt.options.get("sink", "memory").lower()
        if sink not in self.sinks:
            msg = f"unknown sink {sink!r}; available: {', '.join(sorted(self.sinks))}"
            raise AnalysisError(msg, text, stmt.loc)
        if sink == "files" and (problem := FilesSink.check(stmt.options)):
            raise AnalysisError(problem, text, stmt.loc)
        target = self.sinks[sink]
        if isinstance(target, PostgresSink):
            self._ensure_database_options(stmt.options, text, stmt.loc)
            if problem := target.check(stmt.options):
                raise AnalysisError(problem, text, stmt.loc)
        options = self._with_data_path(stmt.options, text, stmt.loc) if sink == "files" \
            else dict(stmt.options)
        if problem := Retention.check(stmt.options):
            raise AnalysisError(problem, text, stmt.loc)
        output = QueryOutput(name, [f.name for f in bound.plan.schema.fields],
                             bound.plan.time_kind is TimeKind.TIMESTAMP, dict(options),
                             bound.plan.schema, bound.form)
        try:
            target.prepare(output)  # before anything is added: a refusal leaves no trace
        except SparkcqError as e:
            raise AnalysisError(str(e), text, stmt.loc) from None
        info = QueryInfo(name, text, bound.plan, sink, dict(options))
        info.options["form"] = bound.form
        self.catalog.add_query(info)
        nodes = walk(bound.plan)
        shared = [n for n in nodes if n in self.plan.ops]
        root_shared = bound.plan in self.plan.ops
        notes = self.plan.add(bound.plan, name, self._operator_for)
        info.log.append(f"cycle {self.cycle}: compiled: {len(nodes)} operators, "
                        f"{len(shared)} shared with running queries")
        formatter = SinkFormatter(bound.plan, self.rt, bound.form, name)
        if root_shared:
            formatter.seeded_inputs, missing = self.plan.seedable([bound.plan])
            notes += missing
        info.log += [f"cycle {self.cycle}: {note}" for note in notes]
        qid = None
        if (self.fuse and bound.plan.kind is EdgeKind.RELATION
                and bound.form is OutputForm.INTERVALS and encodable(bound.plan.schema)):
            self._qids += 1
            qid = self._qids
        self.running[name.lower()] = _Running(info, formatter, output, qid)
        info.log.append(f"cycle {self.cycle}: started")
        self._compile()
        return name

    def _operator_for(self, node: PlanNode) -> Operator:
        if isinstance(node, StreamScan):
            key = node.name.lower()
            return next((s for s in self.old_scans.get(key, []) if s.node == node),
                        self.scans[key])
        if isinstance(node, TableScan):
            return lower(node, self.rt, table=self._table_rows()[node.name.lower()])
        return lower(node, self.rt)

    def _table_rows(self) -> dict[str, TableRows]:
        """Every table's rows and their version, by lower-case name; a snapshot (a
        PostgreSQL table's, which the catalog owns) is served as it is, not cached again.
        """
        return {key: TableRows(self._tables[key], info.version,
                               cache=not (info.source is not None and info.source.snapshot))
                for key, info in self.catalog.tables.items()}

    def drop(self, kind: str, name: str) -> None:
        """Drop a query (freeing operators no one else uses), a stream, a table or an
        aggregate; refused while something else uses it.
        """
        kind = kind.upper()
        self._check_drop(kind, name)
        if self.recovery is not None and not self._depth:
            self.recovery.journal({"drop": kind, "name": name})
        if kind == "AGGREGATE":
            del self.catalog.aggregates[name.lower()]
            return
        if kind == "QUERY":
            info = self.catalog.query(name)
            key = info.name.lower()
            run = self.running.get(key)
            if run is not None:
                self._release_query(run)
            self.stopped.pop(key, None)
            self.sinks[info.sink].forget(info.name)
            del self.catalog.queries[key]
            self.rt.end_cycle()  # between cycles: free the dropped state now
            return
        space = self.catalog.streams if kind == "STREAM" else self.catalog.tables
        del space[name.lower()]
        if kind == "STREAM" and name.lower() in self.sources:
            if name.lower() in self.scans:
                self.scans.pop(name.lower()).release()
            source = self.sources.pop(name.lower())
            source.close()
            if isinstance(source, FeedSource):
                source.delete()
            self._compile()

    def _check_drop(self, kind: str, name: str,
                    dropped: frozenset[tuple[str, str]] = frozenset()) -> None:
        """Raise CatalogError unless ``name`` can be dropped: it exists and nothing uses it.

        ``dropped`` holds ``(KIND, lower-case name)`` of what earlier DROPs of the same script
        remove: those are gone, and they no longer count as users.
        """
        kind = kind.upper()
        if (kind, name.lower()) in dropped:
            msg = f"{kind.lower()} {name!r} is already dropped by an earlier statement"
            raise CatalogError(msg)
        if kind == "AGGREGATE":
            if name.lower() not in self.catalog.aggregates:
                known = ", ".join(sorted(self.catalog.aggregates)) or "none"
                msg = f"unknown aggregate {name!r}; aggregates: {known}"
                raise UnknownNameError(msg)
            users = self.aggregate_users(name)
        elif kind == "QUERY":
            self.catalog.query(name)
            users = []
        else:
            space = self.catalog.streams if kind == "STREAM" else self.catalog.tables
            target = space.get(name.lower())
            if target is None:
                msg = f"unknown {kind.lower()} {name!r}"
                raise UnknownNameError(msg)
            users = [r.info.name for r in self.running.values()
                     if target.plan in walk(r.info.plan)]
            users += [s.name for s in self.catalog.streams.values()
                      if s.derived and s is not target and target.plan in walk(s.plan)]
        users = [u for u in users
                 if ("QUERY", u.lower()) not in dropped and ("STREAM", u.lower()) not in dropped]
        if users:
            msg = f"{kind.lower()} {name!r} is used by {', '.join(users)}; drop them first"
            raise CatalogError(msg)

    # -- sources and sinks ---------------------------------------------------------------
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

    def create_function(self, name: str, fn: Callable[..., Any], return_type: str | DataType,
                        vectorized: bool = False) -> None:
        """Make the Python function ``fn`` callable from queries as ``name(...)``.

        ``fn`` takes and returns plain values (``vectorized=False``; Spark still ships the
        rows through Arrow) or pandas Series (``vectorized=True``). Queries submitted from
        now on may call it; an exception it raises fails only the queries calling it.
        """
        ensure_identifier(name, "function")
        key = name.lower()
        if key in self.catalog.aggregates:
            msg = f"an aggregate named {name!r} already exists; pick another name"
            raise CatalogError(msg)
        used = [q.name for q in self.catalog.queries.values()
                if q.status in (QueryStatus.RUNNING, QueryStatus.PAUSED)
                and re.search(rf"\b{re.escape(key)}\s*\(", q.text, re.IGNORECASE)]
        if key in self.catalog.functions and used:
            msg = f"function {name!r} is used by queries {used}; drop them before replacing it"
            raise CatalogError(msg)
        dtype = ensure_data_type(return_type)
        ref = importable_name(fn) if self.recovery is not None else None
        register_python_function(self.spark, name, fn, dtype, vectorized)
        if self.recovery is not None:
            self.recovery.journal({"function": name, "ref": ref,
                                   "returns": dtype.simpleString(), "vectorized": vectorized})
        params = ", ".join(inspect.signature(fn).parameters)
        self.catalog.functions[key] = FunctionInfo(
            name, f"{name}({params}) -> {dtype.simpleString()}", function_origin(fn))

    def register_sink(self, name: str, sink: Sink) -> None:
        """Make ``sink`` available to queries as ``INTO name``."""
        self.sinks[name.lower()] = sink

    # -- input ---------------------------------------------------------------------------
    def push(self, stream: str, rows: Any, watermark: Any = None,
             end: bool = False, deletes: Any = None) -> PushReceipt:
        """Queue rows for a memory-source stream; ``watermark`` W promises that no later
        event has event time < W; ``end`` marks the end of the stream's input.

        ``deletes`` (a keyed stream's: ``WITH (key=...)``) each give the key columns and
        the event time, e.g. ``{"k": 1, "t": 7}``: the key's current row stops being valid
        at that time. A delete obeys the watermark like a row (a late one is a dead letter).

        Safe to call from any thread (the server's handlers do, while a cycle runs). Each
        row and delete is checked against the stream's schema: the receipt counts those
        accepted and lists the refused ones (they are also kept as dead letters). Raises
        ``BackpressureError`` when the stream's queue is full.
        """
        info, source = self._memory_source(stream)
        try:
            mark = self._time_value(watermark, info.time_kind)
        except (ValueError, TypeError) as e:
            msg = f"watermark {watermark!r} for stream {stream!r} is not a time: {e}"
            raise SourceError(msg) from None
        receipt = source.push(rows, mark, end, deletes)
        for error in receipt.rejected[:3]:
            log.warning("push to %s: %s", info.name, error.describe())
        return receipt

    def delete(self, stream: str, keys: Any, watermark: Any = None) -> PushReceipt:
        """Delete rows of a keyed memory-source stream: each of ``keys`` gives the key
        columns and the event time at which the key's current row stops being valid
        (``push(stream, None, watermark, deletes=keys)``; a feed's ``DELETE`` messages).
        """
        return self.push(stream, None, watermark, deletes=keys)

    def import_table(self, stream: str, table: Any, at: Any = None) -> PushReceipt:
        """Import a table into a keyed memory-source stream: its rows become the keys'
        current rows, valid from ``at`` until replaced or deleted.

        ``table`` is a table's name in the catalog, or rows (dicts, tuples, a pandas
        frame) with the stream's columns except its event time, which every row gets as
        ``at``: by default the stream's watermark now (the one in force for its next push,
        so the rows are on time); a time before the watermark makes them late (dead
        letters). Keys the table does not name keep their rows. A push like any other:
        the next cycle takes it.
        """
        info, source = self._memory_source(stream)
        if not info.key:
            msg = (f"stream {stream!r} has no key; a table is imported into a keyed stream "
                   "(WITH (key='column'))")
            raise SourceError(msg)
        assert info.time_col is not None
        if at is None:
            instant = source.watermark
            if instant in (TIME_MIN, TIME_MAX):
                msg = (f"stream {stream!r} has no watermark yet; give the time the table "
                       "is valid from: import_table(..., at=...)")
                raise SourceError(msg)
        else:
            try:
                given = self._time_value(at, info.time_kind)
            except (ValueError, TypeError) as e:
                msg = f"at={at!r} for stream {stream!r} is not a time: {e}"
                raise SourceError(msg) from None
            assert given is not None
            instant = given
        if isinstance(table, str):
            found = self.catalog.tables.get(table.lower())
            if found is None:
                msg = f"unknown table {table!r}; tables: {', '.join(self.catalog.tables) or 'none'}"
                raise UnknownNameError(msg)
            table = found.dataframe.toPandas()
        try:
            frame = to_pandas(table, StructType([f for f in info.schema.fields
                                                 if f.name != info.time_col]), stream)
        except SourceError as e:
            msg = (f"{e} (a table imported into {stream!r} gives every column but the event "
                   f"time {info.time_col!r}, which is at)")
            raise SourceError(msg) from None
        frame = frame.assign(**{info.time_col: _time_of(instant, info.time_kind)})
        return source.push(frame[[f.name for f in info.schema.fields]], None, False)

    def _memory_source(self, stream: str) -> tuple[StreamInfo, MemorySource]:
        """A stream fed by the memory source, and the source (SourceError otherwise)."""
        info = self.catalog.stream(stream)
        source = self.sources.get(info.name.lower())
        if not isinstance(source, MemorySource):
            msg = f"stream {stream!r} is not fed by the memory source; it cannot be pushed to"
            raise SourceError(msg)
        return info, source

    def end_input(self, stream: str) -> None:
        """Declare a memory stream complete: its watermark becomes +inf."""
        self.push(stream, None, end=True)

    @staticmethod
    def _time_value(value: Any, kind: TimeKind) -> int | None:
        """A watermark as a point of the stream's time axis: a whole number, or for a
        timestamp stream a datetime or ISO-8601 text (UTC when it names no zone).
        """
        if value is None:
            return None
        if kind is TimeKind.TIMESTAMP and isinstance(value, str | dt.datetime | pd.Timestamp):
            ts = pd.Timestamp(value)
            ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts
            return int(ts.value // 1000)
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            msg = f"expected a whole number, got {type(value).__name__}"
            raise ValueError(msg)
        number = float(value) if not isinstance(value, int) else value
        if number != int(number):
            msg = "expected a whole number"
            raise ValueError(msg)
        return int(number)

    # -- cycles --------------------------------------------------------------------------
    def has_pending_input(self) -> bool:
        """Whether any source has input the next cycle would take."""
        return any(s.has_pending() for s in self.sources.values())

    def run_cycle(self) -> CycleReport:
        """Drain sources, evaluate the compiled plan once, commit every sink, rewind.

        The cycle is a transaction (``runtime/cycle.py``): the queries that fail it on their
        own are stopped (status ``failed``, the reason in their log) and the cycle is redone
        for the others with the same input. Only a failure no single query explains is
        raised; the input then stays queued for the next cycle.
        """
        self._refresh_due_tables()
        self._take_input()
        return self.run_taken_input()

    def run_taken_input(self) -> CycleReport:
        """Run a cycle on the input its scans hold (``run_cycle`` after taking it)."""
        start = time.perf_counter()
        jobs_before = self.rt.jobs
        rows_before = sum(s.rows_in for s in self.scans.values())
        if self.recovery is not None:
            self.recovery.before_cycle()
        served = self.plan.table_versions()
        try:
            try:
                self.cycles.execute(self.compiled, self.cycle, self._write_sinks)
            except QueriesFailedError as failed:
                for query, error in failed.failures:
                    self._fail_query(self.running[query.name.lower()], error)
                self.cycles.execute(self.compiled, self.cycle, self._write_sinks)
        finally:
            self.rt.end_cycle()
        self._log_table_switches(served)
        report = CycleReport(
            self.cycle, time.perf_counter() - start,
            sum(s.rows_in for s in self.scans.values()) - rows_before,
            self.rt.jobs - jobs_before,
            {k: s.watermark for k, s in self.scans.items()},
            {n.name: v for n, v in self.plan.table_versions().items()
             if isinstance(n, TableScan)})
        self.reports.append(report)
        self.cycle += 1
        if self.recovery is not None:
            self.recovery.after_cycle()
        else:  # committed: no restart can use the input taken so far
            for source in self.sources.values():
                source.release_before(source.position())
        return report

    def _log_table_switches(self, served: dict[PlanNode, int]) -> None:
        """Say in each query's log where its joins switched to a table's new rows."""
        for node, version in self.plan.table_versions().items():
            if served.get(node, version) == version or not isinstance(node, TableScan):
                continue
            for run in self.running.values():
                if node not in walk(run.info.plan):
                    continue
                kind = run.info.plan.time_kind
                where = ", ".join(show_instant(at, kind) for at in
                                  self.plan.switched_at(run.info.plan, node, version))
                run.info.log.append(
                    f"cycle {self.cycle}: table {node.name!r} version {version} "
                    + (f"in effect from {where}" if where else "in effect from its start"))

    def _take_input(self) -> None:
        """Give each scan its source's new batch (after any batch a failed cycle kept)."""
        self.feeds.resume_fed()
        for key, source in self.sources.items():
            if key not in self.scans:
                continue  # a feed stream before its HEADER
            batch = source.poll()
            if self.recovery is not None and not self._idle(batch, self.scans[key]):
                self.recovery.record_input(key, partial(_describe, source, batch))
            self._hand_batch(key, batch)

    def _hand_batch(self, key: str, batch: SourceBatch) -> None:
        """Give a stream's batch to its scan, and to the scans of its earlier schemas."""
        self.scans[key].batch = merge_batches(self.scans[key].batch, batch)
        for old in self.old_scans.get(key, []):
            old.batch = merge_batches(old.batch, project_batch(batch, old.scan.schema))

    @staticmethod
    def _idle(batch: SourceBatch, scan: ScanOperator) -> bool:
        """Whether ``batch`` brings nothing: no rows, refusals or end, no higher watermark."""
        return (batch.df is None and not batch.end and not batch.rejected
                and (batch.watermark is None or batch.watermark <= scan.watermark))

    def take_logged_input(self, offsets: dict[str, list[dict[str, Any]]]) -> None:
        """Give each scan the batches a cycle took before a crash (``recovery.py``)."""
        for key, described in offsets.items():
            for one in described:
                self._hand_batch(key, self.sources[key].replay(one))

    def _compile(self) -> None:
        """Fix what the next cycles execute: after every change to the running queries."""
        queries = [CompiledQuery(r.info.name, r.info.plan, r.formatter, r.output.timestamp,
                                 r.qid) for r in self.running.values()]
        self.compiled = compile_plan(self.plan, queries, self.scans.values(),
                                     self._table_rows())

    def _fail_query(self, run: _Running, error: BaseException) -> None:
        """Stop one query after a failure; its log says why, the others keep running."""
        info = run.info
        info.status = QueryStatus.FAILED
        info.log.append(f"cycle {self.cycle}: failed: {describe_failure(error)}")
        frames = user_traceback(error)
        if frames:
            info.log.append(f"cycle {self.cycle}: traceback (user code):\n" + "\n".join(frames))
        self._release_query(run)
        self.stopped[info.name.lower()] = run

    def _release_query(self, run: _Running) -> None:
        """Take a query out of the running plan and free what only it used."""
        self.running.pop(run.info.name.lower(), None)
        for op in self.plan.remove(run.info.plan, run.info.name):
            if not isinstance(op, ScanOperator):
                op.release()
            elif op in (old := self.old_scans.get(op.scan.name.lower(), [])):
                old.remove(op)  # no query reads that schema of the stream any more
                op.release()
        run.formatter.release()
        if run.qid is not None and not any(r.qid is not None for r in self.running.values()):
            self.intervals.open.set(None)  # the last query it formatted: nothing stays open
        self._compile()

    def _write_sinks(self, tables: dict[str, pa.Table]) -> None:
        """Hand each sink the cycle's records of all its queries at once, replayable sinks
        first (``sparkcq.io.sinks``): if one fails, the cycle is rolled back and done again.
        """
        per_sink: dict[str, dict[str, tuple[QueryOutput, pd.DataFrame]]] = {}
        for query in self.compiled.queries:
            run = self.running[query.name.lower()]
            table = tables.get(run.info.name)
            if table is not None and table.num_rows:
                per_sink.setdefault(run.info.sink, {})[run.info.name] = (
                    run.output, table.to_pandas())
        for sink_name in sorted(per_sink, key=lambda n: not self.sinks[n].replayable):
            self.sinks[sink_name].write(self.cycle, per_sink[sink_name])

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
        deadline = None if duration is None else time.monotonic() + duration
        while deadline is None or time.monotonic() < deadline:
            began = time.monotonic()
            self.run_cycle()
            rest = interval - (time.monotonic() - began)
            if rest > 0:
                time.sleep(rest if deadline is None else min(rest, max(0.0, deadline
                                                                      - time.monotonic())))

    # -- state at a cycle boundary --------------------------------------------------------
    def save_state(self, path: str) -> None:
        """Write every operator's state and every stream's watermark under ``path``.

        Call between cycles. Operators are named by a fingerprint of their plan node, so an
        engine given the same statements can ``restore_state`` and go on where this one was.
        """
        os.makedirs(path, exist_ok=True)
        for key, op in self._stateful():
            op.save(os.path.join(path, key))
        marks = {name: {"watermark": s.watermark, "max_seen": s.max_seen, "ended": s.ended}
                 for name, s in self.scans.items()}
        with open(os.path.join(path, "streams.json"), "w", encoding="utf-8") as f:
            json.dump({"cycle": self.cycle, "engine_id": self.engine_id, "streams": marks}, f)

    def restore_state(self, path: str) -> None:
        """Load what ``save_state`` wrote; the same streams and queries must exist."""
        with open(os.path.join(path, "streams.json"), encoding="utf-8") as f:
            saved = json.load(f)
        for key, op in self._stateful():
            folder = os.path.join(path, key)
            if not os.path.isdir(folder):
                msg = f"no saved state for operator {op.node.label()!r} under {path!r}"
                raise CatalogError(msg)
            op.load(folder)
        for name, marks in saved["streams"].items():
            scan = self.scans[name]
            scan.watermark, scan.max_seen, scan.ended = (marks["watermark"], marks["max_seen"],
                                                         marks["ended"])
        self.cycle = saved["cycle"]
        self.engine_id = saved.get("engine_id", self.engine_id)
        for sink in self.sinks.values():
            sink.resume(self.engine_id)
        self.plan.resume()

    def _stateful(self) -> list[tuple[str, Operator]]:
        ops: list[tuple[str, Operator]] = []
        for node, op in self.plan.ops.items():
            ops.append((fingerprint(node), op))
        ops.append(("sink-shared-intervals", self.intervals))  # type: ignore[arg-type]
        family_ops = [op for f in self.plan.all_families() for op in f.operators()]
        family_ops += [op for g in self.plan.all_sliced_families() for op in g.operators()]
        for op in family_ops:
            ops.append((f"family-{fingerprint(op.node)}", op))
        for scan in self.scans.values():
            if scan.node not in self.plan.ops:
                ops.append((fingerprint(scan.node), scan))
        for run in self.running.values():
            ops.append((f"sink-{run.info.name.lower()}-{fingerprint(run.info.plan)}",
                        run.formatter))
        return [(key, op) for key, op in ops if op.states]

    # -- output --------------------------------------------------------------------------
    def results(self, query: str) -> pd.DataFrame:
        """A query's results so far (memory sink): user columns plus ``_ts`` and ``_te``.

        Interval results show each coalesced element once, with ``_te`` null while open;
        instant results have ``_ts`` = ``_te``; a changelog has ``_op`` '+' or '-'.
        """
        info = self.catalog.query(query)
        run = self.running.get(info.name.lower()) or self.stopped[info.name.lower()]
        sink = self.sinks[info.sink]
        if not isinstance(sink, MemorySink):
            msg = f"query {query!r} writes to the {info.sink!r} sink; results() reads memory"
            raise CatalogError(msg)
        frame = sink.frame(info.name, run.output.columns)
        # in time order (records of one cycle come in Spark's partition order)
        frame = frame.sort_values(TS, kind="mergesort", na_position="first")
        if not run.output.timestamp:  # integral times; keep them integral next to nulls
            for c in (TS, TE):
                frame[c] = frame[c].astype("Int64")
        cols = run.output.columns
        form = info.options["form"]
        if form is OutputForm.CHANGELOG and run.info.plan.kind is EdgeKind.RELATION:
            return frame[[*cols, TS, OP]].reset_index(drop=True)
        if run.info.plan.kind is not EdgeKind.RELATION or form is not OutputForm.INTERVALS:
            return frame[[*cols, TS, TE]].reset_index(drop=True)
        return close_elements(frame, cols)

    def query_log(self, query: str) -> list[str]:
        """The query's log: compile, start, failures (with the reason), in order."""
        return list(self.catalog.query(query).log)

    def dead_letters(self, stream: str) -> pd.DataFrame:
        """Rows of ``stream`` that were rejected (late, null time, ...) with the reason."""
        info = self.catalog.stream(stream)
        return self.scans[info.name.lower()].dead_letters().toPandas()

    def explain(self, query: str) -> str:
        """The plan of one query; nodes shared with other queries are marked."""
        info = self.catalog.query(query)
        marks = {}
        for node in walk(info.plan):
            users = self.plan.users.get(node, set()) - {info.name}
            if users:
                marks[node] = f"  (shared with {', '.join(sorted(users))})"
        return render_tree(info.plan, marks)

    def explain_global(self, fmt: str = "text") -> str:
        """The shared DAG: each operator, the queries using it, its reference count, state
        rows, rows per cycle and plan-building time; ``fmt='dot'`` gives Graphviz DOT.
        """
        if fmt == "dot":
            return explain_global_dot(self.plan)
        if fmt != "text":
            msg = f"unknown EXPLAIN format {fmt!r}; use 'text' or 'dot'"
            raise CatalogError(msg)
        return explain_global_text(self.plan)

    def show(self, what: str) -> pd.DataFrame:
        """SHOW STREAMS | TABLES | QUERIES | FUNCTIONS | AGGREGATES as a small table."""
        if what == "STREAMS":
            return pd.DataFrame([
                {"name": s.name, "kind": "derived" if s.derived else s.options.get("source",
                                                                                     "memory"),
                 "schema": s.schema.simpleString(), "event_time": s.time_col,
                 "state": "derived" if s.derived else self.feeds.state(s.name),
                 "key": ", ".join(s.key) or None,
                 "watermark": self.scans[k].watermark if k in self.scans else None}
                for k, s in self.catalog.streams.items()])
        if what == "FUNCTIONS":
            return pd.DataFrame([{"name": f.name, "signature": f.signature, "code": f.origin}
                                 for f in self.catalog.functions.values()],
                                columns=["name", "signature", "code"])
        if what == "AGGREGATES":
            return pd.DataFrame([{"name": a.name, "signature": a.signature, "code": a.origin,
                                  "used_by": ", ".join(self.aggregate_users(a.name))}
                                 for a in self.catalog.aggregates.values()],
                                columns=["name", "signature", "code", "used_by"])
        if what == "TABLES":
            return pd.DataFrame([_table_row(t) for t in self.catalog.tables.values()],
                                columns=["name", "schema", "source", "version", "read_at",
                                         "refresh", "note"])
        return pd.DataFrame([{"name": q.name, "status": q.status, "sink": q.sink,
                              "form": q.options["form"].value} for q in
                             self.catalog.queries.values()])

    def metrics(self) -> dict[str, Any]:
        """Engine metrics: cycles, state rows per operator, user aggregate instances per
        operator that runs them, dead letters per stream.
        """
        last = self.reports[-1] if self.reports else None
        return {
            "cycles": self.cycle,
            "last_cycle_seconds": last.seconds if last else None,
            "state_rows": {f"#{i} {n.label()}": op.state_rows
                           for i, (n, op) in enumerate(self.plan.ops.items())},
            "total_state_rows": sum(op.state_rows for op in self.plan.state_holders())
            + sum(r.formatter.state_rows for r in self.running.values())
            + self.intervals.state_rows,
            "live_instances": {f"#{i} {n.label()}": op.live_instances
                               for i, (n, op) in enumerate(self.plan.ops.items())
                               if op.live_instances is not None},
            "dead_letters": {s.scan.name: s.dead_count for s in self.scans.values()},
            "watermarks": {s.scan.name: (None if s.watermark == TIME_MAX else s.watermark)
                           for s in self.scans.values()},
        }

    def stop(self) -> None:
        """Release every operator; stop the Spark session if this engine started it."""
        for name in list(self.running):
            self.drop("QUERY", name)
        for source in self.sources.values():
            source.close()
        for sink in self.sinks.values():
            sink.close()
        if self.owns_session:
            self.spark.stop()


_CREATED_KINDS = {CreateStream: "stream", CreateStreamAs: "stream", CreateTable: "table",
                  CreateQuery: "query", CreateAggregate: "aggregate"}


def _describe(source: Source, batch: SourceBatch, folder: str) -> dict[str, Any]:
    return source.describe(batch, folder)


def _ensure_new_name(stmt: Statement, text: str) -> None:
    """Refuse a CREATE whose name is not an identifier, underlining the name."""
    kind = _CREATED_KINDS.get(type(stmt))
    name = getattr(stmt, "name", "")
    if kind is None or not name:
        return
    try:
        ensure_identifier(name, kind)
    except CatalogError as e:
        loc: Location | None = getattr(stmt, "loc", None)
        at = text.rfind(name, loc.start, loc.end) if loc is not None else -1
        if at >= 0:
            quoted = text[at - 1 : at] == "`"
            loc = Location.of_span(text, at - quoted, at + len(name) + quoted)
        raise AnalysisError(str(e), text, loc) from None


def _time_of(instant: int, kind: TimeKind) -> Any:
    """A point of the time axis as a value of an event-time column (UTC timestamps)."""
    if kind is TimeKind.TIMESTAMP:
        return pd.Timestamp(instant, unit="us", tz="UTC")
    return instant


def _assignment_loc(text: str, loc: Location | None, option: str) -> Location | None:
    """Where ``option='value'`` is written in the statement starting at ``loc`` (its
    whole assignment), or ``loc`` itself if it is not found there.
    """
    if loc is None:
        return None
    end = text.find(";", loc.end)
    found = re.compile(rf"\b{re.escape(option)}\s*=\s*('[^']*'|\"[^\"]*\")",
                       re.IGNORECASE).search(text, loc.start, len(text) if end < 0 else end)
    return loc if found is None else Location.of_span(text, found.start(), found.end())


def _option_loc(text: str, loc: Location | None, value: str) -> Location | None:
    """Where an option's ``value`` is written in the statement starting at ``loc``, or
    ``loc`` itself if it is not found there.
    """
    if loc is None:
        return None
    end = text.find(";", loc.end)
    at = text.find(value, loc.start, len(text) if end < 0 else end)
    return loc if at < 0 or not value else Location.of_span(text, at, at + len(value))


def _table_row(info: TableInfo) -> dict[str, Any]:
    """A table's row of SHOW TABLES: where it is read from, its version, when it was read."""
    every = info.source.refresh_every if info.source is not None else None
    read_at = None if info.read_at is None else dt.datetime.fromtimestamp(
        info.read_at, dt.UTC).isoformat(timespec="seconds")
    return {"name": info.name, "schema": info.schema.simpleString(),
            "source": info.source.origin if info.source is not None else "data",
            "version": info.version,
            "read_at": read_at, "refresh": None if every is None else f"{every:g} SECONDS",
            "note": info.note}


def fingerprint(node: PlanNode) -> str:
    """A name for a plan node that is the same in every process (for saved state)."""
    return hashlib.sha1(repr(node).encode()).hexdigest()[:16]


def close_elements(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Apply close records (C) to the open elements (I) they close: one row per element."""
    opened = frame[frame[OP] == "I"][[*cols, TS, TE]].reset_index(drop=True)
    closes = frame[frame[OP] == "C"]
    if closes.empty:
        return opened
    key = [*cols, TS]
    pending = opened[opened[TE].isna()].copy()
    pending["_rank"] = pending.groupby(key, dropna=False).cumcount()
    closes = closes[[*key, TE]].copy()
    closes["_rank"] = closes.groupby(key, dropna=False).cumcount()
    merged = pending.reset_index().merge(closes, on=[*key, "_rank"], how="left",
                                         suffixes=("", "_c"))
    idx = merged["index"][merged[f"{TE}_c"].notna()]
    opened.loc[idx.to_numpy(), TE] = merged.loc[merged[f"{TE}_c"].notna(), f"{TE}_c"].to_numpy()
    return opened
