"""Logical plan nodes: frozen dataclasses that compare and hash by value.

Two queries that compute the same thing build equal nodes, so sharing an operator in the
global plan is a dictionary lookup. Expressions are ``Expr`` values over the child's column
names, typed when the node is built and equal by meaning, not spelling
(``plan/expressions.py``): ``b = a`` and ``a = b`` build one node.

Every edge carries one of three kinds of data:
- ``STREAM``: instant events (a raw stream, ISTREAM/DSTREAM/RSTREAM output);
- ``RELATION``: a time-varying bag of rows, carried as change events (+1 when a row enters,
  -1 when it leaves, each at an instant);
- ``TABLE``: a static relation, valid at all times; rows that replace it while queries run
  take effect in a later cycle (``runtime/operators/table.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from functools import cached_property
from typing import Any

from pyspark.sql.types import BooleanType, LongType, StructField, StructType

from sparkcq.aggregates.user import UserAggregate
from sparkcq.language.sql.statements import OutputForm
from sparkcq.model.time import TimeKind, show_micros
from sparkcq.plan.expressions import Expr
from sparkcq.plan.options import ShedControl, Shedding
from sparkcq.table_functions.user import UserTableFunction


class EdgeKind(Enum):
    """What flows out of a node: instant events, relation changes or a static table."""

    STREAM = "stream"
    RELATION = "relation"
    TABLE = "table"


#: the metadata of a field holding the logical plan a specialised node replaces, kept as a
#: record (equal queries build equal nodes, EXPLAIN says what runs): rules leave it alone
RECORD = {"record": True}

@dataclass(frozen=True)
class PlanNode:
    """Base of all plan nodes."""

    @property
    def children(self) -> tuple[PlanNode, ...]:
        """The inputs of this node, in order."""
        return ()

    @property
    def kind(self) -> EdgeKind:
        """The kind of data on this node's output edge."""
        return self.children[0].kind

    @property
    def schema(self) -> StructType:
        """The user columns on this node's output edge (time and change columns excluded)."""
        return self.children[0].schema

    @property
    def time_kind(self) -> TimeKind:
        """Whether times on this edge are timestamps or numbers."""
        kinds = {c.time_kind for c in self.children if c.kind is not EdgeKind.TABLE}
        return kinds.pop() if kinds else TimeKind.NUMERIC

    @property
    def time_unit(self) -> int | None:
        """Microseconds in one unit of a numeric time declared with ``time_unit``, else
        None (abstract units, or a timestamp).
        """
        units = {c.time_unit for c in self.children if c.kind is not EdgeKind.TABLE}
        return units.pop() if len(units) == 1 else None

    def label(self) -> str:
        """One line for EXPLAIN."""
        return type(self).__name__


# -- leaves ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class StreamScan(PlanNode):
    """The events of a source stream; instants, or intervals when it has an end-time column."""

    name: str
    stream_schema: StructType
    time_col: str
    end_col: str | None
    stream_time_kind: TimeKind
    # microseconds in one unit of a numeric event time (``time_unit='seconds'``)
    stream_time_unit: int | None = None
    # a keyed (temporal-tabular) stream's key columns: its edge also carries deletes, as
    # ``_d`` = -1 rows (key columns and event time), read only by a ``KeyedSpec`` window
    key: tuple[str, ...] = ()

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.RELATION if self.end_col else EdgeKind.STREAM

    @property
    def time_unit(self) -> int | None:  # noqa: D102
        return self.stream_time_unit

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self.stream_schema

    @property
    def time_kind(self) -> TimeKind:  # noqa: D102
        return self.stream_time_kind

    def label(self) -> str:  # noqa: D102
        return f"StreamScan {self.name}"


@dataclass(frozen=True)
class TableScan(PlanNode):
    """A static table (a registered DataFrame, or files read once)."""

    name: str
    table_schema: StructType
    version: int = 0

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.TABLE

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self.table_schema

    @property
    def time_kind(self) -> TimeKind:  # noqa: D102
        return TimeKind.NUMERIC

    def label(self) -> str:  # noqa: D102
        return f"TableScan {self.name}"


@dataclass(frozen=True)
class UnaryNode(PlanNode):
    """A node with one input."""

    child: PlanNode

    @property
    def children(self) -> tuple[PlanNode, ...]:  # noqa: D102
        return (self.child,)


# -- windows --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RangeSpec:
    """Element at ts lives [ts, ts+size), or, with a slide, on the slide grid."""

    size: int
    slide: int | None = None

    def __str__(self) -> str:
        return f"RANGE {self.size}" + (f" SLIDE {self.slide}" if self.slide else "")


@dataclass(frozen=True)
class UnboundedSpec:
    """Element at ts lives forever."""

    def __str__(self) -> str:
        return "UNBOUNDED"


@dataclass(frozen=True)
class RowsSpec:
    """Element lives until the n-th later row of its partition arrives."""

    rows: int
    partition_by: tuple[str, ...] = ()

    def __str__(self) -> str:
        part = f"PARTITION BY {', '.join(self.partition_by)} " if self.partition_by else ""
        return f"{part}ROWS {self.rows}"


@dataclass(frozen=True)
class KeyedSpec:
    """A keyed stream read as a relation: a row lives from its event time until the next
    row or delete of its key (``[PARTITION BY key ROWS 1]`` whose deletes close the key's
    row and are no elements themselves).
    """

    key: tuple[str, ...]

    def __str__(self) -> str:
        return f"KEY {', '.join(self.key)}"


#: ``chunks`` of a chunk window read by a table function: each row enters at its chunk's
#: cut point and never leaves (a stream of the chunks, not a relation), so no row leaving
#: one chunk cancels an equal row entering the next at the same instant
EACH_CHUNK_ONCE = 0


def _chunks_text(chunks: int) -> str:
    if chunks == EACH_CHUNK_ONCE:
        return " (each chunk once, at its cut)"
    return f" WINDOW {chunks} CHUNKS" if chunks > 1 else ""


@dataclass(frozen=True)
class CutSpec:
    """Element of the time chunk [k*by, (k+1)*by) is valid from its cut point for n chunks."""

    by: int
    chunks: int = 1

    def __str__(self) -> str:
        return f"CUT BY {self.by}" + _chunks_text(self.chunks)


@dataclass(frozen=True)
class CountCutSpec:
    """Chunks of ``rows`` rows in event-time order (ties by value); chunk j's rows are valid
    from the first row of chunk j + 1 until the first row of chunk j + 1 + chunks.
    """

    rows: int
    chunks: int = 1

    def __str__(self) -> str:
        return f"CUT EVERY {self.rows} ROWS" + _chunks_text(self.chunks)


@dataclass(frozen=True)
class KeyCutSpec:
    """A new chunk wherever ``keys`` change from one row to the next in event-time order;
    valid, like a count cut's, from the next chunk's first row for ``chunks`` chunks.
    """

    keys: tuple[str, ...]
    chunks: int = 1

    def __str__(self) -> str:
        return f"CUT ON {', '.join(self.keys)}" + _chunks_text(self.chunks)


@dataclass(frozen=True)
class SessionSpec:
    """Events of a partition at most ``gap`` after the one before are one session; each
    lives from its time until ``gap`` after the session's last event.
    """

    gap: int
    partition_by: tuple[str, ...] = ()

    def __str__(self) -> str:
        part = f"PARTITION BY {', '.join(self.partition_by)} " if self.partition_by else ""
        return f"{part}SESSION {self.gap}"


@dataclass(frozen=True)
class CumulateSpec:
    """Flink's cumulating windows: within each window ``[k*size, (k+1)*size)`` the windows
    ``[k*size, k*size + j*step)``, one per step. An event's element is valid from the end
    of its step until ``step`` after the end of its window of ``size``, so the snapshot at
    every multiple of ``step`` is the window ending there.
    """

    step: int
    size: int

    def __str__(self) -> str:
        return f"CUMULATE STEP {self.step} SIZE {self.size}"


ChunkCutSpec = CountCutSpec | KeyCutSpec
ResolvedWindow = (RangeSpec | UnboundedSpec | RowsSpec | KeyedSpec | CutSpec | CountCutSpec
                  | KeyCutSpec | SessionSpec | CumulateSpec)


def window_reach(spec: ResolvedWindow) -> int | None:
    """How far before an instant p the events of the elements live just before p may lie
    (their event time is at least p minus this); None for windows that reach back without
    bound or by row count.
    """
    if isinstance(spec, RangeSpec):
        return spec.size + (spec.slide or 1)
    if isinstance(spec, CutSpec):
        return spec.by * spec.chunks + spec.by
    if isinstance(spec, CumulateSpec):
        return spec.size + spec.step
    return None


@dataclass(frozen=True)
class Window(UnaryNode):
    """Stream to relation: each event becomes an element with a validity interval."""

    spec: ResolvedWindow

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.RELATION

    def label(self) -> str:  # noqa: D102
        text = str(self.spec)
        if self.child.time_kind is TimeKind.TIMESTAMP:
            text = re.sub(r"(RANGE |SLIDE |CUT BY |SESSION |STEP |SIZE )(\d+)",
                          lambda m: m[1] + show_micros(int(m[2])), text)
        return f"Window [{text}]"


# -- relational operators ------------------------------------------------------------------
@dataclass(frozen=True)
class Filter(UnaryNode):
    """Keep rows satisfying a predicate."""

    predicate: Expr

    def label(self) -> str:  # noqa: D102
        return f"Filter {self.predicate}"


@dataclass(frozen=True)
class Project(UnaryNode):
    """Compute named expressions; ``out_schema`` is their names and types."""

    exprs: tuple[tuple[str, Expr], ...]
    out_schema: StructType = field(compare=False, hash=False)

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self.out_schema

    def label(self) -> str:  # noqa: D102
        shown = ", ".join(e.sql if e.sql == f"`{n}`" else f"{e} AS {n}" for n, e in self.exprs)
        return f"Project {shown}"


def filter_sql(child: PlanNode, predicate: str) -> Filter:
    """A filter by Spark SQL text over ``child``'s columns."""
    return Filter(child, Expr.parse(predicate, BooleanType()))


def project_sql(child: PlanNode, exprs: Iterable[tuple[str, str]],
                schema: StructType) -> Project:
    """A projection of named Spark SQL texts over ``child``'s columns, typed by ``schema``
    (their names and types, in order).
    """
    return Project(child, tuple((name, Expr.parse(sql, f.dataType)) for (name, sql), f
                                in zip(exprs, schema.fields, strict=True)), schema)


class JoinHow(Enum):
    """Which rows a join keeps: the pairs (inner), also the rows of one or both sides
    without a partner, padded with NULLs (outer), or the left rows with (semi) or without
    (anti) a partner, each once per copy.
    """

    INNER = "inner"
    LEFT = "left"
    RIGHT = "right"
    FULL = "full"
    SEMI = "semi"
    ANTI = "anti"

    @property
    def keeps_right_columns(self) -> bool:
        """Whether the output has the right side's columns (not for semi and anti)."""
        return self not in (JoinHow.SEMI, JoinHow.ANTI)

    def padded(self, side: int) -> bool:
        """Whether rows of input ``side`` (0 left, 1 right) without a partner are kept,
        padded with NULLs.
        """
        return self is JoinHow.FULL or self is (JoinHow.LEFT, JoinHow.RIGHT)[side]

    @property
    def spark(self) -> str:
        """Spark's name of this join type."""
        return {JoinHow.SEMI: "left_semi", JoinHow.ANTI: "left_anti"}.get(self, self.value)


@dataclass(frozen=True)
class Join(PlanNode):
    """A join of two inputs: on every snapshot, the SQL join of the inputs' snapshots.

    Between relations an inner pair lives where both inputs' rows do; a row an outer join
    keeps without a partner lives over the part of its interval where it has none.
    """

    left: PlanNode
    right: PlanNode
    condition: Expr | None
    equi_keys: tuple[tuple[str, str], ...] = ()
    how: JoinHow = JoinHow.INNER

    @property
    def children(self) -> tuple[PlanNode, ...]:  # noqa: D102
        return (self.left, self.right)

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        kinds = {self.left.kind, self.right.kind}
        if kinds == {EdgeKind.TABLE}:
            return EdgeKind.TABLE
        if kinds == {EdgeKind.STREAM, EdgeKind.TABLE}:  # each event meets the rows then
            return EdgeKind.STREAM
        return EdgeKind.RELATION

    @cached_property
    def _schema(self) -> StructType:
        if not self.how.keeps_right_columns:
            return self.left.schema
        sides = [[StructField(f.name, f.dataType, True) if self.how.padded(1 - i) else f
                  for f in c.schema.fields] for i, c in enumerate(self.children)]
        return StructType([*sides[0], *sides[1]])

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self._schema

    def label(self) -> str:  # noqa: D102
        how = "" if self.how is JoinHow.INNER else f" {self.how.name}"
        return f"Join{how} ON {self.condition}" if self.condition else f"Join{how} (cross)"


@dataclass(frozen=True)
class Expand(UnaryNode):
    """Each row ``count`` times, without the count column: a relation of counted rows
    (an aggregate's groups) back into its copies.
    """

    count: str

    @cached_property
    def _schema(self) -> StructType:
        return StructType([f for f in self.child.schema.fields if f.name != self.count])

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self._schema

    def label(self) -> str:  # noqa: D102
        return f"Expand {self.count} copies"


@dataclass(frozen=True)
class AggCall:
    """One aggregate in an Aggregate node: function, input column, DISTINCT, output name.

    A user aggregate (``uda``) takes its arguments in one column: the value itself, or a
    struct of fields ``a0, a1, ...`` when it takes several.
    """

    func: str
    arg: str | None
    distinct: bool
    name: str
    uda: UserAggregate | None = None

    def __str__(self) -> str:
        inner = "*" if self.arg is None else ("DISTINCT " if self.distinct else "") + self.arg
        return f"{self.func}({inner}) AS {self.name}"


def calls_text(aggs: tuple[AggCall, ...], keys: tuple[str, ...]) -> str:
    """An aggregate's calls and keys as EXPLAIN shows them."""
    return ", ".join(map(str, aggs)) + (f" BY {', '.join(keys)}" if keys else "")


@dataclass(frozen=True)
class Aggregate(UnaryNode):
    """Grouped aggregation over a relation; one row per non-empty group at every instant."""

    keys: tuple[str, ...]
    aggs: tuple[AggCall, ...]
    out_schema: StructType = field(compare=False, hash=False)

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.RELATION

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self.out_schema

    def label(self) -> str:  # noqa: D102
        return f"Aggregate {calls_text(self.aggs, self.keys)}"


@dataclass(frozen=True)
class InstantAggregate(UnaryNode):
    """Grouped aggregation of a stream per instant: a row per group and instant at which
    the group has events, at that instant. Made by ``aggregate_before_table_joins`` for
    RSTREAM: the snapshots of a relation, as a stream, combined per evaluation instant.
    """

    keys: tuple[str, ...]
    aggs: tuple[AggCall, ...]
    out_schema: StructType = field(compare=False, hash=False)

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.STREAM

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self.out_schema

    def label(self) -> str:  # noqa: D102
        return f"InstantAggregate {calls_text(self.aggs, self.keys)}"


class ReadsWindowChain:
    """What a node computing a logical aggregate over a time window of its stream knows of
    that aggregate: the window, and the filters and projections between it and the
    aggregate (``SlicedAggregate``, ``OverAggregate``).
    """

    aggregate: Aggregate  # a field of the dataclass that mixes this in

    @cached_property
    def window(self) -> Window:
        """The time window the aggregate reads."""
        return next(n for n in self.steps_and_window() if isinstance(n, Window))

    def steps(self) -> tuple[Filter | Project, ...]:
        """The per-event filters and projections between window and aggregate, lowest first."""
        return tuple(n for n in reversed(self.steps_and_window())
                     if isinstance(n, Filter | Project))

    def steps_and_window(self) -> list[PlanNode]:
        """The nodes from the aggregate's child down to the window, top first."""
        chain: list[PlanNode] = []
        node = self.aggregate.child
        while True:
            chain.append(node)
            if isinstance(node, Window):
                return chain
            assert isinstance(node, Filter | Project), node
            node = node.child


@dataclass(frozen=True)
class SlicedAggregate(ReadsWindowChain, UnaryNode):
    """A grouped aggregate over a time window of a stream, computed from panes.

    ``child`` is the stream; ``aggregate`` is the logical plan it replaces (the aggregate
    over filters and projections over the window over ``child``), kept whole so that equal
    queries build equal nodes and EXPLAIN can say what runs. Made by the optimizer rule
    ``plan/rules/slice_window_aggregates.py``: the panes aggregate before the shuffle, so
    about one record per group, pane and task crosses it.
    """

    aggregate: Aggregate

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.RELATION

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self.aggregate.schema

    def label(self) -> str:  # noqa: D102
        steps = "".join(f" <- {n.label()}" for n in reversed(self.steps()))
        return (f"SlicedAggregate {calls_text(self.aggregate.aggs, self.aggregate.keys)}"
                f"{steps} <- {self.window.label()}")


@dataclass(frozen=True)
class OverAggregate(ReadsWindowChain, UnaryNode):
    """SQL's aggregate ``OVER (PARTITION BY k ORDER BY t RANGE BETWEEN w PRECEDING AND
    CURRENT ROW)``: each event of ``child`` once, at its instant, with the aggregates of
    its partition's events in ``[t - w, t]`` (those at ``t`` itself all in, whatever order
    they came in).

    At the event's instant that window is the snapshot of ``[RANGE w + 1]``, so
    ``aggregate`` is the logical aggregate over that window (kept whole as a record: equal
    queries build equal nodes, EXPLAIN says what runs); ``carried`` are the event's columns
    that go out with it (``aggregate``'s input has them beside its keys and arguments).
    The output holds the carried columns, then the aggregate's calls.
    """

    aggregate: Aggregate = field(metadata=RECORD)
    carried: tuple[str, ...]

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.STREAM

    @cached_property
    def _schema(self) -> StructType:
        inputs = {f.name: f for f in self.aggregate.child.schema.fields}
        calls = {a.name for a in self.aggregate.aggs}
        return StructType([*(inputs[c] for c in self.carried),
                           *(f for f in self.aggregate.schema.fields if f.name in calls)])

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self._schema

    @property
    def preceding(self) -> int:
        """How far before an event its window reaches (``w``: both ends in)."""
        spec = self.window.spec
        assert isinstance(spec, RangeSpec)
        return spec.size - 1

    def label(self) -> str:  # noqa: D102
        steps = "".join(f" <- {n.label()}" for n in reversed(self.steps()))
        keys = self.aggregate.keys
        by = f"PARTITION BY {', '.join(keys)} " if keys else ""
        aggs = ", ".join(map(str, self.aggregate.aggs))
        return (f"OverAggregate {aggs} OVER ({by}RANGE {grid_text(self.preceding, self)} "
                f"PRECEDING){self.path()}{steps}")

    def path(self) -> str:
        """How it is computed, as EXPLAIN says after its window."""
        return (" (each event's window from a log of the events: one sort a cycle, from the "
                f"log's last {grid_text(self.preceding, self)} in a cycle at least that long, "
                "else from a base kept between cycles)")


@dataclass(frozen=True)
class SpecialisedJoin(PlanNode):
    """A join computed a faster way than ``Join``'s general one, from what its inputs are:
    ``join`` is the logical join it replaces, kept whole so that equal queries build equal
    nodes and EXPLAIN can say what runs; ``left`` and ``right`` are what it reads.
    """

    left: PlanNode
    right: PlanNode
    join: Join = field(metadata=RECORD)

    @property
    def children(self) -> tuple[PlanNode, ...]:  # noqa: D102
        return (self.left, self.right)

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.RELATION

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self.join.schema


@dataclass(frozen=True)
class IntervalJoin(SpecialisedJoin):
    """An inner join of two time-windowed streams, computed from the elements' intervals.

    ``left`` and ``right`` are the streams; ``join`` is the logical join it replaces (each
    input a time window, possibly under filters and projections), kept whole so that equal
    queries build equal nodes and EXPLAIN can say what runs. Every element's interval is
    known when its event arrives, so a pair is emitted once, valid over
    ``[max(ts), min(te))``, without rebuilding elements from changes. Made by the optimizer
    rule ``plan/rules/join_windowed_streams.py``; ``shedding`` is set by the query that asks
    for it (``plan/rules/shed_window_joins.py``).
    """

    shedding: Shedding | None = None

    def side(self, i: int) -> tuple[Window | IntervalJoin, tuple[Filter | Project, ...]]:
        """Input ``i``'s window (or the interval join whose pairs it reads: a join of three
        or more windowed streams) and the per-element filters and projections above it,
        lowest first.
        """
        steps: list[Filter | Project] = []
        node = self.join.children[i]
        while isinstance(node, Filter | Project):
            steps.append(node)
            node = node.child
        assert isinstance(node, Window | IntervalJoin), node
        return node, tuple(reversed(steps))

    def label(self) -> str:  # noqa: D102
        on = f"ON {self.join.condition}" if self.join.condition else "(cross)"
        shed = ""
        if (how := self.shedding) is not None:
            z = f"z={how.throttle:g}" if how.throttle is not None else \
                "rows processed / received" if how.control is ShedControl.RATIO else \
                f"budget {how.budget_seconds:g} s"
            shed = f" SHEDDING {how.mode.value} ({how.basic_windows} sub-windows, {z})"
        sides = [s.label() if isinstance(s, Window) else "pairs of the join below"
                 for s in (self.side(0)[0], self.side(1)[0])]
        return f"IntervalJoin {on} <- {sides[0]} x {sides[1]}{shed}"


@dataclass(frozen=True)
class ChunkJoin(SpecialisedJoin):
    """An inner join of a stream's time chunks with an aggregate over the same chunks (a
    chunk's bids with the chunk's highest price): each chunk's rows meet the chunk's
    aggregate rows once, when the chunk ends, and the pair holds over the chunk's validity
    ``[cut, cut + by)``, where both inputs' rows hold.

    ``left`` is the stream whose ``[CUT BY by]`` window the join's left input reads (through
    filters and projections, ``steps``); ``right`` is the join's right input, a sliced
    aggregate over that same window (through filters and projections); ``join`` is the
    logical join it replaces, kept whole so that equal queries build equal nodes. Made by
    ``plan/rules/join_aligned_chunks.py``.
    """

    by: int

    def steps(self) -> tuple[Filter | Project, ...]:
        """The per-event filters and projections between the window and the join's left
        input, lowest first.
        """
        steps: list[Filter | Project] = []
        node = self.join.left
        while isinstance(node, Filter | Project):
            steps.append(node)
            node = node.child
        return tuple(reversed(steps))

    def label(self) -> str:  # noqa: D102
        on = f"ON {self.join.condition}" if self.join.condition else "(cross)"
        by = show_micros(self.by) if self.left.time_kind is TimeKind.TIMESTAMP else self.by
        return (f"ChunkJoin {on} <- Window [CUT BY {by}] x its chunks' aggregate (each "
                "chunk's rows with its aggregate, once it ends)")


def keyless_aggregate(node: PlanNode) -> bool:
    """Whether ``node`` is, through filters and projections, a windowed or aligned aggregate
    with no GROUP BY: one row per chunk or instant, small enough to send to every task of
    a join's other side, which is then joined where it is and not shuffled.
    """
    while isinstance(node, Filter | Project):
        node = node.child
    return isinstance(node, SlicedAggregate | AlignedAggregate) and not node.aggregate.keys


def grid_text(step: int, node: PlanNode) -> str:
    """A grid step as EXPLAIN shows it: a duration on a timestamp stream's time axis."""
    return show_micros(step) if node.time_kind is TimeKind.TIMESTAMP else str(step)


@dataclass(frozen=True)
class AlignedAggregate(UnaryNode):
    """A grouped aggregate over a relation that changes only at multiples of ``step`` (a
    hopping or chunk window's aggregate, a join of such), evaluated at those instants: the
    snapshot at a multiple ``m`` holds over ``[m, m + step)``, so the aggregate of it does
    too, and each is computed once, statelessly, from the input's segments (NEXMark q5's
    maximum of the per-slide counts).

    ``child`` is the aggregate's input; ``aggregate`` is the logical aggregate it replaces,
    kept whole so that equal queries build equal nodes. Made by
    ``plan/rules/evaluate_at_slides.py``.
    """

    aggregate: Aggregate = field(metadata=RECORD)
    step: int

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.RELATION

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self.aggregate.schema

    def label(self) -> str:  # noqa: D102
        calls = calls_text(self.aggregate.aggs, self.aggregate.keys)
        return f"AlignedAggregate {calls}{self.path()}"

    def path(self) -> str:
        """How it is computed, and why, as EXPLAIN says after its calls."""
        return (f" at each {grid_text(self.step, self)} (its input changes only there: each "
                "snapshot aggregated once, no state)")


@dataclass(frozen=True)
class AlignedTopN(UnaryNode):
    """A Top-N (or ranking) of a relation that changes only at multiples of ``step``,
    evaluated at those instants: each snapshot ranked once, statelessly, from the input's
    segments (NEXMark q5 in its Top-N form: the auctions ranked by their per-slide count).

    ``child`` is the ranking's input; ``top`` is the logical TopN it replaces, kept whole
    so that equal queries build equal nodes. Made by ``plan/rules/evaluate_at_slides.py``.
    """

    top: TopN = field(metadata=RECORD)
    step: int

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.RELATION

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self.top.schema

    def label(self) -> str:  # noqa: D102
        return (f"Aligned{self.top.label()} at each {grid_text(self.step, self)} (its input "
                "changes only there: each snapshot ranked once, no state)")


@dataclass(frozen=True)
class AlignedJoin(SpecialisedJoin):
    """A join of two relations that change only at multiples of ``step`` (a windowed
    aggregate and an aggregate of it, NEXMark q5), evaluated at those instants: on the
    snapshot at ``m`` the SQL join of the inputs' snapshots at ``m``, which holds over
    ``[m, m + step)``, computed once, statelessly, from the inputs' segments. Made by
    ``plan/rules/evaluate_at_slides.py``.
    """

    step: int

    def label(self) -> str:  # noqa: D102
        how = "" if self.join.how is JoinHow.INNER else f" {self.join.how.name}"
        on = f"ON {self.join.condition}" if self.join.condition else "(cross)"
        return (f"AlignedJoin{how} {on} at each {grid_text(self.step, self)} (its inputs "
                "change only there: each pair of snapshots joined once, no state)")


#: the nodes evaluated at the multiples of a step, from their inputs' segments
Aligned = AlignedAggregate | AlignedJoin | AlignedTopN


@dataclass(frozen=True)
class Union(PlanNode):
    """UNION ALL of inputs of one kind with the same column types (named by the first)."""

    inputs: tuple[PlanNode, ...]

    @property
    def children(self) -> tuple[PlanNode, ...]:  # noqa: D102
        return self.inputs

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        kinds = {c.kind for c in self.inputs}
        if kinds == {EdgeKind.STREAM}:
            return EdgeKind.STREAM
        if kinds == {EdgeKind.TABLE}:
            return EdgeKind.TABLE
        return EdgeKind.RELATION

    def label(self) -> str:  # noqa: D102
        return "Union ALL"


class RankKind(Enum):
    """How a Top-N numbers the rows of a snapshot: every copy its own number
    (``ROW_NUMBER``, ``ORDER BY ... LIMIT``), ties the same number with gaps after them
    (``RANK``) or without (``DENSE_RANK``).
    """

    ROW_NUMBER = "row_number"
    RANK = "rank"
    DENSE_RANK = "dense_rank"


@dataclass(frozen=True)
class SortKey:
    """One ORDER BY item: a column of the input, its direction and where NULLs go."""

    column: str
    descending: bool = False
    nulls_first: bool | None = None  # None: Spark's default (first ascending, last desc)

    def sql(self) -> str:
        """The item as Spark SQL."""
        nulls = "" if self.nulls_first is None else (
            " NULLS FIRST" if self.nulls_first else " NULLS LAST")
        return f"`{self.column}`{' DESC' if self.descending else ''}{nulls}"


@dataclass(frozen=True)
class TopN(UnaryNode):
    """The first ``n`` rows of every snapshot of a relation, per partition, in ``order``
    (all of them numbered, when ``n`` is None).

    Rows equal in ``order`` are ordered by all their columns, so which of them are first
    does not depend on arrival order. With ``rank_column`` the output has each row's
    number under that name (BIGINT), as Flink's ``ROW_NUMBER() ... WHERE rn <= n``.
    """

    partition: tuple[str, ...]
    order: tuple[SortKey, ...]
    n: int | None  # None: every row, numbered (a ranking no WHERE bounds)
    rank: RankKind = RankKind.ROW_NUMBER
    rank_column: str | None = None

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.RELATION

    @cached_property
    def _schema(self) -> StructType:
        fields = list(self.child.schema.fields)
        if self.rank_column is not None:
            fields.append(StructField(self.rank_column, LongType(), False))
        return StructType(fields)

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self._schema

    def label(self) -> str:  # noqa: D102
        part = f" PARTITION BY {', '.join(self.partition)}" if self.partition else ""
        order = ", ".join(k.sql() for k in self.order)
        shown = f" AS {self.rank_column}" if self.rank_column else ""
        bound = f" <= {self.n}" if self.n is not None else ""
        return f"TopN {self.rank.name}{shown}{bound}{part} ORDER BY {order}"


@dataclass(frozen=True)
class TopCandidates(UnaryNode):
    """The elements of a ``[RANGE length]`` window that can still be among the first ``n``
    rows of their partition in ``order``: an element leaves once ``n`` elements that
    arrived no earlier and rank above it have arrived (they outlive it), so a Top-N above
    ranks a few candidates per instant instead of every live row, with the same result.

    ``ties``: rows equal in ``order`` rank by all their columns (``ROW_NUMBER``, ``LIMIT``);
    without, only a row strictly above in ``order`` pushes one out (``RANK``). Made by
    ``plan/rules/prune_top_candidates.py``.
    """

    partition: tuple[str, ...]
    order: tuple[SortKey, ...]
    n: int
    ties: bool
    length: int

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.RELATION

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self.child.schema

    def label(self) -> str:  # noqa: D102
        part = f" PARTITION BY {', '.join(self.partition)}" if self.partition else ""
        order = ", ".join(k.sql() for k in self.order)
        return (f"TopCandidates {self.n}{part} ORDER BY {order} (an element leaves once "
                f"{self.n} later ones rank above it: a Top-N ranks only these)")


@dataclass(frozen=True)
class ToStream(UnaryNode):
    """Relation to stream: ISTREAM, DSTREAM or RSTREAM (snapshots every ``period``).

    ``last_of_group`` (DSTREAM only): only the rows that leave while their group (rows equal
    in these columns; ``()``: all rows one group) gets no new row at that instant, each
    group's last row before it empties, as a session's aggregate when the session ends.
    """

    form: OutputForm
    period: int | None = None
    last_of_group: tuple[str, ...] | None = None

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.STREAM

    def label(self) -> str:  # noqa: D102
        every = f" every {self.period}" if self.period else ""
        if self.last_of_group is not None:
            by = ", ".join(self.last_of_group) or "all rows"
            return f"{self.form.name} of each group's last row (group: {by})"
        return f"{self.form.name}{every}"


@dataclass(frozen=True)
class Quarantine(UnaryNode):
    """A stream as query ``query`` (``on_error='skip'``) reads it: without the rows one of
    its operators raised on (``runtime/quarantine.py``). Its own node: the rows it leaves
    out are that query's, so nothing above it is shared with other queries.
    """

    query: str

    def label(self) -> str:  # noqa: D102
        return f"Quarantine for {self.query} (rows it raised on: dead letters)"


@dataclass(frozen=True)
class TableFunction(UnaryNode):
    """A user table function over its input's chunks (``sparkcq.table_functions``): a
    stream of the rows it emits, each an event at the cut point of the chunk it was
    emitted for, with the ``partition_by`` columns first.

    Its input is a stream (each instant a chunk) or a chunk window (each cut a chunk): the
    rows entering at one instant are one chunk, ordered by ``order``.
    """

    function: UserTableFunction
    args: tuple[Any, ...]
    partition_by: tuple[str, ...]
    order: tuple[str, ...]
    out_schema: StructType = field(compare=False, hash=False)

    @property
    def kind(self) -> EdgeKind:  # noqa: D102
        return EdgeKind.STREAM

    @property
    def schema(self) -> StructType:  # noqa: D102
        return self.out_schema

    def label(self) -> str:  # noqa: D102
        args = ", ".join(map(repr, self.args))
        part = f" PARTITION BY {', '.join(self.partition_by)}" if self.partition_by else ""
        return f"TableFunction {self.function.name}({args}){part}"


def transform_up(node: PlanNode, rewrite: Callable[[PlanNode], PlanNode]) -> PlanNode:
    """``node`` with ``rewrite`` applied to every node, children first (a rewrite sees its
    children already rewritten); subtrees it leaves alone stay the same objects, and so
    does the logical plan a specialised node keeps as a record of what it replaces
    (``RECORD``).
    """
    changed: dict[str, object] = {}
    for f in fields(node):
        if f.metadata.get("record"):
            continue
        value = getattr(node, f.name)
        if isinstance(value, PlanNode):
            new = transform_up(value, rewrite)
            if new is not value:
                changed[f.name] = new
        elif isinstance(value, tuple) and value and all(isinstance(v, PlanNode) for v in value):
            news = tuple(transform_up(v, rewrite) for v in value)
            if any(a is not b for a, b in zip(news, value, strict=True)):
                changed[f.name] = news
    return rewrite(replace(node, **changed) if changed else node)


def walk(node: PlanNode) -> list[PlanNode]:
    """All nodes below and including ``node``, children before parents, each once."""
    seen: dict[PlanNode, None] = {}

    def visit(n: PlanNode) -> None:
        if n in seen:
            return
        for c in n.children:
            visit(c)
        seen[n] = None

    visit(node)
    return list(seen)


def render_tree(node: PlanNode, marks: dict[PlanNode, str] | None = None,
                labels: dict[PlanNode, str] | None = None) -> str:
    """An indented text tree of the plan, one node per line, for EXPLAIN: each node's
    ``label()``, or its line of ``labels`` (``plan/labels.py``), then ``marks``.
    """
    lines: list[str] = []

    def visit(n: PlanNode, depth: int) -> None:
        mark = (marks or {}).get(n, "")
        label = (labels or {}).get(n) or n.label()
        lines.append(f"{'  ' * depth}{label}  [{n.kind.value}]{mark}")
        for c in n.children:
            visit(c, depth + 1)

    visit(node, 0)
    return "\n".join(lines)
