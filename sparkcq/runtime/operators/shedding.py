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
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparkcq.plan.options import ShedMode


def slice_length(span: int, basic_windows: int) -> int:
    """The length of one basic sub-window of a window whose elements last up to ``span``."""
    return max(1, -(-span // basic_windows))


@dataclass(frozen=True)
class Direction:
    """What one direction of a join (one side's elements probing the other's) learnt and
    did, on the driver; per lag bucket, newest first.
    """

    work: tuple[float, ...] = ()  # partners per bucket met by the last measured probers
    processed: int = 0  # partners met, all cycles
    shed: int = 0  # partners skipped, all cycles


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


def met(work: Sequence[float], shares: Sequence[float]) -> tuple[int, int]:
    """The partners met and skipped under ``shares`` of each bucket's ``work``."""
    done = sum(w * f for w, f in zip(work, shares, strict=True))
    return round(done), round(sum(work) - done)
