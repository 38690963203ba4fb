"""The ``WITH (...)`` options sparkcq itself reads, typed and checked in one place.

A statement's options arrive as text pairs. Those the engine interprets (a stream's event
time, lateness, key and source; a table's format, path and refresh; a query's sink and
what it does when its stream's schema changes) become the records below, each checked once
with an error pointing at the option in the user's text. Options a source or sink reads
(a generator's ``rate``, a files sink's ``path``) pass through in ``options`` to that
source or sink, which documents and checks them itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from sparkcq.errors import AnalysisError, Location
from sparkcq.language.sql.statements import assignment_at, copy_options, value_at
from sparkcq.model.time import TimeKind, parse_duration

E = TypeVar("E", bound=StrEnum)


class SourceKind(StrEnum):
    """Where a source stream's rows come from (``WITH (source='...')``)."""

    MEMORY = "memory"  # pushed from Python or over HTTP (the default)
    FEED = "feed"  # a feed connection (TCP or HTTP), its schema from the feed's HEADER
    GENERATOR = "generator"  # rows generated at a rate (demos, benchmarks)
    FILES = "files"  # files appearing in a folder under the data roots


class SinkKind(StrEnum):
    """The sinks every engine has; users register more under names of their own."""

    MEMORY = "memory"
    CONSOLE = "console"
    FILES = "files"
    POSTGRES = "postgres"


class SchemaChange(StrEnum):
    """What a query does when a feed's HEADER changes its stream's schema."""

    STOP = "stop"  # stopped, unless it still compiles with the columns both schemas share
    KEEP = "keep"  # keeps the old columns, NULL where a new row has no such column


class InputRemoved(StrEnum):
    """What a query does when a feed's REMOVE takes a stream it reads away."""

    STOP = "stop"  # stopped at once, its results kept until it is dropped
    KEEP = "keep"  # the stream's input ends: its windows drain and it goes on with the rest


class OperatorError(StrEnum):
    """What a query does when one of its operators raises on a row (a Python function, a
    division by zero, a cast that overflows).
    """

    STOP = "stop"  # stopped, the error and the user's frames in its log
    SKIP = "skip"  # the rows it failed on go to the dead letters with the error; it goes on


def choice(kind: type[E], options: Mapping[str, str], key: str, default: E, text: str,
           loc: Location | None, refusal: str) -> E:
    """Option ``key`` as a member of enum ``kind`` (``default`` when absent); an
    AnalysisError pointing at the value otherwise, ``refusal`` saying why (``{raw!r}`` is
    the value as written).
    """
    raw = options.get(key, default.value)
    try:
        return kind(raw.lower())
    except ValueError:
        msg = refusal.replace("{raw!r}", repr(raw))
        raise AnalysisError(msg, text, value_at(options, key, loc)) from None


@dataclass(frozen=True)
class StreamOptions:
    """``CREATE STREAM ... WITH (...)`` (and a feed's HEADER), as the engine reads them."""

    source: SourceKind = SourceKind.MEMORY
    event_time: str | None = None
    end_time: str | None = None
    lateness: str | None = None  # a duration, in the stream's time units
    time_unit: str | None = None  # of a numeric event time
    key: str | None = None  # a keyed stream's key columns, comma-separated
    options: Mapping[str, str] = field(default_factory=dict)  # all of them, as written

    @classmethod
    def parse(cls, options: Mapping[str, str], text: str,
              loc: Location | None) -> StreamOptions:
        """The options of a stream definition; an unknown source is an AnalysisError."""
        known = ", ".join(k.value for k in SourceKind)
        source = choice(SourceKind, options, "source", SourceKind.MEMORY, text, loc,
                        f"unknown source {{raw!r}}; available: {known}")
        return cls(source, options.get("event_time"), options.get("end_time"),
                   options.get("lateness"), options.get("time_unit"), options.get("key"),
                   copy_options(options))


@dataclass(frozen=True)
class TableOptions:
    """``CREATE TABLE ... WITH (...)``, as the engine reads them."""

    format: str | None = None  # csv, parquet, json, postgres (None: rows from Python)
    path: str | None = None
    refresh_seconds: float | None = None  # re-read after that much processing time
    options: Mapping[str, str] = field(default_factory=dict)  # all of them, as written

    @classmethod
    def parse(cls, options: Mapping[str, str], text: str, loc: Location) -> TableOptions:
        """The options of a table definition; a bad ``refresh`` is an AnalysisError."""
        fmt = options.get("format")
        return cls(None if fmt is None else fmt.lower(), options.get("path"),
                   refresh_seconds(options, text, loc), copy_options(options))

    @property
    def postgres(self) -> bool:
        """Whether the table is read from a PostgreSQL database."""
        return self.format == "postgres"


def refresh_seconds(options: Mapping[str, str], text: str, loc: Location) -> float | None:
    """A table's ``refresh='60 SECONDS'`` in seconds of processing time, or None."""
    return seconds_option(options, "refresh", text, loc)


def seconds_option(options: Mapping[str, str], key: str, text: str,
                   loc: Location | None) -> float | None:
    """Option ``key``, a positive duration of processing time with its unit
    (``'2 SECONDS'``, ``'500 MILLISECONDS'``), in seconds; None when absent.
    """
    every = options.get(key)
    if every is None:
        return None
    try:
        micros = parse_duration(every).to_units(TimeKind.TIMESTAMP)
    except ValueError as e:
        msg = f"{key}: {e}"
        raise AnalysisError(msg, text, value_at(options, key, loc)) from None
    if micros <= 0:
        msg = f"{key}: {every!r} is not a positive duration"
        raise AnalysisError(msg, text, value_at(options, key, loc))
    return micros / 1e6


class ShedMode(StrEnum):
    """How a windowed stream join sheds work when its input outruns it."""

    OFF = "off"  # every pair is joined; the join falls behind instead
    RANDOM = "random"  # a share z of the windows, its sub-windows chosen at random
    ADAPTIVE = "adaptive"  # a share z, the sub-windows that yielded most results first


#: the most sub-windows a window of a shedding join may be cut into
MAX_BASIC_WINDOWS = 100


class ShedControl(StrEnum):
    """What a shedding join's share z follows from cycle to cycle."""

    BUDGET = "budget"  # its cycle time, kept within the latency budget
    RATIO = "ratio"  # the rows it processed in the last cycle over those that came meanwhile


#: the options that tune shedding; given with shedding off they would do nothing
SHEDDING_OPTIONS = ("latency_budget", "basic_windows", "throttle", "shedding_control")


@dataclass(frozen=True)
class Shedding:
    """A windowed stream join's shedding, as its query asked for it (part of the join's
    plan node: joins that shed differently are different operators, never shared).

    ``throttle`` holds the share z of the windows fixed (tests, benchmarks); without it z
    adapts, by ``control``: to the cycle time against ``budget_seconds``, or to the rows
    processed against the rows received.
    """

    mode: ShedMode
    budget_seconds: float = 2.0
    basic_windows: int = 10
    throttle: float | None = None
    control: ShedControl = ShedControl.BUDGET

    @classmethod
    def parse(cls, options: Mapping[str, str], text: str, loc: Location | None,
              default: ShedMode = ShedMode.OFF) -> Shedding | None:
        """The shedding a query's options ask for (``default``: the server's when the query
        says nothing), or None for none; bad values are AnalysisErrors at the value.
        """
        mode = choice(ShedMode, options, "shedding", default, text, loc,
                      "shedding {raw!r}: use 'adaptive' (shed the sub-windows that yield "
                      "least), 'random' or 'off'")
        if mode is ShedMode.OFF:
            for key in SHEDDING_OPTIONS:
                if key in options:
                    msg = (f"{key} tunes load shedding, which is off for this query: add "
                           f"shedding='adaptive' or shedding='random'")
                    raise AnalysisError(msg, text, assignment_at(options, key, loc))
            return None
        budget = seconds_option(options, "latency_budget", text, loc)
        count = options.get("basic_windows", "10")
        # every element of a shedding join keeps a share per sub-window: a bound on both
        if not count.strip().isdigit() or not 1 <= int(count) <= MAX_BASIC_WINDOWS:
            msg = (f"basic_windows {count!r}: use a whole number of sub-windows from 1 to "
                   f"{MAX_BASIC_WINDOWS}")
            raise AnalysisError(msg, text, value_at(options, "basic_windows", loc))
        throttle = None
        if (raw := options.get("throttle")) is not None:
            try:
                throttle = float(raw)
            except ValueError:
                throttle = -1.0
            if not 0 < throttle <= 1:
                msg = (f"throttle {raw!r}: the share of the windows the join processes is "
                       f"a number in (0, 1], e.g. '0.3'")
                raise AnalysisError(msg, text, value_at(options, "throttle", loc))
        control = choice(ShedControl, options, "shedding_control", ShedControl.BUDGET, text,
                         loc, "shedding_control {raw!r}: use 'budget' (the default: keep each "
                         "cycle within latency_budget) or 'ratio' (follow the rows processed "
                         "over the rows received)")
        if control is ShedControl.RATIO and budget is not None:
            msg = ("latency_budget is for shedding_control='budget'; 'ratio' follows the rows "
                   "processed over the rows received, whatever the cycle time")
            raise AnalysisError(msg, text, assignment_at(options, "latency_budget", loc))
        return cls(mode, 2.0 if budget is None else budget, int(count), throttle, control)


@dataclass(frozen=True)
class QueryOptions:
    """``CREATE QUERY ... [INTO sink] WITH (...)``, as the engine reads them."""

    sink: str = SinkKind.MEMORY.value
    on_schema_change: SchemaChange = SchemaChange.STOP
    on_remove: InputRemoved = InputRemoved.STOP
    shedding: Shedding | None = None  # of the query's windowed stream joins
    on_error: OperatorError = OperatorError.STOP
    options: Mapping[str, str] = field(default_factory=dict)  # all of them, as written

    @classmethod
    def parse(cls, options: Mapping[str, str], text: str, loc: Location | None,
              shedding: ShedMode = ShedMode.OFF) -> QueryOptions:
        """The options of a query (``shedding``: the server's default mode); a bad
        ``on_schema_change``, ``on_remove``, ``on_error`` or shedding option is an
        AnalysisError.
        """
        change = choice(SchemaChange, options, "on_schema_change", SchemaChange.STOP, text, loc,
                        "on_schema_change {raw!r}: use 'stop' (the default: stop the query "
                        "when it no longer compiles) or 'keep' (keep the old columns)")
        removed = choice(InputRemoved, options, "on_remove", InputRemoved.STOP, text, loc,
                         "on_remove {raw!r}: use 'stop' (the default: stop the query when "
                         "a feed removes a stream it reads) or 'keep' (the stream's input "
                         "ends, its windows drain and the query goes on)")
        on_error = choice(OperatorError, options, "on_error", OperatorError.STOP, text, loc,
                          "on_error {raw!r}: use 'stop' (the default: stop the query when "
                          "an operator raises) or 'skip' (the rows it raised on go to the "
                          "dead letters, the query goes on)")
        return cls(options.get("sink", SinkKind.MEMORY.value).lower(), change, removed,
                   Shedding.parse(options, text, loc, shedding), on_error,
                   copy_options(options))
