"""The suite's input: ``(k INT, v DOUBLE, ts TIMESTAMP)`` events as CSV files.

Event ``i`` has time ``START + i ms`` (at ``rate`` events per second of event time, 1,000 by
default: ``START + i * 1000 / rate`` ms) plus a jitter below 500 ms, so the stream is slightly
out of order and a 1-second watermark delay never makes an event late. No event falls on a
whole second: window bounds are whole seconds, and the engines disagree on which side of a
bound an event exactly on it belongs (sparkcq's snapshot at ``m`` of ``[RANGE 60 SECONDS]``
holds ``(m-60, m]``, Flink's and Spark's window ending at ``m`` holds ``[m-60, m)``), so with
none on a bound their outputs can be compared row for row. The same events are
written in two layouts:

- ``path/chunks/*.csv``: consecutive time ranges, one file per cycle for the engines that cycle
  (sparkcq's ``files_per_cycle``, Spark's ``maxFilesPerTrigger``). Spark's file source takes
  the oldest files first by modification time, to the millisecond; files written within one
  millisecond tie and come in the directory's order, so ``order_by_name`` sets the times
  apart in the order of the names (without it Spark's NEXMark q8 read its files out of time
  order and dropped whole windows as late);
- ``path/lanes/lane-N.csv``: one file per Flink source reader, events dealt round-robin, so
  each file spans the whole time in order within the bound. A Flink reader that worked
  through time-range files would take them in an order of its own (seen: last first) and
  drop the earlier files' rows as late, silently.

Deterministic from the seed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

START = pd.Timestamp("2026-01-01 00:00:00")
JITTER_MS = 500
WATERMARK_DELAY = "1 second"


@dataclass(frozen=True)
class Input:
    """Where the events are and what they are."""

    path: str
    events: int
    keys: int
    files: int
    lanes: int

    @property
    def chunks_path(self) -> str:  # noqa: D102
        return os.path.join(self.path, "chunks")

    @property
    def lanes_path(self) -> str:  # noqa: D102
        return os.path.join(self.path, "lanes")


def write_events(path: str, events: int, keys: int = 1000, files: int = 8, lanes: int = 2,
                 seed: int = 7, rate: int = 1000) -> Input:
    """Write ``events`` events into ``files`` CSV files under ``path/chunks`` and ``lanes``
    files under ``path/lanes`` (if not there yet; ``path/_complete`` marks a finished set).
    """
    inp = Input(path, events, keys, files, lanes)
    done = os.path.join(path, "_complete")
    if os.path.exists(done):
        order_by_name(inp.chunks_path)
        return inp
    os.makedirs(inp.lanes_path, exist_ok=True)
    os.makedirs(inp.chunks_path, exist_ok=True)
    rng = np.random.default_rng(seed)
    i = np.arange(events, dtype=np.int64)
    ms = i * 1000 // rate + rng.integers(0, JITTER_MS, events)
    ms += (ms % 1000 == 0)  # off the whole second (see above)
    frame = pd.DataFrame({
        "k": rng.integers(0, keys, events).astype(np.int32),
        "v": np.round(rng.random(events) * 100, 3),
        "ts": (START + pd.to_timedelta(ms, unit="ms")).strftime("%Y-%m-%d %H:%M:%S.%f")
        .str[:-3],
    })
    bounds = np.linspace(0, events, files + 1).astype(np.int64)
    for f in range(files):
        part = frame.iloc[bounds[f]:bounds[f + 1]]
        part.to_csv(os.path.join(inp.chunks_path, part_file(f, files)), index=False,
                    header=False)
    order_by_name(inp.chunks_path)
    for lane in range(lanes):
        frame.iloc[lane::lanes].to_csv(os.path.join(inp.lanes_path, f"lane-{lane}.csv"),
                                       index=False, header=False)
    mark_written(done)
    return inp


def mark_written(done: str) -> None:
    """Flush what was written to the disk, then create the marker ``done``, so no timed run
    shares the disk with the kernel writing the new files back. (It is not why the first of
    an engine's runs at a size is often its slowest: that held with files written an hour
    before.)
    """
    os.sync()
    open(done, "w").close()  # noqa: SIM115


def part_file(i: int, files: int) -> str:
    """The name of the ``i``-th of ``files`` time-range files, padded so that names sort in
    time order: with three digits ``part-1000.csv`` sorted between ``part-100.csv`` and
    ``part-101.csv``, and a reader of 2,000 files in name order dropped half of NEXMark q8's
    rows as late.
    """
    return f"part-{i:0{max(3, len(str(files - 1)))}d}.csv"


def order_by_name(folder: str) -> None:
    """Give the CSV files in ``folder`` modification times one second apart in the order of
    their names, so a reader that takes the oldest first (Spark's file source) reads them in
    time order.
    """
    names = sorted(n for n in os.listdir(folder) if n.endswith(".csv"))
    first = int(os.stat(folder).st_mtime) - len(names)
    for i, name in enumerate(names):
        os.utime(os.path.join(folder, name), (first + i, first + i))


def read_events(inp: Input) -> pd.DataFrame:
    """All events, for the independent count of expected output rows."""
    names = sorted(n for n in os.listdir(inp.chunks_path) if n.endswith(".csv"))
    frames = [pd.read_csv(os.path.join(inp.chunks_path, n), names=["k", "v", "ts"],
                          parse_dates=["ts"]) for n in names]
    return pd.concat(frames, ignore_index=True)
