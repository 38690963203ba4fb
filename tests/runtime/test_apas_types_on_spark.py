"""Each allowed cell of the StreamAPAS cast and operator tables computes, on Spark, the value
the table says (``apas_tables.py``).
"""

from __future__ import annotations

import datetime as dt

from apas_tables import (
    BINARY_CASES,
    CAST_TREE,
    LEFT,
    RIGHT,
    TYPES,
    UNARY,
    B,
    D,
    I,
    S,
    T,
    compute,
    convert,
    meet,
)

from sparkcq.language.apas.syntax import Operator
from sparkcq.language.apas.types import Typed, apply, cast


def test_every_allowed_cell_computes_its_value_on_spark(spark):
    from pyspark.sql.types import (
        BooleanType,
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )
    spark_types = {I: LongType(), D: DoubleType(), B: BooleanType(), S: StringType(),
                   T: TimestampType()}
    fields = [StructField(f"{side}_{t.name}", spark_types[t])
              for side in ("l", "r") for t in TYPES.values()]
    utc = {t: (v.replace(tzinfo=dt.UTC) if t is T else v) for t, v in LEFT.items()}
    utc_r = {t: (v.replace(tzinfo=dt.UTC) if t is T else v) for t, v in RIGHT.items()}
    row = [utc[t] for t in TYPES.values()] + [utc_r[t] for t in TYPES.values()]
    df = spark.createDataFrame([row], StructType(fields))
    exprs, want = [], []
    for op, left, right, result in BINARY_CASES:
        if result is None:
            continue
        got = apply(op, Typed(f"l_{left.name}", left), Typed(f"r_{right.name}", right))
        at = meet(left, right, op)
        a, b = convert(LEFT[left], left, at), convert(RIGHT[right], right, at)
        exprs.append(got.sql)
        want.append((f"{LEFT[left]!r} {op.shown} {RIGHT[right]!r}", compute(op, a, b, at)))
    for op, table in UNARY.items():
        for operand in table:
            got = apply(op, Typed(f"l_{operand.name}", operand))
            value = LEFT[operand]
            expected = (-value if op is Operator.NEG  # type: ignore[operator]
                        else (not value) if operand is B else ~value)  # type: ignore[operator]
            exprs.append(got.sql)
            want.append((f"{op.shown} {value!r}", expected))
    for (source, target) in sorted(CAST_TREE, key=str):
        exprs.append(cast(f"l_{source.name}", source, target))
        want.append((f"{LEFT[source]!r} as {target.value}",
                     convert(LEFT[source], source, target)))
    values = df.selectExpr(*[f"{e} AS c{i}" for i, e in enumerate(exprs)]).collect()[0]
    wrong = [(what, expected, got) for (what, expected), got in zip(want, values, strict=True)
             if not (got == expected or (isinstance(expected, float)
                                         and abs(got - expected) < 1e-9))]
    assert not wrong, wrong
    assert len(want) > 150
