"""The control side of a shedding window join (DESIGN 4.4): which part of the windows a
cycle's probing elements meet, decided on the driver from small tallies.

Each side's window is cut into basic sub-windows of ``slice_length`` (its longest element
over ``basic_windows``), aligned to multiples of that length. An element of the other side
that starts at ``s`` (the *prober*: the later start of a pair finds it) meets its partners
one lag bucket at a time: bucket ``j`` is the partners' sub-window ``floor(s / b) - j``,
bucket 0 the newest; a partner is at most ``basic_windows`` buckets back.

A cycle gives every lag bucket a fraction: 1 (all its partners), 0 (none) or, for the one
bucket where the share ``z`` runs out, a part of its partners chosen by a hash of each
partner (the same partners for every prober of the cycle). The buckets are taken in an
order (``adaptive``: by priority, the results a bucket yielded per prober; ``random``: a
shuffle seeded by the cycle's number), each bucket weighing the work it cost in the last
cycle it was measured, until the taken work is ``z`` of the whole.

An adaptive join learns the priorities from a sample: the probers whose hash falls below
``sample_rate(z)`` meet every bucket (their pairs are emitted too), and the results they
find per bucket, per sampled prober, are the bucket's new priority, aged into the old one
(``AGING``) so the order follows a correlation that shifts. The other probers' share is
lowered so that sampled and unsampled probers together still process ``z`` of the work.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparkcq.plan.options import ShedMode

#: z grows back by this factor per cycle while the join keeps within its budget
BOOST = 1.25
#: a cycle this far under its budget counts as keeping up (z may grow)
HEADROOM = 0.8
#: z never goes below this: a join always meets some of its windows
LEAST_Z = 0.01
#: a change of z by more than this part of it is written to the query's log
NOTABLE = 0.1

#: the share of probers an adaptive join samples (they meet the whole window)
SAMPLE = 0.05
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
    priorities: tuple[float, ...] = ()  # results per sampled prober, per bucket (aged)
    processed: int = 0  # partners met, all cycles
    shed: int = 0  # partners skipped, all cycles
    # the prober side's live elements by absolute sub-window (as partners of the other
    # direction), counted as they arrive: no cycle scans the windows to count them
    elements: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class CycleShedding:
    """What one cycle of a shedding join does: its z, the share of probers it samples
    (they meet every bucket) and, per prober side, the share of each bucket the others meet.
    """

    z: float
    rate: float
    shares: tuple[tuple[float, ...], tuple[float, ...]]

    def effective(self, i: int) -> tuple[float, ...]:
        """The share of each bucket side ``i``'s probers meet, the sampled ones included."""
        return tuple(self.rate + (1 - self.rate) * f for f in self.shares[i])


def next_z(z: float, seconds: float, budget: float, rows: int | None = None,
           waiting: int | None = None) -> tuple[float, str]:
    """The z of the next cycle after one that took ``seconds`` against ``budget``, and why.

    The join processed ``budget / seconds`` of the last cycle's ``rows`` in the time it had;
    the next cycle receives the ``waiting`` rows (when the driver knows them). When what
    it can process falls behind what it receives, z falls by that ratio: a cycle is
    expected to take ``seconds * waiting / rows`` at the same z, and a burst of input lowers
    z before the cycle that would overrun. One expected well under its budget
    (``HEADROOM``) lets z grow back by ``BOOST``, up to 1.
    """
    growth = waiting / rows if rows and waiting is not None else 1.0
    expected = seconds * growth
    if expected > budget:
        new = max(LEAST_Z, z * budget / expected)
        if growth == 1.0:
            return new, (f"the cycle took {seconds:.2f} s, over the budget of {budget:g} s: "
                         f"{budget / seconds:.0%} of its input was processed in time")
        return new, (f"the cycle took {seconds:.2f} s for {rows:,} rows and {waiting:,} "
                     f"are waiting: about {expected:.2f} s at this z, over the budget of "
                     f"{budget:g} s")
    if expected < HEADROOM * budget and z < 1:
        return min(1.0, z * BOOST), (f"the cycle took {seconds:.2f} s, within the budget of "
                                      f"{budget:g} s")
    return z, ""


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
    until they hold ``z`` of the ``work``, then a part of the next one. Unmeasured work
    (none yet) counts every bucket alike.
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


def sample_rate(mode: ShedMode, z: float) -> float:
    """The share of probers sampled (meeting every bucket): adaptive joins only, and never
    more than ``z``.
    """
    return min(SAMPLE, z) if mode is ShedMode.ADAPTIVE else 0.0


def unsampled_share(z: float, rate: float) -> float:
    """The share of the work the unsampled probers meet so that, with the sampled ones
    meeting all of it, the probers together meet ``z``.
    """
    return 1.0 if z >= 1 else max(0.0, (z - rate) / (1 - rate))


def aged(old: Sequence[float], results: Mapping[int, int], sampled: int,
         buckets: int) -> tuple[float, ...]:
    """The priorities after a cycle whose ``sampled`` probers found ``results`` per bucket
    (unchanged without a sample).
    """
    if sampled <= 0:
        return tuple(old)
    new = [results.get(j, 0) / sampled for j in range(buckets)]
    if len(old) != buckets:
        return tuple(new)
    return tuple((1 - AGING) * o + AGING * n for o, n in zip(old, new, strict=True))


def met(work: Sequence[float], shares: Sequence[float]) -> tuple[int, int]:
    """The partners met and skipped under ``shares`` of each bucket's ``work``, in whole
    partners that add up to the work (rounded once, not each on its own).
    """
    done = sum(w * f for w, f in zip(work, shares, strict=True))
    met_ = round(done)
    return met_, round(sum(work)) - met_
