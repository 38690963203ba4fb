"""Inner join of two time-windowed streams, from the elements' intervals.

A side may also be the pairs of an interval join below (a join of three or more windowed
streams): a pair is an element whose interval is known when it is found, and it comes in
the cycle it starts in (``Slice.elements``), as a windowed event does.

An event of a RANGE, NOW or CUT window becomes an element whose interval ``[s, e)`` is known
when the event arrives. A pair of elements meeting the condition is in the join's relation
over ``[max(s), min(e))`` when that is not empty, so in a cycle ``[lo, hi)`` the join's
changes are:

- ``+1`` at ``max(s)`` for the pairs whose later start lies in ``[lo, hi)``: one side starts
  in the cycle and the other started no later (ties go to the left side);
- ``-1`` at ``min(e)`` for the pairs whose earlier end lies in ``[lo, hi)``: one side ends in
  the cycle and the other ends no earlier (ties go to the left side).

A change of the cycle lies below ``hi``, the slower input's watermark, and so do the starts
of both elements of its pair; every event with a time below ``hi`` has arrived, and an
element never starts before its event (``s >= t``), so each pair is found exactly once, by
probing the elements that start (or end) in the cycle against the other side's elements. A
faster input's events beyond ``hi`` need not wait in a buffer: their elements start at or
after ``hi``, so they are only kept, and probed in the cycle they start in.

Each side's state is its elements that may still start or end a pair, kept as runs
(``runtime/state_runs.py``): a cycle's new elements become one run, cached once, and a run
is dropped whole once every element in it ended. A cycle writes its new elements, not the
windows. Its probes read only the runs that may hold elements starting or ending in the
cycle (each run's extent in time is known), and join them, as the small side on which the
join builds its hash table, with the other side's runs streamed through it: both changes
of a side in one pass over the other side's runs, no sort, and in a large cycle no shuffle
(runs are hash-partitioned by the equi-join keys, and so is their union).

A join that sheds (``runtime/operators/shedding.py``) gives each element two
more columns: its basic sub-window (``_la``/``_ra``) and a hash in [0, 1) (``_lu``/``_ru``)
that picks it in a partly taken sub-window. The two probes that find pairs (+1) meet only
the taken sub-windows: only the runs that may hold partners in them are read (each run's
latest start is observed, and its elements start no earlier than its first cycle's
``lo``), their elements are cut to the sub-windows (and hashes) the cycle's probers
meet, and the pairs found on the keys are kept when their lag bucket is taken (whole, or
the partner's hash lies below the part taken). Its hash
table is built on the smaller side, as the driver estimates it from the runs' rows: at a
low z the few partners met, not every prober. An adaptive join learns which sub-windows
yield from a sample of each side's elements kept apart, which every prober meets in every
sub-window, in the same job as the probes: the pairs of the sample are kept beside the
pairs found, and the commit counts them, and each side's new elements by sub-window, as
it writes them. It does not probe again for the ends (-1): a pair's end, the earlier of
its elements' ends, is known when it is found, so the pairs it found wait in a state of
their own until their end passes, kept as runs by their end (a cycle writes the pairs it
found and reads only the runs that may hold pairs ending in it). Each pair the join emits
ends, no other does, and ending costs a filter of those runs instead of two probes of the
whole windows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from sparkcq.model.columns import TE, TS, D, T
from sparkcq.model.time import TIME_MAX, TIME_MIN
from sparkcq.plan.nodes import (
    IntervalJoin,
    StreamScan,
)
from sparkcq.plan.options import Shedding, ShedMode
from sparkcq.runtime.cycle_input import CycleInput
from sparkcq.runtime.frames import (
    Runtime,
    Slice,
    SqlViews,
    bound_sql,
    coalesce_partitions,
    col,
    project,
    q,
    sql_column,
    union_by_name,
)
from sparkcq.runtime.operators.base import CycleContext, Operator, Progress, as_changes_at
from sparkcq.runtime.operators.shedding import (
    SAMPLE,
    CycleLoad,
    CycleShedding,
    Direction,
    added,
    aged,
    bucket_order,
    fractions,
    joint_fractions,
    live_elements,
    met,
    sample_share,
    slice_length,
    work_per_bucket,
)
from sparkcq.runtime.operators.window import element_interval_sql, side_span
from sparkcq.runtime.saved_frames import FrameReader, FrameWriter
from sparkcq.runtime.state_runs import Counted
from sparkcq.runtime.step_chains import chain_sql

#: where each side's element starts and ends (the left's ``_ls``/``_le``, the right's
#: ``_rs``/``_re``), so the join condition's columns and these never clash
STARTS, ENDS = ("_ls", "_rs"), ("_le", "_re")
#: a shedding join's columns of each side's elements: basic sub-window and hash in [0, 1)
SLICES, HASHES = ("_la", "_ra"), ("_lu", "_ru")
#: a found pair's start and end; a sampled partner's prober side and lag bucket; whether
#: a pair of the probe was found among the partners met (``MET``) or in the sample
PAIR_START, PAIR_END, PROBER, LAG_BUCKET, FOUND_IN = "_ps", "_pe", "_pp", "_pj", "_pf"
MET, SAMPLED = 1, 2
CONTROL_FILE = "shedding.json"
#: an element's hash in [0, 1) compared as a whole number of this many parts
HASH_SCALE = 1_000_000
#: the most sub-windows a probe lists to cut its partners to those it meets
MET_LIST = 256


@dataclass(frozen=True)
class IntervalJoinProgress(Progress):
    """A join's position and, when it sheds, what each direction learnt and did."""

    directions: tuple[Direction, Direction] = (Direction(), Direction())
    z: float = 1.0  # of the last cycle
    met: float = 0.0  # partners the last cycle's probers met, both directions
    shares: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())  # of the last cycle


#: a side's tally keys: sub-window x TALLY_KINDS + 0 (its elements, as partners) or + 1
#: (its probers, by the other side's sub-window); the sampled partners' tally: lag bucket
#: x TALLY_KINDS + the prober's side
TALLY_KINDS = 2


#: a cycle's new elements are counted by sub-window in this many classes (sub-window modulo
#: it) by the commit that writes them: exact when they lie in fewer sub-windows than that
SUB_WINDOW_CLASSES = 8


@dataclass
class CycleCounts:
    """What a shedding join's cycle waits for from its commit (each side's new elements by
    sub-window, the pairs found in the sample), handed to ``then`` once all came.
    """

    then: Callable[[dict[str, dict[int, int]]], None]
    wanted: set[str] = field(default_factory=set)
    counted: dict[str, dict[int, int]] = field(default_factory=dict)

    def expect(self, what: str) -> Callable[[dict[int, int]], None]:
        """Wait for the counts ``what``; returns what receives them."""
        self.wanted.add(what)

        def receive(counts: dict[int, int]) -> None:
            self.counted[what] = counts
            if self.wanted <= self.counted.keys():
                self.then(self.counted)
        return receive

    def expect_nothing_more(self) -> None:
        """After the last ``expect``: if nothing is awaited, hand over now."""
        if not self.wanted:
            self.then(self.counted)


def by_sub_window(values: list[int | None]) -> dict[int, int] | None:
    """Rows by sub-window from a commit's counts (the least and greatest sub-window, then
    rows per class of ``SUB_WINDOW_CLASSES``); None when they lie too far apart to tell.
    """
    first, last, *classes = values
    if first is None or last is None:
        return {}
    if last - first >= SUB_WINDOW_CLASSES:
        return None
    counts = {k: classes[k % SUB_WINDOW_CLASSES] or 0 for k in range(first, last + 1)}
    return {k: n for k, n in counts.items() if n}


def as_both(counts: dict[int, int]) -> dict[int, int]:
    """A side's counts by sub-window as its tally, where its elements as partners are its
    elements as probers (a sub-window the same on both sides).
    """
    return {k * TALLY_KINDS + kind: n for k, n in counts.items() for kind in range(TALLY_KINDS)}


def split_tally(counts: dict[int, int]) -> tuple[dict[int, int], dict[int, int]]:
    """A side's tally as partners by sub-window and probers by sub-window."""
    parts: tuple[dict[int, int], dict[int, int]] = ({}, {})
    for key, n in counts.items():
        parts[key % TALLY_KINDS][key // TALLY_KINDS] = n
    return parts


def within(column: str, lo: int, hi: int) -> str:
    """SQL: ``column`` lies in the cycle ``[lo, hi)`` (open ends left out)."""
    bounds = [f"{column} >= {lo}" if lo != TIME_MIN else "",
              f"{column} < {hi}" if hi != TIME_MAX else ""]
    return " AND ".join(b for b in bounds if b) or "TRUE"


def within_bounds(column: str, lo: int, hi: int) -> str:
    """``within`` with bounds that are not literals (``bound_sql``): for filters, not for a
    join condition.
    """
    bounds = [f"{column} >= {bound_sql(lo)}" if lo != TIME_MIN else "",
              f"{column} < {bound_sql(hi)}" if hi != TIME_MAX else ""]
    return " AND ".join(b for b in bounds if b) or "TRUE"


def partners_sql(side: int, lo: int, hi: int, view: str = "all") -> str:
    """Side ``side``'s elements a prober of the cycle ``[lo, hi)`` may meet (view
    ``<view><side>``): started before ``hi`` and not ended before ``lo``. A run merged from
    several cycles still holds elements that ended since, and a faster input's elements
    that start later: left out before the join rather than compared with every prober of
    their key.
    """
    bounds = [f"{ENDS[side]} >= {bound_sql(lo)}" if lo != TIME_MIN else "",
              f"{STARTS[side]} < {bound_sql(hi)}" if hi != TIME_MAX else ""]
    where = " AND ".join(b for b in bounds if b)
    name = f"{{{view}{side}}}"
    return f"(SELECT * FROM {name} WHERE {where})" if where else name


def starts_band(prober: int, lo: int, hi: int) -> str:
    """SQL: the pairs whose later start is side ``prober``'s and lies in ``[lo, hi)`` (ties
    go to the left side), with the partner not ended by then: the +1 probe's band.
    """
    ls, rs = STARTS
    le, re_ = ENDS
    if prober == 0:
        return f"{within(ls, lo, hi)} AND {rs} <= {ls} AND {re_} > {ls}"
    return f"{within(rs, lo, hi)} AND {ls} < {rs} AND {le} > {rs}"


def floor_div(column: str, by: int) -> str:
    """SQL for ``column`` divided by ``by`` rounded down (negative instants too)."""
    return f"(({column} - pmod({column}, {by})) DIV {by})"


def met_sql(lag: str, whole: Sequence[int], parts: Sequence[tuple[int, float]],
            hash_column: str) -> str:
    """SQL: the bucket ``lag`` is one of those taken ``whole``, or one of the (bucket,
    share) ``parts`` and the partner's hash lies below the share (a bound: it changes with
    z).
    """
    terms = [f"{lag} IN ({', '.join(map(str, whole))})"] if whole else []
    terms += [f"({lag} = {j} AND {hash_column} * {HASH_SCALE} < "
              f"{bound_sql(round(f * HASH_SCALE))})" for j, f in parts]
    return " OR ".join(terms)


class IntervalJoinOperator(Operator):
    """Pairs elements of two windowed streams by their intervals (see module)."""

    def __init__(self, node: IntervalJoin, rt: Runtime):
        super().__init__(node, rt)
        self.interval_join = node
        self.views = SqlViews(rt.spark, "ijoin")
        # a source stream's events are taken in as they arrive (``Slice.arrivals``): their
        # elements start at or after their time, so they wait in the state, not in a buffer
        self.reads_arrivals = [isinstance(c, StreamScan) for c in node.children]
        # a side that reads the pairs of a join below (three or more windowed streams):
        # its elements come with their intervals (``Slice.elements``)
        self.reads_pairs = [isinstance(node.side(i)[0], IntervalJoin) for i in (0, 1)]
        self.names = [[f.name for f in node.join.children[i].schema.fields] for i in (0, 1)]
        self.keys = [[k[i] for k in node.join.equi_keys] for i in (0, 1)]
        self.condition = node.join.condition.sql if node.join.condition else "TRUE"
        self.events_sql = [self.build_events_sql(i) for i in (0, 1)]
        self.shedding: Shedding | None = node.shedding
        self.progress: IntervalJoinProgress = IntervalJoinProgress()
        shed_fields: list[list[StructField]] = [[], []]
        spans = [side_span(node.side(i)[0]) for i in (0, 1)]  # longest elements
        if self.shedding is not None:
            # each side's basic sub-window: its longest element over the sub-windows
            self.spans = [span or 1 for span in spans]
            self.slices = [slice_length(span, self.shedding.basic_windows)
                           for span in self.spans]
            self.buckets = self.shedding.basic_windows + 1  # a partner lies 0..n back
            shed_fields = [[StructField(SLICES[i], LongType()),
                            StructField(HASHES[i], DoubleType())] for i in (0, 1)]
        element_schemas = [StructType([
            *node.join.children[i].schema.fields,
            StructField(STARTS[i], LongType()), StructField(ENDS[i], LongType()),
            *shed_fields[i]]) for i in (0, 1)]
        self.sides = [self.state_runs(element_schemas[i], ("left", "right")[i] + "-elements",
                                      STARTS[i], ENDS[i], self.keys[i], spans[i])
                      for i in (0, 1)]
        self.elements_sql = [self.build_elements_sql(i) for i in (0, 1)]
        # a shedding join's found pairs that have not ended yet (see module)
        # as runs by end: a cycle writes the pairs it found and reads the runs that may
        # hold pairs ending in it, not every pair it holds
        known = [span for span in spans if span is not None]
        self.pairs = None if self.shedding is None else self.state_runs(StructType([
            *node.join.children[0].schema.fields, *node.join.children[1].schema.fields,
            StructField(PAIR_START, LongType()), StructField(PAIR_END, LongType())]),
            "found-pairs", PAIR_START, PAIR_END, span=min(known) if len(known) == 2 else None)
        # what the commit counts of each side's new elements (``by_sub_window``), and of
        # the pairs found in the sample (by prober side and lag bucket): columns built once
        self.sub_window_metrics = [] if self.shedding is None else [(
            sql_column(f"min({SLICES[i]}) AS v4"), sql_column(f"max({SLICES[i]}) AS v5"),
            *[sql_column(f"count_if(pmod({SLICES[i]}, {SUB_WINDOW_CLASSES}) = {c}) AS v{6 + c}")
              for c in range(SUB_WINDOW_CLASSES)]) for i in (0, 1)]
        self.sample_metrics = () if self.shedding is None else tuple(
            sql_column(f"count_if({FOUND_IN} = {SAMPLED} AND {PROBER} = {p} AND "
                       f"{LAG_BUCKET} = {j}) AS v{j * TALLY_KINDS + p}")
            for j in range(self.buckets) for p in range(TALLY_KINDS))
        # an adaptive join's sample of partners (``shedding.SAMPLE``), met in every bucket;
        # made last, so the states a checkpoint made before it keep their names
        self.samples = [self.state_runs(element_schemas[i], ("left", "right")[i] + "-sample",
                                        STARTS[i], ENDS[i], self.keys[i], spans[i])
                        for i in (0, 1)] \
            if self.shedding is not None and self.shedding.mode is ShedMode.ADAPTIVE else None

    # -- SQL text, built once ----------------------------------------------------------------

    def reads_edge(self, i: int, own_edge_read: bool) -> bool:  # noqa: D102
        return not self.reads_arrivals[i] and not self.reads_pairs[i]

    def build_events_sql(self, i: int) -> str:
        """Side ``i``'s new events (view ``{inp}``) through the filters and projections
        above its window: its columns and ``_t``; of a side reading a join's pairs, the
        pairs that start in the cycle, with ``_ts`` and ``_te``.
        """
        _window, steps = self.interval_join.side(i)
        if self.reads_pairs[i]:
            src = chain_sql("{inp}", steps, (TS, TE))
            return f"SELECT {', '.join(map(q, self.names[i]))}, {q(TS)}, {q(TE)} FROM {src}"
        # a stream edge: one event per row
        src = chain_sql(f"(SELECT * FROM {{inp}} WHERE {q(D)} > 0)", steps, (T,))
        return f"SELECT {', '.join(map(q, self.names[i]))}, {q(T)} FROM {src}"

    def build_elements_sql(self, i: int) -> str:
        """Side ``i``'s new events (view ``{inp}``) as elements: its columns with the
        interval's start and end (as its window would give them), empty ones dropped; of a
        shedding join, with each element's sub-window and hash (see module).
        """
        window, _steps = self.interval_join.side(i)
        if isinstance(window, IntervalJoin):  # a pair's interval is the element's
            start, end = q(TS), q(TE)
        else:
            start, end_sql = element_interval_sql(window.spec, q(T))
            assert end_sql is not None  # the rule takes windows whose elements end
            end = end_sql
        names = ", ".join(map(q, self.names[i]))
        text = (f"SELECT {names}, {start} AS {q(STARTS[i])}, {end} AS {q(ENDS[i])} "
                f"FROM ({self.events_sql[i]}) AS e WHERE {end} > {start}")
        if self.shedding is None:
            return text
        # the hash of the whole element, the same in every process (xxhash64's fixed seed)
        share = (f"(pmod(xxhash64({names}, {q(STARTS[i])}), 1000003) / CAST(1000003 AS DOUBLE))")
        return (f"SELECT *, {floor_div(q(STARTS[i]), self.slices[i])} AS {SLICES[i]}, "
                f"{share} AS {HASHES[i]} FROM ({text}) AS x")

    def changes_sql(self, lo: int, hi: int) -> list[tuple[str, str, str]]:
        """The changes of the cycle ``[lo, hi)`` of a join that does not shed: +1 at the
        later start, -1 at the earlier end, each pair found once (see module). Two probes,
        each as (text, its left view, its right view): side ``i``'s elements that start
        or end in the cycle (view ``probers<i>``, the runs that may hold them), each with
        its change (an element that does both, twice), against the other side's runs
        (``all<j>``).

        The probers are the small side: the join builds its hash table there and streams
        the other side's runs through it once for both changes, so no side is sorted and
        a cycle's join work grows with its own elements and one pass over the windows.
        """
        ls, rs = STARTS
        le, re_ = ENDS
        cols = ", ".join(map(q, [*self.names[0], *self.names[1]]))
        bands = (  # (+1 band, -1 band) of each prober side: ties go to the left side
            (f"{rs} <= {ls} AND {re_} > {ls}", f"{re_} >= {le} AND {rs} < {le}"),
            (f"{ls} < {rs} AND {le} > {rs}", f"{le} > {re_} AND {ls} < {re_}"))
        out = []
        for i in (0, 1):
            j = 1 - i
            # the bounds need not be literals where the instants are filtered on their own
            # side (a join condition takes only literals, which code generation compiles
            # afresh every cycle)
            starts = within_bounds(STARTS[i], lo, hi)
            ends = within_bounds(ENDS[i], lo, hi)
            changes = (f"CASE WHEN {starts} AND {ends} THEN array(1L, -1L) "
                       f"WHEN {starts} THEN array(1L) ELSE array(-1L) END")
            probers = (f"(SELECT * FROM {{probers{i}}} LATERAL VIEW explode({changes}) "
                       f"AS {q(D)} WHERE ({starts}) OR ({ends}))")
            partners = partners_sql(j, lo, hi)
            sides = [probers, partners] if i == 0 else [partners, probers]
            views = (f"probers{i}", f"all{j}") if i == 0 else (f"all{j}", f"probers{i}")
            plus, minus = bands[i]
            out.append((f"SELECT /*+ SHUFFLE_HASH({'lr'[i]}) */ {cols}, IF({q(D)} = 1, "
                        f"{STARTS[i]}, {ENDS[i]}) AS {q(T)}, {q(D)} FROM {sides[0]} AS l "
                        f"JOIN {sides[1]} AS r ON ({self.condition}) AND "
                        f"(({q(D)} = 1 AND {plus}) OR ({q(D)} = -1 AND {minus}))",
                        *views))
        return out

    def pairs_sql(self, lo: int, hi: int) -> list[tuple[str, str, str]]:
        """The pairs of a join that does not shed starting in the cycle ``[lo, hi)``, each
        with its interval (``_ts``, ``_te``): the +1 probes of ``changes_sql`` alone, with
        each pair's end beside its start (views ``starting<i>``, ``all<j>``).
        """
        cols = ", ".join(map(q, [*self.names[0], *self.names[1]]))
        le, re_ = ENDS
        out = []
        for i in (0, 1):
            j = 1 - i
            probers = (f"(SELECT * FROM {{starting{i}}} "
                       f"WHERE {within_bounds(STARTS[i], lo, hi)})")
            partners = partners_sql(j, lo, hi)
            sides = [probers, partners] if i == 0 else [partners, probers]
            views = (f"starting{i}", f"all{j}") if i == 0 else (f"all{j}", f"starting{i}")
            band = starts_band(i, TIME_MIN, TIME_MAX)
            out.append((f"SELECT /*+ SHUFFLE_HASH({'lr'[i]}) */ {cols}, {STARTS[i]} AS "
                        f"{q(TS)}, least({le}, {re_}) AS {q(TE)} FROM {sides[0]} AS l "
                        f"JOIN {sides[1]} AS r ON ({self.condition}) AND {band}",
                        *views))
        return out

    def found_sql(self, lo: int, hi: int, plan: CycleShedding,
                  probers: tuple[bool, bool], learners: tuple[bool, bool] = (False, False),
                  builds: tuple[tuple[bool, bool], tuple[bool, bool]] = (
                      (False, False), (False, False))) -> str | None:
        """The pairs a shedding join finds in the cycle ``[lo, hi)``: the two +1 probes
        (of the sides that have ``probers``), each meeting the cycle's share of each lag
        bucket, with each pair's start and end, and ``FOUND_IN`` = ``MET``; and of the
        sides that are ``learners``, the pairs their probers make with the share
        ``plan.sample`` of the other side's sample (``sample<j>``: its lowest hashes) in
        every bucket, with ``FOUND_IN`` = ``SAMPLED``, the prober's side and the lag bucket:
        what an adaptive join learns from, counted as the commit reads the pairs (no
        grouping of its own). None when no prober meets anything. Views as
        ``changes_sql``'s; a probe's hash table is built on its partners where ``builds``
        says so (per prober side, of the probe and of its probe of the sample), else on its
        probers.
        """
        cols = ", ".join(map(q, [*self.names[0], *self.names[1]]))
        le, re_ = ENDS
        selects = []
        for prober in (0, 1):
            other = 1 - prober
            taken = self.taken_sql(prober, plan, lo, hi) if probers[prober] else None
            probes = [] if taken is None else [(MET, *taken, builds[0][prober])]
            if learners[prober]:
                probes.append((SAMPLED, self.sampled_sql(other, lo, hi, plan.sample), "",
                               builds[1][prober]))
            probing = f"{{starting{prober}}}"
            lag = f"{floor_div(STARTS[prober], self.slices[other])} - {SLICES[other]}"
            for found_in, partners, meets, on_partners in probes:
                sides = (f"{probing} AS l JOIN {partners} AS r" if prober == 0
                         else f"{partners} AS l JOIN {probing} AS r")
                hint = f"/*+ SHUFFLE_HASH({'lr'[other if on_partners else prober]}) */"
                selects.append(
                    f"SELECT {hint} {cols}, {STARTS[prober]} AS {PAIR_START}, "
                    f"least({le}, {re_}) AS {PAIR_END}, {found_in} AS {FOUND_IN}, "
                    f"{prober} AS {PROBER}, {lag} AS {LAG_BUCKET} "
                    f"FROM {sides} ON ({self.condition}) AND {starts_band(prober, lo, hi)}"
                    + (f" WHERE {meets}" if meets else ""))
        return " UNION ALL ".join(selects) or None

    def sampled_sql(self, side: int, lo: int, hi: int, share: float) -> str:
        """Side ``side``'s sampled elements a prober of the cycle ``[lo, hi)`` meets when
        learning: the ``share`` of its elements of the lowest hashes (of the ``SAMPLE`` its
        sample holds) that may be partners then.
        """
        partners = partners_sql(side, lo, hi, "sample")
        if share >= SAMPLE:
            return partners
        # a bound: z, and so the share, changes from cycle to cycle
        below = bound_sql(round(share * HASH_SCALE))
        return f"(SELECT * FROM {partners} AS s WHERE {HASHES[side]} * {HASH_SCALE} < {below})"

    def taken_sql(self, prober: int, plan: CycleShedding, lo: int,
                  hi: int) -> tuple[str, str] | None:
        """The partners of a +1 probe whose probers (side ``prober``) meet only the lag
        buckets the cycle takes, and the condition a pair it finds is met on, as (partners,
        condition); None when it takes none. A pair is met when the partner's bucket (the
        prober's sub-window less the partner's) is taken whole, or in part and the
        partner's hash lies below the part taken (so a part of a bucket costs only that
        part, and z may be any share). The condition filters the pairs after the join: its
        parts change with z from cycle to cycle, as bounds (``bound_sql``), which a join
        condition does not take. The partners are first cut to the sub-windows and hashes
        some prober of the cycle may meet, so the join compares no prober with a partner
        it skips, except where the cycle's probers lie in two sub-windows.
        """
        other = 1 - prober
        shares = plan.shares[prober]
        whole = [j for j, f in enumerate(shares) if f >= 1]
        parts = [(j, f) for j, f in enumerate(shares) if 0 < f < 1]
        if not whole and not parts:
            return None
        lag = f"({floor_div(STARTS[prober], self.slices[other])} - {SLICES[other]})"
        partners = partners_sql(other, lo, hi)
        held = self.met_partners_sql(prober, whole, parts, lo, hi)
        if held is not None:
            partners = f"(SELECT * FROM {partners} AS p WHERE {held})"
        return partners, met_sql(lag, whole, parts, HASHES[other])

    def met_partners_sql(self, prober: int, whole: list[int], parts: list[tuple[int, float]],
                         lo: int, hi: int) -> str | None:
        """SQL: the other side's element lies in a sub-window that some prober of side
        ``prober`` in the cycle ``[lo, hi)`` meets (and below the share taken of it), given
        the buckets it takes ``whole`` and the (bucket, share) it takes of the others
        (``parts``); None when the cycle is open, empty, or spans too many sub-windows for
        a short list. Written relative to the probers' first sub-window, a bound
        (``bound_sql``): the lists stay the same from cycle to cycle while the order of the
        buckets does, and so does the compiled code.
        """
        if lo == TIME_MIN or hi == TIME_MAX:
            return None
        other = 1 - prober
        length = self.slices[other]
        first, last = lo // length, (hi - 1) // length
        if (last - first + 1) * (len(whole) + len(parts)) > MET_LIST:
            return None
        # a partner in sub-window ``first - d`` is met by a prober in ``first + k`` when
        # ``d + k`` is a bucket taken (and its hash lies below the share, of a part)
        back = range(last - first + 1)
        lags = sorted({j - k for j in whole for k in back})
        shifted = sorted({(j - k, f) for j, f in parts for k in back})
        if not lags and not shifted:  # an empty cycle: no prober, the join meets nothing
            return None
        return met_sql(f"({bound_sql(first)} - {SLICES[other]})", lags, shifted,
                       HASHES[other])

    def builds_on_partners(self, prober: int, plan: CycleShedding, lo: int, hi: int,
                           new_rows: int | None) -> bool:
        """Whether side ``prober``'s probe of the cycle ``[lo, hi)`` had better build its
        hash table on the partners it meets than on its probers: the partners its taken
        shares leave (estimated from the runs' rows) are fewer than its probers (the
        cycle's ``new_rows`` and the older runs that may start in it). At a low z the
        partners are a sliver of the window, and a hash table of every prober costs more
        than the probe.
        """
        spans = self.partner_spans(prober, plan, lo, hi)
        if new_rows is None or spans is None:
            return False
        runs = self.sides[1 - prober].runs
        taken = [f for f in plan.shares[prober] if f > 0]  # as the spans, bucket by bucket
        partners = sum(f * sum(r.rows or 0 for r in runs if r.known and r.starts_within(*span))
                       for f, span in zip(taken, spans, strict=True))
        return partners < self.prober_rows(prober, lo, new_rows)

    def sample_builds(self, prober: int, lo: int, share: float, new_rows: int | None) -> bool:
        """Whether side ``prober``'s probe of the sample had better build its hash table on
        the ``share`` of the other side's elements it meets there than on its probers.
        """
        if self.samples is None or new_rows is None or lo == TIME_MIN:
            return False
        sampled = sum(r.rows or 0 for r in self.samples[1 - prober].runs if r.known)
        return sampled * share / SAMPLE < self.prober_rows(prober, lo, new_rows)

    def prober_rows(self, prober: int, lo: int, new_rows: int) -> int:
        """About how many of side ``prober``'s elements may start in the cycle from ``lo``:
        its ``new_rows`` and the older runs' rows that may.
        """
        return new_rows + sum(r.rows or 0 for r in self.sides[prober].runs
                              if r.known and r.starts_from(lo))

    # -- the cycle ---------------------------------------------------------------------------
    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        left, right = inputs
        # the safe time is the slower input's; a faster input's events beyond it are no
        # trouble (their elements start at or after ``hi``: kept, probed in a later cycle),
        # so no input waits in a buffer
        # from the last safe time (its position; at first the earliest input's lo)
        lo = self.progress.position
        lo = lo if lo is not None else min(left.lo, right.lo)
        hi = min(left.hi, right.hi)
        # no new event lies behind the slower input's last watermark, ``lo``, and no
        # element starts before its event: a run made now starts from ``lo``
        starts_from = None if lo == TIME_MIN else lo
        plan = None if self.shedding is None else self.cycle_shedding(cycle)
        counts = None if plan is None else CycleCounts(
            lambda counted: self.learn_both(counted, lo, plan))
        for i, inp in enumerate((left, right)):
            events = (inp.arrivals if self.reads_arrivals[i] else
                      inp.elements if self.reads_pairs[i] else inp.df)
            runs = self.sides[i]
            runs.expire(lo)
            runs.merge(lo)
            if events is None:
                continue
            receive = None if counts is None else counts.expect(f"side{i}")
            observed = receive is not None and self.counts_as_written(i, lo, hi)
            new = runs.add(self.views.sql(self.elements_sql[i], inp=events), starts_from,
                           self.sub_window_counts(i, receive)
                           if receive is not None and observed else None)
            if receive is not None and not observed:
                self.tally_side(i, new, receive)
            if self.samples is not None:  # the new elements' share of the sample
                sample = self.samples[i]
                sample.expire(lo)
                sample.merge(lo)
                sample.add(new.where(col(HASHES[i]) < F.lit(SAMPLE)), starts_from)
        new_rows = [self.new_rows(i, cycle) for i in (0, 1)]
        builds = (False, False) if plan is None else (  # per probe: on the partners?
            self.builds_on_partners(0, plan, lo, hi, new_rows[0]),
            self.builds_on_partners(1, plan, lo, hi, new_rows[1]))
        sample_builds = (False, False) if plan is None else (
            self.sample_builds(0, lo, plan.sample, new_rows[0]),
            self.sample_builds(1, lo, plan.sample, new_rows[1]))
        views: dict[str, DataFrame | None] = {}
        for i, runs in enumerate(self.sides):  # the runs each probe reads (``changes_sql``,
            # ``pairs_sql``, ``found_sql``)
            views[f"starting{i}"] = runs.starting(lo)
            if plan is None:
                views |= {f"all{i}": runs.live(), f"probers{i}": runs.probers(lo, hi)}
            else:  # partners only in the sub-windows the other side's probers meet
                spans = self.partner_spans(1 - i, plan, lo, hi)
                views[f"all{i}"] = runs.live() if spans is None else runs.starting_within(spans)
                if self.samples is not None:
                    views[f"sample{i}"] = self.samples[i].live()
        for runs in [*self.sides, *(self.samples or [])]:  # what ends before ``hi`` meets
            # no later cycle
            if hi == TIME_MAX:  # the input ended: nothing is kept
                runs.clear()
            else:
                runs.expire(hi)
        if plan is not None:
            assert counts is not None
            changes, found = self.shed_changes(views, lo, hi, plan, counts,
                                               (builds, sample_builds))
            elements = None if found is None else project(
                found, *map(q, [*self.names[0], *self.names[1]]),
                f"{PAIR_START} AS {q(TS)}", f"{PAIR_END} AS {q(TE)}")
            return Slice(changes, lo, hi, elements=elements)
        return Slice(self.probed(self.changes_sql(lo, hi), views), lo, hi,
                     elements=self.probed(self.pairs_sql(lo, hi), views))

    def partner_spans(self, prober: int, plan: CycleShedding, lo: int,
                      hi: int) -> list[tuple[int, int]] | None:
        """Where the partners side ``prober``'s probers of the cycle ``[lo, hi)`` meet may
        start: per lag bucket they meet, the other side's sub-windows that lie that many
        back from the probers' own; None for every start (an open cycle). A run none of
        whose elements starts there is not read.
        """
        if lo == TIME_MIN or hi == TIME_MAX:
            return None
        length = self.slices[1 - prober]
        first, last = lo // length, (hi - 1) // length  # the probers' sub-windows
        met = [j for j, f in enumerate(plan.shares[prober]) if f > 0]
        return [((first - j) * length, (last - j + 1) * length) for j in met]

    def probed(self, probes: list[tuple[str, str, str]],
               views: dict[str, DataFrame | None]) -> DataFrame | None:
        """The union of ``probes`` (text, left view, right view) whose views both hold
        runs; None if none does.
        """
        found = []
        for text, left_view, right_view in probes:
            l_df, r_df = views[left_view], views[right_view]
            if l_df is not None and r_df is not None:
                found.append(self.views.sql(text, **{left_view: l_df, right_view: r_df}))
        return union_by_name(found) if found else None

    def new_rows(self, i: int, cycle: CycleContext) -> int | None:
        """Side ``i``'s rows taken in this cycle, when the driver knows them."""
        child = self.interval_join.children[i]
        return cycle.input.rows_of(child) if self.reads_arrivals[i] else None

    def shed_changes(self, views: dict[str, DataFrame | None], lo: int, hi: int,
                     plan: CycleShedding, counts: CycleCounts,
                     builds: tuple[tuple[bool, bool], tuple[bool, bool]] = (
                         (False, False), (False, False)),
                     ) -> tuple[DataFrame | None, DataFrame | None]:
        """A shedding join's changes of the cycle: +1 for each pair it finds meeting the
        cycle's shares, -1 for each pair it found that ends in the cycle; the pairs that
        end later are kept. ``views`` are both sides' runs (as ``changes_sql``'s),
        ``builds`` per prober side whether its probe, and its probe of the sample, build on
        the partners (``builds_on_partners``, ``sample_builds``); the pairs found in the
        sample go to ``counts``. Also the pairs found (None: none), with their intervals.
        """
        assert self.pairs is not None
        cols = [*self.names[0], *self.names[1]]
        probers = (views["starting0"] is not None and views["all1"] is not None,
                   views["starting1"] is not None and views["all0"] is not None)
        learners = (False, False) if not plan.learns else (
            views["starting0"] is not None and views["sample1"] is not None,
            views["starting1"] is not None and views["sample0"] is not None)
        sql = self.found_sql(lo, hi, plan, probers, learners, builds)
        met = None
        if sql is not None:
            read = {k: df for k, df in views.items() if df is not None and "{" + k + "}" in sql}
            # the union of up to four probes, each in the cycle's partitions: kept in
            # those partitions, so the stages reading the pairs run no more tasks
            found = self.rt.cache_for_cycle(coalesce_partitions(
                self.views.sql(sql, **read), self.rt.cycle_partitions))
            met = found
            if any(learners):
                met = found.where(sql_column(f"{FOUND_IN} = {MET}"))
                self.count_sampled(found, counts.expect("sample"))
        counts.expect_nothing_more()
        self.pairs.expire(lo)
        self.pairs.merge(lo)
        if met is not None:
            self.pairs.add(met.select(*[col(c) for c in [*cols, PAIR_START, PAIR_END]]))
        ending = self.pairs.ending(lo, hi)
        if hi == TIME_MAX:
            self.pairs.clear()
        else:
            self.pairs.expire(hi)
        ends = None if ending is None else ending.where(within_bounds(PAIR_END, lo, hi)).select(
            *[col(c) for c in cols], col(PAIR_END).alias(T), F.lit(-1).cast("long").alias(D))
        if met is None:
            return ends, None
        starts = met.select(*[col(c) for c in cols], col(PAIR_START).alias(T),
                            F.lit(1).cast("long").alias(D))
        return starts if ends is None else starts.unionByName(ends), met

    def cycle_shedding(self, cycle: CycleContext) -> CycleShedding:
        """The cycle's z, whether it learns, and per prober side the share of each lag
        bucket its probers meet (in the order of the mode: by priority, or shuffled by the
        cycle).
        """
        assert self.shedding is not None
        how = self.shedding
        z = how.throttle if how.throttle is not None else \
            cycle.input.throttles.get(self.node, 1.0)
        directions = self.progress.directions
        if how.mode is ShedMode.ADAPTIVE:
            shares = joint_fractions([d.priorities for d in directions],
                                     [d.work for d in directions], z, self.buckets)
            return CycleShedding(z, self.samples is not None, shares, sample_share(z))
        out = []
        for i in (0, 1):
            known = directions[i]
            order = bucket_order(how.mode, self.buckets, 2 * cycle.input.number + i,
                                 known.priorities)
            out.append(fractions(order, known.work, z))
        return CycleShedding(z, self.samples is not None, (out[0], out[1]), sample_share(z))

    def counts_as_written(self, side: int, lo: int, hi: int) -> bool:
        """Whether side ``side``'s new elements of the cycle ``[lo, hi)`` are counted by
        sub-window as the commit writes them (``sub_window_counts``) rather than by a
        grouping of their own (``tally_side``): when a sub-window is the same on both sides
        and the cycle spans few of them, as a rule they all lie in fewer than
        ``SUB_WINDOW_CLASSES``.
        """
        length = self.slices[side]
        return (length == self.slices[1 - side] and lo != TIME_MIN and hi != TIME_MAX
                and hi - lo <= (SUB_WINDOW_CLASSES - 3) * length)

    def sub_window_counts(self, side: int,
                          receive: Callable[[dict[int, int]], None]) -> Counted:
        """What the commit that writes side ``side``'s new elements counts of them: their
        rows by sub-window (``by_sub_window``), as partners and as probers (a sub-window is
        the same on both sides); counted again by a job of their own if they lie too far
        apart (an input far ahead of the other).
        """
        def then(values: list[int | None], written: DataFrame) -> None:
            counts = by_sub_window(values)
            if counts is None:
                counts = self.rt.count_by(written, SLICES[side])
            receive(as_both(counts))
        return Counted(self.sub_window_metrics[side], then)

    def tally_side(self, side: int, new: DataFrame,
                   receive: Callable[[dict[int, int]], None]) -> None:
        """Have the commit count side ``side``'s ``new`` elements by sub-window (as
        partners) and by the other side's sub-window (as probers: an element probes in the
        cycle it starts in, as a rule the one it arrives in), in one tally
        (``TALLY_KINDS`` kinds of key).
        """
        other = 1 - side
        if self.slices[side] == self.slices[other]:  # its elements as partners are its
            # elements as probers
            self.rt.tally(new, col(SLICES[side]), lambda counts: receive(as_both(counts)))
            return
        partner = col(SLICES[side]) * TALLY_KINDS
        prober = F.expr(floor_div(STARTS[side], self.slices[other])) * TALLY_KINDS + 1
        self.rt.tally(new.select(F.explode(F.array(partner, prober)).alias("_key")),
                      col("_key"), receive)

    def count_sampled(self, found: DataFrame,
                      receive: Callable[[dict[int, int]], None]) -> None:
        """Have the commit count, as it reads the cycle's ``found`` pairs, those found in
        the sample, by lag bucket and prober side (``TALLY_KINDS`` kinds of key).
        """
        def then(values: list[int | None]) -> None:
            receive({key: n for key, n in enumerate(values) if n})
        self.rt.observe(found, self.sample_metrics, then)

    def learn_both(self, counted: dict[str, dict[int, int]], lo: int,
                   plan: CycleShedding) -> None:
        """After the commit, from the cycle's tallies: each side's live elements by
        sub-window, then what both directions learn.
        """
        sides = [split_tally(counted.get(f"side{j}", {})) for j in (0, 1)]
        found: list[dict[int, int]] = [{}, {}]
        for key, n in counted.get("sample", {}).items():
            found[key % TALLY_KINDS][key // TALLY_KINDS] = n
        live = [live_elements(self.progress.directions[j].elements, sides[j][0], lo,
                              self.slices[j], self.spans[j]) for j in (0, 1)]
        met = 0
        for j in (0, 1):
            met += self.learn(j, {"probers": sides[j][1], "partners": dict(live[1 - j]),
                                  "found": found[j]}, live[j], plan)
        self.progress = replace(self.progress, met=met)

    def learn(self, i: int, counts: dict[str, dict[int, int]],
              elements: tuple[tuple[int, int], ...], plan: CycleShedding) -> int:
        """After the commit: direction ``i``'s work per bucket, what it met and skipped,
        and (learning) its priorities; returns the partners it met.
        """
        work = work_per_bucket(counts["probers"], counts["partners"], self.buckets)
        shares = plan.shares[i]
        done, skipped = met(work, shares)
        old = self.progress.directions[i]
        priorities = old.priorities
        if plan.learns:
            priorities = aged(old.priorities, counts["found"],
                              sum(counts["probers"].values()) * plan.sample, self.buckets)
        pairs = list(zip(work, shares, strict=True))
        new = replace(old, work=work if sum(work) > 0 else old.work, priorities=priorities,
                      processed=old.processed + done, shed=old.shed + skipped,
                      processed_by_bucket=added(old.processed_by_bucket,
                                                [w * f for w, f in pairs]),
                      shed_by_bucket=added(old.shed_by_bucket, [w * (1 - f) for w, f in pairs]),
                      elements=elements)
        directions = list(self.progress.directions)
        directions[i] = new
        both = list(self.progress.shares)
        both[i] = shares
        self.progress = replace(self.progress, directions=(directions[0], directions[1]),
                                shares=(both[0], both[1]), z=plan.z)
        return done

    def coming_load(self, waiting: CycleInput) -> CycleLoad | None:
        """The ``waiting`` input's rows and the partners its probers would meet at z = 1:
        each side's new rows against the other side's live elements (and half its new
        ones), on the scale of the work the tallies measure; None when a side's rows are
        not known on the driver. ``runtime/throttles.py`` weighs it against the cycle time.
        """
        rows = []
        for child in self.interval_join.children:
            n = waiting.rows_of(child) if isinstance(child, StreamScan) else None
            if n is None:
                return None
            rows.append(n)
        live = [sum(n for _k, n in d.elements) for d in self.progress.directions]
        return CycleLoad(sum(rows), float(sum(rows[i] * (live[1 - i] + rows[1 - i] / 2)
                                              for i in (0, 1))))

    def shedding_report(self) -> dict[str, Any] | None:
        """What the join sheds: its mode, z, and per input (as the prober) the partners
        it met and skipped, its last work per lag bucket and the shares it took.
        """
        if self.shedding is None:
            return None
        how = self.shedding
        return {
            "mode": how.mode.value, "control": how.control.value,
            "budget_seconds": how.budget_seconds,
            "basic_windows": how.basic_windows,
            "z": how.throttle if how.throttle is not None else self.progress.z,
            "inputs": [{"processed": d.processed, "shed": d.shed, "work": list(d.work),
                        "shares": list(s), "priorities": list(d.priorities),
                        "processed_by_bucket": [round(x) for x in d.processed_by_bucket],
                        "shed_by_bucket": [round(x) for x in d.shed_by_bucket]}
                       for d, s in zip(self.progress.directions, self.progress.shares,
                                       strict=True)],
        }

    def save(self, path: str, frames: FrameWriter) -> None:  # noqa: D102 - and the shedding's
        super().save(path, frames)
        if self.shedding is not None:
            with open(os.path.join(path, CONTROL_FILE), "w", encoding="utf-8") as f:
                json.dump([{"work": list(d.work), "priorities": list(d.priorities),
                            "processed": d.processed, "shed": d.shed,
                            "processed_by_bucket": list(d.processed_by_bucket),
                            "shed_by_bucket": list(d.shed_by_bucket),
                            "elements": [list(e) for e in d.elements]}
                           for d in self.progress.directions], f)

    def load(self, path: str, frames: FrameReader) -> None:  # noqa: D102
        super().load(path, frames)
        control = os.path.join(path, CONTROL_FILE)
        if self.shedding is not None and os.path.exists(control):
            with open(control, encoding="utf-8") as f:
                saved = json.load(f)
            directions = [Direction(tuple(d["work"]), tuple(d["priorities"]),
                                    d["processed"], d["shed"],
                                    tuple(d.get("processed_by_bucket", ())),
                                    tuple(d.get("shed_by_bucket", ())),
                                    tuple((k, n) for k, n in d.get("elements", [])))
                          for d in saved]
            self.progress = replace(self.progress,
                                    directions=(directions[0], directions[1]))

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The pairs valid just before ``at`` (the operator's position): both elements
        started before it and neither ended before it; of a shedding join, the pairs it
        found that have not ended.
        """
        cols = [*self.names[0], *self.names[1]]
        if self.pairs is not None:
            found = self.pairs.live()
            if found is None:
                return None
            pairs = found.where((col(PAIR_START) < F.lit(at)) & (col(PAIR_END) >= F.lit(at)))
            return as_changes_at(pairs.select(*[col(c) for c in cols]), cols, None, at)
        left, right = (s.live() for s in self.sides)
        if left is None or right is None:
            return None
        ls, rs = STARTS
        le, re_ = ENDS
        pairs = self.views.sql(
            f"SELECT {', '.join(map(q, cols))} FROM {{left}} AS l JOIN {{right}} AS r "
            f"ON ({self.condition}) AND {ls} < {at} AND {rs} < {at} AND {le} >= {at} "
            f"AND {re_} >= {at}", left=left, right=right)
        return as_changes_at(pairs, cols, None, at)
