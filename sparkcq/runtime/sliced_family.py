"""Sliced families: the window aggregates of many queries over one window, from one set of
panes.

Fifty dashboards over ``readings [RANGE 60 SECONDS SLIDE 10 SECONDS] WHERE value > 0.1``
grouped by sensor differ only in their aggregates. Their ``SlicedAggregate`` nodes (same
window input below the argument projection, same group-key expressions) form a family: one
``SlicedAggregateOperator`` computes the union of their calls, each distinct call once, from
one pane state and one sort per cycle. A member is a projection of the family's result: its
columns of the segments, and of the change edge (+1 where a segment starts, -1 where one
ends; a segment boundary where only another member's value changes gives a -1 and a +1 of
the same row, which cancel).

Members come and go at run time. A member whose calls the family computes already just
joins: the panes hold what it needs, and in its first cycle it takes the segments that began
before the cycle as starting at the cycle's start (as a new query above a shared relation
does). A member with new calls makes the family rebuild its operator over the
union of calls; the rebuilt operator starts from the stream's recent events, which the scan
keeps for the window's reach (``ScanOperator.history``), so the panes of the new calls are
as complete as the others. If the stream does not hold them (a derived stream, or history
kept since too recently), the member starts a family of its own. A dropped member's calls
stay in the operator until the family empties, with their arguments read as NULL, so a
query stopped because its expression failed cannot fail the others.

Windows of steps of one kind (``CUT BY s [WINDOW c CHUNKS]``, ``RANGE w SLIDE s``) are
one family whatever their lengths and steps: five dashboards over ``CUT ON ts BY 5, 10, 20,
30, 60 SECONDS`` keep one set of panes of 5 seconds, and each window's rows come from those
panes regrouped, tagged with the window in one frame of segments
(``SlicedAggregateOperator.windows``). A member with a new window rebuilds the operator as
one with new calls does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from math import gcd

from pyspark.sql import DataFrame
from pyspark.sql.types import StructField, StructType

from sparkcq.model.columns import FROM, TO, WINDOW_TAG, D, T, family_key
from sparkcq.plan.nodes import (
    AggCall,
    Aggregate,
    CutSpec,
    Filter,
    PlanNode,
    Project,
    RangeSpec,
    SlicedAggregate,
    Window,
    project_sql,
    window_reach,
)
from sparkcq.runtime.frames import Runtime, Slice, SqlViews, project, q
from sparkcq.runtime.fusion import StableNames, split_aggregate
from sparkcq.runtime.operators.base import CycleContext, Operator
from sparkcq.runtime.operators.range_aggregate import RangeAggregateOperator
from sparkcq.runtime.operators.scan import ScanOperator
from sparkcq.runtime.operators.sliced_aggregate import (
    SlicedAggregateOperator,
    events_taken,
    shares_panes,
    window_step,
)
from sparkcq.runtime.transaction import CycleParticipant

SlicedKey = tuple[PlanNode, tuple[str, ...]]
CallKey = tuple[str, str | None]  # function, argument expression


def sliced_key(node: SlicedAggregate) -> SlicedKey:
    """What sliced aggregates must share to be one family: the window input below the
    argument projection, and the group-key expressions. Windows of steps of one kind
    (``CUT BY s [WINDOW c CHUNKS]``, ``RANGE w SLIDE s``) count as one window whatever their
    length and step: their family keeps panes of a step dividing every step, and regroups
    them per window.
    """
    base, exprs, _schema = split_aggregate(node.aggregate)
    spec = node.window.spec
    if shares_panes(spec):
        base = with_window(base, tumbling_like(spec, 1))  # type: ignore[arg-type]
    return base, tuple(exprs[k] for k in node.aggregate.keys)


def tumbling_like(spec: CutSpec | RangeSpec, span: int) -> CutSpec | RangeSpec:
    """A tumbling window of ``spec``'s kind, ``span`` long."""
    return CutSpec(span) if isinstance(spec, CutSpec) else RangeSpec(span, span)


def with_window(node: PlanNode, spec: CutSpec | RangeSpec) -> PlanNode:
    """``node`` (filters and projections over a window) with the window's spec ``spec``."""
    if isinstance(node, Window):
        return replace(node, spec=spec)
    assert isinstance(node, Filter | Project), node
    return replace(node, child=with_window(node.child, spec))


def sliced_operator(node: SlicedAggregate, rt: Runtime) -> SlicedAggregateOperator:
    """The operator computing ``node``: from panes, or from a log and a base for a
    per-event ``[RANGE w]`` window (``operators/range_aggregate.py``).
    """
    spec = node.window.spec
    if isinstance(spec, RangeSpec) and spec.slide is None:
        return RangeAggregateOperator(node, rt)
    return SlicedAggregateOperator(node, rt)


@dataclass(frozen=True)
class SlicedRun:
    """One cycle's evaluation of a family: its segments (the change edges derived from
    them are built only for members whose edge is read, ``SlicedFamily.changes``).
    """

    segments: Slice
    waits: bool = False  # the stream stayed where the history ends: the reseed is not due


@dataclass(frozen=True)
class SlicedFamilyProgress:
    """What a sliced family keeps between cycles on the driver, besides its operators'."""

    previous: SlicedAggregateOperator | None = None  # answers contents until op has run
    # the (re)built op starts from the stream's held events at or after reseed_at minus
    # reseed_length: the history of the window's reach when it replaces an op that ran,
    # or only the events ahead of the stream's position when the family is new
    reseed_at: int | None = None
    fresh: frozenset[SlicedAggregate] = frozenset()  # members yet to run


class SlicedFamily(CycleParticipant):
    """The sliced aggregates over one window input and key list (see the module)."""

    def __init__(self, key: SlicedKey, stream: PlanNode, scan: Operator, rt: Runtime):
        self.base, self.key_sqls = key
        self.stream = stream
        self.scan = scan
        self.rt = rt
        self.members: dict[SlicedAggregate, list[tuple[str, str]]] = {}  # out col -> family col
        self.calls: dict[CallKey, str] = {}
        self.names = StableNames()
        self.op: SlicedAggregateOperator | None = None
        self.reseed_length = 0  # see ``SlicedFamilyProgress.reseed_at``
        self.progress: SlicedFamilyProgress = SlicedFamilyProgress()
        self.views = SqlViews(rt.spark, "sliced_family")  # its queries' runs (sliced_runs.py)

    @property
    def runs_name(self) -> str:
        """A name for the family's open runs (``sliced_runs.py``) that is the same in every
        process, for saved state: its window input and keys, whatever its members.
        """
        return hashlib.sha1(repr((self.base, self.key_sqls)).encode()).hexdigest()[:16]

    @property
    def previous(self) -> SlicedAggregateOperator | None:
        """The operator a rebuild replaced, answering contents until the new one has run."""
        return self.progress.previous

    @property
    def fresh(self) -> frozenset[SlicedAggregate]:
        """The members that have not run yet."""
        return self.progress.fresh

    # -- membership (between cycles) ---------------------------------------------------------
    def new_calls(self, node: SlicedAggregate) -> bool:
        """Whether ``node`` calls anything the family does not compute yet, or over a
        window it does not compute.
        """
        _base, exprs, _schema = split_aggregate(node.aggregate)
        return (any((a.func, exprs[a.arg] if a.arg else None) not in self.calls
                    for a in node.aggregate.aggs)
                or (self.op is not None and node.window.spec not in self.windows))

    @property
    def windows(self) -> tuple[CutSpec | RangeSpec, ...]:
        """The windows the family's operator computes."""
        if self.op is None:
            return ()
        return self.op.windows or (self.op.sliced.window.spec,)  # type: ignore[return-value]

    def window_tag(self, node: SlicedAggregate) -> int | None:
        """The tag of a member's rows in the family's segments (None: untagged)."""
        assert self.op is not None
        return self.op.tag_of(node.window.spec)  # type: ignore[arg-type]

    def can_take(self, node: SlicedAggregate) -> bool:
        """Whether ``node`` can join: the family has not run, computes its calls already,
        or can be rebuilt from the stream's history.
        """
        if self.op is None or self.op.position is None or not self.new_calls(node):
            return True
        reach = max(self.op.history_length, window_reach(node.window.spec) or 0)
        return isinstance(self.scan, ScanOperator) and self.scan.covers(self.op.position, reach)

    def add(self, node: SlicedAggregate, reach: int = 0) -> None:
        """Take ``node`` in; rebuild the operator if it calls something new. ``reach``: how
        far before the stream's position a new operator starts from the stream's history
        (``GlobalPlan.history_of``: the window's reach when the window already runs).
        """
        rebuild = self.op is None or self.new_calls(node)
        self.members = {**self.members, node: []}
        self.progress = replace(self.progress, fresh=self.fresh | {node})
        if rebuild:
            self.rebuild(reach)
        else:
            self.members[node] = self.columns_of(node)

    def remove(self, node: SlicedAggregate) -> None:
        """Let ``node`` go (its calls are computed until the family empties)."""
        self.members = {m: c for m, c in self.members.items() if m != node}
        self.progress = replace(self.progress, fresh=self.fresh - {node})
        if not self.members:
            self.release()

    def columns_of(self, node: SlicedAggregate) -> list[tuple[str, str]]:
        """(output column, family column) pairs of a member, in its schema's order."""
        _base, exprs, _schema = split_aggregate(node.aggregate)
        keys = {k: family_key(i) for i, k in enumerate(node.aggregate.keys)}
        calls = {a.name: self.calls[(a.func, exprs[a.arg] if a.arg else None)]
                 for a in node.aggregate.aggs}
        return [(f.name, keys.get(f.name) or calls[f.name]) for f in node.schema.fields]

    def rebuild(self, reach: int = 0) -> None:
        """A new operator over the union of the members' calls; when the old one ran, the
        new one starts from the stream's history at the old one's position (else from the
        stream's position, ``reach`` back).
        """
        key_cols = [family_key(i) for i in range(len(self.key_sqls))]
        exprs = dict(zip(key_cols, self.key_sqls, strict=True))
        fields: dict[str, StructField] = {}
        out_fields: dict[str, StructField] = {}
        calls: dict[str, AggCall] = {}
        for node in self.members:
            _base, node_exprs, node_schema = split_aggregate(node.aggregate)
            in_types = {f.name: f.dataType for f in node_schema.fields}
            out_types = {f.name: f.dataType for f in node.schema.fields}
            for k, kc in zip(node.aggregate.keys, key_cols, strict=True):
                fields[kc] = StructField(kc, in_types[k])
                out_fields[kc] = StructField(kc, out_types[k])
            for call in node.aggregate.aggs:
                arg_sql = node_exprs[call.arg] if call.arg is not None else None
                arg_col = None
                if arg_sql is not None and call.arg is not None:
                    arg_col = self.names.name(self.names.args, arg_sql, "_f")
                    exprs[arg_col] = arg_sql
                    fields[arg_col] = StructField(arg_col, in_types[call.arg])
                name = self.names.name(self.names.calls, (call.func, arg_sql), "_c")
                self.calls[(call.func, arg_sql)] = name
                calls[name] = AggCall(call.func, arg_col, False, name)
                out_fields[name] = StructField(name, out_types[call.name])
        # the members' windows: one, or several over panes of a step dividing each one's
        # step (the old operator's too, so a window of a dropped member stays)
        windows = tuple(dict.fromkeys([*(m.window.spec for m in self.members),
                                       *self.windows]))
        base = self.base
        if len(windows) > 1 or shares_panes(windows[0]):
            step = 0
            for w in windows:
                step = gcd(step, window_step(w))  # type: ignore[arg-type]
            base = with_window(base, tumbling_like(windows[0], step)  # type: ignore[arg-type]
                               if len(windows) > 1 else windows[0])  # type: ignore[arg-type]
        project = project_sql(base, exprs.items(), StructType(list(fields.values())))
        aggregate = Aggregate(project, tuple(key_cols), tuple(calls.values()),
                              StructType([*[out_fields[k] for k in key_cols],
                                          *[out_fields[c] for c in calls]]))
        old = self.op
        node = SlicedAggregate(self.stream, aggregate)
        self.op = (SlicedAggregateOperator(node, self.rt, windows)  # type: ignore[arg-type]
                   if len(windows) > 1 else sliced_operator(node, self.rt))
        if old is not None and old.position is not None:
            self.progress = replace(self.progress, previous=old, reseed_at=old.position)
            self.reseed_length = self.op.history_length
            self.op.resume_at(old.position)
        else:
            if old is not None:
                old.release()
            if isinstance(self.scan, ScanOperator) and self.scan.position is not None:
                # events that arrived ahead of the watermark before this family existed,
                # and the window's reach when the window already runs for others
                self.progress = replace(self.progress, reseed_at=self.scan.position)
                self.reseed_length = reach
                self.op.resume_at(self.scan.position)
        for node in self.members:
            self.members[node] = self.columns_of(node)

    def resumed(self) -> None:
        """State was restored from a checkpoint: every member ran before (none is fresh)."""
        self.progress = replace(self.progress, fresh=frozenset())

    def seeded_from(self) -> None:
        """None: a sliced family starts from its stream's history, as its members join."""
        return None

    def as_sliced(self) -> SlicedFamily:
        """Itself: its records may come as runs of segments (``runtime/sliced_runs.py``)."""
        return self

    def as_fused(self) -> None:
        """Not an aggregate family over a relation."""
        return None

    def release(self) -> None:
        """Free every state the family holds."""
        for op in self.operators():
            op.release()
        self.op = None
        self.progress = replace(self.progress, previous=None)

    def operators(self) -> list[Operator]:
        """The physical operators whose state the family holds (transactions, metrics)."""
        return [op for op in (self.op, self.previous) if op is not None]

    def cycle_parts(self) -> tuple[CycleParticipant, ...]:  # noqa: D102
        return tuple(self.operators())

    # -- the cycle ---------------------------------------------------------------------------
    def evaluate(self, base: Slice, cycle: CycleContext) -> SlicedRun:
        """The cycle's segments and change edges, computed once for every member (kept in
        ``cycle.evaluations``).
        """
        done = cycle.evaluations.get(id(self))
        if done is not None:
            return done  # type: ignore[no-any-return]
        run = self.compute(base, cycle)
        cycle.evaluations[id(self)] = run
        return run

    def compute(self, base: Slice, cycle: CycleContext) -> SlicedRun:
        """What ``evaluate`` returns, computed."""
        assert self.op is not None
        inp = base
        reseed_at = self.progress.reseed_at
        if reseed_at is not None:
            if base.hi <= reseed_at:  # the stream stayed where the history ends
                return SlicedRun(Slice(None, base.lo, base.hi), waits=True)
            assert isinstance(self.scan, ScanOperator)
            # the scan stepped: its held events include this cycle's arrivals
            inp = Slice(None, base.lo, base.hi,
                        arrivals=self.scan.history(reseed_at, self.reseed_length))
        # arguments no member evaluated this cycle reads (dropped members' calls, or
        # another query's while one is tried alone) are NULL: a failed query's expression
        # must not fail the others
        members = self.members if cycle.only is None else \
            {m: c for m, c in self.members.items() if m in cycle.only}
        live = {c for cols in members.values() for _out, c in cols}
        agg = self.op.sliced.aggregate
        needed = {a.arg for a in agg.aggs if a.arg is not None and a.name in live}
        blank = frozenset(a.arg for a in agg.aggs if a.arg is not None and a.arg not in needed)
        # members that ran before all (no reseed, none fresh): a slice where no row
        # changes is skipped
        segments = self.op.evaluate(inp, blank, settled=reseed_at is None and not self.fresh,
                                    events=events_taken(self.op.node, cycle))
        return SlicedRun(segments, waits=segments.segments is None and reseed_at is not None)

    def changes(self, run: SlicedRun, fresh: bool, cycle: CycleContext) -> DataFrame:
        """The change edge of the cycle's segments, for members that ran before or (with
        ``fresh``) for members in their first cycle; built once per cycle, when a member
        whose edge is read asks.
        """
        key = (id(self), fresh)
        done = cycle.evaluations.get(key)
        if done is None:
            assert self.op is not None
            done = cycle.evaluations[key] = self.op.changes(run.segments, fresh=fresh)
        return done  # type: ignore[no-any-return]

    def finish_cycle(self, run: SlicedRun | None) -> None:
        """The cycle was built: fresh members have run, a reseed is spent (unless it still
        waits: then all stays for next cycle).
        """
        if run is None or run.waits:
            return
        if self.previous is not None:
            self.previous.release()
        self.progress = SlicedFamilyProgress()


class SlicedMemberOperator(Operator):
    """One query's sliced aggregate, a projection of its family's evaluation."""

    family: SlicedFamily

    contents_from_inputs = False

    def __init__(self, node: SlicedAggregate, family: SlicedFamily):
        super().__init__(node, family.rt)
        self.family = family
        self.views = SqlViews(family.rt.spark, "sliced_member")

    @property
    def has_run(self) -> bool:
        """Whether its family's operator has stepped (the member's rows are a projection of
        it; the member keeps no position of its own).
        """
        op = self.family.op
        return op is not None and op.position is not None

    def cycle_parts(self) -> tuple[CycleParticipant, ...]:  # noqa: D102
        return (self.family,)

    def reads_edge(self, i: int, own_edge_read: bool) -> bool:  # noqa: D102
        op = self.family.op
        return op is None or op.reads_edge(i, own_edge_read)

    @property
    def state_rows(self) -> int:
        """The rows of the family's state this member shares (counted once in totals)."""
        return sum(op.state_rows for op in self.family.operators())

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        fam = self.family
        run = fam.evaluate(inputs[0], cycle)
        seg = run.segments
        if seg.segments is None:
            return Slice(None, seg.lo, seg.hi)
        assert isinstance(self.node, SlicedAggregate)
        # a projection of the family's frames, of its own
        # window's rows when the family computes several
        pick = [f"{q(src)} AS {q(out)}" for out, src in fam.members[self.node]]
        tag = fam.window_tag(self.node)
        edge = None
        if self.node not in cycle.edges_unread:
            changes = fam.changes(run, self.node in fam.fresh, cycle)
            if tag is not None:
                changes = changes.where(f"{q(WINDOW_TAG)} = {tag}")
            edge = project(changes, *pick, q(T), q(D))
        # a member reading every column of the family's rows has its segments as they are
        op = fam.op
        assert op is not None
        whole = {src for _out, src in fam.members[self.node]} == set(op.names)
        segments = seg.segments
        if tag is not None:
            segments = segments.where(f"{q(WINDOW_TAG)} = {tag}")
        return Slice(edge, seg.lo, seg.hi,
                     project(segments, *pick, q(FROM), q(TO)),
                     coalesced=(op.coalesced_segments and whole
                                and self.node not in fam.fresh))

    def pass_unread(self, inputs: list[Slice], cycle: CycleContext) -> Slice:
        """The family is evaluated (its segments feed fused query outputs); the member's
        own output is not built.
        """
        seg = self.family.evaluate(inputs[0], cycle).segments
        return Slice(None, seg.lo, seg.hi)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The member's rows now, from the family's operator that ran last."""
        fam = self.family
        op = fam.previous if fam.previous is not None else fam.op
        assert op is not None and isinstance(self.node, SlicedAggregate)
        rows = (op.contents([], at, self.node.window.spec)  # type: ignore[arg-type]
                if op.windows else op.contents([], at))
        if rows is None:
            return None
        pick = ", ".join(f"{q(src)} AS {q(out)}" for out, src in fam.members[self.node])
        return self.views.sql(f"SELECT {pick}, {q(T)}, {q(D)} FROM {{r}}", r=rows)
