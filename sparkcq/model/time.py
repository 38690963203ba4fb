"""Event time: durations in query text and the long encoding used on every plan edge.

Timestamps are carried as microseconds since the epoch, numeric event times as-is, so every
operator works on one ``LONG`` time axis. ``TIME_MAX`` stands for +infinity (an element that
never ends, the watermark at end of input).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import Enum

TIME_MAX = 2**63 - 1
TIME_MIN = -(2**63)

_UNIT_MICROS = {
    "MICROSECOND": 1,
    "MICROSECONDS": 1,
    "MILLISECOND": 1_000,
    "MILLISECONDS": 1_000,
    "MILLIS": 1_000,
    "MS": 1_000,
    "SECOND": 1_000_000,
    "SECONDS": 1_000_000,
    "SECS": 1_000_000,
    "SEC": 1_000_000,
    "S": 1_000_000,
    "MINUTE": 60_000_000,
    "MINUTES": 60_000_000,
    "MINS": 60_000_000,
    "MIN": 60_000_000,
    "HOUR": 3_600_000_000,
    "HOURS": 3_600_000_000,
    "DAY": 86_400_000_000,
    "DAYS": 86_400_000_000,
}

DURATION_UNITS = frozenset(_UNIT_MICROS)


class TimeKind(Enum):
    """Whether a stream's event time is a timestamp or an abstract integral number."""

    TIMESTAMP = "timestamp"
    NUMERIC = "numeric"


@dataclass(frozen=True)
class Duration:
    """A length of event time as written in a query: an amount and an optional unit."""

    amount: int
    unit: str | None = None

    def to_units(self, kind: TimeKind, unit_micros: int | None = None) -> int:
        """Return the length on the long time axis of a stream of ``kind``; a numeric
        stream whose unit is declared (``time_unit='seconds'``: ``unit_micros``) takes
        durations with a unit too.

        Raises ValueError with a message naming the mismatch: a unit on a numeric stream
        without a declared unit, a bare number on a timestamp stream, or a duration that is
        no whole number of the stream's unit.
        """
        if kind is TimeKind.NUMERIC:
            if self.unit is not None and unit_micros is not None:
                micros = self.amount * _UNIT_MICROS[self.unit.upper()]
                if micros % unit_micros:
                    msg = (f"duration '{self}' is not a whole number of the stream's time "
                           f"unit ({show_micros(unit_micros)})")
                    raise ValueError(msg)
                return micros // unit_micros
            if self.unit is not None:
                msg = (
                    f"duration '{self}' has a unit but the stream's event time is a number; "
                    f"write a plain number such as {self.amount}, or declare the unit "
                    f"of the event time: WITH (time_unit='seconds')"
                )
                raise ValueError(msg)
            return self.amount
        if self.unit is None:
            msg = (
                f"duration '{self}' needs a unit because the stream's event time is a "
                f"timestamp; write e.g. '{self.amount} SECONDS'"
            )
            raise ValueError(msg)
        return self.amount * _UNIT_MICROS[self.unit.upper()]

    def __str__(self) -> str:
        return f"{self.amount} {self.unit}" if self.unit else str(self.amount)


def parse_duration(text: str) -> Duration:
    """Parse '60 SECONDS', '5 min' or '10' into a Duration; ValueError names what is wrong."""
    parts = text.strip().split()
    if not parts or len(parts) > 2:
        msg = f"cannot read duration {text!r}; expected e.g. '60 SECONDS' or '10'"
        raise ValueError(msg)
    try:
        amount = int(parts[0])
    except ValueError:
        msg = f"cannot read duration {text!r}: {parts[0]!r} is not a whole number"
        raise ValueError(msg) from None
    if len(parts) == 1:
        return Duration(amount)
    unit = parts[1].upper()
    if unit not in _UNIT_MICROS:
        msg = f"unknown time unit {parts[1]!r} in {text!r}; use one of SECONDS, MINUTES, HOURS, ..."
        raise ValueError(msg)
    return Duration(amount, unit)


def unit_micros(name: str) -> int:
    """Microseconds in one ``name`` ('seconds', 'ms', ...); ValueError lists the units."""
    micros = _UNIT_MICROS.get(name.strip().upper())
    if micros is None:
        msg = (f"unknown time unit {name!r}; use one of microseconds, milliseconds, seconds, "
               f"minutes, hours, days")
        raise ValueError(msg)
    return micros


def shift(at: int, by: int) -> int:
    """``at + by`` kept on the time axis: a bound computed from "no watermark yet"
    (``TIME_MIN``) or +infinity stays within ``LONG``, as Spark must read it.

    >>> shift(TIME_MIN, -6000) == TIME_MIN and shift(10, -6000)
    -5990
    """
    return max(TIME_MIN, min(TIME_MAX, at + by))


def show_micros(micros: int) -> str:
    """A duration in microseconds in the largest unit that divides it: '60 SECONDS'."""
    for unit, size in (("DAYS", 86_400_000_000), ("HOURS", 3_600_000_000),
                       ("MINUTES", 60_000_000), ("SECONDS", 1_000_000), ("MILLISECONDS", 1000)):
        if micros % size == 0:
            n = micros // size
            return f"{n} {unit[:-1] if n == 1 else unit}"
    return f"{micros} MICROSECONDS"


def show_instant(at: int, kind: TimeKind) -> str:
    """An instant of the time axis as a user reads it: a number, or for timestamps the UTC
    time (``2026-01-01T00:00:05+00:00``); ``+inf`` for ``TIME_MAX`` (an ended stream's
    watermark) and ``none yet`` for ``TIME_MIN`` (a watermark before any event).
    """
    if at == TIME_MAX:
        return "+inf"
    if at == TIME_MIN:
        return "none yet"
    if kind is TimeKind.TIMESTAMP:
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        return (epoch + dt.timedelta(microseconds=at)).isoformat()
    return str(at)
