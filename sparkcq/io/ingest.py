"""Typed ingest: pushed rows are checked and converted against the stream's schema at the door.

A row that does not fit (a value of the wrong type, a whole number out of range, an unknown
column, not an object at all) is refused alone, with its index, column and reason, and is
kept as a dead letter with its raw text; the other rows of the push go on. So a client's
mistake can never fail a cycle later, where it would take other clients' rows with it.

Conversions are these implicit ones, and no more: BOOLEAN to a number
(true = 1), a whole DOUBLE (``3.0``, as JSON writes it) to an integral column, numbers and
booleans to STRING (a list or an object is not text: refused), numeric and boolean text
(``"42"``, ``"true"``) to numbers and booleans, ISO-8601 text to TIMESTAMP and DATE
(without a zone it is UTC), and numbers to TIMESTAMP when the stream declares their unit
(``epoch_unit='milliseconds'``). A key missing from a row is
NULL; an event time that is NULL goes to the dead letters in the stream's scan, as always.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DateType,
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

from sparkcq.model.rows import RowError

_INT_RANGES = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}


class Unfit(ValueError):
    """A value that does not fit its column; the message says why."""


@dataclass(frozen=True)
class Conformed:
    """A push after the door: the rows that fit, as Arrow in the stream's schema, and the
    refused ones.
    """

    table: pa.Table
    errors: tuple[RowError, ...]
    kept: tuple[int, ...] | None = None  # the index each row of ``table`` had (None: its own)

    def index(self, row: int) -> int:
        """The index row ``row`` of ``table`` had in the push (rows after the kept ones are
        deletes appended to them: their own index among the deletes is not kept).
        """
        return row if self.kept is None or row >= len(self.kept) else self.kept[row]


def arrow_schema(schema: StructType) -> pa.Schema:
    """The stream's schema in Arrow (timestamps as UTC microseconds, as Spark keeps them)."""
    return to_arrow_schema(schema, timezone="UTC")


def _raw(row: Any) -> str:
    try:
        return json.dumps(row, default=str)
    except (TypeError, ValueError):
        return repr(row)


def _integral(bits: int) -> Callable[[Any], int]:
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def convert(v: Any) -> int:
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, int):
            out = v
        elif isinstance(v, float | decimal.Decimal):
            if not math.isfinite(v) or v != int(v):
                msg = f"{v!r} is not a whole number"
                raise Unfit(msg)
            out = int(v)
        elif isinstance(v, str):
            try:
                out = int(v.strip())
            except ValueError:
                msg = f"{v!r} is not a whole number"
                raise Unfit(msg) from None
        else:
            msg = f"{_show(v)} is not a whole number"
            raise Unfit(msg)
        if not lo <= out <= hi:
            msg = f"{v!r} is out of range for a {bits}-bit integer"
            raise Unfit(msg)
        return out
    return convert


def _fractional(v: Any) -> float:
    if isinstance(v, bool | int | float | decimal.Decimal):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            pass
    msg = f"{_show(v)} is not a number"
    raise Unfit(msg)


def _decimal(v: Any) -> decimal.Decimal:
    if isinstance(v, bool):
        return decimal.Decimal(int(v))
    if isinstance(v, int | float | decimal.Decimal | str):
        try:
            out = decimal.Decimal(str(v).strip())
        except decimal.InvalidOperation:
            pass
        else:
            if out.is_finite():
                return out
    msg = f"{_show(v)} is not a decimal number"
    raise Unfit(msg)


def _string(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float | decimal.Decimal):
        return str(v)
    if isinstance(v, dict | list):
        what = "an object" if isinstance(v, dict) else "a list"
        msg = (f"{what} is not text; send its JSON as a string, or declare the column "
               "STRUCT<...>, ARRAY<...> or MAP<...>")
        raise Unfit(msg)
    if isinstance(v, dt.date | pd.Timestamp):
        return v.isoformat()
    msg = f"{_show(v)} cannot be text"
    raise Unfit(msg)


def _boolean(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    msg = f"{_show(v)} is not a boolean (true or false)"
    raise Unfit(msg)


EPOCH_UNITS = {"seconds": 1_000_000, "milliseconds": 1_000, "microseconds": 1}


def _timestamp(v: Any, epoch_micros: int | None = None) -> dt.datetime:
    if isinstance(v, int | float) and not isinstance(v, bool):
        if epoch_micros is None:
            msg = (f"{_show(v)} is not a timestamp; give ISO-8601 text such as "
                   "'2026-01-31T12:00:00Z', or declare the stream's epoch_unit "
                   "('milliseconds', 'microseconds' or 'seconds') to send numbers")
            raise Unfit(msg)
        micros = v * epoch_micros
        if micros != int(micros):
            msg = f"{_show(v)} is not a whole number of microseconds since the epoch"
            raise Unfit(msg)
        try:
            return (pd.Timestamp(int(micros), unit="us", tz="UTC")).to_pydatetime()
        except (OverflowError, ValueError, pd.errors.OutOfBoundsDatetime):
            msg = f"{_show(v)} is out of the range of timestamps"
            raise Unfit(msg) from None
    if isinstance(v, str | dt.datetime | pd.Timestamp | dt.date):
        try:
            ts = pd.Timestamp(v)
        except (ValueError, TypeError):
            pass
        else:
            if not pd.isna(ts):
                ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
                return ts.to_pydatetime()
    msg = f"{_show(v)} is not a timestamp; give ISO-8601 text such as '2026-01-31T12:00:00Z'"
    raise Unfit(msg)


def _date(v: Any) -> dt.date:
    if isinstance(v, dt.datetime | pd.Timestamp):
        return pd.Timestamp(v).date()
    if isinstance(v, dt.date):
        return v
    if isinstance(v, str):
        try:
            return dt.date.fromisoformat(v.strip())
        except ValueError:
            pass
    msg = f"{_show(v)} is not a date; give ISO-8601 text such as '2026-01-31'"
    raise Unfit(msg)


def _nested(arrow_type: pa.DataType) -> Callable[[Any], Any]:
    def convert(v: Any) -> Any:
        try:
            pa.array([v], type=arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
            msg = f"{_show(v)} does not fit {arrow_type}: {e}"
            raise Unfit(msg) from None
        return v
    return convert


def converter(dtype: DataType, arrow_type: pa.DataType,
              epoch_micros: int | None = None) -> Callable[[Any], Any]:
    """The function that checks and converts one non-null value for a column of ``dtype``;
    a number for a TIMESTAMP counts ``epoch_micros`` microseconds since the epoch (None:
    numbers are refused).
    """
    for kind, bits in _INT_RANGES.items():
        if isinstance(dtype, kind):
            return _integral(bits)
    if isinstance(dtype, DoubleType | FloatType):
        return _fractional
    if isinstance(dtype, DecimalType):
        return _decimal
    if isinstance(dtype, StringType):
        return _string
    if isinstance(dtype, BooleanType):
        return _boolean
    if isinstance(dtype, TimestampNTZType):
        return lambda v: _timestamp(v, epoch_micros).replace(tzinfo=None)
    if isinstance(dtype, TimestampType):
        return lambda v: _timestamp(v, epoch_micros)
    if isinstance(dtype, DateType):
        return _date
    return _nested(arrow_type)


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_null(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NaT


def _records(rows: Any, names: list[str]) -> list[Any]:
    """Rows as a list of mappings (or of anything else, refused later row by row)."""
    if isinstance(rows, pd.DataFrame):
        return rows.to_dict("records")
    out = []
    for row in rows if isinstance(rows, Iterable) else [rows]:
        if isinstance(row, tuple | list) and len(row) == len(names):
            out.append(dict(zip(names, row, strict=True)))
        else:
            out.append(row)
    return out


def _exact_kinds(dtype: DataType) -> tuple[type, ...] | None:
    """The Python types a column's values may have to go through Arrow as they are."""
    if isinstance(dtype, ByteType | ShortType | IntegerType | LongType):
        return (int, bool)
    if isinstance(dtype, DoubleType | FloatType):
        return (float, int, bool)
    if isinstance(dtype, StringType):
        return (str,)
    if isinstance(dtype, BooleanType):
        return (bool,)
    if isinstance(dtype, TimestampType | TimestampNTZType):
        return (str, dt.datetime, pd.Timestamp)
    if isinstance(dtype, DateType):
        return (str, dt.date)
    return None


def conform_exact(rows: list[Any], schema: StructType, target: pa.Schema) -> Conformed | None:
    """``conform`` in one Arrow call per column, for rows that fit as they are: JSON objects
    whose keys are column names, numbers for numeric columns, text for text, booleans for
    booleans, ISO-8601 text or datetimes for times (text parsed by Arrow). None when any
    value needs a conversion or a check that ``conform`` does value by value (then it does).
    """
    if not all(type(row) is dict for row in rows):
        return None
    if not set().union(*rows) <= set(target.names):
        return None
    columns = []
    try:
        for f, field in zip(schema.fields, target, strict=True):
            kinds = _exact_kinds(f.dataType)
            values = [row.get(f.name) for row in rows]
            present = [v for v in values if v is not None]
            if kinds is None or not all(type(v) in kinds for v in present):
                return None
            text = bool(present) and all(type(v) is str for v in present)
            if (pa.types.is_timestamp(field.type) or pa.types.is_date(field.type)) and text:
                column = pa.array(values, pa.string()).cast(field.type, safe=True)
            elif isinstance(f.dataType, DateType) and not all(
                    type(v) is dt.date for v in present):
                return None  # datetimes for a date column: conform takes the date part
            else:
                column = pa.array(values, field.type)
            if pa.types.is_floating(field.type) and column.null_count < len(column):
                column = pc.if_else(pc.is_nan(column), pa.scalar(None, field.type), column)
            columns.append(column)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError,
            ValueError, OverflowError):
        return None
    return Conformed(pa.Table.from_arrays(columns, schema=target), ())


def conform(rows: Any, schema: StructType, stream: str, *, required: tuple[str, ...] = (),
            what: str = "row", exact_first: bool = True,
            epoch_micros: int | None = None) -> Conformed:
    """Check and convert ``rows`` (dicts, tuples in column order, or a pandas frame) for
    ``stream``; every row that does not fit is in ``errors``, the rest in ``table``.

    A row that leaves a ``required`` column out or NULL is refused (a delete's key);
    ``what`` names the rows in errors (``row``, ``delete``). Rows that fit as they are go
    through Arrow at once (``conform_exact``); otherwise each value is checked and converted
    here, so that each refused row is named with its reason. A number for a TIMESTAMP
    column counts ``epoch_micros`` microseconds since the epoch (the stream's
    ``epoch_unit``); without one it is refused.
    """
    names = [f.name for f in schema.fields]
    target = arrow_schema(schema)
    if exact_first and not required and isinstance(rows, list) and rows:
        exact = conform_exact(rows, schema, target)
        if exact is not None:
            return exact
    convert = [converter(f.dataType, target.field(i).type, epoch_micros)
               for i, f in enumerate(schema.fields)]
    by_lower = {n.lower(): n for n in names}
    columns: list[list[Any]] = [[] for _ in names]
    errors: list[RowError] = []
    kept: list[int] = []
    for index, row in enumerate(_records(rows, names)):
        if not isinstance(row, Mapping):
            errors.append(RowError(index, None, f"a {what} must be an object with the columns "
                                   f"{', '.join(names)}; got {_show(row)}", _raw(row), what))
            continue
        values: list[Any] = [None] * len(names)
        problem: RowError | None = None
        for key, value in row.items():
            name = by_lower.get(str(key).lower())
            if name is None:
                owner = f"{stream!r}" if what == "row" else f"a {what} of {stream!r}"
                problem = RowError(index, str(key), f"unknown column; {owner} has "
                                   f"{', '.join(names)}", _raw(row), what)
                break
            i = names.index(name)
            if _is_null(value):
                continue
            try:
                values[i] = convert[i](value)
            except Unfit as e:
                kind = schema.fields[i].dataType.simpleString().upper()
                problem = RowError(index, name, f"{e} (column type {kind})", _raw(row), what)
                break
        for name in required:
            if problem is None and values[names.index(name)] is None:
                problem = RowError(index, name, f"a {what} of {stream!r} needs this column "
                                   f"(it needs {', '.join(required)})", _raw(row), what)
        if problem is not None:
            errors.append(problem)
            continue
        for i, value in enumerate(values):
            columns[i].append(value)
        kept.append(index)
    arrays = [pa.array(values, type=target.field(i).type) for i, values in enumerate(columns)]
    return Conformed(pa.Table.from_arrays(arrays, schema=target), tuple(errors),
                     None if not errors else tuple(kept))


def conform_arrow(table: pa.Table, schema: StructType, stream: str) -> Conformed:
    """``conform`` for rows sent as Arrow: columns matched by name (any case) and cast in
    Arrow, without a Python object per value; when a cast fails, the rows are checked one
    by one so that each refused row is named with its reason.
    """
    target = arrow_schema(schema)
    by_lower = {f.name.lower(): f.name for f in schema.fields}
    unknown = [c for c in table.column_names if c.lower() not in by_lower]
    if unknown:
        names = ", ".join(f.name for f in schema.fields)
        errors = tuple(RowError(i, unknown[0], f"unknown column; {stream!r} has {names}", "")
                       for i in range(table.num_rows))
        return Conformed(target.empty_table(), errors)
    given = {c.lower(): table.column(c) for c in table.column_names}
    arrays = []
    try:
        for f in target:
            column = given.get(f.name.lower())
            if column is None:
                arrays.append(pa.nulls(table.num_rows, f.type))
            elif column.type == f.type:
                arrays.append(column)
            else:
                arrays.append(column.cast(f.type, safe=True))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return conform(table.to_pylist(), schema, stream)
    return Conformed(pa.Table.from_arrays(arrays, schema=target), ())
