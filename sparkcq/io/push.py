"""Rows pushed from Python (or over HTTP) into memory-source streams: rows, a keyed
stream's deletes, a table imported as a keyed stream's current rows, end of input.

Safe to call from any thread while a cycle runs (the server's handlers do): each call only
queues what it is given in the stream's source, which the next cycle polls.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

import pandas as pd
from pyspark.sql.types import StructType

from sparkcq.catalog import Catalog, StreamInfo
from sparkcq.errors import SourceError, UnknownNameError
from sparkcq.io.sources import MemorySource, PushReceipt, Source, to_pandas
from sparkcq.model.time import TIME_MAX, TIME_MIN, TimeKind

log = logging.getLogger("sparkcq.push")


def time_value(value: Any, kind: TimeKind) -> int | None:
    """A point of a stream's time axis given as a whole number, or for a timestamp stream
    as a datetime or ISO-8601 text (UTC when it names no zone); ValueError otherwise.
    """
    if value is None:
        return None
    if kind is TimeKind.TIMESTAMP and isinstance(value, str | dt.datetime | pd.Timestamp):
        ts = pd.Timestamp(value)
        ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts
        return int(ts.value // 1000)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        msg = f"expected a whole number, got {type(value).__name__}"
        raise ValueError(msg)
    number = float(value) if not isinstance(value, int) else value
    if number != int(number):
        msg = "expected a whole number"
        raise ValueError(msg)
    return int(number)


def time_of(instant: int, kind: TimeKind) -> Any:
    """A point of the time axis as a value of an event-time column (UTC timestamps)."""
    if kind is TimeKind.TIMESTAMP:
        return pd.Timestamp(instant, unit="us", tz="UTC")
    return instant


def memory_source(catalog: Catalog, sources: Mapping[str, Source],
                  stream: str) -> tuple[StreamInfo, MemorySource]:
    """A stream fed by the memory source, and the source (SourceError otherwise)."""
    info = catalog.stream(stream)
    source = sources.get(info.name.lower())
    if not isinstance(source, MemorySource):
        msg = f"stream {stream!r} is not fed by the memory source; it cannot be pushed to"
        raise SourceError(msg)
    return info, source


def push(catalog: Catalog, sources: Mapping[str, Source], stream: str, rows: Any,
         watermark: Any = None, end: bool = False, deletes: Any = None) -> PushReceipt:
    """Queue rows (and a keyed stream's deletes) for a memory-source stream; see
    ``Engine.push``.
    """
    info, source = memory_source(catalog, sources, stream)
    try:
        mark = time_value(watermark, info.time_kind)
    except (ValueError, TypeError) as e:
        msg = f"watermark {watermark!r} for stream {stream!r} is not a time: {e}"
        raise SourceError(msg) from None
    receipt = source.push(rows, mark, end, deletes)
    for error in receipt.rejected[:3]:
        log.warning("push to %s: %s", info.name, error.describe())
    return receipt


def import_table(catalog: Catalog, sources: Mapping[str, Source], stream: str, table: Any,
                 at: Any = None) -> PushReceipt:
    """Queue a table's rows as a keyed memory-source stream's current rows, valid from
    ``at``; see ``Engine.import_table``.
    """
    info, source = memory_source(catalog, sources, stream)
    if not info.key:
        msg = (f"stream {stream!r} has no key; a table is imported into a keyed stream "
               "(WITH (key='column'))")
        raise SourceError(msg)
    assert info.time_col is not None
    if at is None:
        instant = source.watermark
        if instant in (TIME_MIN, TIME_MAX):
            msg = (f"stream {stream!r} has no watermark yet; give the time the table "
                   "is valid from: import_table(..., at=...)")
            raise SourceError(msg)
    else:
        try:
            given = time_value(at, info.time_kind)
        except (ValueError, TypeError) as e:
            msg = f"at={at!r} for stream {stream!r} is not a time: {e}"
            raise SourceError(msg) from None
        assert given is not None
        instant = given
    if isinstance(table, str):
        found = catalog.tables.get(table.lower())
        if found is None:
            msg = f"unknown table {table!r}; tables: {', '.join(catalog.tables) or 'none'}"
            raise UnknownNameError(msg)
        table = found.dataframe.toPandas()
    try:
        frame = to_pandas(table, StructType([f for f in info.schema.fields
                                             if f.name != info.time_col]), stream)
    except SourceError as e:
        msg = (f"{e} (a table imported into {stream!r} gives every column but the event "
               f"time {info.time_col!r}, which is at)")
        raise SourceError(msg) from None
    frame = frame.assign(**{info.time_col: time_of(instant, info.time_kind)})
    return source.push(frame[[f.name for f in info.schema.fields]], None, False)
