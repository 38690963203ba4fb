"""Implicit type widening (``docs/apas.md``, "The cast tree"): which value may stand where
another type is declared, and the Spark SQL that converts it.

INTEGER widens to a larger integral type, DOUBLE or DECIMAL; FLOAT and DECIMAL (the type of a
literal such as ``0.9``) to DOUBLE; BOOLEAN to
an integral type or DOUBLE (true = 1, false = 0); anything to STRING; DATETIME to DOUBLE
(milliseconds since the epoch). Nothing else converts implicitly, and conversions do not
chain.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

INTEGRAL_TYPES = (ByteType, ShortType, IntegerType, LongType)  # Spark's whole numbers
_WIDTH = {ByteType: 1, ShortType: 2, IntegerType: 4, LongType: 8}


def implicit_cast_sql(sql: str, source: DataType, target: DataType) -> str | None:
    """``sql`` (of type ``source``) as a value of ``target``, or None if not implicit."""
    if source == target:
        return sql
    cast = f"CAST(({sql}) AS {target.simpleString()})"
    if isinstance(target, StringType):
        return cast
    if isinstance(source, INTEGRAL_TYPES):
        if isinstance(target, INTEGRAL_TYPES) and _WIDTH[type(target)] >= _WIDTH[type(source)]:
            return cast
        if isinstance(target, DoubleType | DecimalType):
            return cast
    if isinstance(source, FloatType | DecimalType) and isinstance(target, DoubleType):
        return cast
    if isinstance(source, BooleanType) and isinstance(target, (*INTEGRAL_TYPES, DoubleType)):
        return f"CAST(CAST(({sql}) AS INT) AS {target.simpleString()})"
    if isinstance(source, TimestampType | TimestampNTZType) and isinstance(target, DoubleType):
        return f"CAST(unix_micros(CAST(({sql}) AS TIMESTAMP)) AS DOUBLE) / 1000.0"
    return None


def type_sql(dtype: DataType) -> str:
    """``dtype`` as Spark SQL writes a type, field names back-quoted (``simpleString``
    leaves them bare, which a name with a space or a colon breaks).
    """
    if isinstance(dtype, StructType):
        fields = ", ".join("`" + f.name.replace("`", "``") + "`: " + type_sql(f.dataType)
                           for f in dtype.fields)
        return f"STRUCT<{fields}>"
    if isinstance(dtype, ArrayType):
        return f"ARRAY<{type_sql(dtype.elementType)}>"
    if isinstance(dtype, MapType):
        return f"MAP<{type_sql(dtype.keyType)}, {type_sql(dtype.valueType)}>"
    return dtype.simpleString()
