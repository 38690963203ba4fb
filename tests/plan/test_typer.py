"""The schema-only typer: Spark's types from a schema, without a JVM."""

from __future__ import annotations

import pytest
import sqlglot
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sparkcq.errors import PlanError
from sparkcq.plan.typer import SchemaTyper, spark_type, sqlglot_type

POSITION = StructType([StructField("x", DoubleType()), StructField("y", DoubleType())])
SCHEMA = StructType([
    StructField("n", LongType()), StructField("v", DoubleType()),
    StructField("s", StringType()), StructField("t", TimestampType()),
    StructField("position", POSITION),
])

CASES = [
    ("n + 1", LongType()),
    ("n + v", DoubleType()),
    ("`n` / 2", DoubleType()),
    ("n div 2", LongType()),
    ("avg(n)", DoubleType()),
    ("count(*)", LongType()),
    ("n > 3 AND s = 'a'", BooleanType()),
    ("CAST(s AS INT)", IntegerType()),
    ("position.x * 2", DoubleType()),
    ("position", POSITION),
    ("coalesce(n, v)", DoubleType()),
    ("upper(s)", StringType()),
    ("t", TimestampType()),
]


@pytest.mark.parametrize(("sql", "expected"), CASES, ids=[c[0] for c in CASES])
def test_types_from_the_schema(sql: str, expected: DataType) -> None:
    assert SchemaTyper().type_of(sqlglot.parse_one(sql, read="spark"), SCHEMA) == expected


def test_an_unknown_column_cannot_be_typed() -> None:
    with pytest.raises(PlanError, match="cannot type 'nope \\+ 1'.*'nope'"):
        SchemaTyper().type_of(sqlglot.parse_one("nope + 1", read="spark"), SCHEMA)


def test_a_function_only_spark_knows_says_so() -> None:
    with pytest.raises(PlanError, match="only Spark's analyzer knows"):
        SchemaTyper().type_of(sqlglot.parse_one("my_udf(n)", read="spark"), SCHEMA)


@pytest.mark.parametrize("dtype", [
    LongType(), DoubleType(), StringType(), TimestampType(), DecimalType(20, 2),
    ArrayType(StringType()), MapType(StringType(), LongType()), POSITION,
], ids=lambda d: d.simpleString())
def test_spark_types_survive_the_round_trip(dtype: DataType) -> None:
    assert spark_type(sqlglot_type(dtype)) == dtype
