"""User aggregates that ship with sparkcq, written as a user would write theirs.

Each follows the protocol of ``sparkcq.aggregates.user``: ``plus`` when an element enters
the group's relation, ``minus`` when it leaves, ``value`` for the aggregate of what is in it
now. They keep a multiset of live values, so an element leaving is exact; ``value`` is
deterministic (equal multisets give equal values), which keeps results independent of how
input is cut into cycles. Allowed to load by name in every engine::

    CREATE AGGREGATE median(x DOUBLE) RETURNS DOUBLE
        USING 'sparkcq.aggregates.library:Median';
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from typing import Any


class SortedValues:
    """A sorted list of live values: O(log n) to find, O(n) to insert or remove; a base for
    an aggregate of the values' order (``Median``), with ``value()`` left to define.
    """

    def __init__(self) -> None:
        self.values: list[Any] = []

    def plus(self, x: Any) -> None:
        insort(self.values, x)

    def minus(self, x: Any) -> None:
        i = bisect_left(self.values, x)
        if i == len(self.values) or self.values[i] != x:
            msg = f"{type(self).__name__}.minus({x!r}): no such live value"
            raise ValueError(msg)
        del self.values[i]

    def merge(self, other: SortedValues) -> None:
        self.values = sorted(self.values + other.values)


class Median(SortedValues):
    """The median: the middle value, or the mean of the two middle values."""

    def value(self) -> float | None:
        n = len(self.values)
        if n == 0:
            return None
        mid = n // 2
        if n % 2:
            return float(self.values[mid])
        return (self.values[mid - 1] + self.values[mid]) / 2


class Percentile(SortedValues):
    """The p-th percentile (0 <= p <= 1) with linear interpolation, as numpy's default.

    Called as ``percentile(x, p)``; ``p`` must be the same for every element of a group.
    """

    def __init__(self) -> None:
        super().__init__()
        self.p: float | None = None

    def plus(self, x: Any, p: float = 0.5) -> None:  # type: ignore[override]
        self._check(p)
        super().plus(x)

    def minus(self, x: Any, p: float = 0.5) -> None:  # type: ignore[override]
        self._check(p)
        super().minus(x)

    def _check(self, p: float) -> None:
        if not 0 <= p <= 1:
            msg = f"percentile: p must be between 0 and 1, got {p!r}"
            raise ValueError(msg)
        if self.p is None:
            self.p = p
        elif p != self.p:
            msg = f"percentile: p changed within a group ({self.p!r}, then {p!r})"
            raise ValueError(msg)

    def value(self) -> float | None:
        n = len(self.values)
        if n == 0 or self.p is None:
            return None
        rank = self.p * (n - 1)
        lo = int(rank)
        hi = min(lo + 1, n - 1)
        return float(self.values[lo] + (self.values[hi] - self.values[lo]) * (rank - lo))


class ValueCounts:
    """Live values with their multiplicities: O(1) to add or remove one; a base for an
    aggregate of how often each value occurs (``Mode``), with ``value()`` left to define.
    """

    def __init__(self) -> None:
        self.counts: Counter[Any] = Counter()

    def plus(self, x: Any) -> None:
        self.counts[x] += 1

    def minus(self, x: Any) -> None:
        self.counts[x] -= 1
        if self.counts[x] <= 0:
            del self.counts[x]

    def merge(self, other: ValueCounts) -> None:
        self.counts.update(other.counts)


class Mode(ValueCounts):
    """The most frequent value; ties go to the smallest, so the value is deterministic."""

    def value(self) -> Any:
        if not self.counts:
            return None
        top = max(self.counts.values())
        return min(x for x, n in self.counts.items() if n == top)


class CountDistinct(ValueCounts):
    """The number of distinct live values, exactly (no sketch)."""

    def value(self) -> int:
        return len(self.counts)
