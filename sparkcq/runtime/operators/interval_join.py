"""Inner join of two time-windowed streams, from the elements' intervals (DESIGN 6).

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

Each side's state is its elements that may still start or end a pair, ``e >= hi``: the
cycle's frame of the side itself, hash-partitioned by the equi-join keys and kept for the
next cycle rather than copied (``StateFrame.adopt``); elements that ended are filtered out
when it is read. Only the new elements are shuffled (a union with the kept ones keeps their
partitioning), and the four probes run on co-partitioned frames with no shuffle of their own.

A join that sheds (DESIGN 4.4, ``runtime/operators/shedding.py``) gives each element three
more columns: its basic sub-window (``_la``/``_ra``), a hash in [0, 1) (``_lu``/``_ru``)
that picks it in a partly taken sub-window, and, once it has probed, the shares of each lag
bucket it met (``_lsel``/``_rsel``). The two probes that find pairs (+1) meet only the
taken sub-windows: each prober is expanded into its taken buckets and joined on the keys
and the partner's sub-window, so skipped sub-windows are never touched. The two probes that
end pairs (-1), and the contents, keep a pair only if its prober met its partner, read from
the prober's recorded shares: each pair the join emits also ends, and no other does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DoubleType, LongType, StructField, StructType

from sparkcq.model.columns import D, T
from sparkcq.model.time import TIME_MAX, TIME_MIN
from sparkcq.plan.nodes import (
    Filter,
    IntervalJoin,
    Project,
    StreamScan,
)
from sparkcq.plan.options import Shedding
from sparkcq.runtime.frames import Runtime, Slice, SqlViews, col, q
from sparkcq.runtime.operators.base import CycleContext, Operator, Progress, as_changes_at
from sparkcq.runtime.operators.shedding import (
    CycleShedding,
    Direction,
    aged,
    bucket_order,
    fractions,
    met,
    sample_rate,
    slice_length,
    unsampled_share,
    work_per_bucket,
)
from sparkcq.runtime.operators.window import element_interval, element_span

#: where each side's element starts and ends (the left's ``_ls``/``_le``, the right's
#: ``_rs``/``_re``), so the join condition's columns and these never clash
STARTS, ENDS = ("_ls", "_rs"), ("_le", "_re")
#: a shedding join's columns of each side's elements: basic sub-window, hash, shares met
SLICES, HASHES, SHARES = ("_la", "_ra"), ("_lu", "_ru"), ("_lsel", "_rsel")
SHARES_TYPE = ArrayType(DoubleType())
CONTROL_FILE = "shedding.json"


@dataclass(frozen=True)
class IntervalJoinProgress(Progress):
    """A join's position and, when it sheds, what each direction learnt and did."""

    directions: tuple[Direction, Direction] = (Direction(), Direction())
    z: float = 1.0  # of the last cycle
    shares: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())  # of the last cycle


#: a side's tally keys: sub-window x TALLY_KINDS + 0 (its elements, as partners), + 1
#: (its probers, by the other side's sub-window), or 2 (a sampled prober)
TALLY_KINDS = 4


def split_tally(counts: dict[int, int]) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """A side's tally as partners by sub-window, probers by sub-window, and sampled probers
    (under key 0).
    """
    parts: tuple[dict[int, int], dict[int, int], dict[int, int]] = ({}, {}, {})
    for key, n in counts.items():
        kind = key % TALLY_KINDS
        if kind == 2:
            parts[2][0] = n
        else:
            parts[kind][key // TALLY_KINDS] = n
    return parts


def within(column: str, lo: int, hi: int) -> str:
    """SQL: ``column`` lies in the cycle ``[lo, hi)`` (open ends left out)."""
    bounds = [f"{column} >= {lo}" if lo != TIME_MIN else "",
              f"{column} < {hi}" if hi != TIME_MAX else ""]
    return " AND ".join(b for b in bounds if b) or "TRUE"


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


class IntervalJoinOperator(Operator):
    """Pairs elements of two windowed streams by their intervals (see module)."""

    def __init__(self, node: IntervalJoin, rt: Runtime):
        super().__init__(node, rt)
        self.interval_join = node
        self.views = SqlViews(rt.spark, "ijoin")
        # a source stream's events are taken in as they arrive (``Slice.arrivals``): their
        # elements start at or after their time, so they wait in the state, not in a buffer
        self.reads_arrivals = [isinstance(c, StreamScan) for c in node.children]
        self.names = [[f.name for f in node.join.children[i].schema.fields] for i in (0, 1)]
        self.keys = [[k[i] for k in node.join.equi_keys] for i in (0, 1)]
        self.condition = node.join.condition or "TRUE"
        self.events_sql = [self.build_events_sql(i) for i in (0, 1)]
        self.shedding: Shedding | None = node.shedding
        self.progress: IntervalJoinProgress = IntervalJoinProgress()
        shed_fields: list[list[StructField]] = [[], []]
        if self.shedding is not None:
            # each side's basic sub-window: its longest element over the sub-windows
            spans = [element_span(node.side(i)[0].spec) for i in (0, 1)]
            self.slices = [slice_length(span or 1, self.shedding.basic_windows)
                           for span in spans]
            self.buckets = self.shedding.basic_windows + 1  # a partner lies 0..n back
            shed_fields = [[StructField(SLICES[i], LongType()),
                            StructField(HASHES[i], DoubleType()),
                            StructField(SHARES[i], SHARES_TYPE)] for i in (0, 1)]
        self.sides = [self.state(StructType([
            *node.join.children[i].schema.fields,
            StructField(STARTS[i], LongType()), StructField(ENDS[i], LongType()),
            *shed_fields[i]]),
            ("left", "right")[i] + "-elements") for i in (0, 1)]

    # -- SQL text, built once ----------------------------------------------------------------
    def build_events_sql(self, i: int) -> str:
        """Side ``i``'s new events (view ``{inp}``) through the filters and projections
        above its window: its columns and ``_t``.
        """
        _window, steps = self.interval_join.side(i)
        src = f"(SELECT * FROM {{inp}} WHERE {q(D)} > 0)"  # a stream edge: one event per row
        for step in steps:
            if isinstance(step, Filter):
                src = f"(SELECT * FROM {src} WHERE {step.predicate})"
            else:
                assert isinstance(step, Project)
                exprs = ", ".join(f"{sql} AS {q(name)}" for name, sql in step.exprs)
                src = f"(SELECT {exprs}, {q(T)} FROM {src})"
        return f"SELECT {', '.join(map(q, self.names[i]))}, {q(T)} FROM {src}"

    def elements(self, i: int, events: DataFrame) -> DataFrame:
        """Side ``i``'s new events as elements: its columns with the interval's start and
        end (``element_interval``, as its window would give them); empty ones dropped.
        """
        window, _steps = self.interval_join.side(i)
        start, end = element_interval(window.spec, col(T))
        assert end is not None  # the rule takes windows whose elements end
        rows = self.views.sql(self.events_sql[i], inp=events)
        out = rows.select(*[col(n) for n in self.names[i]], start.alias(STARTS[i]),
                          end.alias(ENDS[i])).where(col(ENDS[i]) > col(STARTS[i]))
        if self.shedding is None:
            return out
        # the hash of the whole element, the same in every process (xxhash64's fixed seed)
        digest = F.xxhash64(*[col(n) for n in self.names[i]], col(STARTS[i]))
        return out.select(
            "*", F.expr(floor_div(q(STARTS[i]), self.slices[i])).alias(SLICES[i]),
            (F.pmod(digest, F.lit(1_000_003)) / F.lit(1_000_003.0)).alias(HASHES[i]),
            F.lit(None).cast(SHARES_TYPE).alias(SHARES[i]))

    def mark_probers(self, i: int, side: DataFrame, lo: int, hi: int,
                     plan: CycleShedding) -> DataFrame:
        """Side ``i``'s elements with the shares recorded on those that probe in the cycle
        ``[lo, hi)`` (their start lies in it; sampled ones meet all): a later cycle's -1
        probes read them.
        """
        start = col(STARTS[i])
        probing = (start >= F.lit(lo)) & (start < F.lit(hi))
        shares = F.array(*[F.lit(float(f)) for f in plan.shares[i]]).cast(SHARES_TYPE)
        if plan.rate > 0:
            whole = F.array(*[F.lit(1.0)] * self.buckets).cast(SHARES_TYPE)
            shares = F.when(col(HASHES[i]) < F.lit(plan.rate), whole).otherwise(shares)
        marked = F.when(probing, shares).otherwise(col(SHARES[i]))
        return side.select(*[col(n) for n in side.columns if n != SHARES[i]],
                           marked.alias(SHARES[i]))

    def side(self, i: int, old: DataFrame | None, events: DataFrame | None,
             lo: int) -> DataFrame | None:  # noqa: C901 - shedding or not, one frame
        """Side ``i``'s elements that may still start or end a pair at or after ``lo``: the
        kept ones (``old``) and those of the new ``events``, hash-partitioned by the equi-join
        keys and sorted by them within each partition, so the probes merge-join the frames
        with no shuffle and no sort of their own (a hash join builds a table per probe that
        cannot spill: many joins in one commit ran out of memory).

        Built with DataFrame calls, not SQL text: a subquery's name on the columns makes
        Spark 4.3 forget the partitioning of a copy of the cached frame (the four probes
        read it in one plan) or of a union with it, and every probe shuffled again.
        """
        names = [*self.names[i], STARTS[i], ENDS[i]]
        if self.shedding is not None:
            names += [SLICES[i], HASHES[i], SHARES[i]]
        kept = None
        if old is not None:  # partitioned and sorted already
            kept = old.select(*[col(n).alias(n) for n in names])
            if lo != TIME_MIN:
                kept = kept.where(col(ENDS[i]) >= F.lit(lo))
        if events is None:
            return kept
        new = self.elements(i, events)
        keys = [col(k) for k in self.keys[i]]
        if keys:
            new = new.repartition(self.rt.partitions, *keys)
        side = new if kept is None else kept.unionByName(new)
        if self.shedding is not None:  # sorted by sub-window too: the +1 probes join on it
            return side.sortWithinPartitions(*keys, col(SLICES[i]))
        return side.sortWithinPartitions(*keys) if keys else side

    def changes_sql(self, lo: int, hi: int, plan: CycleShedding | None = None) -> str:
        """The changes of the cycle ``[lo, hi)``, four probes: +1 at the later start, -1 at
        the earlier end, each pair found once (see module); when shedding (``plan``), the
        +1 probes meet the cycle's share of each lag bucket and the -1 probes end only the
        pairs their prober met.
        """
        ls, rs = STARTS
        le, re_ = ENDS
        cols = ", ".join(map(q, [*self.names[0], *self.names[1]]))
        met_ = f" AND {self.met_sql()}" if plan is not None else ""
        probes = [  # (instant, change, band of the pair, prober side)
            (ls, 1, starts_band(0, lo, hi), 0),
            (rs, 1, starts_band(1, lo, hi), 1),
            (le, -1, f"{within(le, lo, hi)} AND {re_} >= {le} AND {rs} < {le}{met_}", None),
            (re_, -1, f"{within(re_, lo, hi)} AND {le} > {re_} AND {ls} < {re_}{met_}", None),
        ]
        hint = "/*+ MERGE(r) */"  # both sides are frames of the cycle: no broadcast
        selects = []
        for at, sign, band, prober in probes:
            sides = "{left} AS l JOIN {right} AS r"
            on = f"({self.condition}) AND {band}"
            if plan is not None and prober is not None:
                taken = self.taken_sql(prober, plan)
                if taken is None:
                    continue  # the cycle meets nothing: no pair starts
                sides, meets = taken
                on += f" AND {meets}"
            selects.append(f"SELECT {hint} {cols}, {at} AS {q(T)}, "
                           f"CAST({sign} AS BIGINT) AS {q(D)} FROM {sides} ON {on}")
        return " UNION ALL ".join(selects)

    def taken_sql(self, prober: int, plan: CycleShedding) -> tuple[str, str] | None:
        """The join of a +1 probe whose probers (side ``prober``) meet only the lag
        buckets the cycle takes (sampled probers: all of them): each prober expanded into
        its buckets, joined on the partner's sub-window; a partly taken bucket's partners
        picked by their hash. None when no prober meets anything.
        """
        other = 1 - prober

        def buckets(shares: list[tuple[int, float]]) -> str:
            return "array(" + ", ".join(f"named_struct('j', CAST({j} AS BIGINT), 'f', "
                                        f"CAST({f!r} AS DOUBLE))" for j, f in shares) + ")"

        taken = [(j, f) for j, f in enumerate(plan.shares[prober]) if f > 0]
        whole = buckets([(j, 1.0) for j in range(self.buckets)])
        sampled = f"{HASHES[prober]} < {plan.rate!r}"
        where = ""
        if plan.rate > 0 and taken:
            each = f"IF({sampled}, {whole}, {buckets(taken)})"
        elif plan.rate > 0:
            each, where = whole, f" WHERE {sampled}"
        elif taken:
            each = buckets(taken)
        else:
            return None
        expanded = (f"(SELECT * FROM {{{('left', 'right')[prober]}}} "
                    f"LATERAL VIEW explode({each}) AS _p{where})")
        sub_window = floor_div(STARTS[prober], self.slices[other])
        meets = (f"{SLICES[other]} = {sub_window} - _p.j AND {HASHES[other]} < _p.f")
        if prober == 0:
            return f"{expanded} AS l JOIN {{right}} AS r", meets
        return f"{{left}} AS l JOIN {expanded} AS r", meets

    def met_sql(self) -> str:
        """SQL: the prober of the pair (its later start; ties: the left) met the partner."""
        ls, rs = STARTS
        lsel, rsel = SHARES
        la, ra = SLICES
        lu, ru = HASHES
        left_met = (f"try_element_at({lsel}, CAST({floor_div(ls, self.slices[1])} - {ra} "
                    f"AS INT) + 1) > {ru}")
        right_met = (f"try_element_at({rsel}, CAST({floor_div(rs, self.slices[0])} - {la} "
                     f"AS INT) + 1) > {lu}")
        return f"(CASE WHEN {ls} >= {rs} THEN {left_met} ELSE {right_met} END)"

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
        plan = self.cycle_shedding(cycle) if self.shedding is not None else None
        frames: list[DataFrame | None] = []
        for i, inp in enumerate((left, right)):
            events = inp.arrivals if self.reads_arrivals[i] else inp.df
            side = self.side(i, self.sides[i].get(), events, lo)
            if plan is not None and side is not None:
                # probers record what they met, so the state is rewritten every cycle
                side = self.mark_probers(i, side, lo, hi, plan)
            if (events is not None or plan is not None) and side is not None:
                side = self.rt.cache_for_cycle(side)
                if hi != TIME_MAX:
                    self.sides[i].adopt(side)
            frames.append(side)
        if hi == TIME_MAX:
            for state in self.sides:
                state.set(None)
        if frames[0] is None or frames[1] is None:
            return Slice(None, lo, hi)
        if plan is not None:
            self.tally_work(frames[0], frames[1], lo, hi, plan)
        changes = self.views.sql(self.changes_sql(lo, hi, plan), left=frames[0],
                                 right=frames[1])
        return Slice(changes, lo, hi)

    # -- shedding (``runtime/operators/shedding.py``) --------------------------------------
    def cycle_shedding(self, cycle: CycleContext) -> CycleShedding:
        """The cycle's z, sample and, per prober side, the share of each lag bucket its
        probers meet (in the order of the mode: by priority, or shuffled by the cycle).
        """
        assert self.shedding is not None
        how = self.shedding
        z = how.throttle if how.throttle is not None else \
            cycle.input.throttles.get(self.node, 1.0)
        rate = sample_rate(how.mode, z)
        out = []
        for i in (0, 1):
            known = self.progress.directions[i]
            order = bucket_order(how.mode, self.buckets, 2 * cycle.input.number + i,
                                 known.priorities)
            out.append(fractions(order, known.work, unsampled_share(z, rate)))
        return CycleShedding(z, rate, (out[0], out[1]))

    def tally_work(self, left: DataFrame, right: DataFrame, lo: int, hi: int,
                   plan: CycleShedding) -> None:
        """Have the commit count, per side, its elements by sub-window (as partners), its
        probers by the other side's sub-window and, sampling, its sampled probers, in one
        tally per side (``TALLY_KINDS`` kinds of key); and, sampling, the pairs the sampled
        probers found per lag bucket. From them each direction learns its work per lag
        bucket, what it met and skipped, and its priorities.
        """
        frames = (left, right)
        counted: dict[tuple[str, int], dict[int, int]] = {}
        wanted = [("side", 0), ("side", 1)] + ([("found", 0), ("found", 1)]
                                               if plan.rate > 0 else [])

        def then(what: str, i: int) -> Callable[[dict[int, int]], None]:
            def receive(counts: dict[int, int]) -> None:
                counted[(what, i)] = counts
                if all(w in counted for w in wanted):
                    sides = [split_tally(counted[("side", j)]) for j in (0, 1)]
                    for j in (0, 1):
                        self.learn(j, {"probers": sides[j][1], "partners": sides[1 - j][0],
                                       "sampled": sides[j][2],
                                       "found": counted.get(("found", j), {})}, plan)
            return receive

        for i in (0, 1):
            other = 1 - i
            start = col(STARTS[i])
            probing = (start >= F.lit(lo)) & (start < F.lit(hi))
            sampled = probing & (col(HASHES[i]) < F.lit(plan.rate))
            partner = col(SLICES[i]) * TALLY_KINDS
            prober = F.expr(floor_div(STARTS[i], self.slices[other])) * TALLY_KINDS + 1
            keys = F.when(sampled, F.array(partner, prober, F.lit(2).cast("long"))) \
                .when(probing, F.array(partner, prober)).otherwise(F.array(partner))
            self.rt.tally(frames[i].select(F.explode(keys).alias("_key")), col("_key"),
                          then("side", i))
            if plan.rate > 0:
                found = self.views.sql(self.sample_sql(i, lo, hi, plan.rate),
                                       left=frames[0], right=frames[1])
                self.rt.tally(found, col("_j"), then("found", i))

    def sample_sql(self, prober: int, lo: int, hi: int, rate: float) -> str:
        """The lag bucket of each pair a sampled prober of side ``prober`` finds (its +1
        probe over the whole window).
        """
        other = 1 - prober
        j = f"{floor_div(STARTS[prober], self.slices[other])} - {SLICES[other]}"
        return (f"SELECT /*+ MERGE(r) */ {j} AS _j FROM {{left}} AS l JOIN {{right}} AS r "
                f"ON ({self.condition}) AND {starts_band(prober, lo, hi)} "
                f"AND {HASHES[prober]} < {rate!r}")

    def learn(self, i: int, counts: dict[str, dict[int, int]], plan: CycleShedding) -> None:
        """After the commit: direction ``i``'s work per bucket, what it met and skipped,
        and (sampling) its priorities.
        """
        work = work_per_bucket(counts["probers"], counts["partners"], self.buckets)
        done, skipped = met(work, plan.effective(i))
        old = self.progress.directions[i]
        priorities = old.priorities
        if plan.rate > 0:
            priorities = aged(old.priorities, counts["found"],
                              counts["sampled"].get(0, 0), self.buckets)
        new = replace(old, work=work if sum(work) > 0 else old.work, priorities=priorities,
                      processed=old.processed + done, shed=old.shed + skipped)
        directions = list(self.progress.directions)
        directions[i] = new
        both = list(self.progress.shares)
        both[i] = plan.effective(i)
        self.progress = replace(self.progress, directions=(directions[0], directions[1]),
                                shares=(both[0], both[1]), z=plan.z)

    def shedding_report(self) -> dict[str, Any] | None:
        """What the join sheds: its mode, z, and per input (as the prober) the partners
        it met and skipped, its last work per lag bucket and the shares it took.
        """
        if self.shedding is None:
            return None
        how = self.shedding
        return {
            "mode": how.mode.value, "budget_seconds": how.budget_seconds,
            "basic_windows": how.basic_windows,
            "z": how.throttle if how.throttle is not None else self.progress.z,
            "inputs": [{"processed": d.processed, "shed": d.shed, "work": list(d.work),
                        "shares": list(s), "priorities": list(d.priorities)}
                       for d, s in zip(self.progress.directions, self.progress.shares,
                                       strict=True)],
        }

    def save(self, path: str) -> None:  # noqa: D102 - and what the shedding learnt
        super().save(path)
        if self.shedding is not None:
            with open(os.path.join(path, CONTROL_FILE), "w", encoding="utf-8") as f:
                json.dump([{"work": list(d.work), "priorities": list(d.priorities),
                            "processed": d.processed, "shed": d.shed}
                           for d in self.progress.directions], f)

    def load(self, path: str) -> None:  # noqa: D102
        super().load(path)
        control = os.path.join(path, CONTROL_FILE)
        if self.shedding is not None and os.path.exists(control):
            with open(control, encoding="utf-8") as f:
                saved = json.load(f)
            directions = [Direction(tuple(d["work"]), tuple(d["priorities"]),
                                    d["processed"], d["shed"]) for d in saved]
            self.progress = replace(self.progress,
                                    directions=(directions[0], directions[1]))

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The pairs valid just before ``at`` (the operator's position): both elements
        started before it and neither ended before it.
        """
        left, right = (s.get() for s in self.sides)
        if left is None or right is None:
            return None
        ls, rs = STARTS
        le, re_ = ENDS
        cols = ", ".join(map(q, [*self.names[0], *self.names[1]]))
        met_ = f" AND {self.met_sql()}" if self.shedding is not None else ""
        pairs = self.views.sql(
            f"SELECT {cols} FROM {{left}} AS l JOIN {{right}} AS r ON ({self.condition}) "
            f"AND {ls} < {at} AND {rs} < {at} AND {le} >= {at} AND {re_} >= {at}{met_}",
            left=left, right=right)
        return as_changes_at(pairs, [*self.names[0], *self.names[1]], None, at)
