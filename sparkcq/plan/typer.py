"""Typing expressions: one protocol, two typers.

The engine types an expression with Spark's analyzer (``SparkTyper``: what Spark will run,
every built-in function included). The plan layer's own tests, golden files among
them, type with ``SchemaTyper``: sqlglot's type annotation over the input schema, no JVM.
Both answer Spark types (``pyspark.sql.types``, plain Python objects).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol

from pyspark.errors import AnalysisException
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
    IntegralType,
    LongType,
    MapType,
    NullType,
    NumericType,
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
from sparkcq.plan.expressions import parse_expression

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class TypingError(PlanError):
    """An expression that cannot be typed: the typer's reason in one line, and the name of
    the function it does not know, if that is why.
    """

    def __init__(self, reason: str, unknown_function: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.unknown_function = unknown_function


class Typer(Protocol):
    """What expressions over the columns of a schema evaluate to."""

    def fields(self, named: Sequence[tuple[str, str]], schema: StructType) -> StructType:
        """The named Spark SQL expressions' output columns (``TypingError`` if one cannot
        be typed).
        """
        ...

    def aggregates(self, schema: StructType, keys: Sequence[str],
                   calls: Sequence[tuple[str, str]]) -> StructType:
        """The columns of ``GROUP BY keys`` with the named aggregate calls."""
        ...

    def casts(self, text: str, dtype: DataType) -> bool:
        """Whether the string ``text`` casts to ``dtype``."""
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
    typer where no JVM runs (its golden files and unit tests). A function sqlglot does not
    know cannot be typed here; decimals' precision may differ from Spark's; every column
    may be NULL.
    """

    def fields(self, named: Sequence[tuple[str, str]],  # noqa: D102
               schema: StructType) -> StructType:
        fields = []
        for name, sql in named:
            try:
                tree = parse_expression(sql)
            except PlanError as e:
                raise TypingError(str(e)) from None
            fields.append(StructField(name, self.type_of(tree, schema)))
        return StructType(fields)

    def aggregates(self, schema: StructType, keys: Sequence[str],  # noqa: D102
                   calls: Sequence[tuple[str, str]]) -> StructType:
        by_name = {f.name: f for f in schema.fields}
        return StructType([*[by_name[k] for k in keys],
                           *self.fields(calls, schema).fields])

    def casts(self, text: str, dtype: DataType) -> bool:  # noqa: D102
        value = text.strip()
        try:
            if isinstance(dtype, IntegralType):
                int(value)
            elif isinstance(dtype, NumericType):
                float(value)
            elif isinstance(dtype, BooleanType):
                return value.lower() in ("true", "false", "t", "f", "yes", "no", "y", "n",
                                         "1", "0")
            elif isinstance(dtype, DateType | TimestampType | TimestampNTZType):
                datetime.fromisoformat(value)
        except ValueError:
            return False
        return True

    def type_of(self, tree: exp.Expr, schema: StructType) -> DataType:
        """The type of one expression tree over ``schema``."""
        columns = {f.name: sqlglot_type(f.dataType) for f in schema.fields}
        select = exp.select(exp.alias_(tree.copy(), "_e")).from_("_t")
        try:
            typed = annotate_types(
                qualify(select, schema={"_t": columns}, dialect="spark",
                        validate_qualify_columns=True, quote_identifiers=False),
                schema={"_t": columns}, dialect="spark")
        except (OptimizeError, SqlglotError) as e:
            msg = f"cannot type {tree.sql(dialect='spark')!r}: {e}"
            raise TypingError(msg) from None
        found = typed.selects[0].type
        if found is None or found.this is _T.UNKNOWN:
            msg = (f"cannot type {tree.sql(dialect='spark')!r} from the schema alone "
                   "(a function only Spark's analyzer knows)")
            raise TypingError(msg)
        return spark_type(found)


class SparkTyper:
    """Types by Spark's analyzer over an empty frame of the schema: what Spark will run,
    every built-in function included (no job runs).
    """

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def fields(self, named: Sequence[tuple[str, str]],  # noqa: D102
               schema: StructType) -> StructType:
        frame = empty_frame(self.spark, schema.json())
        try:
            return frame.selectExpr(*[f"{sql} AS {quote(name)}" for name, sql in named]).schema
        except AnalysisException as e:
            raise spark_typing_error(e) from None

    def aggregates(self, schema: StructType, keys: Sequence[str],  # noqa: D102
                   calls: Sequence[tuple[str, str]]) -> StructType:
        from pyspark.sql import functions as F

        frame = empty_frame(self.spark, schema.json())
        columns = [F.expr(f"{sql} AS {quote(name)}") for name, sql in calls]
        try:
            if not columns:  # GROUP BY alone: the distinct keys (agg() needs a column)
                return frame.groupBy(*keys).agg(F.expr("count(1) AS `__rows`")).drop(
                    "__rows").schema
            return frame.groupBy(*keys).agg(*columns).schema
        except AnalysisException as e:
            raise spark_typing_error(e) from None

    def casts(self, text: str, dtype: DataType) -> bool:  # noqa: D102
        from pyspark.sql import functions as F

        frame = self.spark.createDataFrame([(text,)], "s STRING")  # a local relation: no job
        return bool(frame.select(F.col("s").try_cast(dtype).isNotNull()).collect()[0][0])


@lru_cache(maxsize=256)
def empty_frame(spark: SparkSession, schema_json: str) -> DataFrame:
    """An empty frame of a schema (as JSON), over which Spark types expressions: made once
    per schema, as most statements read the same few (a frame is ten calls into the JVM, a
    query's binding made one per expression).
    """
    return spark.createDataFrame([], StructType.fromJson(json.loads(schema_json)))


_UNKNOWN_ROUTINE = re.compile(r"UNRESOLVED_ROUTINE\] Cannot resolve routine `([^`]+)`")


def spark_typing_error(e: AnalysisException) -> TypingError:
    """Spark's analysis error in one line, without its plan dump."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
    unknown = _UNKNOWN_ROUTINE.search(text)
    return TypingError(text.split("; line ")[0].split(" SQLSTATE")[0],
                       unknown[1].lower() if unknown else None)


def quote(name: str) -> str:
    """A back-quoted column name for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


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
