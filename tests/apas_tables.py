"""The StreamAPAS cast and operator tables (docs/apas.md) as the spec writes them, by hand,
and the values each cell gives: shared by the tests of the tables and of their SQL on Spark.
"""

from __future__ import annotations

import datetime as dt
import math

from sparkcq.language.apas.syntax import Operator
from sparkcq.language.apas.types import ApasType

I, D, B, S, T = (ApasType.INTEGER, ApasType.DOUBLE, ApasType.BOOLEAN, ApasType.STRING,  # noqa: E741
                 ApasType.DATETIME)
TYPES = {"I": I, "D": D, "B": B, "S": S, "T": T}

# the cast tree: every implicit cast there is (one edge; casts never chain)
CAST_TREE = {(I, D), (I, S), (B, I), (B, D), (B, S), (D, S), (T, D), (T, S)}

# where operands of two types meet, in order of preference: one side's type when the other
# casts to it, else a type both cast to
MEET = {
    (I, D): [D, S], (I, B): [I, D, S], (I, S): [S], (I, T): [D, S], (D, B): [D, S],
    (D, S): [S], (D, T): [D, S], (B, S): [S], (B, T): [D, S], (S, T): [S],
}

_EQUAL = """
    I D B S T
  I B B B B B
  D B B B B B
  B B B B B B
  S B B B B B
  T B B B B B"""
_ORDER = """
    I D B S T
  I B B B B B
  D B B B B B
  B B B - B B
  S B B B B B
  T B B B B B"""
_ARITHMETIC = """
    I D B S T
  I I D I - D
  D D D D - D
  B I D - - D
  S - - - - -
  T D D D - -"""
_LOGIC = """
    I D B S T
  I I - I - -
  D - - - - -
  B I - B - -
  S - - - - -
  T - - - - -"""
GRIDS = {
    Operator.EQ: _EQUAL, Operator.NE: _EQUAL,
    Operator.LT: _ORDER, Operator.LE: _ORDER, Operator.GT: _ORDER, Operator.GE: _ORDER,
    Operator.ADD: """
    I D B S T
  I I D I S D
  D D D D S D
  B I D - S D
  S S S S S S
  T D D D S -""",
    Operator.SUB: _ARITHMETIC, Operator.MUL: _ARITHMETIC, Operator.MOD: _ARITHMETIC,
    Operator.DIV: """
    I D B S T
  I D D D - D
  D D D D - D
  B D D - - D
  S - - - - -
  T D D D - -""",
    Operator.AND: _LOGIC, Operator.OR: _LOGIC, Operator.XOR: _LOGIC,
}
UNARY = {Operator.NOT: {I: I, B: B}, Operator.NEG: {I: I, D: D}}


def cells(grid: str) -> dict[tuple[ApasType, ApasType], ApasType | None]:
    rows = [line.split() for line in grid.strip().splitlines()]
    head = rows[0]
    return {(TYPES[row[0]], TYPES[col]): (TYPES[v] if v != "-" else None)
            for row in rows[1:] for col, v in zip(head, row[1:], strict=True)}


BINARY_CASES = [(op, left, right, want) for op, grid in GRIDS.items()
                for (left, right), want in cells(grid).items()]


def meet(left: ApasType, right: ApasType, op: Operator) -> ApasType:
    """The type two operands are compared or combined at."""
    if left is right:
        return left
    options = MEET.get((left, right)) or MEET[(right, left)]
    allowed = cells(GRIDS[op])
    return next(t for t in options if allowed[(t, t)] is not None)



LEFT = {I: 7, D: 2.5, B: False, S: "x", T: dt.datetime(2026, 1, 1, 0, 0, 1)}
RIGHT = {I: 3, D: 0.5, B: True, S: "yz", T: dt.datetime(2026, 1, 2)}
_EPOCH = dt.datetime(1970, 1, 1)


def convert(value: object, source: ApasType, target: ApasType) -> object:
    """The cast tree's conversions, by their definitions (docs/apas.md)."""
    if source is target:
        return value
    if target is S:
        if source is B:
            return "True" if value else "False"
        if source is T:
            return value.strftime("%Y-%m-%d %H:%M:%S")  # type: ignore[attr-defined]
        return str(value)
    if source is T and target is D:
        return (value - _EPOCH) / dt.timedelta(milliseconds=1)  # type: ignore[operator]
    if target is D:
        return float(value)  # type: ignore[arg-type]
    if source is B and target is I:
        return int(value)  # type: ignore[call-overload]
    raise AssertionError((source, target))


def compute(op: Operator, a: object, b: object, at: ApasType) -> object:
    """What an operator gives on two values of type ``at``."""
    return {
        Operator.EQ: lambda: a == b, Operator.NE: lambda: a != b,
        Operator.LT: lambda: a < b, Operator.LE: lambda: a <= b,  # type: ignore[operator]
        Operator.GT: lambda: a > b, Operator.GE: lambda: a >= b,  # type: ignore[operator]
        Operator.ADD: lambda: a + b,  # type: ignore[operator]
        Operator.SUB: lambda: a - b, Operator.MUL: lambda: a * b,  # type: ignore[operator]
        Operator.DIV: lambda: a / b,  # type: ignore[operator]
        # the remainder takes the dividend's sign, as in Java and SQL (Python's % the divisor's)
        Operator.MOD: lambda: (int if at is I else float)(math.fmod(a, b)),  # type: ignore[arg-type]
        Operator.AND: lambda: (a and b) if at is B else a & b,  # type: ignore[operator]
        Operator.OR: lambda: (a or b) if at is B else a | b,  # type: ignore[operator]
        Operator.XOR: lambda: (a != b) if at is B else a ^ b,  # type: ignore[operator]
    }[op]()
