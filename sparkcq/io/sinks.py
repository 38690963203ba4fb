"""Sinks: where a query's records go, committed once per cycle.

Contract: ``write(cycle, records)`` receives the cycle's non-empty records of every query
using the sink (pandas frames of the user columns plus ``_ts``, ``_te``, ``_op``), collected
by the cycle's single commit action; a cycle's records become visible at once when
``write`` returns, never partly. ``write`` runs inside the cycle: when it raises, the cycle
is rolled back and its input kept, and the next cycle, numbered the same, brings the records
again (with any input that arrived since). Sinks marked ``replayable`` (a cycle written
again replaces or skips what was written) are written first, so that a failing one leaves
the others (the memory sink) without the cycle's records.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd
from pyspark.sql.types import StructType

from sparkcq.catalog import is_identifier
from sparkcq.errors import ExecutionError
from sparkcq.language.sql.statements import OutputForm
from sparkcq.model.columns import OP, TE, TS


@dataclass
class QueryOutput:
    """What a sink needs to know of a query: its name, columns (and their Spark types),
    time rendering (``_ts``/``_te`` timestamps or numbers), output form, options.
    """

    name: str
    columns: list[str]
    timestamp: bool
    options: dict[str, str] = field(default_factory=dict)
    schema: StructType | None = None
    form: OutputForm = OutputForm.INTERVALS


class Sink:
    """Base class of sinks."""

    replayable: ClassVar[bool] = False  # writing a cycle again adds nothing (see above)

    def prepare(self, output: QueryOutput) -> None:
        """A query will write here (CREATE QUERY): check its options, make its table; a
        SparkcqError refuses the query.
        """

    def write(self, cycle: int, records: dict[str, tuple[QueryOutput, pd.DataFrame]]) -> None:
        """Commit the cycle's records of each query."""
        raise NotImplementedError(type(self).__name__)

    def forget(self, query: str) -> None:
        """The query was dropped."""

    def resume(self, engine_id: str) -> None:
        """The engine goes on from the state engine ``engine_id`` saved (``restore_state``)."""

    def close(self) -> None:
        """The engine stops: release connections."""


@dataclass(frozen=True)
class Retention:
    """How many of a query's records the memory sink keeps: the newest ``rows`` and/or
    those committed in the last ``seconds`` (None: no bound of that kind).
    """

    rows: int | None = None
    seconds: float | None = None

    @classmethod
    def of(cls, options: dict[str, str], default: Retention) -> Retention:
        """A query's ``WITH (retain_rows='n', retain_seconds='s')``, else ``default``."""
        rows, seconds = options.get("retain_rows"), options.get("retain_seconds")
        return cls(int(rows) if rows is not None else default.rows,
                   float(seconds) if seconds is not None else default.seconds)

    @staticmethod
    def check(options: dict[str, str]) -> str | None:
        """What is wrong with a query's retention options, if anything."""
        for key, kind in (("retain_rows", int), ("retain_seconds", float)):
            if key in options:
                try:
                    ok = kind(options[key]) > 0
                except ValueError:
                    ok = False
                if not ok:
                    return f"{key} must be a positive number, got {options[key]!r}"
        return None


@dataclass
class _Kept:
    """One query's retained records: frames with the offset of their first record."""

    parts: deque[tuple[int, float, pd.DataFrame]] = field(default_factory=deque)
    end: int = 0  # offset after the newest record

    @property
    def first(self) -> int:
        return self.parts[0][0] if self.parts else self.end


@dataclass
class MemorySink(Sink):
    """Keeps each query's newest records in driver memory for ``Engine.results`` and the
    server's ``/results``; what falls out of the retention is gone (``first_offset`` says
    where the kept records begin). Reads may come from any thread.
    """

    retention: Retention = field(default_factory=Retention)
    kept: dict[str, _Kept] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    clock: Callable[[], float] = time.monotonic

    def write(self, cycle: int, records: dict[str, tuple[QueryOutput, pd.DataFrame]]) -> None:  # noqa: D102
        now = self.clock()
        with self.lock:
            for name, (out, frame) in records.items():
                kept = self.kept.setdefault(name, _Kept())
                if TS in frame.columns:  # a cycle's records come in Spark's partition order
                    frame = frame.sort_values(TS, kind="mergesort", na_position="first")
                kept.parts.append((kept.end, now, frame.reset_index(drop=True)))
                kept.end += len(frame)
                self._trim(kept, Retention.of(out.options, self.retention), now)

    @staticmethod
    def _trim(kept: _Kept, keep: Retention, now: float) -> None:
        if keep.seconds is not None:
            while kept.parts and kept.parts[0][1] < now - keep.seconds:
                kept.parts.popleft()
        if keep.rows is not None:
            while kept.parts and kept.end - kept.parts[0][0] > keep.rows:
                start, at, frame = kept.parts.popleft()
                drop = kept.end - start - keep.rows
                if drop < len(frame):  # keep the newest part of this frame
                    kept.parts.appendleft((start + drop, at, frame.iloc[drop:]))

    def forget(self, query: str) -> None:  # noqa: D102
        with self.lock:
            self.kept.pop(query, None)

    def clear(self) -> None:
        """Drop every kept record (benchmarks keep the driver's buffer out of a run)."""
        with self.lock:
            for kept in self.kept.values():
                kept.parts.clear()

    def since(self, query: str, offset: int) -> tuple[pd.DataFrame, int, int]:
        """Kept records of ``query`` from ``offset`` on: (frame, offset after them, offset of
        the first record still kept). Records before that were dropped by the retention.
        """
        with self.lock:
            kept = self.kept.get(query)
            if kept is None:
                return pd.DataFrame(), 0, 0
            parts = [(start, frame) for start, _, frame in kept.parts
                     if start + len(frame) > offset]
            end, first = kept.end, kept.first
        frames = [frame.iloc[max(0, offset - start):] for start, frame in parts]
        out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        return out, end, first

    def frame(self, query: str, columns: list[str]) -> pd.DataFrame:
        """The kept records of ``query``, in commit order."""
        out, _, _ = self.since(query, 0)
        if out.empty and not len(out.columns):
            return pd.DataFrame({c: [] for c in [*columns, TS, TE, OP]})
        return out


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
            shown = [c for c in [*out.columns, TS, TE, OP] if c in frame.columns]
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


# the folder, under a files sink's path, of the markers of committed cycles: not an
# identifier, so no query's folder can have its name
COMMITTED = "_committed-cycles"


@dataclass
class FilesSink(Sink):
    """Writes each cycle's records of a query as one file; a cycle of all queries under one
    path is committed at once.

    ``CREATE QUERY q INTO files WITH (path='/out', format='parquet' | 'json')``: cycle n of
    query q becomes ``/out/q/cycle-000000n.parquet`` (or ``.jsonl``, JSON lines). Each file
    is written under a hidden temporary name and renamed into place, so a reader sees a
    cycle's file whole or not at all. Once every query's file of cycle n under ``/out`` is in
    place, the empty marker ``/out/_committed-cycles/cycle-000000n`` is written (the same
    way): cycle n is **committed** when its marker exists, and only then are its files
    under ``/out`` all there. A reader that wants whole cycles across queries reads the
    files of committed cycles only; one that reads a single query's folder may read any
    file. A cycle written again (done again after a failure) replaces its files. A query's
    folder is always a direct child of ``path``.
    """

    replayable: ClassVar[bool] = True  # a cycle written again replaces its files

    def write(self, cycle: int, records: dict[str, tuple[QueryOutput, pd.DataFrame]]) -> None:  # noqa: D102
        moves: list[tuple[str, str]] = []
        paths: list[str] = []
        try:
            for name, (out, frame) in records.items():
                fmt = out.options.get("format", "parquet").lower()
                folder = self.query_folder(out.options["path"], name)
                os.makedirs(folder, exist_ok=True)
                ext = "parquet" if fmt == "parquet" else "jsonl"
                tmp = os.path.join(folder, f".cycle-{cycle:08d}.{ext}.tmp")
                moves.append((tmp, os.path.join(folder, f"cycle-{cycle:08d}.{ext}")))
                if fmt == "parquet":
                    frame.to_parquet(tmp, index=False)
                else:
                    frame.to_json(tmp, orient="records", lines=True, date_format="iso",
                                  date_unit="us")
                if out.options["path"] not in paths:
                    paths.append(out.options["path"])
        except BaseException:
            for tmp, _final in moves:
                if os.path.exists(tmp):
                    os.remove(tmp)
            raise
        for tmp, final in moves:
            os.replace(tmp, final)
        for path in paths:
            marks = os.path.join(path, COMMITTED)
            os.makedirs(marks, exist_ok=True)
            tmp = os.path.join(marks, f".cycle-{cycle:08d}.tmp")
            with open(tmp, "w", encoding="utf-8"):
                pass
            os.replace(tmp, os.path.join(marks, f"cycle-{cycle:08d}"))

    @staticmethod
    def committed_cycles(path: str) -> list[int]:
        """The cycles whose files under ``path`` are all in place, in order."""
        marks = os.path.join(path, COMMITTED)
        if not os.path.isdir(marks):
            return []
        return sorted(int(n[len("cycle-"):]) for n in os.listdir(marks)
                      if n.startswith("cycle-") and n[len("cycle-"):].isdigit())

    @staticmethod
    def query_folder(path: str, query: str) -> str:
        """The folder of ``query``'s files under ``path``; ExecutionError if it would not be a
        direct child of ``path`` (the catalog admits only identifiers as names, and a link
        in place of the folder could lead elsewhere).
        """
        folder = os.path.join(path, query)
        real = os.path.realpath(folder)
        if not is_identifier(query) or os.path.dirname(real) != os.path.realpath(path):
            msg = (f"files sink: query {query!r} would write to {real!r}, outside its folder "
                   f"under {path!r}; nothing was written")
            raise ExecutionError(msg)
        return folder

    @staticmethod
    def check(options: dict[str, str]) -> str | None:
        """What is wrong with a query's files-sink options, or None."""
        if not options.get("path"):
            return "the files sink needs WITH (path='<directory>')"
        if options.get("format", "parquet").lower() not in ("parquet", "json"):
            return "the files sink writes format='parquet' or format='json'"
        return None
