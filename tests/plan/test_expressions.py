"""Expressions equal by meaning: the spellings that must share a plan node, and those that
must not (no JVM).
"""

from __future__ import annotations

import pytest
from pyspark.sql.types import LongType

from sparkcq.errors import PlanError
from sparkcq.plan.expressions import Expr, conjuncts

SAME = [
    ("a = b", "b = a"),
    ("a = b AND c > 1", "c > 1 AND a = b"),
    ("a = b AND c > 1 AND d", "d AND (c > 1 AND a = b)"),
    ("(a OR b) AND c", "c AND (b OR a)"),
    ("x > 1", "1 < x"),
    ("x >= y", "y <= x"),
    ("x + 1", "1 + x"),
    ("x * y + z", "z + y * x"),
    ("a <=> b", "b <=> a"),
    ("a <> b", "b != a"),
    ("`k` = 'x'", "K = 'x'"),
    ("Upper(s)", "upper(s)"),
    ("myFunc(x)", "MYFUNC(x)"),
    ("x = 007", "x = 7"),
    ("'abc' = s", "s = \"abc\""),
]

DIFFERENT = [
    ("a OR b AND c", "(a OR b) AND c"),
    ("x - y", "y - x"),
    ("x / y", "x / y / 1"),
    ("x > 1", "x < 1"),
    ("x >= 1", "x > 1"),
    ("x = 'A'", "x = 'a'"),
    ("x = 1", "x = 1.0"),
    ("x = 1.5", "x = 1.50"),
    ("concat(a, b)", "concat(b, a)"),
    ("(x + y) + z", "x + (y + z)"),
    ("a AND b", "a OR b"),
]


@pytest.mark.parametrize(("one", "other"), SAME, ids=[f"{a} | {b}" for a, b in SAME])
def test_spellings_of_one_meaning_are_equal(one: str, other: str) -> None:
    a, b = Expr.parse(one), Expr.parse(other)
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1


@pytest.mark.parametrize(("one", "other"), DIFFERENT,
                         ids=[f"{a} | {b}" for a, b in DIFFERENT])
def test_different_meanings_are_not_equal(one: str, other: str) -> None:
    assert Expr.parse(one) != Expr.parse(other)


def test_spark_runs_the_spelling_it_was_given() -> None:
    e = Expr.parse("1 < `x` AND b = a", LongType())
    assert e.sql == "1 < `x` AND b = a"
    assert str(e) == "1 < `x` AND b = a"
    assert e.dtype == LongType()


def test_conjuncts_go_through_parentheses() -> None:
    e = Expr.parse("a AND ((b AND c) AND (d OR e))")
    assert [c.sql(dialect="spark") for c in conjuncts(e.tree)] == ["a", "b", "c", "(d OR e)"]


def test_text_that_is_no_expression_is_refused() -> None:
    with pytest.raises(PlanError, match="not a Spark SQL expression: 'a ='"):
        Expr.parse("a =")


def test_the_repr_names_the_meaning_not_the_spelling() -> None:
    assert repr(Expr.parse("b = a AND x > 1")) == repr(Expr.parse("1 < x AND a = b"))
