"""Every cell of the StreamAPAS cast and operator tables (docs/apas.md), as the spec writes
them (``apas_tables.py``): which operand types an operator takes and what it gives, and the
refusal text otherwise. No JVM: ``tests/runtime/test_apas_types_on_spark.py`` computes each
allowed cell on Spark.
"""

from __future__ import annotations

import itertools

import pytest
from apas_tables import (
    BINARY_CASES,
    CAST_TREE,
    GRIDS,
    TYPES,
    UNARY,
    cells,
)

from sparkcq.language.apas.syntax import Operator
from sparkcq.language.apas.types import (
    CASTS,
    OPERATORS,
    ApasType,
    OperatorTypeError,
    Typed,
    apply,
    cast,
)


@pytest.mark.parametrize(("source", "target"), list(itertools.product(TYPES.values(),
                                                                       repeat=2)),
                         ids=lambda t: t.value)
def test_cast_table(source, target):
    converted = cast("x", source, target)
    if source is target:
        assert converted == "x"
    elif (source, target) in CAST_TREE:
        assert converted is not None
    else:
        assert converted is None
    assert set(CASTS) == CAST_TREE


@pytest.mark.parametrize(("op", "left", "right", "want"), BINARY_CASES,
                         ids=[f"{op.shown} {a.value} {b.value}" for op, a, b, _ in BINARY_CASES])
def test_operator_table(op, left, right, want):
    if want is None:
        with pytest.raises(OperatorTypeError) as err:
            apply(op, Typed("a", left), Typed("b", right))
        assert str(err.value) == (f"type error: operator {op.shown!r} does not apply to "
                                  f"{left.value} and {right.value}; it applies to "
                                  f"{', '.join(x.value for x in _own_types(op))}")
    else:
        assert apply(op, Typed("a", left), Typed("b", right)).type is want


def _own_types(op: Operator) -> list[ApasType]:
    """The types an operator applies to without a cast (the grid's diagonal), in the order
    the refusal lists them.
    """
    own = cells(GRIDS[op])
    listed = [t for t in TYPES.values() if own[(t, t)] is not None]
    assert set(OPERATORS[op]) == set(listed)
    return list(OPERATORS[op])


@pytest.mark.parametrize(("op", "operand"), list(itertools.product(UNARY, TYPES.values())),
                         ids=lambda x: x.value if isinstance(x, ApasType) else x.name)
def test_unary_operator_table(op, operand):
    want = UNARY[op].get(operand)
    if want is None:
        with pytest.raises(OperatorTypeError) as err:
            apply(op, Typed("a", operand))
        assert f"operator {op.shown!r} does not apply to {operand.value}; it applies to" in str(
            err.value)
    else:
        assert apply(op, Typed("a", operand)).type is want
