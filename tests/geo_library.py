"""A user's function library for the StreamAPAS tests: ``CREATE LIBRARY geo USING
'geo_library'`` makes ``geo.dist`` and ``geo.label`` callable, and the aggregate
``geo.spread``.
"""

import math


def dist(x: float, y: float) -> float:
    """The distance of (x, y) from the origin."""
    return math.hypot(x, y)


def label(name: str, n: int) -> str:
    """``name#n``."""
    return f"{name}#{n}"


def _helper() -> None:
    """Not public: not part of the library."""


class Spread:
    """max - min of the values in the group: an aggregate class (plus, minus, value)."""

    def __init__(self) -> None:
        self.values: dict[float, int] = {}

    def plus(self, x: float) -> None:
        self.values[x] = self.values.get(x, 0) + 1

    def minus(self, x: float) -> None:
        self.values[x] -= 1
        if not self.values[x]:
            del self.values[x]

    def value(self) -> float:
        return max(self.values) - min(self.values)
