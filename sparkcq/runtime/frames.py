"""Spark-side building blocks every operator uses: edge slices, state and cycle-scoped caches.

Edge encoding: the user's columns, then ``_t`` (LONG, the instant of the change)
and ``_d`` (LONG, +n when n copies of the row enter the relation at ``_t``, -n when they
leave). A stream edge carries instants with ``_d`` = 1; a keyed stream's edge also carries
its deletes, with ``_d`` = -1 (key columns and instant), read only by its ``KEY`` window
(``runtime/operators/window.py``). In a cycle an edge delivers exactly
the changes with ``lo <= _t < hi``: ``hi`` is the edge's watermark, so everything before it is
final and nothing emitted is ever taken back.
"""

from __future__ import annotations

import itertools
import os
import re
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from py4j.java_gateway import JavaObject
from pyspark.errors.exceptions.captured import capture_sql_exception
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame
from pyspark.sql.types import StructType

from sparkcq.model.clock import Clock
from sparkcq.model.columns import TE, TS, T
from sparkcq.runtime.columnar_checkpoints import (
    ColumnarCheckpoints,
    columnar_batches_id,
    free_columnar,
)
from sparkcq.runtime.commit_plan import CommitPlan
from sparkcq.runtime.cycle_cost import cycle_tag
from sparkcq.runtime.jvm_classes import session_instance
from sparkcq.runtime.partitioning import CHANGED_KEYS, INTERPRETED_CONF, SMALL_CYCLE_CONF
from sparkcq.runtime.size_estimates import SizeEstimates
from sparkcq.runtime.templates import PlanTemplates, bound_text

if TYPE_CHECKING:
    from sparkcq.runtime.saved_frames import FrameReader, FrameWriter

_TALLIED_BASE = 1 << 41  # ids of tallied frames (``Runtime.tally``)
_BUNDLE_SID = -(1 << 30)  # id of the bundled records of several queries
_OBSERVED_SID = -(1 << 31)  # id of the observed parts (which give no rows)
# what keeps no row of an observed part (see ``_observed``)
_NO_ROW = "spark_partition_id() < 0"


def q(name: str) -> str:
    """A back-quoted identifier for SQL text."""
    return "`" + name.replace("`", "``") + "`"


def sql_literal(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def no_broadcast(alias: str) -> str:
    """A join hint that shuffles relation ``alias`` instead of broadcasting it.

    For joins whose small side is computed in the cycle: a broadcast would compute that side
    in a Spark job of its own, while the driver waits, outside the cycle's one commit job.
    """
    return f"/*+ SHUFFLE_HASH({alias}) */"


class SqlViews:
    """Runs one operator's SQL over temporary views named uniquely for that operator.

    Operators compile to Spark SQL text built once; each cycle only re-binds it to that
    cycle's DataFrames, so building a cycle's plan costs a few calls into the JVM per
    operator instead of one per expression. A text is analysed once over views
    (``PlanTemplates``: later cycles put their frames in place of the views in the analysed
    plan); Spark resolves a view when a query is analysed (at once), so re-binding a view
    later does not change frames already built.

    A view holds its last frame, and with it that frame's whole plan, until it is bound
    again or dropped: once the operator is gone (its query dropped, its engine stopped),
    its views are dropped from the session before the next text is analysed
    (``_forget``). Kept, they held every plan an operator ever made alive in the JVM: 1.2 GB
    of plans after ten minutes of the test suite, and the JVM's collector marking them
    again every four seconds.
    """

    _numbers = itertools.count(1)  # a prefix per instance, never reused
    # every view's frame, and the view of each frame bound to one (by session and frame):
    # binding a view is a command Spark plans and runs, as costly as analysing a query,
    # and operators reading one frame (a stream's batch read by five windows) share one
    _bound: dict[str, DataFrame] = {}
    _views: dict[tuple[int, int], str] = {}
    # views whose operator is gone, to drop from their session's catalog
    _gone: list[str] = []

    def __init__(self, spark: SparkSession, kind: str, texts: int = 16):
        self.spark = spark
        self.prefix = f"sparkcq_{kind.lower()}_{next(SqlViews._numbers)}"
        self.templates = PlanTemplates(spark, texts)
        self._names: set[str] = set()  # the views this operator bound
        weakref.finalize(self, SqlViews._forget, self._names)

    def sql(self, template: str, **views: DataFrame) -> DataFrame:
        """Run ``template`` with each ``{name}`` replaced by a view bound to ``views[name]``."""
        return self.templates.sql(template, views, self.analyse)

    def sql_union(self, templates: Sequence[str], **views: DataFrame) -> DataFrame:
        """The union of ``templates`` over ``views``: what one text reading a view twice
        would give, as texts reading each view once, each analysed once (``templates``
        re-binds no text reading a view twice).
        """
        return union_by_name([self.sql(template, **views) for template in templates])

    def analyse(self, template: str, views: Mapping[str, DataFrame],
                ) -> tuple[DataFrame, dict[str, str]]:
        """Run ``template`` over views bound to ``views``: the frame, and the key of each
        view name.
        """
        if SqlViews._gone:  # before this text names any view, so none it names is dropped
            self._drop_gone()
        text, keys = template, {}
        for key, df in views.items():
            name = self.view_of(df, key)
            text = text.replace("{" + key + "}", name)
            keys[name] = key
        return self.spark.sql(text), keys

    def view_of(self, df: DataFrame, key: str) -> str:
        """A view bound to ``df``: one already bound to it, or this operator's ``key``.

        Not another key's view of this operator's: a frame that moves from one key to
        another between texts (a scan's held batch, ``b1`` then ``b0``) would be read
        through a name the same text binds again to the frame of that other key.
        """
        bound, views = SqlViews._bound, SqlViews._views
        own = f"{self.prefix}_{key}"
        name = views.get((id(self.spark), id(df)))
        if name is not None and bound.get(name) is df and (
                name == own or name not in self._names):
            return name
        name = own
        old = bound.get(name)
        if old is not None:
            views.pop((id(self.spark), id(old)), None)
        rebind_view(name, df)
        bound[name] = df
        views[(id(self.spark), id(df))] = name
        self._names.add(name)
        return name

    def _drop_gone(self) -> None:
        """Drop the views of operators that are gone from this session's catalog."""
        catalog = self.spark._jsparkSession.sessionState().catalog()  # type: ignore[union-attr]
        while SqlViews._gone:
            name = SqlViews._gone.pop()
            catalog.dropTempView(name)
            _MADE_VIEWS.pop((id(self.spark), name), None)

    @staticmethod
    def _forget(names: set[str]) -> None:
        """An operator is gone: let go of its views' frames, and have its views dropped
        (called by the collector, so it only records, with no call into the JVM).
        """
        for name in names:
            df = SqlViews._bound.pop(name, None)
            if df is not None:
                SqlViews._views.pop((id(df.sparkSession), id(df)), None)
            SqlViews._gone.append(name)


_PROJECTIONS: dict[int, SqlViews] = {}  # ``project``'s views and templates, per session


def project(df: DataFrame, *exprs: str, where: str | None = None) -> DataFrame:
    """``df.selectExpr(*exprs)`` (of its rows where SQL condition ``where`` holds), its
    text analysed once and re-bound to later frames.

    For the projections and filters operators build every cycle from SQL text over a
    frame of the cycle (generators of query records, a member's columns of its family's
    rows, a query's filter): Spark parses and analyses a long text afresh each time
    otherwise, and analyses every DataFrame call (see ``PlanTemplates``).
    """
    spark = df.sparkSession
    views = _PROJECTIONS.get(id(spark))
    if views is None:
        views = _PROJECTIONS[id(spark)] = SqlViews(spark, "project", texts=256)
    condition = "" if where is None else f" WHERE {where}"
    return views.sql(f"SELECT {', '.join(exprs)} FROM {{inp}}{condition}", inp=df)


_SOME: dict[int, JavaObject] = {}  # Scala's ``Some`` of each session's JVM


def scala_some(spark: SparkSession) -> JavaObject:
    """Scala's ``Some`` object, to wrap a value as an ``Option`` for a JVM method."""
    some = _SOME.get(id(spark))
    if some is None:
        jvm = spark._jvm
        assert jvm is not None
        some = _SOME[id(spark)] = getattr(getattr(jvm.scala, "Some$"), "MODULE$")
    return some


# the view bound last to each name (by session and name), first made by Spark, and the
# schema of the frame it was made for: ``rebind_view`` binds the name again from it
_MADE_VIEWS: dict[tuple[int, str], tuple[StructType, JavaObject]] = {}


def rebind_view(name: str, df: DataFrame) -> None:
    """Bind temporary view ``name`` to ``df``, which has the schema the name had.

    ``createOrReplaceTempView`` is a command Spark analyses, plans and runs as a SQL
    execution of its own (measured: 5-7 ms each, two to nine bindings per cycle); putting a
    copy of the view Spark made for the name, holding ``df``'s plan, into the session's
    catalog does what that command does for a frame already analysed, in four calls. The
    first binding of a name, and one whose frame has another schema, take the command.
    """
    spark = df.sparkSession
    key = (id(spark), name)
    made = _MADE_VIEWS.get(key)
    if made is None or made[0] != df.schema:
        df.createOrReplaceTempView(name)
        catalog = spark._jsparkSession.sessionState().catalog()  # type: ignore[union-attr]
        _MADE_VIEWS[key] = (df.schema, catalog.getRawTempView(name).get())
        return
    view = made[1]
    copy = view.copy(view.tableMeta(), scala_some(spark).apply(df._jdf.logicalPlan()))
    spark._jsparkSession.sessionState().catalog().createTempView(  # type: ignore[union-attr]
        name, copy, True)
    _MADE_VIEWS[key] = (made[0], copy)  # holds no plan the catalog does not


class RowCounting(StrEnum):
    """Which operators' output rows a cycle counts, for EXPLAIN GLOBAL's rows per cycle.

    An operator's output is usually computed inside its consumers' plans, never on its own;
    counting it then means computing it once more in the commit (measured: a third of an
    interval join's cycle). ``cached`` (the default) counts the outputs the cycle
    materialises anyway, read by several operators or queries, and shows the others as
    ``inline``; ``all`` counts every output, at that cost; ``off`` counts nothing.
    """

    CACHED = "cached"
    ALL = "all"
    OFF = "off"


def bound_sql(value: int) -> str:
    """SQL for a whole number that changes from cycle to cycle (a watermark, a slice's
    ``lo``/``hi``), in a form Spark's code generation does not inline.

    Spark writes a long literal into the Java source it generates and caches compiled
    classes by that source, so a bound written as a literal makes every cycle compile its
    stages afresh (measured: six Janino compilations, 0.15-0.25 s of driver time per cycle
    of the tumbling aggregate). An array literal is passed to the generated code as an
    object instead, and the non-foldable index keeps the optimizer from turning the lookup
    back into a literal: the source, and the compiled class, stay the same every cycle.
    Allowed where Spark allows a non-deterministic expression (Project, Filter, Generate,
    Aggregate), not in a join condition.
    """
    return bound_text(value)


def bound(value: int) -> Column:
    """``bound_sql`` as a Column."""
    return F.expr(bound_sql(value))


@lru_cache(maxsize=4096)
def col(name: str) -> Column:
    """A column by exact name (names may hold dots); memoised, as each new Column is a round
    trip to the JVM and operators name the same few columns over and over.
    """
    return F.col("`" + name.replace("`", "``") + "`")


@dataclass
class Slice:
    """What an edge delivers in one cycle: changes in [lo, hi), or None when known empty.

    ``segments``, when an operator gives them (``SlicedAggregateOperator``), are the
    relation's whole content over [lo, hi) as interval rows: the user's columns, ``_from``
    and ``_to``, each row one copy valid over [_from, _to) (which may reach outside the
    slice). A consumer that reads them (RSTREAM) needs no state of the relation's content.
    """

    df: DataFrame | None
    lo: int
    hi: int
    segments: DataFrame | None = None
    # a stream scan's on-time events that arrived this cycle, whatever their time (at or
    # after ``lo``), each in the arrivals of exactly one cycle: for consumers keyed by event
    # time that need not wait for the watermark (``ScanOperator``); such a consumer reads
    # them instead of ``df``, every cycle
    arrivals: DataFrame | None = None
    # the segments are the relation's rows as coalesced elements: no two rows of one value
    # overlap or meet, and ``df`` holds exactly their starts and ends in [lo, hi), so a row
    # enters where a segment starts (ISTREAM) and leaves where one ends (DSTREAM)
    coalesced: bool = False
    # in the slice where a stream ends (hi becomes TIME_MAX): the watermark it had reached,
    # where a next chunk could have started at the earliest (``ChunkCutOperator``)
    ended_at: int | None = None
    # the relation's elements that start in [lo, hi), each with its end (``_ts``, ``_te``),
    # from an operator that knows every element's end when it starts (an interval join,
    # through filters and projections: ``element_intervals.element_source``); None when
    # none starts. Its query's records come from them and need no -1 changes
    elements: DataFrame | None = None


@dataclass(frozen=True)
class TaggedRecords:
    """Records of several queries in one frame, for the commit: column ``_sid`` holds a
    query's id, and each query's records are a struct column (NULL on other rows):
    ``queries`` maps its name to (id, column).
    """

    df: DataFrame
    queries: Mapping[str, tuple[int, str]]


@dataclass(frozen=True)
class Summary:
    """What the commit found in a measured frame (``Runtime.measure``)."""

    rows: int
    flagged: int  # rows whose flag was true
    largest: int | None  # the largest value (None: no row had one)


@dataclass
class Runtime:
    """Shared per-engine services: the Spark session, the cycle's caches and its commit.

    A cycle builds lazy plans only. Every state an operator replaced and every query's sink
    records are then computed by one Spark action (``commit_cycle``): a union of the
    records, each query's in its own struct column, whose tasks also observe each state's
    row count and earliest instant. That action also materialises the new states, whose
    lineage is cut by their local checkpoints, so the number of Spark jobs per cycle does
    not grow with the number of operators or queries.
    """

    spark: SparkSession
    partitions: int = 2  # hash partitions of a large cycle
    # the session's own values of what a small cycle changes (``SMALL_CYCLE_CONF``)
    large_conf: dict[str, str] = field(default_factory=dict)
    single: bool = False  # this cycle runs in one partition (``runtime/partitioning.py``)
    # this cycle changed the session's settings (a small or an interpreted cycle): its end
    # puts the session's own back
    conf_changed: bool = False
    # tells this engine's cycles' job tags from other engines' on the same session
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    job_tag: str | None = None  # the tag of the running cycle's Spark jobs
    cycle_frames: list[DataFrame] = field(default_factory=list)
    kept: list[DataFrame] = field(default_factory=list)  # cycle frames to keep if committed
    released: list[DataFrame] = field(default_factory=list)
    changed_states: list[StateFrame] = field(default_factory=list)
    # frames whose aggregates the commit computes, and who is told: see ``observe``
    observed: list[tuple[DataFrame, Sequence[Column], Callable[[list[int | None]], None],
                         bool]] = field(default_factory=list)
    # frames whose rows the commit counts by a small whole-number key: see ``tally``
    tallied: list[tuple[DataFrame, Column, Callable[[dict[int, int]], None]]] = field(
        default_factory=list)
    # frames measured where their one reader reads them: see ``measure_in_place``
    measured_in_place: list[tuple[DataFrame, str, str, Callable[[Summary], None]]] = (
        field(default_factory=list))
    # the frames this cycle's checkpoints (caches, state frames and runs) were made from:
    # their plans hold the observations made inside them
    cached_from: list[DataFrame] = field(default_factory=list)
    jobs: int = 0
    # frames a checkpoint written in the background still reads (``FramePins``)
    pins: FramePins = field(default_factory=lambda: FramePins())

    @property
    def cycle_partitions(self) -> int:
        """The partitions of this cycle's frames: 1 in a small cycle."""
        return 1 if self.single else self.partitions

    def label_jobs(self, cycle: int | None) -> str | None:
        """Name and tag the Spark jobs and frames of this thread's coming cycle after it
        (None: the cycle ended; the thread's own jobs are named by Spark again); returns
        the cycle's job tag.

        Spark gives every RDD it builds (several per operator each time a frame is planned)
        the call site of its creation, found by walking the JVM thread's stack unless the
        thread carries one (measured: 2.5% of the JVM's samples on a demo cycle's driver
        thread in that walk). The Spark UI then also shows which cycle a job belongs to.
        """
        label = None if cycle is None else f"sparkcq cycle {cycle}"
        sc = self.spark.sparkContext
        sc.setLocalProperty("callSite.short", label)  # type: ignore[arg-type]
        sc.setLocalProperty("callSite.long", label)  # type: ignore[arg-type]
        if self.job_tag is not None:
            sc.removeJobTag(self.job_tag)
        # the cycle's jobs carry a tag of their own: what they ran is read back by it
        # (``spark_work.tagged_work``) when a user asks what the cycle cost
        self.job_tag = None if cycle is None else cycle_tag(self.run_id, cycle)
        if self.job_tag is not None:
            sc.addJobTag(self.job_tag)
        return self.job_tag

    def run_in_one_partition(self, single: bool, interpreted: bool = False) -> None:
        """Run the coming cycle in one partition (``single``) or hash-partitioned, its
        expressions ``interpreted`` or compiled (``runtime/partitioning.py``).

        Sets the session's shuffle partitions every time: engines sharing a session (tests)
        each set it for their own cycles. The other settings of a cycle in one partition or
        of one small enough to interpret, in either layout, hold only while it runs
        (``end_cycle`` puts the session's own back).
        """
        self.single = single
        settings = {"spark.sql.shuffle.partitions": str(self.cycle_partitions)}
        self.conf_changed = single or interpreted
        if self.conf_changed:
            settings |= {**SMALL_CYCLE_CONF, **(INTERPRETED_CONF if interpreted else {})}
        configure(self.spark, settings)

    def restore_session_conf(self) -> None:
        """Put back the session's own values of what a small cycle changed: code run on the
        session between cycles (the user's, the catalog's) sees the session as it was made;
        Spark's interpreted object factory, for one, cannot build the catalog's rows.
        """
        configure(self.spark, {key: self.large_conf.get(key) for key in CHANGED_KEYS})

    def partition_by(self, df: DataFrame, *columns: Column) -> DataFrame:
        """``df`` hash-partitioned by ``columns`` into the cycle's partitions; in a small
        cycle, coalesced into one (a repartition into one would still shuffle).
        """
        if self.single:
            return coalesce_partitions(df, 1)
        return df.repartition(self.partitions, *columns)

    @cached_property
    def commit_plan(self) -> CommitPlan:
        """Builds this session's commit parts as plan nodes (``commit_plan``)."""
        return CommitPlan(self.spark)

    @cached_property
    def columnar(self) -> ColumnarCheckpoints:
        """Makes this session's cycle checkpoints (``columnar_checkpoints``)."""
        return ColumnarCheckpoints(self.spark, self.estimates)

    @cached_property
    def estimates(self) -> SizeEstimates:
        """Re-estimates this session's checkpoints for the planner (``size_estimates``)."""
        return SizeEstimates(self.spark)

    def checkpoint(self, df: DataFrame) -> DataFrame:
        """``df`` as a lazy local checkpoint, materialised by the cycle's commit: kept as
        columnar batches (``columnar_checkpoints``), in a small cycle planned as one byte.
        """
        self.cached_from.append(df)
        kept = self.columnar.checkpoint(df, small=self.single)
        if kept is not None:
            return kept
        if self.single:
            return self.estimates.planned_small(df.localCheckpoint(eager=False))
        return df.localCheckpoint(eager=False)

    def cache_for_cycle(self, df: DataFrame, ordered: bool = False) -> DataFrame:
        """Keep ``df`` until the end of the cycle: read twice, computed once.

        A lazy local checkpoint rather than ``persist``: plans built on it start from a
        leaf instead of the whole cycle's lineage, so Spark analyses and plans them quickly.
        The checkpoint keeps the order of ``df``'s partitions for the plans that read it (a
        merge join sorts nothing again); an ``ordered`` frame is in one partition already in
        a small cycle, where coalescing it would lose its order.
        """
        if self.single and not ordered:
            df = coalesce_partitions(df, 1)
        df = self.checkpoint(df)
        self.cycle_frames.append(df)
        return df

    def measure(self, df: DataFrame, flag: str, value: str,
                then: Callable[[Summary], None]) -> None:
        """Have the cycle's commit count ``df``'s rows, those where ``flag`` holds, and find
        the largest ``value`` (both SQL); ``then`` receives them once the commit ran.

        For what a source's batch holds (rows, late rows, largest event time): learnt in
        the cycle's one action rather than a Spark job of its own.
        """
        def summarised(values: list[int | None]) -> None:
            rows, flagged, largest = values[:3]
            then(Summary(rows or 0, flagged or 0, largest))
        self.observe(df, summary_metrics(flag, value), summarised)

    def observe(self, df: DataFrame, metrics: Sequence[Column],
                then: Callable[[list[int | None]], None], written: bool = False) -> None:
        """Have the cycle's commit compute ``metrics`` over ``df`` as its tasks read it
        (whole-number aggregates named ``v0``, ``v1``, ...; columns the caller builds
        once); ``then`` receives their values once the commit ran. A ``written``
        frame is state the cycle writes (a run of a ``StateRuns``): its ``v0``, its rows,
        count among the state rows the cycle wrote.
        """
        self.observed.append((df, metrics, then, written))

    def measure_in_place(self, df: DataFrame, flag: str, value: str,
                         then: Callable[[Summary], None]) -> DataFrame:
        """``measure`` for a frame that exactly one plan of the cycle reads once: returns
        ``df`` observed, to be read instead of it, so the reader's tasks count it as they
        go and it need not be cached for a second reading by the commit.
        """
        name = f"p{len(self.measured_in_place)}"
        observed = df.observe(name, *summary_metrics(flag, value))
        self.measured_in_place.append((df, flag, value, then))
        return observed

    def tally(self, df: DataFrame, key: Column,
              then: Callable[[dict[int, int]], None]) -> None:
        """Have the cycle's commit count ``df``'s rows by ``key`` (a whole number taking
        few values: a sub-window, a bucket); ``then`` receives the counts once it ran.

        For control data an operator learns from its own frames (a shedding join's work
        per sub-window), in the cycle's one action rather than a job of its own.
        """
        self.tallied.append((df, key, then))

    def count_by(self, df: DataFrame, key: str) -> dict[int, int]:
        """Count ``df``'s rows by column ``key`` now, in a Spark job of its own (rare: what
        a commit's observed counts could not tell; ``df`` is cached, so the job reads it).
        """
        self.jobs += 1
        return {int(row[0]): int(row[1]) for row in df.groupBy(key).count().collect()}

    def materialize(self, state: StateFrame) -> None:
        """Compute a state set after the commit now, in a Spark job of its own (rare: the
        dead letters a commit found in a batch, before the batch is let go).
        """
        if state.df is None:
            return
        self.jobs += 1
        rows = state.df.count()
        self.changed_states = [st for st in self.changed_states if st is not state]
        state.committed(rows, None)

    def is_cycle_frame(self, df: DataFrame) -> bool:
        """Whether ``df`` is materialised by this cycle's commit anyway (cached for the
        cycle): counting its rows then costs a scan of the cache, not a recomputation.
        """
        return any(f is df for f in self.cycle_frames)

    def keep_after_cycle(self, df: DataFrame) -> None:
        """Keep a frame cached for the cycle beyond it, if the cycle commits (a failed
        cycle frees it with the others); its owner frees it later with
        ``release_at_cycle_end``.
        """
        self.kept.append(df)

    def release_at_cycle_end(self, df: DataFrame) -> None:
        """Free a checkpointed frame once this cycle no longer reads it."""
        self.released.append(df)

    def commit_cycle(self, outputs: dict[str, DataFrame],
                     counted: dict[int, DataFrame] | None = None,
                     bundle: DataFrame | None = None,
                     by_id: Sequence[TaggedRecords] = (),
                     timestamped: frozenset[str] = frozenset(),
                     clock: Clock | None = None,
                     ) -> Committed:
        """Run the cycle's one Spark action: materialise changed states, collect records;
        with the seconds (by ``clock``) Spark took to optimise and plan it and the rows the
        states it materialised hold.

        ``counted`` frames (operator outputs, for EXPLAIN GLOBAL's rows per cycle) are
        counted by the same action; their counts come back by key. ``bundle`` holds the
        records of several queries in one frame, struct columns (NULL on the rows of
        queries they do not hold), each a row struct ``_r`` and the record's own columns;
        each comes back as one table under its column's name. Other frames hold
        the records of queries by id (``by_id``, ``TaggedRecords``). The ``timestamped``
        outputs' ``_ts`` and ``_te`` (microseconds) come back as timestamps.
        """
        parts: list[JavaObject | DataFrame] = []  # plan nodes, analysed once in the union
        counted = counted or {}
        states = [st for st in dict.fromkeys(self.changed_states) if st.df is not None]
        tallied, self.tallied = self.tallied, []
        # counts, earliest instants and largest values as observed metrics: gathered by the
        # tasks that compute the frames anyway, with no shuffle and no stage of their own
        nodes = self.commit_plan
        observed: list[JavaObject] = []
        for i, df in enumerate(counted.values()):
            observed.append(_observed(nodes, df, f"c{i}", [sql_column("count(1) AS `v0`")]))
        for i, st in enumerate(states):
            assert st.df is not None
            observed.append(_observed_state(nodes, st.df, f"s{i}"))
        watched, self.observed = self.observed, []
        for j, (df, aggregates, _told, _written) in enumerate(watched):
            observed.append(_observed(nodes, df, f"o{j}", aggregates))
        parts += observed
        if tallied:  # counts by key: a grouping (only shedding joins tally)
            keyed = union_all([df.select(sid_of(_TALLIED_BASE + j), key.cast("long").alias("_k"))
                               for j, (df, key, _counts) in enumerate(tallied)])
            assert keyed is not None
            parts.append(keyed.groupBy("_sid", "_k").agg(sql_column("count(1) AS `_n`")))
        names = list(outputs)
        # queries whose records have one schema share a struct column: the union's schema
        # does not grow with every query
        shapes: dict[str, str] = {}  # schema -> its column
        column_of: dict[str, str] = {}  # query -> its shape's column
        for j, name in enumerate(names):
            df = outputs[name]
            stamped = name in timestamped
            shape = column_of[name] = shapes.setdefault(f"{stamped}{df.schema.json()}",
                                                        f"_q{len(shapes)}")
            parts.append(nodes.projected(df, [sid_of(-1 - j),
                                              record_struct(tuple(df.columns), stamped,
                                                            shape)]))
        if bundle is not None:
            parts.append(nodes.projected(bundle, [sid_of(_BUNDLE_SID),
                                                  *[col(c) for c in bundle.columns]]))
        parts += [records.df for records in by_id]
        self.changed_states.clear()
        in_place, self.measured_in_place = self.measured_in_place, []
        if not parts:
            self.measured_where_read(in_place, {})
            return Committed({}, {}, 0.0, 0)
        # a union has a partition per partition of every part: fifty queries' records made
        # a last stage of hundreds of tiny tasks
        frames = [p for p in parts if isinstance(p, DataFrame)]
        if same_column_types(frames):
            merged = nodes.union(parts, self.cycle_partitions)
        else:  # only a chain of unions widens a column's types (an INT and a BIGINT)
            merged = union_by_name([p if isinstance(p, DataFrame) else nodes.frame(p)
                                    for p in parts], allow_missing=True)
            merged = merged.coalesce(self.cycle_partitions)
        self.jobs += 1
        planning = 0.0
        if clock is not None:  # planned here rather than by the action: timed apart
            began = clock.monotonic()
            merged._jdf.queryExecution().executedPlan()  # type: ignore[operator]
            planning = clock.monotonic() - began
        # the raw Arrow batches: toArrow() would re-cast them to the Spark schema, which
        # rejects the null structs the union pads other parts with
        batches = merged._collect_as_arrow()  # type: ignore[operator]
        metrics = observed_metrics(merged) if observed or in_place else {}
        self.measured_where_read(in_place, metrics)
        state_rows = 0
        for j, (_df, _aggregates, then_values, written) in enumerate(watched):
            values = metrics[f"o{j}"]
            then_values(values)
            state_rows += (values[0] or 0) if written else 0
        for i, st in enumerate(states):
            rows, earliest = metrics[f"s{i}"]
            st.committed(rows or 0, earliest)
            state_rows += rows or 0
        counts = {key: metrics[f"c{i}"][0] or 0 for i, key in enumerate(counted)}
        table = pa.Table.from_batches(batches) if batches else None
        sid = table.column("_sid") if table is not None else None
        for j, (_df, _key, then_counts) in enumerate(tallied):
            if table is None:
                then_counts({})
                continue
            rows_of = table.filter(pc.equal(sid, _TALLIED_BASE + j))
            then_counts(dict(zip(rows_of.column("_k").to_pylist(),
                                 rows_of.column("_n").to_pylist(), strict=True)))
        if table is None:
            return Committed({}, counts, planning, state_rows)
        out: dict[str, pa.Table] = {}
        for j, name in enumerate(names):
            rows = table.filter(pc.equal(sid, -1 - j)).column(column_of[name]).combine_chunks()
            out[name] = pa.Table.from_arrays(rows.flatten(), names=[f.name for f in rows.type])
        if bundle is not None:
            rows_of = table.filter(pc.equal(sid, _BUNDLE_SID))
            for name in bundle.columns:
                column = rows_of.column(name).combine_chunks()
                out[name] = _flatten_record(column.filter(column.is_valid()))
        for records in by_id:
            for name, (query_id, column) in records.queries.items():
                rows = table.filter(pc.equal(sid, query_id)).column(column).combine_chunks()
                out[name] = pa.Table.from_arrays(rows.flatten(),
                                                 names=[f.name for f in rows.type])
        return Committed(out, counts, planning, state_rows)

    def measured_where_read(self, in_place: list[tuple[DataFrame, str, str,
                                                      Callable[[Summary], None]]],
                            metrics: dict[str, list[int | None]]) -> None:
        """Hand each frame measured in place its summary: found in the commit's plan or in
        the plan of the cycle cache its reader was checkpointed from (one call into the JVM
        per plan looked in), or, if no plan read it, counted by a Spark job of its own.
        """
        sources = iter(self.cached_from)
        for j, (df, flag, value, then) in enumerate(in_place):
            name = f"p{j}"
            while name not in metrics:
                source = next(sources, None)
                if source is None:
                    break
                metrics.update(observed_metrics(source))
            if name not in metrics:  # nothing read it (a reader that took no rows)
                self.jobs += 1
                row = df.agg(*summary_metrics(flag, value)).first()
                assert row is not None
                metrics[name] = [None if v is None else int(v) for v in row]
            rows, flagged, largest = metrics[name]
            then(Summary(rows or 0, flagged or 0, largest))

    def end_cycle(self) -> None:
        """Drop the cycle's caches and the state frames replaced during the cycle; the
        session's own settings back after a small or interpreted cycle.
        """
        if self.conf_changed:  # an interpreted cycle may be hash-partitioned
            self.restore_session_conf()
            self.conf_changed = False
        kept = {id(df) for df in self.kept}
        self.columnar.settle()
        self.free([*(df for df in self.cycle_frames if id(df) not in kept), *self.released])
        self.cycle_frames.clear()
        self.cached_from.clear()
        self.released.clear()
        self.kept.clear()

    def abort_cycle(self) -> None:
        """Forget a failed cycle: free its caches, keep the states it meant to replace."""
        self.columnar.forget_unsettled()
        self.free(self.cycle_frames)
        self.cycle_frames.clear()
        self.released.clear()
        self.kept.clear()
        self.changed_states.clear()
        self.observed.clear()
        self.measured_in_place.clear()
        self.cached_from.clear()
        self.tallied.clear()

    def free(self, frames: Sequence[DataFrame]) -> None:
        """Free the blocks of checkpointed ``frames``, those a checkpoint being written
        still reads once it is written (``FramePins``).
        """
        unpersist_checkpoints(self.pins.free_now(frames))

    def empty(self, schema: StructType) -> DataFrame:
        """An empty DataFrame of ``schema``."""
        return self.spark.createDataFrame([], schema)


def _flatten_record(column: pa.StructArray) -> pa.Table:
    """A bundled query's records (struct of row ``_r`` and record columns) as a table."""
    row = column.field("_r")
    names = [f.name for f in row.type] + [f.name for f in column.type if f.name != "_r"]
    arrays = [row.field(i) for i in range(row.type.num_fields)]
    arrays += [column.field(f.name) for f in column.type if f.name != "_r"]
    return pa.Table.from_arrays(arrays, names=names)


def rdd_id(df: DataFrame) -> int:
    """The id of the RDD behind a DataFrame (a local checkpoint's: its persisted blocks)."""
    batches = columnar_batches_id(df)
    if batches is not None:
        return batches
    return int(df._jdf.queryExecution().analyzed().rdd().id())


def unpersist_checkpoint(df: DataFrame) -> None:
    """Free the blocks behind a locally checkpointed DataFrame (Dataset.unpersist does not)."""
    unpersist_checkpoints([df])


def unpersist_checkpoints(frames: Sequence[DataFrame]) -> None:
    """``unpersist_checkpoint`` for each of ``frames``: a cycle's own checkpoints in a call
    or two into the JVM, not one each.
    """
    for df in free_columnar(frames):
        try:
            df._jdf.queryExecution().analyzed().rdd().unpersist(False)
        except Exception:  # noqa: BLE001 - not a checkpointed frame: the cache manager's
            df.unpersist()


class FramePins:
    """The frames a checkpoint written in the background reads: the cycles that run
    meanwhile may replace them, but their blocks are freed only once it is written.

    Used from the thread that runs cycles alone: the writer's thread only reads frames.
    """

    def __init__(self) -> None:
        self.pins: dict[int, int] = {}  # id of a frame -> the writes reading it
        self.waiting: dict[int, DataFrame] = {}  # pinned frames freed meanwhile

    def pin(self, frames: Sequence[DataFrame]) -> None:
        """Keep ``frames`` until ``unpin`` (a frame pinned stays referenced, so its id
        names it alone).
        """
        for df in frames:
            self.pins[id(df)] = self.pins.get(id(df), 0) + 1

    def unpin(self, frames: Sequence[DataFrame]) -> list[DataFrame]:
        """Let ``frames`` go; those freed while pinned, to free now."""
        due = []
        for df in frames:
            left = self.pins.get(id(df), 0) - 1
            if left > 0:
                self.pins[id(df)] = left
                continue
            self.pins.pop(id(df), None)
            waiting = self.waiting.pop(id(df), None)
            if waiting is not None:
                due.append(waiting)
        return due

    def free_now(self, frames: Sequence[DataFrame]) -> list[DataFrame]:
        """Of ``frames`` to free, those no write reads; the others wait for ``unpin``."""
        if not self.pins:
            return list(frames)
        now = []
        for df in frames:
            if id(df) in self.pins:
                self.waiting[id(df)] = df
            else:
                now.append(df)
        return now


@dataclass(frozen=True)
class Committed:
    """What a cycle's commit gave back: each query's records, the counted frames' rows by
    key, the seconds Spark took to optimise and plan it, and the rows held by the states it
    materialised (what the cycle wrote of its state: a state rewritten whole counts all its
    rows, every cycle).
    """

    tables: dict[str, pa.Table]
    counts: dict[int, int]
    planning_s: float
    state_rows_written: int


@dataclass(frozen=True)
class FrameState:
    """What a state frame holds at a cycle boundary: a cycle's rollback puts it back."""

    df: DataFrame | None
    rows: int
    min_t: int | None
    one_partition: bool = False

    @property
    def frames(self) -> tuple[DataFrame, ...]:
        """The frames it holds."""
        return () if self.df is None else (self.df,)


class HeldState(Protocol):
    """What an operator keeps across cycles in Spark (a ``StateFrame``, or a
    ``StateRuns``): a cycle's transaction takes its ``snapshot`` and, on a rollback,
    frees the ``frames`` the failed attempt made and ``restore``s it.
    """

    name: str

    @property
    def rows(self) -> int: ...  # noqa: D102

    def snapshot(self) -> Any: ...  # noqa: D102

    def restore(self, state: Any) -> None: ...  # noqa: D102

    def frames(self) -> tuple[DataFrame, ...]: ...  # noqa: D102

    def save(self, path: str, frames: FrameWriter) -> None: ...  # noqa: D102

    def load(self, path: str, frames: FrameReader) -> None: ...  # noqa: D102

    def release(self) -> None: ...  # noqa: D102


class StateFrame:
    """Operator state carried across cycles as a Spark DataFrame with its lineage cut.

    ``set`` installs the new state as a lazy local checkpoint; the cycle's commit action
    materialises it and reports its row count and earliest instant (``committed``). The
    previous state is freed at the end of the cycle, when nothing reads it any more.
    ``save`` and ``load`` write and read it as Parquet for checkpoints at a cycle boundary.

    A state whose frames come hash-partitioned by column ``partition_by`` (into the
    runtime's number of partitions) keeps that partitioning, so the next cycle's joins with
    frames partitioned the same way need no shuffle; others are coalesced to that number.
    """

    def __init__(self, rt: Runtime, schema: StructType, name: str,
                 partition_by: str | None = None):
        self.rt = rt
        self.schema = schema
        self.name = name
        self.partition_by = partition_by
        self.df: DataFrame | None = None
        self.rows = 0
        self.min_t: int | None = None
        # the frame was made in a small cycle, in one partition (runtime/partitioning.py),
        # and is planned as one byte (runtime/size_estimates.py)
        self.one_partition = False
        self.read_large: tuple[DataFrame, DataFrame] | None = None  # (df, as planned large)

    def get(self) -> DataFrame | None:
        """The current state, or None when it holds no rows.

        A frame made in a small cycle (planned as one byte) is read by a large one with no
        size estimate, Spark's largest: a large cycle broadcasts no state
        (``size_estimates``). A state kept hash-partitioned (``partition_by``) comes back
        so partitioned: a grouping over it and frames partitioned alike then needs no
        shuffle, and what it makes keeps that partitioning for the cycles after (a state
        kept as it was made, ``adopt``, would otherwise stay partitioned as the first
        shuffle after a small cycle left it: every sliding window's panes, shuffled whole
        every cycle).
        """
        if self.df is None or not self.one_partition or self.rt.single:
            return self.df
        if self.read_large is None or self.read_large[0] is not self.df:
            large = self.rt.estimates.planned_unknown(self.df)
            if self.partition_by is not None:
                large = self.rt.partition_by(large, col(self.partition_by))
            self.read_large = (self.df, large)
        return self.read_large[1]

    def snapshot(self) -> FrameState:
        """What the frame holds now, for a cycle's transaction."""
        return FrameState(self.df, self.rows, self.min_t, self.one_partition)

    def restore(self, state: FrameState) -> None:
        """Hold ``state`` again (a failed cycle is rolled back)."""
        self.df, self.rows, self.min_t = state.df, state.rows, state.min_t
        self.one_partition = state.one_partition

    def frames(self) -> tuple[DataFrame, ...]:
        """The frame it holds now (none when it holds no rows)."""
        return () if self.df is None else (self.df,)

    def release(self) -> None:
        """Hold nothing (the operator leaves the plan)."""
        self.set(None)

    def get_or_empty(self) -> DataFrame:
        """The current state, or an empty frame of its schema."""
        return self.df if self.df is not None else self.rt.empty(self.schema)

    def set(self, df: DataFrame | None) -> None:
        """Replace the state by ``df``; it is materialised by the cycle's commit."""
        old = self.df
        if df is None:
            self.df, self.rows, self.min_t = None, 0, None
        else:
            if self.partition_by is None or self.rt.single:
                df = coalesce_partitions(df, self.rt.cycle_partitions)
            elif not hash_partitioned(df, self.partition_by, self.rt.partitions):
                df = self.rt.partition_by(df, col(self.partition_by))
            self.df = self.rt.checkpoint(df)
            self.one_partition = self.rt.single
            self.rt.changed_states.append(self)
        if old is not None:
            self.rt.release_at_cycle_end(old)

    def adopt(self, cached: DataFrame) -> None:
        """Make a frame cached for this cycle (``Runtime.cache_for_cycle``) the new state as
        it is: kept, not copied into a checkpoint of its own, its partitioning unchanged.

        For an operator whose state is a superset of what it reads next cycle (rows that
        expired are filtered out when read): it saves one checkpoint per cycle.
        """
        old = self.df
        self.rt.keep_after_cycle(cached)
        self.df = cached
        self.one_partition = self.rt.single
        self.rt.changed_states.append(self)
        if old is not None:
            self.rt.release_at_cycle_end(old)

    def committed(self, rows: int, min_t: int | None) -> None:
        """The commit materialised the state: remember its size; drop it if empty."""
        self.rows, self.min_t = rows, min_t
        if rows == 0 and self.df is not None:
            self.rt.release_at_cycle_end(self.df)
            self.df = None

    def save(self, path: str, frames: FrameWriter) -> None:
        """Save the state under ``path`` with the checkpoint's other ``frames``."""
        frames.add(os.path.join(path, self.name), self.df, self.rows)

    def load(self, path: str, frames: FrameReader) -> None:
        """Restore the state ``save`` saved, with its size known at once."""
        self.set(frames.read(os.path.join(path, self.name), self.schema))
        assert self.df is not None
        least = F.min(col(T)) if T in self.df.columns else F.lit(None).cast("long")
        n, m = self.df.agg(F.count(F.lit(1)), least).first()  # type: ignore[misc]
        self.committed(n, m)


def hash_partitioned(df: DataFrame, column: str, partitions: int) -> bool:
    """Whether Spark plans ``df`` hash-partitioned by ``column`` alone into ``partitions``
    (so a join or grouping on it with frames partitioned alike needs no shuffle).
    """
    partitioning = df._jdf.queryExecution().executedPlan().outputPartitioning()
    if partitioning.getClass().getSimpleName() != "HashPartitioning":
        return False
    exprs = partitioning.expressions()
    return (partitioning.numPartitions() == partitions and exprs.size() == 1
            and exprs.apply(0).getClass().getSimpleName() == "AttributeReference"
            and exprs.apply(0).name() == column)


def sid_of(number: int) -> Column:
    """A part's id in the commit's union: a BIGINT in every part, as a union by name
    merges the types of its parts' columns without widening them.
    """
    return sql_column(f"CAST({number} AS BIGINT) AS `_sid`")


def summary_metrics(flag: str, value: str) -> list[Column]:
    """A measured frame's ``Summary`` as aggregates named ``v0``-``v2``: its rows, those
    where ``flag`` holds, the largest ``value`` (SQL, the same every cycle: the columns
    are built once, not three calls into the JVM each per cycle).
    """
    return [sql_column("count(1) AS `v0`"),
            sql_column(f"CAST(sum(CASE WHEN {flag} THEN 1 ELSE 0 END) AS BIGINT) AS `v1`"),
            sql_column(f"max(CAST({value} AS BIGINT)) AS `v2`")]


def _observed(nodes: CommitPlan, df: DataFrame, name: str,
              metrics: Sequence[Column]) -> JavaObject:
    """A commit part that gives no row but has the tasks reading ``df`` compute ``metrics``
    (aggregates named ``v0``, ``v1``, ...: read back by ``observed_metrics`` under ``name``).

    The filter that drops every row is one Spark cannot fold away (a partition id is never
    negative, but Spark does not know it): folded, it would prune the observation with it.
    """
    return nodes.observed(df, name, metrics, sql_column(_NO_ROW), sid_of(_OBSERVED_SID))


def _observed_state(nodes: CommitPlan, df: DataFrame, name: str) -> JavaObject:
    """``_observed`` of a state: its rows and its earliest instant (NULL for a state
    without instants).
    """
    return nodes.observed_state(
        df, name, sql_column("count(1) AS `v0`"), sql_column(f"min({q(T)}) AS `v1`"),
        sql_column("CAST(NULL AS BIGINT) AS `v1`"), T, sql_column(_NO_ROW),
        sid_of(_OBSERVED_SID))


_METRIC = re.compile(r"(\w+) -> \[([^\]]*)\]")


def observed_metrics(merged: DataFrame) -> dict[str, list[int | None]]:
    """The metrics (whole numbers) observed by the last action on ``merged``, by name.

    Read as the text of Spark's map of metric rows, in one call into the JVM rather than
    three per metric: each row prints as ``[12,null]``, and whole numbers print exactly.
    """
    text = merged._jdf.queryExecution().observedMetrics().mkString("|")  # type: ignore[operator]
    found: dict[str, list[int | None]] = {}
    for name, values in _METRIC.findall(text):
        found[name] = [None if v == "null" else int(v) for v in values.split(",")]
    return found


@lru_cache(maxsize=4096)
def sql_column(text: str) -> Column:
    """The Column of SQL expression ``text``, built once: each Column built is a call into
    the JVM, and its Java object one more call when Python drops it; the commit's ids, NULL
    paddings and summaries are the same expressions every cycle.
    """
    return F.expr(text)


@lru_cache(maxsize=1024)
def record_struct(columns: tuple[str, ...], stamped: bool, shape: str) -> Column:
    """A query's records as struct column ``shape`` of the commit's union (``_ts`` and
    ``_te`` as timestamps when ``stamped``), built once per query shape.
    """
    fields = [F.timestamp_micros(col(c)).alias(c) if stamped and c in (TS, TE) else col(c)
              for c in columns]
    return F.struct(*fields).alias(shape)


def cycle_frames(spark: SparkSession) -> JavaObject:
    """``spark``'s helper for small steps on frames, each one call into the JVM
    (``runtime/java/CycleFrames.java``).
    """
    return session_instance(spark, "CycleFrames")


def configure(spark: SparkSession, settings: Mapping[str, str | None]) -> None:
    """Set each of ``settings`` in ``spark``'s conf (unset those None) in one call."""
    cycle_frames(spark).configure("\n".join(
        key if value is None else f"{key}={value}" for key, value in settings.items()))


def same_column_types(frames: Sequence[DataFrame]) -> bool:
    """Whether every column name has one type (nullability apart) in all ``frames``."""
    if len(frames) < 2:
        return True
    return bool(cycle_frames(frames[0].sparkSession).sameColumnTypes(
        [df._jdf for df in frames]))


def coalesce_partitions(df: DataFrame, partitions: int) -> DataFrame:
    """``df.coalesce(partitions)`` without an analysis: the node over ``df``'s analysed
    plan is analysed already, and a DataFrame call would have Spark run its analyser on it
    again (about 1.5 ms on a warm JVM, four to six times a small cycle).
    """
    spark = df.sparkSession
    return ClassicDataFrame(cycle_frames(spark).coalesce(df._jdf, partitions), spark)


def union_all(frames: Sequence[DataFrame | None]) -> DataFrame | None:
    """Union by name of the frames that are not None; None if all are."""
    present = [f for f in frames if f is not None]
    if not present:
        return None
    return union_by_name(present)


def union_by_name(frames: Sequence[DataFrame], allow_missing: bool = False) -> DataFrame:
    """One union by name of all ``frames`` (``allow_missing``: a column some lack is NULL
    on their rows), as one n-ary plan node.

    Chained ``unionByName`` calls analyse the whole union built so far again at every step
    (Spark flattens it into one node each time); building a cycle's commit of twenty parts
    that way cost about as much as analysing twenty queries. One ``Union`` node of all of
    them is analysed once. Spark's n-ary union by name does not widen a column's types, so
    frames whose types differ take the chain.
    """
    if len(frames) == 1:
        return frames[0]
    spark = frames[0].sparkSession
    # its errors become PySpark's (an AnalysisException with Spark's message), as those
    # of ``unionByName`` do
    union = capture_sql_exception(cycle_frames(spark).unionByName)
    return ClassicDataFrame(union([df._jdf for df in frames], allow_missing), spark)


def split_at(df: DataFrame, hi: int) -> tuple[DataFrame, DataFrame]:
    """Rows with ``_t < hi`` (due now) and the rest (future)."""
    return df.where(col(T) < bound(hi)), df.where(col(T) >= bound(hi))


