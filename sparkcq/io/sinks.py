"""Sinks: where a query's records go, committed once per cycle.

Contract: ``write(cycle, records)`` receives the cycle's non-empty records of every query
using the sink (pandas frames of the user columns plus ``_ts``, ``_te``, ``_op``), collected
by the cycle's single commit action; a cycle's records become visible at once when
``write`` returns, never partly.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd


@dataclass
class QueryOutput:
    """What a sink needs to know of a query: its name, columns, time rendering, options."""

    name: str
    columns: list[str]
    timestamp: bool
    options: dict[str, str] = field(default_factory=dict)


class Sink:
    """Base class of sinks."""

    def write(self, cycle: int, records: dict[str, tuple[QueryOutput, pd.DataFrame]]) -> None:
        """Commit the cycle's records of each query."""
        raise NotImplementedError(type(self).__name__)

    def forget(self, query: str) -> None:
        """The query was dropped."""


@dataclass
class MemorySink(Sink):
    """Keeps every query's records in driver memory for ``Engine.results``."""

    records: dict[str, list[pd.DataFrame]] = field(default_factory=dict)

    def write(self, cycle: int, records: dict[str, tuple[QueryOutput, pd.DataFrame]]) -> None:  # noqa: D102
        for name, (_out, frame) in records.items():
            self.records.setdefault(name, []).append(frame)

    def forget(self, query: str) -> None:  # noqa: D102
        self.records.pop(query, None)

    def frame(self, query: str, columns: list[str]) -> pd.DataFrame:
        """All records of ``query`` so far, in commit order."""
        parts = self.records.get(query, [])
        if not parts:
            return pd.DataFrame({c: [] for c in [*columns, "_ts", "_te", "_op"]})
        return pd.concat(parts, ignore_index=True)


@dataclass
class CallbackSink(Sink):
    """Calls a Python function with each cycle's records of a query as a pandas frame."""

    callback: Callable[[str, int, pd.DataFrame], None]

    def write(self, cycle: int, records: dict[str, tuple[QueryOutput, pd.DataFrame]]) -> None:  # noqa: D102
        for name, (_out, frame) in records.items():
            self.callback(name, cycle, frame)


@dataclass
class ConsoleSink(Sink):
    """Prints each query's new records per cycle as a rich table (at most ``max_rows``)."""

    max_rows: int = 8
    console: Any = None

    def write(self, cycle: int, records: dict[str, tuple[QueryOutput, pd.DataFrame]]) -> None:  # noqa: D102
        from rich.console import Console
        from rich.table import Table

        console = self.console or Console()
        for name, (out, frame) in records.items():
            table = Table(title=f"{name} · cycle {cycle} · {len(frame)} new record(s)",
                          title_justify="left")
            shown = [c for c in [*out.columns, "_ts", "_te", "_op"] if c in frame.columns]
            for c in shown:
                table.add_column(c)
            for rec in frame[shown].head(self.max_rows).itertuples(index=False):
                table.add_row(*[_fmt(v) for v in rec])
            if len(frame) > self.max_rows:
                table.caption = f"... and {len(frame) - self.max_rows} more"
            console.print(table)


def _fmt(value: Any) -> str:
    if value is None or (not isinstance(value, str | bytes | list | dict) and pd.isna(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, pd.Timestamp):
        return value.strftime("%H:%M:%S.%f")[:-3]
    return str(value)


@dataclass
class FilesSink(Sink):
    """Writes each cycle's records of a query as one file, atomically.

    ``CREATE QUERY q INTO files WITH (path='/out', format='parquet' | 'json')``: cycle n of
    query q becomes ``/out/q/cycle-000000n.parquet`` (or ``.jsonl``, JSON lines). The file is
    written under a hidden temporary name and renamed into place, so a reader sees a cycle's
    file whole or not at all.
    """

    def write(self, cycle: int, records: dict[str, tuple[QueryOutput, pd.DataFrame]]) -> None:  # noqa: D102
        for name, (out, frame) in records.items():
            fmt = out.options.get("format", "parquet").lower()
            folder = os.path.join(out.options["path"], name)
            os.makedirs(folder, exist_ok=True)
            ext = "parquet" if fmt == "parquet" else "jsonl"
            final = os.path.join(folder, f"cycle-{cycle:08d}.{ext}")
            tmp = os.path.join(folder, f".cycle-{cycle:08d}.{ext}.tmp")
            if fmt == "parquet":
                frame.to_parquet(tmp, index=False)
            else:
                frame.to_json(tmp, orient="records", lines=True, date_format="iso",
                              date_unit="us")
            os.replace(tmp, final)

    @staticmethod
    def check(options: dict[str, str]) -> str | None:
        """What is wrong with a query's files-sink options, or None."""
        if not options.get("path"):
            return "the files sink needs WITH (path='<directory>')"
        if options.get("format", "parquet").lower() not in ("parquet", "json"):
            return "the files sink writes format='parquet' or format='json'"
        return None
