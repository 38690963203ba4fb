"""A grouped aggregate over a hopping, tumbling or chunk window, computed from panes.

The window's length W is a whole number of steps S (the slide, or the chunk length), so the
time axis cuts into panes of one step each, and the window at an instant holds whole panes:
- ``[RANGE W SLIDE S]``: an event at t lies in the pane ending at ceil(t / S) * S and is in
  the windows of the instants [pane end, pane end + W);
- ``CUT BY S [WINDOW c CHUNKS]`` (W = c * S): an event at t lies in the pane ending at the
  cut after it, floor(t / S) * S + S, and is valid from that cut for W.

Each event is added to its (group, pane) before the shuffle: a pane holds the count, the
exact sum (``aggregate.accumulator_type``; a DOUBLE's as two BIGINTs,
``aggregate.exact_double_parts``), min and max of each argument, so the shuffle
carries about one record per group, pane and task instead of two changes per event. The
state is the panes still in a window at or after the watermark. The group's value changes
only where a pane enters (at its end) or leaves (W later): a running sum over those points,
sorted once per group, gives count, sum and avg at each point without any subtraction of
doubles (the sums are exact), and min and max come from a frame over the panes of the last
W. Consecutive points bound the segments ``[from, to)`` over which the group's row holds.

The output slice carries those segments (``Slice.segments``: the relation's whole content
over the slice, which RSTREAM expands to its evaluation instants with no state of its own)
and the usual change edge derived from them (+1 where a segment starts, -1 where it ends),
for every other consumer.

Several windows whose steps are multiples of the pane step can be computed from one set of
panes (``windows``, a family over several windows): a pane ending at p lies in the window's
own pane (of its step S) ending at the next multiple of S from p on, so each window's panes
are the panes regrouped by that end; a tumbling window's rows are those, a hopping one's
come from points and running sums over them as above, per window; all windows' rows are in
one frame tagged by window (``WINDOW_TAG``):

    CUT BY 4 and CUT BY 6 over panes of 2; panes of key a ending at 2, 4, 6, 8 (sums 1 2 3 4)
    tag 0 (4): [4, 8) sum 3, [8, 12) sum 7      tag 1 (6): [6, 12) sum 6, [12, 18) sum 4
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pyspark.sql import DataFrame
from pyspark.sql.types import (
    LongType,
    StructField,
    StructType,
)

from sparkcq.model.columns import AT, FROM, GROUP_HASH, NEXT, PANE_END, TO, WINDOW_TAG, D, N, T
from sparkcq.model.time import TIME_MAX, TIME_MIN, shift
from sparkcq.plan.nodes import (
    CutSpec,
    OverAggregate,
    PlanNode,
    RangeSpec,
    SlicedAggregate,
    StreamScan,
    window_reach,
)
from sparkcq.runtime.frames import Runtime, Slice, SqlViews, StateFrame, bound_sql, q
from sparkcq.runtime.operators.base import CycleContext, Operator, Progress, as_changes_at
from sparkcq.runtime.operators.measures import Measure, measures_of
from sparkcq.runtime.step_chains import chain_sql


@dataclass(frozen=True)
class SlicedProgress(Progress):
    """A sliced aggregate's position, and whether it has emitted (segments that began
    before its position were then emitted).
    """

    started: bool = False
    # the cycle's events are shuffled by group before they are summed, rather than summed
    # per task first (``spreads_events``)
    spreads: bool = False


class SlicedAggregateOperator(Operator):
    """count, sum, avg, min and max per group over a time window, from panes (see module)."""

    # whether consecutive segments of a group always differ (``Slice.coalesced``)
    coalesced_segments = False
    # whether the panes still in a window are kept in one state frame, each cycle's panes
    # merged into it (``panes``; a per-event RANGE window keeps runs instead)
    keeps_panes = True
    panes: StateFrame

    def __init__(self, node: SlicedAggregate | OverAggregate, rt: Runtime,
                 windows: tuple[CutSpec | RangeSpec, ...] = ()):
        super().__init__(node, rt)
        self.sliced = node
        self.views = SqlViews(rt.spark, "sliced")
        agg = node.aggregate
        spec = node.window.spec
        if isinstance(spec, CutSpec):
            self.step_len, self.length = spec.by, spec.by * spec.chunks
            self.pane_end = f"{q(T)} - pmod({q(T)}, {spec.by}) + {spec.by}"
        else:
            # a per-event RANGE window is one of panes of one unit (``range_aggregate.py``)
            assert isinstance(spec, RangeSpec)
            self.step_len, self.length = spec.slide or 1, spec.size
            self.pane_end = (f"{q(T)} + pmod(-{q(T)}, {spec.slide})"
                             if spec.slide and spec.slide > 1 else q(T))
        # a tumbling window (W = S) holds one pane at a time: a group's row over
        # [pane end, pane end + W) is that pane's, with no points to merge or sort
        self.tumbling = self.length == self.step_len
        self.keys = list(agg.keys)
        found = measures_of(agg)
        self.measures: dict[str, Measure] = found.columns
        self.values: dict[str, str] = found.values  # output column -> SQL over measures
        self.names = [f.name for f in agg.schema.fields]
        self.pane_fields = [
            StructField(GROUP_HASH, LongType()),
            *[f for f in agg.child.schema.fields if f.name in self.keys],
            StructField(PANE_END, LongType()), StructField(N, LongType()),
            *[StructField(m.name, m.dtype) for m in self.measures.values()]]
        if self.keeps_panes:
            self.panes = self.state(StructType(self.pane_fields), "panes", GROUP_HASH)
        self.events_sql = self.build_events_sql(node)
        self.progress: SlicedProgress = SlicedProgress()
        # a source stream's events are taken in as they arrive, ahead of the watermark
        # (``Slice.arrivals``): a pane is only read once the watermark passes its end
        self.reads_arrivals = isinstance(node.child, StreamScan)
        # how far back the stream's events of the window's live elements reach: what a
        # rebuilt family starts from (``ScanOperator.history``)
        reach = window_reach(spec)
        assert reach is not None
        self.history_length = reach
        # how far before a cycle's start the kept panes must reach
        self.kept_length = self.length
        # Several windows of one kind over one set of panes (``windows``; the node's own
        # window gives the panes, a step that divides every window's step): each window's
        # rows come from its panes regrouped, tagged with the window's index
        # (``WINDOW_TAG``) in one frame of segments for all of them.
        self.windows = windows if len(windows) > 1 else ()
        self.hopping = any(window_length(w) != window_step(w) for w in self.windows)
        if self.windows:
            assert all(window_step(w) % self.step_len == 0 for w in self.windows)
            # a window's first pane may end one step after its earliest event
            self.kept_length = max(window_length(w) + window_step(w) for w in self.windows)
            self.history_length = max(r for w in self.windows
                                      if (r := window_reach(w)) is not None)

    def reads_edge(self, i: int, own_edge_read: bool) -> bool:  # noqa: D102
        return not self.reads_arrivals

    # -- SQL text, built once ----------------------------------------------------------------
    def build_events_sql(self, node: SlicedAggregate | OverAggregate,
                         blank: frozenset[str] = frozenset()) -> str:
        """The input's events through the filters and projections below the aggregate
        (with the columns named in ``blank`` NULL, see ``evaluate``).
        """
        return chain_sql("{inp}", node.steps(), (T, D), blank)

    def key_list(self, *extra: str) -> str:
        """The group hash, the keys and ``extra`` columns, comma-separated."""
        return ", ".join([q(GROUP_HASH), *map(q, self.keys), *extra])

    def group_hash(self) -> str:
        """The group hash ``_g`` of an event; every frame of a sliding window's operator
        after the pane sums is partitioned by it alone, so grouping per (group, pane), per
        (group, point) and the per-group sort need no shuffle of their own (as
        ``GroupKeys``).
        """
        if not self.keys:
            return "CAST(0 AS BIGINT)"
        return f"xxhash64({', '.join(map(q, self.keys))})"

    def placed_events_sql(self) -> str:
        """The cycle's entering events, each with its pane end and group hash."""
        return (f"(SELECT *, {self.pane_end} AS {q(PANE_END)}, {self.group_hash()} AS "
                f"{q(GROUP_HASH)} FROM {self.events_sql}) WHERE {q(D)} > 0")

    def panes_sql(self, with_old: bool, lo: int, single: bool, spreads: bool = False) -> str:
        """The cycle's events summed per (group, pane), then merged with the panes kept
        from earlier cycles that may still be in a window at or after ``lo``. The kept
        panes are partitioned by the group hash (a sliding window's) or by the whole
        (group, pane) key (a tumbling one's) already: only the new sums are redistributed,
        and the union keeps that partitioning (each kept column renamed to itself, as in
        ``interval_join``). A tumbling window's panes are read by no per-group sort, so
        its new sums are shuffled by their grouping key itself: one exchange, of the
        cycle's sums alone (reshuffling the kept panes with them doubled an output-heavy
        cycle's shuffled records). A sliding window's sums are shuffled twice, by their
        key to be summed and by the group hash to join the kept panes, unless the events
        are shuffled by the group hash before they are summed (``spreads``, see
        ``spreads_events``): one exchange. In a cycle run in one partition (``single``)
        nothing is redistributed: a repartition would still be an exchange, and a stage.
        """
        by = self.key_list(q(PANE_END))
        names = [f.name for f in self.panes.schema.fields]
        merged = "".join(f", {m.combine}({q(m.name)}) AS {q(m.name)}"
                         for m in self.measures.values())
        # a bound even in the first slice (lo = TIME_MIN): one text for every cycle
        live = f" WHERE {q(PANE_END)} >= {bound_sql(max(lo - self.kept_length, TIME_MIN))}"
        measures = "".join(f", {m.combine}({m.sql}) AS {q(m.name)}"
                           for m in self.measures.values())
        # a sliding window's new panes go to the kept panes' partitions: as events or as sums
        by_group = not self.tumbling and not single
        events = self.placed_events_sql()
        if by_group and spreads:
            events = f"(SELECT * FROM {events} DISTRIBUTE BY {q(GROUP_HASH)})"
        partial = (f"SELECT {by}, sum({q(D)}) AS `{N}`{measures} "
                   f"FROM {events} GROUP BY {by}")
        merging = f"SELECT {', '.join(map(q, names))} FROM ({partial})"
        if by_group and not spreads:
            merging += f" DISTRIBUTE BY {q(GROUP_HASH)}"
        if with_old:
            kept = ", ".join(f"{q(n)} AS {q(n)}" for n in names)
            merging = f"SELECT {kept} FROM {{old}}{live} UNION ALL ({merging})"
        return f"SELECT {by}, sum(`{N}`) AS `{N}`{merged} FROM ({merging}) GROUP BY {by}"

    def points_sql(self, hi: int, panes: str = "{panes}", keys: str | None = None,
                   enters: str = q(PANE_END), leaves: str | None = None) -> str:
        """Each pane enters the window at its end and leaves ``length`` later: the points
        where a group's value may change, with the change in count and sums (and the
        pane's own min and max where it enters). ``panes`` the source, ``keys`` what a
        group is (several windows: the window's tag too), ``enters`` and ``leaves`` where a
        pane enters and leaves. A group may have several points at one instant (a pane
        leaves where another enters): ``running_sql`` reads them as one, with no grouping
        of its own (grouping them was a hash aggregate over every point for the few that
        meet, over 100,000 keys 514,000 points into 495,000).

        Only the panes that enter before ``hi`` are read: a later one changes nothing
        before ``hi``, and what a segment is past ``hi`` is no reader's concern (each
        takes a segment's end at or after ``hi``, or none, as "not within the slice").
        The panes of a cycle's arrivals lie mostly ahead of its watermark: over 100,000
        keys they were 95,000 of 257,000 panes sorted for nothing (2026-12-07).
        """
        keys = keys or self.key_list()
        leaves = leaves or f"{q(PANE_END)} + {self.length}"
        enter = [q(m.name) for m in self.measures.values()]
        leave = [f"-{q(m.name)}" if m.combine == "sum"
                 else f"CAST(NULL AS {m.dtype.simpleString()})"
                 for m in self.measures.values()]
        names = ", ".join([q(AT), q(N), *(q(m.name) for m in self.measures.values())])
        both = ", ".join([enters, q(N), *enter, leaves, f"-{q(N)}", *leave])
        due = "" if hi == TIME_MAX else f" WHERE {enters} < {bound_sql(hi)}"
        return f"SELECT {keys}, stack(2, {both}) AS ({names}) FROM {panes}{due}"

    def running_sql(self, points: str, keys: str, lengths: dict[int | None, int]) -> str:
        """Each point's row: the next point, running sums, ``min`` and ``max`` over the
        points of the window's last length (``lengths``: {None: length} for one window,
        else each window's tag and length, one frame per window).

        The frames end at the last point of the current one's instant (RANGE), so the
        points of one instant all hold the group's row after every one of them; all but
        one have the instant itself as their next point and are left out, and the one kept
        is the row from that instant to the next, whichever it is.
        """
        order = f"(PARTITION BY {keys} ORDER BY {q(AT)}"
        running = f"{order} RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"

        def frame(length: int) -> str:
            return f"{order} RANGE BETWEEN {length - 1} PRECEDING AND CURRENT ROW)"

        cols = [f"sum(`{N}`) OVER {running} AS `{N}`"]
        for m in self.measures.values():
            if m.combine == "sum":
                value = f"sum({q(m.name)}) OVER {running}"
            elif None in lengths:
                value = f"{m.combine}({q(m.name)}) OVER {frame(lengths[None])}"
            else:
                cases = " ".join(f"WHEN {tag} THEN {m.combine}({q(m.name)}) OVER {frame(n)}"
                                 for tag, n in lengths.items())
                value = f"CASE {q(WINDOW_TAG)} {cases} END"
            cols.append(f"{value} AS {q(m.name)}")
        rows = (f"SELECT {keys}, {q(AT)}, lead({q(AT)}) OVER {order}) AS {q(NEXT)}, "
                f"{', '.join(cols)} FROM ({points})")
        return f"SELECT * FROM ({rows}) WHERE {q(NEXT)} IS NULL OR {q(NEXT)} > {q(AT)}"

    def segments_sql(self, lo: int, hi: int) -> str:
        """Each group's row over [point, next point) where its window is not empty, for the
        segments that start before ``hi`` and end at or after ``lo`` (their end is due).
        """
        out = ", ".join(q(n) if n in self.keys else f"{self.values[n]} AS {q(n)}"
                        for n in self.names)
        if self.windows:
            run = self.windows_sql("{panes}")
            if self.hopping:
                run = self.windows_run_sql(run, hi)
            return self.due_segments_sql(f"{q(WINDOW_TAG)}, {out}", run, lo, hi)
        if self.tumbling:  # each pane is a window: a projection of the panes
            one = (f"SELECT *, {q(PANE_END)} AS {q(AT)}, {q(PANE_END)} + {self.length} "
                   f"AS {q(NEXT)} FROM {{panes}}")
            return self.due_segments_sql(out, one, lo, hi)
        run = self.running_sql(self.points_sql(hi), self.key_list(), {None: self.length})
        return self.due_segments_sql(out, run, lo, hi)

    def windows_sql(self, panes: str) -> str:
        """Each window's panes regrouped from the panes of ``panes``: per (window, group,
        pane end), the window's tag, ``AT`` (where the pane enters the window: its end),
        ``NEXT`` (where it leaves, one window length later), ``_len`` (the window's length)
        and merged measures. A pane ending at p lies in the window's pane ending at the
        next multiple of the window's step from p on (p itself when it is one). For a
        tumbling window each such pane is a row of the window.
        """
        spans = ", ".join(f"named_struct('tag', {i}, 'step', {window_step(w)}, "
                          f"'len', {window_length(w)})" for i, w in enumerate(self.windows))
        merged = "".join(f", {m.combine}({q(m.name)}) AS {q(m.name)}"
                         for m in self.measures.values())
        end = f"{q(PANE_END)} + pmod(-{q(PANE_END)}, win.step)"
        kept = "".join(f", {q(m.name)}" for m in self.measures.values())
        regrouped = (f"SELECT win.tag AS {q(WINDOW_TAG)}, {self.key_list()}, {end} AS {q(AT)}, "
                     f"win.len AS _len, `{N}`{kept} "
                     f"FROM {panes} LATERAL VIEW inline(array({spans})) win")
        by = f"{q(WINDOW_TAG)}, {self.key_list(q(AT))}, _len"
        return (f"SELECT {by}, {q(AT)} + _len AS {q(NEXT)}, sum(`{N}`) AS `{N}`{merged} "
                f"FROM ({regrouped}) GROUP BY {by}")

    def windows_run_sql(self, panes: str, hi: int) -> str:
        """The windows' rows when some hop (length above step): as for one window, per
        (window, group) — each pane of ``windows_sql`` enters at ``AT`` and leaves at
        ``NEXT`` — with ``min`` and ``max`` over each window's own last length.
        """
        keys = f"{q(WINDOW_TAG)}, {self.key_list()}"
        points = self.points_sql(hi, f"({panes})", keys, q(AT), q(NEXT))
        lengths: dict[int | None, int] = {i: window_length(w) for i, w in enumerate(self.windows)}
        return self.running_sql(points, keys, lengths)

    def tag_of(self, window: CutSpec | RangeSpec) -> int | None:
        """The tag of ``window``'s rows in the segments; None: the operator computes one
        window, its rows carry no tag.
        """
        return self.windows.index(window) if self.windows else None

    @staticmethod
    def due_segments_sql(out: str, points: str, lo: int, hi: int) -> str:
        """``out`` over [``AT``, ``NEXT``) for the rows of ``points`` where the group has a
        row, that start before ``hi`` and end at or after ``lo`` or are still open.
        """
        # bounds even in the first slice (lo = TIME_MIN): one text for every cycle
        where = [f"`{N}` > 0", f"{q(AT)} < {bound_sql(hi)}",
                 f"({q(NEXT)} IS NULL OR {q(NEXT)} >= {bound_sql(lo)})"]
        return (f"SELECT {out}, {q(AT)} AS {q(FROM)}, {q(NEXT)} AS {q(TO)} FROM ({points}) "
                f"WHERE {' AND '.join(where)}")

    def changes_sql(self, lo: int, hi: int, fresh: bool) -> list[str]:
        """+1 where a segment starts in [lo, hi), -1 where one ends in it: two texts, each
        reading the segments once (a text reading a view twice is analysed every cycle,
        ``templates``), unioned as frames.

        ``fresh``: nothing was emitted yet, so a segment that began before ``lo`` (from
        seeded events) starts at ``lo``, and one that ended at ``lo`` does not exist. The
        text is the same either way, and in the first slice (``lo`` = TIME_MIN): freshness
        and the slice are in its bounds, so a member's first cycle and the ones after it
        run one analysed plan and one generated code.
        """
        names = ", ".join(map(q, [*([WINDOW_TAG] if self.windows else []), *self.names]))
        # fresh: from ``lo`` (``first``); else the bounds of ``first`` and ``seeded`` hold
        # for every segment
        first = bound_sql(lo if fresh else TIME_MIN)
        seeded = bound_sql(lo if fresh else TIME_MAX)
        start = f"greatest({q(FROM)}, {first})"
        # a segment that began in the slice, or (fresh) one still open (NULL) or ending
        # after its start
        starts = (f" WHERE {q(FROM)} >= {bound_sql(lo)} "
                  f"OR coalesce({q(TO)}, {TIME_MAX}) > {seeded}")
        ends = f" AND {q(TO)} < {bound_sql(hi)} AND {q(TO)} > {first}"
        return [f"SELECT {names}, {start} AS {q(T)}, CAST(1 AS BIGINT) AS {q(D)} "
                f"FROM {{seg}}{starts}",
                f"SELECT {names}, {q(TO)} AS {q(T)}, CAST(-1 AS BIGINT) AS {q(D)} "
                f"FROM {{seg}} WHERE {q(TO)} IS NOT NULL{ends}"]

    # -- the cycle ---------------------------------------------------------------------------
    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        run = self.evaluate(inputs[0], settled=self.progress.started,
                            events=events_taken(self.node, cycle))
        if run.segments is None:
            return run
        fresh = not self.progress.started
        changes = (None if self.node in cycle.edges_unread
                   else self.changes(run, fresh=fresh))
        self.progress = replace(self.progress, started=True)
        return Slice(changes, run.lo, run.hi, run.segments,
                     coalesced=self.coalesced_segments and not fresh)

    def resumed(self) -> None:
        """Restored from a checkpoint: the saved run emitted the segments before its
        position, so this one is not fresh (it would emit them again).
        """
        self.progress = replace(self.progress, started=True)

    def evaluate(self, inp: Slice, blank: frozenset[str] = frozenset(),
                 settled: bool = False, events: int | None = None) -> Slice:
        """Merge the slice's events into the panes (the state) and return the segments of
        [lo, hi) (cached for the cycle), or no segments when no group has a window there
        or (``settled``) no row can change there; the operator then stands at ``hi``.

        ``blank`` names argument columns evaluated as NULL (a family tries one query's
        part of a cycle alone without evaluating the other queries' expressions).
        ``settled``: every reader has taken segments before (none starts its elements
        at ``lo``), so a slice in which no row changes need not be read at all.
        ``events``: about how many events the slice brings, when known.
        """
        out = self.segments_of(inp, blank, settled, self.spreads_events(events))
        self.progress = replace(self.progress, position=inp.hi)
        return out

    def changes_between(self, lo: int, hi: int) -> bool:
        """Whether a group's row can change in [lo, hi): a pane enters at its end and
        leaves a window's length later, both multiples of the pane's step, so a slice
        holding no multiple of it changes nothing (a cycle within a window's slide: in
        ``[RANGE 60 SECONDS SLIDE 10 SECONDS]`` fed every second, nine cycles of ten).
        """
        return hi == TIME_MAX or lo == TIME_MIN or lo + (-lo) % self.step_len < hi

    def spreads_events(self, events: int | None) -> bool:
        """Whether this cycle shuffles its events by group before summing them (one
        exchange) rather than summing them per task first (two).

        Summing first pays when a task's events fall on few (group, pane) keys; when the
        kept panes are as many as the cycle's events, the events are spread over about as
        many keys, the sums are about as many as the events, and the second exchange is
        all cost: a sliding window over 100,000 keys at 100,000 events a cycle summed
        100,000 events to 95,900 sums and shuffled them twice (2026-12-06, the suite's
        ``hop-10s-100k``: 1.03 s per 100,000 events with two exchanges, 0.98 s with one;
        ``hop-1s``, 1,000 keys, 0.66 s and 0.61 s). It switches to spreading when the panes are
        at least the events, and back below a quarter of them, so input hovering around
        the line does not change the plan every cycle. The results are the same.
        """
        spreads = self.progress.spreads
        if events is not None and events > 0:
            if self.panes.rows >= events:
                spreads = True
            elif 4 * self.panes.rows < events:
                spreads = False
        self.progress = replace(self.progress, spreads=spreads)
        return spreads

    def segments_of(self, inp: Slice, blank: frozenset[str], settled: bool = False,
                    spreads: bool = False) -> Slice:
        """What ``evaluate`` returns, the state updated."""
        lo, hi = inp.lo, inp.hi
        sql = self.views.sql
        old = self.panes.get()
        events = inp.arrivals if self.reads_arrivals else inp.df
        if events is None and old is None:
            return Slice(None, lo, hi)
        if events is None:
            assert old is not None
            panes = old  # panes that left before lo change nothing at or after it
        else:
            views = {"inp": events} if old is None else {"inp": events, "old": old}
            text = self.panes_sql(old is not None, lo, self.rt.single, spreads)
            if blank:
                text = text.replace(self.events_sql, self.build_events_sql(self.sliced, blank))
            panes = self.rt.cache_for_cycle(sql(text, **views))
            # the cycle's panes are the state, kept as they are (no copy): those that
            # left before the next cycle's lo are dropped when it reads them
            if hi != TIME_MAX:
                self.panes.adopt(panes)
        if hi == TIME_MAX:
            self.panes.set(None)
        if settled and not self.changes_between(lo, hi):
            return Slice(None, lo, hi)
        segments = sql(self.segments_sql(lo, hi), panes=panes)
        if not self.tumbling or self.hopping:  # read by several consumers; a tumbling
            # one is a projection (or a regrouping) of the panes
            segments = self.rt.cache_for_cycle(segments)
        return Slice(None, lo, hi, segments)

    def changes(self, run: Slice, fresh: bool) -> DataFrame:
        """The change edge of ``evaluate``'s segments (see ``changes_sql``)."""
        assert run.segments is not None
        return self.views.sql_union(self.changes_sql(run.lo, run.hi, fresh), seg=run.segments)

    def contents(self, children: list[DataFrame | None], at: int,
                 window: CutSpec | RangeSpec | None = None) -> DataFrame | None:
        """Each group's row once every change before ``at`` (the operator's position) is
        applied: the panes that entered before ``at`` and have not left before it (of
        ``window``'s rows, when the operator computes several windows).
        """
        panes = self.panes.get()
        if panes is None:
            return None
        out = ", ".join(q(n) if n in self.keys else f"{self.values[n]} AS {q(n)}"
                        for n in self.names)
        if self.windows:
            assert window is not None
            end = f"{q(PANE_END)} + pmod(-{q(PANE_END)}, {window_step(window)})"
            inside = (f"(SELECT * FROM {{p}} WHERE {end} < {at} "
                      f"AND {end} >= {shift(at, -window_length(window))})")
        else:
            inside = (f"(SELECT * FROM {{p}} WHERE {q(PANE_END)} < {at} "
                      f"AND {q(PANE_END)} >= {shift(at, -self.length)})")
        df = self.views.sql(f"SELECT {out} FROM ({self.group_sql(inside)}) WHERE `{N}` > 0",
                            p=panes)
        return as_changes_at(df, self.names, None, at)

    def group_sql(self, source: str) -> str:
        """Rows of ``source`` (pane columns) merged per group."""
        measures = "".join(f", {m.combine}({q(m.name)}) AS {q(m.name)}"
                           for m in self.measures.values())
        return (f"SELECT {self.key_list()}, sum(`{N}`) AS `{N}`{measures} FROM {source} "
                f"GROUP BY {self.key_list()}")


def window_step(window: CutSpec | RangeSpec) -> int:
    """The step of a window computed from panes: its slide, or its chunks' length."""
    if isinstance(window, CutSpec):
        return window.by
    assert window.slide is not None
    return window.slide


def window_length(window: CutSpec | RangeSpec) -> int:
    """The length of a window computed from panes."""
    if isinstance(window, CutSpec):
        return window.by * window.chunks
    return window.size


def shares_panes(window: object) -> bool:
    """Whether ``window`` is a window of steps (``CUT BY s [WINDOW c CHUNKS]``, ``RANGE w
    SLIDE s``): several such windows of one kind can share one set of panes.
    """
    return isinstance(window, CutSpec) or (isinstance(window, RangeSpec)
                                           and window.slide is not None)


def events_taken(node: PlanNode, cycle: CycleContext) -> int | None:
    """About how many events the cycle takes from the stream under ``node`` (through
    single-input steps), when the driver or the source knows.
    """
    while not isinstance(node, StreamScan):
        if len(node.children) != 1:
            return None
        node = node.children[0]
    rows = cycle.input.rows_of(node)
    return rows if rows is not None else cycle.input.estimated_rows_of(node)
