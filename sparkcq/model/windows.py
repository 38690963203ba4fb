"""Window clauses as written in a query, before durations are resolved against a stream."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sparkcq.model.time import Duration


@dataclass(frozen=True)
class RangeWindow:
    """``[RANGE w]`` or ``[RANGE w SLIDE s]``: an element lives for ``w``; hops by ``s``."""

    size: Duration
    slide: Duration | None = None


@dataclass(frozen=True)
class NowWindow:
    """``[NOW]``: an element lives for one time unit."""


@dataclass(frozen=True)
class UnboundedWindow:
    """``[UNBOUNDED]``: an element never leaves."""


@dataclass(frozen=True)
class RowsWindow:
    """``[ROWS n]`` / ``[PARTITION BY k ROWS n]``: the last n rows (of each partition)."""

    rows: int
    partition_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class CutWindow:
    """``[CUT ON t BY d [WINDOW m CHUNKS]]``: time chunks valid from their cut point."""

    by: Duration
    on: str | None = None
    chunks: int = 1


@dataclass(frozen=True)
class CountCutWindow:
    """``[CUT EVERY n ROWS [WINDOW m CHUNKS]]``: chunks of n rows in event-time order."""

    rows: int
    chunks: int = 1


@dataclass(frozen=True)
class KeyCutWindow:
    """``[CUT ON k [WINDOW m CHUNKS]]``: a new chunk whenever the key's value changes."""

    keys: tuple[str, ...]
    chunks: int = 1


@dataclass(frozen=True)
class SessionWindow:
    """``[SESSION g]`` / ``[PARTITION BY k SESSION g]``: an element lives from its event
    until ``g`` after the last event of its session (of its partition).
    """

    gap: Duration
    partition_by: tuple[str, ...] = ()


class AssignedKind(Enum):
    """How events are assigned to windows ``[start, end)`` in Flink's and Spark's forms."""

    TUMBLE = "TUMBLE"
    HOP = "HOP"
    CUMULATE = "CUMULATE"
    SESSION = "SESSION"


class BoundsNaming(Enum):
    """How a query names its window's bounds: Flink's ``window_start``, ``window_end`` and
    ``window_time`` columns, or Spark's ``window`` struct of ``start`` and ``end``.
    """

    FLINK = "flink"
    SPARK = "spark"


@dataclass(frozen=True)
class AssignedWindow:
    """Windows ``[start, end)`` of event time as Flink's window table functions and Spark's
    ``window()`` write them: an event at ``t`` lies in every window with ``start <= t <
    end``; starts are multiples of ``step`` (HOP's slide, CUMULATE's step, TUMBLE's size)
    and a window's bounds are columns of its result rows.

    ``TABLE(HOP(TABLE s, DESCRIPTOR(t), INTERVAL '5' SECONDS, INTERVAL '10' SECONDS))`` is
    ``AssignedWindow(HOP, 't', size=10 SECONDS, step=5 SECONDS, FLINK)``.
    """

    kind: AssignedKind
    time_column: str
    size: Duration  # SESSION: the gap
    step: Duration
    naming: BoundsNaming
    partition_by: tuple[str, ...] = ()  # SESSION: sessions per these columns


@dataclass(frozen=True)
class LookupTime:
    """``JOIN table FOR SYSTEM_TIME AS OF s.t``: a lookup join, each event of the stream
    meeting the table's rows as of its event time ``s.t`` (``path``: the column as written).
    """

    path: tuple[str, ...]


WindowSpec = (RangeWindow | NowWindow | UnboundedWindow | RowsWindow | CutWindow
              | CountCutWindow | KeyCutWindow | SessionWindow | AssignedWindow | LookupTime)
