"""What Spark's analyzer accepts but the first row would fail on, refused at CREATE.

Spark types ``amt > 'abc'`` (the string cast to the number's type), ``CAST('x' AS INT)``
and ``sum(page)`` of a STRING column without complaint; under ANSI mode each fails when
the query meets its first row, in a cycle, long after the user pressed enter. This module
finds them in the user's own tree, so the error underlines the literal or the argument at
fault when the query is created.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlglot.expressions as exp
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    NullType,
    NumericType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from sparkcq.model.aggregate_functions import adds

#: comparisons whose string side Spark casts to the other side's type
_COMPARISONS = (exp.EQ, exp.NEQ, exp.NullSafeEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
#: types a string literal is cast to, and may fail to become
_CAST_TARGETS = (NumericType, BooleanType, DateType, TimestampType, TimestampNTZType)

#: the Spark type of an expression of the user's tree (its columns resolved by the caller)
TypeOf = Callable[[exp.Expr], DataType]
#: whether the literal's text casts to the type (Spark's own cast, evaluated)
Casts = Callable[[str, DataType], bool]


def literal_problem(tree: exp.Expr, type_of: TypeOf,
                    casts: Casts) -> tuple[exp.Expr, str] | None:
    """The first string literal in ``tree`` that Spark would cast to a type it cannot be,
    and why: a side of a comparison with a number, boolean, date or timestamp, or the
    operand of a ``CAST``; None when there is none.
    """
    for node in tree.walk():
        if isinstance(node, _COMPARISONS):
            for lit, other in ((node.left, node.right), (node.right, node.left)):
                if not _string_literal(lit) or _string_literal(other):
                    continue
                target = type_of(other)
                if isinstance(target, _CAST_TARGETS) and not casts(lit.this, target):
                    shown = other.sql(dialect="spark")
                    return lit, (f"{node.sql(dialect='spark')} compares {shown}, a "
                                 f"{_name(target)}, with {lit.sql(dialect='spark')}, which is "
                                 f"not a {_name(target)}; write a {_name(target)} value")
        elif isinstance(node, exp.Cast) and _string_literal(node.this):
            target = type_of(node)
            if isinstance(target, _CAST_TARGETS) and not casts(node.this.this, target):
                return node.this, (f"{node.this.sql(dialect='spark')} cannot be a "
                                   f"{_name(target)}: {node.sql(dialect='spark')} would fail "
                                   "on every row")
    return None


def aggregate_argument_problem(func: str, arg: exp.Expr, dtype: DataType) -> str | None:
    """Why ``func(arg)`` of an argument of type ``dtype`` cannot be computed, or None."""
    if adds(func) and not isinstance(dtype, NumericType | NullType):
        return (f"{func}({arg.sql(dialect='spark')}) adds numbers, and "
                f"{arg.sql(dialect='spark')} is {_name(dtype)}; cast it (CAST(x AS DOUBLE)) "
                "if its values are numbers, or use count, min or max")
    return None


def _string_literal(node: exp.Expr) -> bool:
    return isinstance(node, exp.Literal) and node.is_string


def _name(dtype: DataType) -> str:
    if isinstance(dtype, StringType):
        return "STRING"
    return dtype.simpleString().upper()
