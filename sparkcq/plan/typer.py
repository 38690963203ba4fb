"""Typing expressions: one protocol, two typers.

The engine types an expression with Spark's analyzer (``runtime``'s typer: what Spark will
run, every built-in function included). The plan layer's own tests, golden files among
them, type with ``SchemaTyper``: sqlglot's type annotation over the input schema, no JVM.
Both answer Spark types (``pyspark.sql.types``, plain Python objects).
"""

from __future__ import annotations

from typing import Protocol

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from sparkcq.errors import PlanError


class Typer(Protocol):
    """What an expression over the columns of ``schema`` evaluates to."""

    def type_of(self, tree: exp.Expr, schema: StructType) -> DataType:
        """The Spark type of ``tree``; ``PlanError`` when it cannot be typed."""
        ...


_T = exp.DataType.Type
_SIMPLE: dict[object, DataType] = {
    _T.BIGINT: LongType(), _T.INT: IntegerType(), _T.SMALLINT: ShortType(),
    _T.TINYINT: ByteType(), _T.DOUBLE: DoubleType(), _T.FLOAT: FloatType(),
    _T.BOOLEAN: BooleanType(), _T.TEXT: StringType(), _T.VARCHAR: StringType(),
    _T.CHAR: StringType(), _T.DATE: DateType(), _T.TIMESTAMPTZ: TimestampType(),
    _T.TIMESTAMPLTZ: TimestampType(), _T.TIMESTAMP: TimestampType(),
    _T.TIMESTAMPNTZ: TimestampNTZType(), _T.BINARY: BinaryType(), _T.NULL: NullType(),
}


class SchemaTyper:
    """Types by sqlglot's annotation of the expression over the schema: the plan layer's
    typer where no JVM runs. A function sqlglot does not know cannot be typed here.
    """

    def type_of(self, tree: exp.Expr, schema: StructType) -> DataType:  # noqa: D102
        columns = {f.name: sqlglot_type(f.dataType) for f in schema.fields}
        select = exp.select(exp.alias_(tree.copy(), "_e")).from_("_t")
        try:
            typed = annotate_types(
                qualify(select, schema={"_t": columns}, dialect="spark",
                        validate_qualify_columns=True, quote_identifiers=False),
                schema={"_t": columns}, dialect="spark")
        except (OptimizeError, SqlglotError) as e:
            msg = f"cannot type {tree.sql(dialect='spark')!r}: {e}"
            raise PlanError(msg) from None
        found = typed.selects[0].type
        if found is None or found.this is _T.UNKNOWN:
            msg = (f"cannot type {tree.sql(dialect='spark')!r} from the schema alone "
                   "(a function only Spark's analyzer knows)")
            raise PlanError(msg)
        return spark_type(found)


def sqlglot_type(dtype: DataType) -> exp.DataType:
    """The sqlglot type of a Spark type."""
    if isinstance(dtype, NullType):
        return exp.DataType.build("NULL")
    return exp.DataType.build(dtype.simpleString(), dialect="spark")


def spark_type(dtype: exp.DataType) -> DataType:
    """The Spark type of a sqlglot type; ``PlanError`` for one Spark has no name for."""
    kind = dtype.this
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind is _T.DECIMAL:
        args = [int(a.name) for a in dtype.expressions]
        return DecimalType(*args) if args else DecimalType(10, 0)
    if kind is _T.ARRAY and dtype.expressions:
        return ArrayType(spark_type(dtype.expressions[0]))
    if kind is _T.MAP and len(dtype.expressions) == 2:
        return MapType(spark_type(dtype.expressions[0]), spark_type(dtype.expressions[1]))
    if kind is _T.STRUCT:
        fields = []
        for f in dtype.expressions:
            if not isinstance(f, exp.ColumnDef) or not isinstance(f.kind, exp.DataType):
                break
            fields.append(StructField(f.name, spark_type(f.kind)))
        else:
            return StructType(fields)
    msg = f"no Spark type for {dtype.sql(dialect='spark')}"
    raise PlanError(msg)
