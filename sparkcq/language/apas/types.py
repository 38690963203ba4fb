"""The type system of the StreamAPAS language: five types, a cast tree and
an operator table, each cell of which is documented in docs/apas.md.

A value converts implicitly along one edge of the cast tree, never two (casts do not
chain)::

    INTEGER -> DOUBLE, STRING          BOOLEAN -> INTEGER, DOUBLE, STRING
    DOUBLE  -> STRING                  DATETIME -> DOUBLE (ms since the epoch), STRING

An operator applies to the types its row of ``OPERATORS`` lists. With operands of two types
it applies after one side is cast to the other's type, or both to a type each casts to, in
the order of ``_COMMON``; ``2 + 0.5`` is DOUBLE, ``true < false`` is refused, ``true < 2``
compares 1 with 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sparkcq.language.apas.syntax import Operator


class ApasType(Enum):
    """A type of the language; TREE is an attribute tree (a Spark struct)."""

    INTEGER = "INTEGER"
    DOUBLE = "DOUBLE"
    BOOLEAN = "BOOLEAN"
    STRING = "STRING"
    DATETIME = "DATETIME"
    TREE = "TREE"


I, D, B, S, T = (ApasType.INTEGER, ApasType.DOUBLE, ApasType.BOOLEAN, ApasType.STRING,  # noqa: E741
                 ApasType.DATETIME)

_BOOL_TO_STRING = "CASE WHEN {0} THEN 'True' WHEN NOT {0} THEN 'False' END"

#: the implicit casts: (from, to) -> Spark SQL template over the value's SQL (each an atom:
#: it needs no parentheses around it, nor around what it is given)
CASTS: dict[tuple[ApasType, ApasType], str] = {
    (I, D): "CAST({0} AS DOUBLE)",
    (I, S): "CAST({0} AS STRING)",
    (B, I): "CAST({0} AS BIGINT)",
    (B, D): "CAST({0} AS DOUBLE)",
    (B, S): _BOOL_TO_STRING,
    (D, S): "CAST({0} AS STRING)",
    (T, D): "(CAST(unix_micros(CAST({0} AS TIMESTAMP)) AS DOUBLE) / 1000.0)",
    (T, S): "CAST({0} AS STRING)",
}

#: each operator's cells: operand type -> result type (absent: refused)
OPERATORS: dict[Operator, dict[ApasType, ApasType]] = {
    Operator.EQ: {I: B, D: B, B: B, S: B, T: B},
    Operator.NE: {I: B, D: B, B: B, S: B, T: B},
    Operator.LT: {I: B, D: B, S: B, T: B},
    Operator.LE: {I: B, D: B, S: B, T: B},
    Operator.GT: {I: B, D: B, S: B, T: B},
    Operator.GE: {I: B, D: B, S: B, T: B},
    Operator.ADD: {I: I, D: D, S: S},
    Operator.SUB: {I: I, D: D},
    Operator.MUL: {I: I, D: D},
    Operator.DIV: {I: D, D: D},
    Operator.MOD: {I: I, D: D},
    Operator.AND: {B: B, I: I},
    Operator.OR: {B: B, I: I},
    Operator.XOR: {B: B, I: I},
    Operator.NOT: {B: B, I: I},
    Operator.NEG: {I: I, D: D},
}

# where neither operand casts to the other: the types both cast to, most preferred first
_COMMON = (D, S)

#: how tightly Spark SQL binds each operator (a higher number binds tighter); ATOM: a
#: literal, a column, a call
ATOM = 100
_INFIX: dict[tuple[Operator, ApasType | None], tuple[str, int]] = {
    (Operator.OR, B): ("OR", 10), (Operator.AND, B): ("AND", 20),
    (Operator.EQ, None): ("=", 40), (Operator.NE, None): ("<>", 40),
    (Operator.LT, None): ("<", 40), (Operator.LE, None): ("<=", 40),
    (Operator.GT, None): (">", 40), (Operator.GE, None): (">=", 40),
    (Operator.XOR, B): ("<>", 40),
    (Operator.OR, I): ("|", 45), (Operator.XOR, I): ("^", 46), (Operator.AND, I): ("&", 47),
    (Operator.ADD, None): ("+", 50), (Operator.SUB, None): ("-", 50),
    (Operator.MUL, None): ("*", 60), (Operator.DIV, None): ("/", 60),
    (Operator.MOD, None): ("%", 60),
}
_PREFIX: dict[tuple[Operator, ApasType], tuple[str, int]] = {
    (Operator.NOT, B): ("NOT ", 30), (Operator.NOT, I): ("~", 70),
    (Operator.NEG, I): ("-", 70), (Operator.NEG, D): ("-", 70),
}


def apas_type(dtype: DataType) -> ApasType | None:
    """The language's type of a Spark column type, or None if it has none."""
    if isinstance(dtype, ByteType | ShortType | IntegerType | LongType):
        return I
    if isinstance(dtype, FloatType | DoubleType | DecimalType):
        return D
    if isinstance(dtype, BooleanType):
        return B
    if isinstance(dtype, StringType):
        return S
    if isinstance(dtype, TimestampType | TimestampNTZType):
        return T
    if isinstance(dtype, StructType):
        return ApasType.TREE
    return None


def cast(sql: str, source: ApasType, target: ApasType) -> str | None:
    """``sql`` (of type ``source``) as a ``target``, or None if no implicit cast exists."""
    if source is target:
        return sql
    template = CASTS.get((source, target))
    return None if template is None else template.format(sql)


@dataclass(frozen=True)
class Typed:
    """An expression's Spark SQL, its type, and how tightly its SQL binds."""

    sql: str
    type: ApasType
    binds: int = ATOM

    def within(self, binds: int) -> str:
        """Its SQL as an operand of an operator that binds ``binds`` tightly."""
        return self.sql if self.binds >= binds else f"({self.sql})"


class OperatorTypeError(Exception):
    """No cell of the operator table takes these operands (the compiler adds the place)."""

    def __init__(self, op: Operator, operands: tuple[ApasType, ...]):
        self.op = op
        self.operands = operands
        allowed = ", ".join(t.value for t in OPERATORS[op])
        types = " and ".join(t.value for t in operands)
        super().__init__(f"type error: operator {op.shown!r} does not apply to {types}; "
                         f"it applies to {allowed}")


def apply(op: Operator, *args: Typed) -> Typed:
    """``op`` over ``args`` by the operator table, with the implicit casts it needs."""
    cells = OPERATORS[op]
    if len(args) == 1:
        (a,) = args
        if a.type not in cells:
            raise OperatorTypeError(op, (a.type,))
        word, binds = _PREFIX[(op, a.type)]
        return Typed(f"{word}{a.within(binds)}", cells[a.type], binds)
    left, right = args
    for target in _targets(left.type, right.type):
        if target not in cells:
            continue
        a, b = _operand(left, target, right.type), _operand(right, target, left.type)
        if op is Operator.ADD and target is S:
            return Typed(f"concat({a.sql}, {b.sql})", S)
        word, binds = _INFIX.get((op, target)) or _INFIX[(op, None)]
        return Typed(f"{a.within(binds)} {word} {b.within(binds + 1)}", cells[target], binds)
    raise OperatorTypeError(op, (left.type, right.type))


def _targets(a: ApasType, b: ApasType) -> list[ApasType]:
    """The types two operands may meet at: their own if equal, else one side's type if the
    other casts to it, else a type both cast to.
    """
    if a is b:
        return [a]
    out = [t for t in (b, a) if (a, t) in CASTS or (b, t) in CASTS]
    out += [t for t in _COMMON if (a, t) in CASTS and (b, t) in CASTS and t not in out]
    return out


def _operand(x: Typed, target: ApasType, other: ApasType) -> Typed:
    """``x`` as a ``target``; INTEGER meeting DOUBLE is left to Spark, which widens it the
    same way, so the SQL equals what a user would write.
    """
    if x.type is target or (x.type is I and target is D and other is D):
        return x
    converted = cast(x.sql, x.type, target)
    assert converted is not None
    return Typed(converted, target)
