"""User aggregates for the tests, written as a user would: plain classes with plus, minus
and value. ``USum``/``UAvg``/``UMin``/``UMax`` redo the built-ins, so the two must agree.
"""

from __future__ import annotations

from collections import Counter


class USum:
    """sum(x) of the live non-NULL values; NULL when there are none."""

    def __init__(self) -> None:
        self.total = 0
        self.n = 0

    def plus(self, x: int) -> None:
        self.total += x
        self.n += 1

    def minus(self, x: int) -> None:
        self.total -= x
        self.n -= 1

    def value(self) -> int | None:
        return self.total if self.n else None


class UAvg(USum):
    """avg(x): exact integer sum over the count, rounded once."""

    def value(self) -> float | None:  # type: ignore[override]
        return self.total / self.n if self.n else None


class _Values:
    def __init__(self) -> None:
        self.values: Counter[int] = Counter()

    def plus(self, x: int) -> None:
        self.values[x] += 1

    def minus(self, x: int) -> None:
        self.values[x] -= 1
        if not self.values[x]:
            del self.values[x]


class UMin(_Values):
    """min(x), correct when the minimum leaves."""

    def value(self) -> int | None:
        return min(self.values) if self.values else None


class UMax(_Values):
    """max(x), correct when the maximum leaves."""

    def value(self) -> int | None:
        return max(self.values) if self.values else None


class Fragile(USum):
    """A sum that raises on the value 7, as user code does."""

    def plus(self, x: int) -> None:
        if x == 7:
            msg = f"cannot take {x}"
            raise ValueError(msg)
        super().plus(x)


class Wordy(USum):
    """Declared to return a number, returns text."""

    def value(self) -> str:  # type: ignore[override]
        return f"total {self.total}"


class Lifecycle:
    """Counts its own lifecycle calls, so a test can see which instance saw what."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def plus(self, x: int) -> None:
        self.calls.append(f"+{x}")

    def minus(self, x: int) -> None:
        self.calls.append(f"-{x}")

    def value(self) -> str:
        return " ".join(self.calls)
