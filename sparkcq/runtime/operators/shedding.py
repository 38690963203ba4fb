"""The control side of a shedding window join (``docs/shedding.md``): which part of the
windows a cycle's probing elements meet, decided on the driver from small tallies.

Each side's window is cut into basic sub-windows of ``slice_length`` (its longest element
over ``basic_windows``), aligned to multiples of that length. An element of the other side
that starts at ``s`` (the *prober*: the later start of a pair finds it) meets its partners
one lag bucket at a time: bucket ``j`` is the partners' sub-window ``floor(s / b) - j``,
bucket 0 the newest; a partner is at most ``basic_windows`` buckets back.

A cycle gives every lag bucket a fraction: 1 (all its partners), 0 (none) or, for the one
bucket where the share ``z`` runs out, the rest of the share: the partners whose hash lies
below it (the same partners for every prober of the cycle). The buckets are taken in an
order (``adaptive``: by priority, the results a bucket yielded per prober; ``random``: a
shuffle seeded by the cycle's number), each bucket weighing the work it cost in the last
cycle it was measured, until the taken work is ``z`` of the whole.

An adaptive join learns the priorities from a sample of partners: each side keeps apart
the elements whose hash falls below ``SAMPLE`` (a twentieth of its window), and every
prober of a cycle meets those in every bucket. The results found per bucket, per prober
and sampled partner, are the bucket's new priority, aged into the old one (``AGING``) so
the order follows a correlation that shifts. The sample's pairs only teach: the output is
what the shares met, ``z`` of the work. The sample costs a twentieth of the windows read
each cycle, less at a low z (``sample_share``: the probers then meet only the sampled
elements of the lowest hashes); probers that met every bucket would read all of them
whatever ``z`` (at three times a join's sustainable rate its whole window cost more than
the budget).

The z of an adapting join is decided before each cycle (``next_z``) from the cost of a
cycle fitted to its recent ones (``fit_cycle_cost``: a fixed part, a part per input row, a
part per partner met) and the load the waiting input brings (``CycleLoad``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sparkcq.plan.options import ShedMode

#: z grows back by at most this factor per cycle
BOOST = 1.5
#: the cycle time z aims at, as a share of the budget: cycles of the same work vary (by
#: half as much again on a busy 2-core machine), and the work a cycle brings is known only
#: roughly, so a cycle aimed at the budget itself would run over it every other time
TARGET = 0.5
#: while cycles stay under the target, z may grow by ``EXPLORE_STEP`` past what the fitted
#: cost says fits, up to a cycle predicted at ``EXPLORE`` of the budget: a cost fitted to
#: cycles of one z cannot tell time per row from time per partner, and the next cycle's
#: time tells
EXPLORE, EXPLORE_STEP = 0.65, 1.2
#: z never goes below this: a join always meets some of its windows. At three times its
#: sustainable rate a join of 60 s windows over 100,000 keys still took 1.6-2.4 s cycles
#: against a budget of 2 at 0.01, its partners met no longer the larger part of a cycle
LEAST_Z = 0.001
#: a change of z by more than this part of it is written to the query's log
NOTABLE = 0.1
#: a cycle's cost is fitted to this many recent cycles of the join, once there are
#: ``FIT_AFTER`` of them (``fit_cycle_cost``)
RECENT, FIT_AFTER = 20, 4

#: the share of each side's elements an adaptive join keeps apart as its sample of
#: partners, which every prober meets in every bucket
SAMPLE = 0.05
#: at a z below this the probers meet only the part ``z / SAMPLE_Z`` of the sample (never
#: less than ``SAMPLE_Z`` of it): the sample is read whole every cycle, and at a low z
#: it was read more than the partners met (a 60 s window at 127,000 rows/s: 1.2 times
#: the cycle's new rows, against 1% of the window met)
SAMPLE_Z = 0.2
#: the weight of a cycle's sample in a bucket's priority: after a shift of the
#: correlation the new buckets outrank the old ones in two or three cycles
AGING = 0.3



def slice_length(span: int, basic_windows: int) -> int:
    """The length of one basic sub-window of a window whose elements last up to ``span``."""
    return max(1, -(-span // basic_windows))


@dataclass(frozen=True)
class Direction:
    """What one direction of a join (one side's elements probing the other's) learnt and
    did, on the driver; per lag bucket, newest first.
    """

    work: tuple[float, ...] = ()  # partners per bucket met by the last measured probers
    priorities: tuple[float, ...] = ()  # results per prober and sampled partner (aged)
    processed: int = 0  # partners met, all cycles
    shed: int = 0  # partners skipped, all cycles
    # the same per lag bucket, all cycles (unrounded)
    processed_by_bucket: tuple[float, ...] = ()
    shed_by_bucket: tuple[float, ...] = ()
    # the prober side's live elements by absolute sub-window (as partners of the other
    # direction), counted as they arrive: no cycle scans the windows to count them
    elements: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class CycleShedding:
    """What one cycle of a shedding join does: its z, whether it learns from its sample of
    partners (adaptive), and, per prober side, the share of each bucket its probers meet.
    """

    z: float
    learns: bool
    shares: tuple[tuple[float, ...], tuple[float, ...]]
    sample: float = SAMPLE  # the share of the elements in the sample its probers meet


@dataclass(frozen=True)
class CycleLoad:
    """The input rows of a join's cycle, and the partners its probers meet in it (a past
    cycle) or would meet at z = 1 (the coming one).
    """

    rows: int
    partners: float


@dataclass(frozen=True)
class CycleCost:
    """What a cycle costs, fitted to a join's recent cycles: a fixed part (building the
    plan, the commit), a part per input row (taking it in, its state, its tallies) and a
    part per partner its probers meet, in seconds.
    """

    fixed: float
    per_row: float
    per_partner: float
    cycles: int  # fitted to

    def floor(self, rows: int) -> float:
        """The time of a cycle of ``rows`` that meets no partner: what shedding cannot cut."""
        return self.fixed + self.per_row * rows


def fit_cycle_cost(history: Sequence[tuple[CycleLoad, float]]) -> CycleCost | None:
    """The cost of a cycle, by least squares over the last ``RECENT`` of ``history`` (each
    cycle's load and seconds), no part below 0 (a part that would be is left out and the
    others fitted again); None before ``FIT_AFTER`` cycles.
    """
    recent = history[-RECENT:]
    if len(recent) < FIT_AFTER:
        return None
    x = np.array([[1.0, load.rows, load.partners] for load, _ in recent])
    y = np.array([seconds for _, seconds in recent])
    kept = [0, 1, 2]
    while True:
        fitted, *_ = np.linalg.lstsq(x[:, kept], y, rcond=None)
        below = [k for k, c in zip(kept, fitted, strict=True) if c < 0]
        if not below or len(kept) == 1:
            break
        kept = [k for k in kept if k not in below]
    parts = [0.0, 0.0, 0.0]
    for k, c in zip(kept, fitted, strict=True):
        parts[k] = max(0.0, float(c))
    return CycleCost(parts[0], parts[1], parts[2], len(recent))


def next_z(z: float, seconds: float, budget: float, *, cost: CycleCost | None = None,
           met: float = 0.0, coming: CycleLoad | None = None) -> tuple[float, str]:
    """The z of the next cycle after one that took ``seconds`` against ``budget``, and why.

    The next cycle takes ``coming.rows`` and its probers would meet ``coming.partners``
    at z = 1 (``IntervalJoinOperator.coming_load``). With the ``cost`` of a cycle fitted
    to the join's recent cycles, the z that fits is the share of those partners the join
    can meet in ``TARGET`` of the budget beside the cycle's floor (its fixed and per-row
    parts): what it can process over what it receives. z grows towards it by at most
    ``BOOST`` a cycle, up to 1, and falls to it at once, before a burst rather than after
    the cycle that ran over; but while the last cycle was under the target, z holds, or
    grows by ``EXPLORE_STEP`` if that is predicted within ``EXPLORE`` of the budget (a
    cost fitted to cycles of one z may take per-row time for per-partner time and would
    hold z too low; a cycle at another z tells them apart). A fit with no time per partner
    (too few met to tell) lets z grow only after a cycle under the target.

    Before a cost is fitted, the last cycle's ``met`` partners are taken to have cost all
    of its time (z errs low, and grows back). Without a measure of the work (the waiting
    rows unknown), z follows the time alone: times ``budget / seconds`` after a cycle over
    the budget, times ``BOOST`` after one under the target.
    """
    aim = TARGET * budget
    if coming is None or seconds <= 0 or (cost is None and met <= 0):
        if seconds > budget:
            return max(LEAST_Z, z * budget / seconds), (
                f"the cycle took {seconds:.2f} s, over the budget of {budget:g} s: "
                f"{budget / seconds:.0%} of its input was processed in time")
        if seconds < aim and z < 1:
            return min(1.0, z * BOOST), (f"the cycle took {seconds:.2f} s, under "
                                          f"{aim:g} s of the budget of {budget:g} s")
        return z, ""
    if cost is None:
        cost = CycleCost(0.0, 0.0, seconds / met, 1)
        how = f"{met:,.0f} partners met in {seconds:.2f} s"
    else:
        how = (f"a cycle costs {cost.fixed:.2f} s, {cost.per_row * 1e6:.1f} us a row and "
               f"{cost.per_partner * 1e9:.2f} ns a partner (fitted to {cost.cycles} cycles)")
    floor = cost.floor(coming.rows)
    how += f"; {coming.rows:,} rows wait, {coming.partners:,.0f} partners to meet at z = 1"
    work = cost.per_partner * coming.partners  # seconds at z = 1 beyond the floor
    if work <= 0:
        # no time per partner in the fit: at a low z the partners met are too few to
        # tell, so z grows only after a cycle under the target (grown after any cycle, it
        # went from 0.001 to 0.13 in 12 cycles over the budget, and one cycle took 6 s)
        if seconds < aim and z < 1:
            return min(1.0, z * BOOST), (f"{how}: no time per partner is seen, and the "
                                         f"last cycle took {seconds:.2f} s, under {aim:g} s")
        return z, ""
    fits = max(LEAST_Z, (aim - floor) / work)
    fitting = f"{min(fits, 1.0):.2f} of them fit in {aim:g} s of the budget of {budget:g} s"
    if fits >= z:
        return min(1.0, z * BOOST, fits), f"{how}: {fitting}"
    tried = z * EXPLORE_STEP
    if seconds < aim and floor + work * tried <= EXPLORE * budget:
        return min(1.0, tried), (
            f"{how}: {fitting}, but the last cycle took {seconds:.2f} s, under {aim:g} s: "
            f"{tried:.2f} of them are tried (predicted {floor + work * tried:.2f} s)")
    if seconds < aim and floor + work * z <= budget:
        return z, ""
    return fits, f"{how}: {fitting}"


def ratio_z(z: float, processed: int | None, received: int | None) -> tuple[float, str]:
    """The z of the next cycle by the rows the last cycle processed against the rows that
    came while it ran (``shedding_control='ratio'``), and why: times ``processed /
    received``, down to ``LEAST_Z``, and back up by at most ``BOOST`` a cycle, to 1.

    A join that took 4,000 rows while 8,000 more came falls behind: it halves z; one that
    took 8,000 while 4,000 came has room, and z grows by ``BOOST``. Cycle time is not
    looked at: any steady cycle time that keeps the queue from growing is an equilibrium.
    """
    if not processed or received is None:
        return z, ""  # no rows to compare (the last cycle had none, or the waiting are unknown)
    share = processed / received if received else BOOST
    new = max(LEAST_Z, min(1.0, z * min(share, BOOST)))
    return new, (f"the last cycle processed {processed:,} rows while {received:,} came: "
                 f"{share:.0%} of them")


def bucket_order(mode: ShedMode, buckets: int, seed: int,
                 priorities: Sequence[float] = ()) -> list[int]:
    """The order a cycle takes the lag buckets in: by priority (ties: newest first) for
    ``adaptive``, a shuffle seeded by ``seed`` for ``random``.
    """
    order = list(range(buckets))
    if mode is ShedMode.RANDOM:
        random.Random(seed).shuffle(order)
        return order
    known = list(priorities) + [0.0] * (buckets - len(priorities))
    return sorted(order, key=lambda j: -known[j])


def fractions(order: Sequence[int], work: Sequence[float], z: float) -> tuple[float, ...]:
    """Per lag bucket, the part of its partners a prober meets: whole buckets in ``order``
    until they hold ``z`` of the ``work``, then the part of the next one that makes up the
    rest (a prober meets the partners whose hash lies below it, so a part of a bucket costs
    only that part). Unmeasured work (none yet) counts every bucket alike.
    """
    buckets = len(order)
    weights = list(work) if len(work) == buckets and sum(work) > 0 else [1.0] * buckets
    if z >= 1:
        return (1.0,) * buckets
    out = [0.0] * buckets
    left = z * sum(weights)
    for j in order:
        if left <= 0:
            break
        if weights[j] <= left:
            out[j] = 1.0
            left -= weights[j]
        else:
            out[j] = left / weights[j]
            left = 0
    return tuple(out)


def joint_fractions(priorities: Sequence[Sequence[float]], work: Sequence[Sequence[float]],
                    z: float, buckets: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Both directions' parts from one share: the lag buckets of both (each direction's
    probers in its own buckets) taken by priority, whole, until they hold ``z`` of the work
    of both, then the part of the next one; ties go newest first, the two directions in
    turn. Where only one direction finds partners (those of each ``a``-tuple lie ahead of
    it, so only ``b``'s probers meet them) the other's buckets come last, and the share
    they would have had goes to the buckets that yield (``adaptive``). Unmeasured work
    counts every bucket alike.
    """
    if z >= 1:
        return (1.0,) * buckets, (1.0,) * buckets
    weights = [list(w) if len(w) == buckets and sum(w) > 0 else [1.0] * buckets
               for w in work]
    known = [list(p) + [0.0] * (buckets - len(p)) for p in priorities]
    items = sorted(((side, j) for j in range(buckets) for side in (0, 1)),
                   key=lambda item: -known[item[0]][item[1]])
    out = [[0.0] * buckets, [0.0] * buckets]
    left = z * (sum(weights[0]) + sum(weights[1]))
    for side, j in items:
        if left <= 0:
            break
        if weights[side][j] <= left:
            out[side][j] = 1.0
            left -= weights[side][j]
        else:
            out[side][j] = left / weights[side][j]
            left = 0
    return tuple(out[0]), tuple(out[1])


def work_per_bucket(probers: Mapping[int, int], partners: Mapping[int, int],
                    buckets: int) -> tuple[float, ...]:
    """Per lag bucket, the partners the probers would meet there: probers in sub-window
    ``b`` times partners in sub-window ``b - j`` (tallied by the commit). The newest and the
    oldest bucket count half: of the partners in a prober's own sub-window about half start
    after it (the other direction finds those pairs), and of those ``n`` sub-windows back
    about half have ended before it starts.
    """
    def edge(j: int) -> float:
        return 0.5 if j in (0, buckets - 1) and buckets > 1 else 1.0

    return tuple(edge(j) * sum(n * partners.get(b - j, 0) for b, n in probers.items())
                 for j in range(buckets))


def live_elements(kept: Sequence[tuple[int, int]], new: Mapping[int, int], lo: int,
                  slice_length: int, span: int) -> tuple[tuple[int, int], ...]:
    """A side's elements by sub-window at the start ``lo`` of a cycle: those ``kept`` from
    earlier cycles and the ``new`` ones, without the sub-windows whose elements have all
    ended (an element of sub-window ``k`` starts before ``(k + 1) * slice_length`` and
    lasts at most ``span``). A partly ended sub-window counts whole: its partners are
    weighed a little high, and the oldest bucket already counts half (``work_per_bucket``).
    """
    merged = dict(kept)
    for k, n in new.items():
        merged[k] = merged.get(k, 0) + n
    return tuple(sorted((k, n) for k, n in merged.items()
                        if (k + 1) * slice_length + span > lo))


def sample_share(z: float) -> float:
    """The share of the elements in the sample an adaptive join's probers meet at ``z``:
    ``SAMPLE`` down to ``SAMPLE * SAMPLE_Z`` as z falls below ``SAMPLE_Z``, so learning
    costs a cycle no more than a small part of its work, and some at the least z.
    """
    return SAMPLE * max(min(z / SAMPLE_Z, 1.0), SAMPLE_Z)


def aged(old: Sequence[float], results: Mapping[int, int], trials: float,
         buckets: int) -> tuple[float, ...]:
    """The priorities after a cycle whose probers found ``results`` per bucket in the
    sample of partners, over ``trials`` (probers times the cycle's ``sample_share``;
    unchanged with none).
    """
    if trials <= 0:
        return tuple(old)
    new = [results.get(j, 0) / trials for j in range(buckets)]
    if len(old) != buckets:
        return tuple(new)
    return tuple((1 - AGING) * o + AGING * n for o, n in zip(old, new, strict=True))


def added(total: Sequence[float], more: Sequence[float]) -> tuple[float, ...]:
    """Per-bucket sums ``total`` with a cycle's ``more`` added (``total`` may be empty)."""
    if len(total) != len(more):
        return tuple(more)
    return tuple(a + b for a, b in zip(total, more, strict=True))


def met(work: Sequence[float], shares: Sequence[float]) -> tuple[int, int]:
    """The partners met and skipped under ``shares`` of each bucket's ``work``, in whole
    partners that add up to the work (rounded once, not each on its own).
    """
    done = sum(w * f for w, f in zip(work, shares, strict=True))
    met_ = round(done)
    return met_, round(sum(work)) - met_
