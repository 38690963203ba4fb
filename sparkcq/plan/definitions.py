"""What a stream or table definition declares, bound: its schema, and a source stream's
scan node (event time, end time, time unit, key) with its lateness.

``CREATE STREAM`` and a feed's ``HEADER`` define a stream the same way, so both go through
``bind_stream``; its errors point at the option or column in the statement's text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.types import (
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    _parse_datatype_string,
)

from sparkcq.errors import AnalysisError, Location
from sparkcq.language.sql.statements import ColumnDef, assignment_at, value_at
from sparkcq.model.time import TimeKind, parse_duration, unit_micros
from sparkcq.model.types import INTEGRAL_TYPES
from sparkcq.plan.nodes import StreamScan
from sparkcq.plan.options import StreamOptions


def declared_schema(columns: Sequence[ColumnDef], text: str) -> StructType:
    """The Spark schema of a column list (``DATETIME`` is ``TIMESTAMP``); an unknown type is
    an AnalysisError underlining it.
    """
    fields = []
    for c in columns:
        type_sql = "TIMESTAMP" if c.type_sql.upper() == "DATETIME" else c.type_sql
        try:
            dtype = _parse_datatype_string(type_sql)
        except Exception:  # noqa: BLE001 - Spark raises several kinds of parse errors
            msg = f"unknown type {c.type_sql!r} for column {c.name!r}"
            raise AnalysisError(msg, text, c.loc) from None
        fields.append(StructField(c.name, dtype))
    return StructType(fields)


@dataclass(frozen=True)
class BoundStream:
    """A source stream's scan node, its allowed lateness and the recent events it keeps
    for queries added later (``retain``), in its time units.
    """

    node: StreamScan
    lateness: int
    retention: int = 0


def bind_stream(name: str, schema: StructType, options: StreamOptions, text: str,
                loc: Location) -> BoundStream:
    """The scan a source stream's definition gives, and its lateness in time units."""
    names = {f.name.lower(): f for f in schema.fields}
    time_col = options.event_time
    if time_col is None:
        msg = "CREATE STREAM needs WITH (event_time='column')"
        raise AnalysisError(msg, text, loc)
    kinds = []
    at = options.options
    for opt, col_name in (("event_time", time_col), ("end_time", options.end_time)):
        if col_name is None:
            continue
        f = names.get(col_name.lower())
        if f is None:
            msg = f"{opt} column {col_name!r} is not a column of {name!r}"
            raise AnalysisError(msg, text, value_at(at, opt, loc))
        if isinstance(f.dataType, TimestampType | TimestampNTZType):
            kinds.append(TimeKind.TIMESTAMP)
        elif isinstance(f.dataType, INTEGRAL_TYPES):
            kinds.append(TimeKind.NUMERIC)
        else:
            msg = (f"{opt} column {col_name!r} is {f.dataType.simpleString()}; it must be "
                   "a TIMESTAMP or an integral number")
            raise AnalysisError(msg, text, value_at(at, opt, loc))
    if len(set(kinds)) > 1:
        msg = "event_time and end_time must both be timestamps or both be numbers"
        raise AnalysisError(msg, text, loc)
    kind = kinds[0]
    unit = None
    if options.time_unit is not None:
        where = value_at(at, "time_unit", loc)
        if kind is TimeKind.TIMESTAMP:
            msg = (f"time_unit applies to a numeric event time; {time_col!r} is a "
                   "timestamp, whose unit is known")
            raise AnalysisError(msg, text, where)
        try:
            unit = unit_micros(options.time_unit)
        except ValueError as e:
            raise AnalysisError(str(e), text, where) from None
    lengths = {"lateness": 0, "retain": 0}
    for opt in lengths:
        given = at.get(opt)
        if given is None:
            continue
        try:
            lengths[opt] = parse_duration(given).to_units(kind, unit)
        except ValueError as e:
            msg = f"{opt}: {e}"
            raise AnalysisError(msg, text, value_at(at, opt, loc)) from None
    lateness, retention = lengths["lateness"], lengths["retain"]
    if retention and options.end_time is not None:
        msg = ("retain keeps recent events of a stream of instants; a stream with its own "
               "end_time keeps its live elements already")
        raise AnalysisError(msg, text, value_at(at, "retain", loc))
    end_col = names[options.end_time.lower()].name if options.end_time is not None else None
    key = key_columns(name, options, schema, text, loc)
    node = StreamScan(name, schema, names[time_col.lower()].name, end_col, kind, unit, key)
    return BoundStream(node, lateness, retention)


def key_columns(name: str, options: StreamOptions, schema: StructType, text: str,
                loc: Location) -> tuple[str, ...]:
    """The key columns of ``WITH (key='a, b')``, as the schema spells them (none: an
    append-only stream); an unknown, repeated or missing column is an AnalysisError
    pointing at the option.
    """
    raw = options.key
    if raw is None:
        return ()
    where = assignment_at(options.options, "key", loc)
    names = {f.name.lower(): f.name for f in schema.fields}
    parts = [p.strip() for p in raw.split(",")]
    if not raw.strip() or any(not p for p in parts):
        msg = (f"key {raw!r}: name the key columns, separated by commas, e.g. "
               f"key='{schema.fields[0].name}'")
        raise AnalysisError(msg, text, where)
    for p in parts:
        if p.lower() not in names:
            msg = (f"key column {p!r} is not a column of {name!r}; columns: "
                   f"{', '.join(names.values())}")
            raise AnalysisError(msg, text, where)
    if len({p.lower() for p in parts}) < len(parts):
        msg = f"key {raw!r} names a column twice"
        raise AnalysisError(msg, text, where)
    if options.end_time is not None:
        msg = ("a keyed stream's rows are valid until their key's next row or delete; "
               "it cannot also take end_time")
        raise AnalysisError(msg, text, where)
    return tuple(names[p.lower()] for p in parts)
