"""A user's function library for the StreamAPAS tests: ``CREATE LIBRARY geo USING
'geo_library'`` makes ``geo.dist`` and ``geo.label`` callable.
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
