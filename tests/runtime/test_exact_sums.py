"""DOUBLE sums kept as two BIGINTs (``aggregate.exact_double_parts``): each value split
exactly as Spark's cast to DECIMAL(38, 10) rounds it, and window averages equal to those
computed in Python's ``decimal`` over the same values, whatever the cycles.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Context, Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkcq import Engine
from sparkcq.runtime.operators.aggregate import (
    exact_double_parts,
    exact_double_total,
    exact_double_value,
)
from sparkcq.testing import push_in_cycles

# near ties at the 11th decimal, values at the fast path's edge (4096), large and negative
# ones that take the cast, and the values of the benchmarks (three decimals)
EDGES = [0.12345678905, -0.12345678905, 2.00000000005, 4095.99999999995, 4096.0, -4095.5,
         0.1, -0.1, 1.25, 1e15, -3.5e17, 9.2e18, 0.0, -0.0, 1e-11, 5e-11, -5e-11, 99.999]


def decimal_of(x: float) -> Decimal:
    """What Spark's cast makes of ``x``: its decimal text rounded half up to 10 decimals."""
    return Decimal(repr(x)).quantize(Decimal("1E-10"), context=Context(prec=60),
                                     rounding=ROUND_HALF_UP)


def exact(whole: int, fraction: int) -> Decimal:
    return Context(prec=60).add(Decimal(whole), Decimal(fraction).scaleb(-10))


def parts_of(spark, values: list[float]) -> list[tuple[float, int, int]]:
    whole, fraction = exact_double_parts("x")
    frame = spark.createDataFrame([(v,) for v in values], "x DOUBLE")
    return [(r[0], r[1], r[2]) for r in frame.selectExpr("x", whole, fraction).collect()]


def test_parts_are_the_decimal_split_exactly(spark):
    values = EDGES + [i / 1000 for i in range(-2000, 2000, 7)]
    for x, whole, fraction in parts_of(spark, values):
        assert 0 <= fraction < 10**10, x
        assert exact(whole, fraction) == decimal_of(x), x


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(min_value=-5000, max_value=5000, allow_nan=False), min_size=1,
                max_size=40))
def test_parts_of_any_doubles(spark, values):
    for x, whole, fraction in parts_of(spark, values):
        assert exact(whole, fraction) == decimal_of(x), x


def test_total_is_the_decimal_sum(spark):
    whole, fraction = exact_double_parts("x")
    frame = spark.createDataFrame([(v,) for v in EDGES], "x DOUBLE")
    sums = frame.selectExpr(f"{whole} AS w", f"{fraction} AS f").selectExpr(
        f"{exact_double_total('sum(w)', 'sum(f)')} AS total").collect()[0][0]
    total = Decimal(0)
    for x in EDGES:
        total = Context(prec=60).add(total, decimal_of(x))
    assert sums == total


def doubles_of(spark, totals: list[tuple[int, int]]) -> list[float]:
    frame = spark.createDataFrame(totals, "w BIGINT, f BIGINT")
    return [r[0] for r in frame.selectExpr(exact_double_value("w", "f")).collect()]


# the long path's edges: |whole| at 450,359, units at 2^52, fractions summed past 10^10
TOTALS = [(0, 1), (1, 2500000000), (-1, 9000000000), (450358, 9999999999), (450359, 0),
          (-450358, 1), (-450359, 5), (450359, -9999999999), (0, 4503599627370495),
          (0, 4503599627370496), (3, 123456789012345), (-7, -98765432109876),
          (10**15, 5), (-(10**17), 3), (0, 3 * 10**18), (12, 0)]


def test_a_total_becomes_its_nearest_double(spark):
    """The DOUBLE of a total in long arithmetic is the one its DECIMAL gives: the exact
    value rounded to the nearest double (``float`` of a ``Decimal`` rounds so), on both
    sides of where the long path ends.
    """
    assert doubles_of(spark, TOTALS) == [float(exact(w, f)) for w, f in TOTALS]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(-10**6, 10**6), st.integers(-10**13, 10**13)),
                min_size=1, max_size=40))
def test_any_total_becomes_its_nearest_double(spark, totals):
    assert doubles_of(spark, totals) == [float(exact(w, f)) for w, f in totals]


EVENTS = [(0.1, 1), (0.2, 3), (0.12345678905, 4), (1e15, 6), (-1e15, 7), (2.00000000005, 8),
          (0.3, 12), (-4095.5, 14)]


@pytest.mark.parametrize("cuts", [[20], [5, 9, 20], [2, 4, 6, 8, 13, 20]],
                         ids=["one-cycle", "three-cycles", "six-cycles"])
def test_window_sums_and_averages_are_exact(engine: Engine, cuts: list[int]):
    """sum and avg over ``[RANGE 10 SLIDE 5]``, each evaluated in Python's decimal from the
    events in the window at each evaluation instant.
    """
    engine.execute("CREATE STREAM s (v DOUBLE, t BIGINT) WITH (event_time='t')")
    engine.execute("CREATE QUERY q AS RSTREAM SELECT count(*) AS c, sum(v) AS s, avg(v) AS a "
                   "FROM s [RANGE 10 SLIDE 5]")
    push_in_cycles(engine, "s", [{"v": v, "t": t} for v, t in EVENTS], cuts)
    out = engine.results("q").sort_values("_ts")
    expected = []
    for at in (5, 10, 15, 20):
        live = [decimal_of(v) for v, t in EVENTS if at - 10 < t <= at]
        total = sum(live, Decimal(0))
        expected.append((len(live), float(total), float(total) / len(live)))
    got = [(int(r.c), r.s, r.a) for r in out.itertuples()]
    assert got == expected
