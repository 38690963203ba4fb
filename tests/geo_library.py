"""A user's function library for the StreamAPAS tests: ``CREATE LIBRARY geo USING
'geo_library'`` makes ``geo.dist`` and ``geo.label`` callable, the aggregate
``geo.spread`` and the table function ``geo.track``.
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


class Track:
    """Per car, how far it travelled along x (times ``scale``) and the points seen, after
    each chunk: a table function class (``process``), its columns in ``returns``.
    """

    returns = {"travelled": float, "points": int}  # noqa: RUF012 - the library's declaration

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.last: float | None = None
        self.travelled = 0.0
        self.points = 0

    def process(self, rows) -> None:  # noqa: ANN001 - a pandas DataFrame
        for position in rows["position"]:
            x = position["x"]
            if self.last is not None:
                self.travelled += abs(x - self.last) * self.scale
            self.last = x
            self.points += 1

    def end_chunk(self) -> dict:
        return {"travelled": self.travelled, "points": self.points}
