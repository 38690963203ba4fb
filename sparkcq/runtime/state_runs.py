"""Event-time state kept as runs: each cycle's new elements a frame of their own, merged
when they get many, dropped whole once the watermark passes them.

A state frame rewritten every cycle (``StateFrame``: new state = old state + change,
cached again) costs a cycle what the state holds, not what changed: a join over a minute
of events copies the minute every cycle. Here a state is a list of runs. A cycle adds its
new elements as one run, cached once and never copied again; readers take the union of
the runs they need. Each run's extent in event time (its latest start, earliest and latest
end) is observed by the commit that makes it, so the driver knows, with no Spark job,

- which runs a reader need not look at (no element of the run starts, or ends, in the
  cycle), and
- which runs hold no live element any more (their latest end lies behind the watermark):
  they are dropped whole, nothing rewritten.

Runs are merged size-tiered, like the levels of an LSM tree: when ``FANOUT`` adjacent
runs are of one level (level 0: a cycle's new elements), they become one run of the next
level, written in the cycle's one job with the expired elements left out. A state of ``n``
cycles holds ``O(log n)`` runs and an element is written ``O(log n)`` times, so what a cycle
writes grows with its change, not with the state. A run of ``FINAL_ROWS`` rows or more is
merged no further: large cycles write their elements once, and a state of ``r`` rows holds
at most ``r / FINAL_ROWS`` such runs beside the small ones. A merged run spans no more than a share
of the elements' longest life (``span``), so the oldest run, dropped only when its last
element expires, holds little that is dead::

    cycle  runs (level: cycles they hold; newest last)
      4    0:1  0:2  0:3  0:4          -> merged: 1:1-4
      8    1:1-4  0:5 0:6 0:7 0:8      -> 1:1-4  1:5-8
     16    1:1-4 1:5-8 1:9-12 1:13-16  -> 2:1-16
     61    (window of 60 cycles) 2:1-16 expires after its last element: dropped whole

A run made in a small cycle is in one partition; a large cycle's runs are hash-partitioned
by the state's keys, so a union of runs is partitioned as each of them and a join on the
keys shuffles none. A large cycle first merges the one-partition runs into one partitioned
run (written once); a small cycle reads any run in its one partition as it is.

A cycle's rollback puts the run list back and frees the runs the failed attempt made.
A checkpoint writes the runs made since the last one and a manifest naming every live run
where it was saved (``save``; ``saved_frames.FrameWriter``); the checkpoints whose runs a
newer one still names are kept (``CheckpointStore.prune``), and ``load`` reads the runs
back from where the manifest says.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pyspark.sql import Column, DataFrame
from pyspark.sql.types import StructType

from sparkcq.runtime.frames import (
    Runtime,
    coalesce_partitions,
    col,
    q,
    sql_column,
    union_by_name,
    unpersist_checkpoint,
)
from sparkcq.runtime.saved_frames import FrameReader, FrameWriter, RunRef

#: runs of one level merged into one of the next
FANOUT = 4
#: a run holding this many rows is merged no more: it is read as cheaply alone as within a
#: larger one, and a merge of several would write in one cycle what many cycles took in
#: (a join at 127,000 rows/s merged 2.4M rows in one cycle: 4.7 s against 2.5)
FINAL_ROWS = 100_000
#: a state's manifest in a checkpoint: its runs, where each is saved
MANIFEST_SUFFIX = ".runs.json"


@dataclass(frozen=True)
class Counted:
    """More aggregates the commit that makes a run computes over it as it writes it
    (named ``v4``, ``v5``, ... after the run's own four), and who receives their values
    with the run's frame: what an operator learns of its new elements without reading
    them again.
    """

    metrics: tuple[Column, ...]
    then: Callable[[list[int | None], DataFrame], None]


@dataclass(frozen=True)
class Run:
    """One immutable frame of a state's elements and what its commit observed of them
    (None until that commit ran: a run of the running cycle may hold anything).
    """

    df: DataFrame
    level: int  # merges it went through: 0 for a cycle's new elements
    one_partition: bool  # made in a small cycle
    rows: int | None = None
    last_start: int | None = None
    first_end: int | None = None
    last_end: int | None = None
    first_start: int | None = None  # no element starts before it (None: not known)
    saved: RunRef | None = None  # where a checkpoint saved it, for later ones to reuse

    @property
    def known(self) -> bool:
        """Whether its commit ran: its rows and extent are known."""
        return self.rows is not None

    def starts_from(self, lo: int) -> bool:
        """Whether an element of the run may start at or after ``lo``."""
        return not self.known or (self.last_start is not None and self.last_start >= lo)

    def starts_within(self, lo: int, hi: int) -> bool:
        """Whether an element of the run may start in ``[lo, hi)``."""
        if not self.known:
            return True
        return (self.last_start is not None and self.last_start >= lo
                and (self.first_start is None or self.first_start < hi))

    def ends_within(self, lo: int, hi: int) -> bool:
        """Whether an element of the run may end in ``[lo, hi)``."""
        if not self.known:
            return True
        return (self.first_end is not None and self.last_end is not None
                and self.first_end < hi and self.last_end >= lo)

    def live_at(self, lo: int) -> bool:
        """Whether an element of the run may end at or after ``lo``."""
        return not self.known or (self.last_end is not None and self.last_end >= lo)


@dataclass(frozen=True)
class RunsState:
    """What a ``StateRuns`` holds at a cycle boundary: a cycle's rollback puts it back."""

    runs: tuple[Run, ...]

    @property
    def frames(self) -> tuple[DataFrame, ...]:
        """The runs' frames."""
        return tuple(r.df for r in self.runs)


class StateRuns:
    """An operator's event-time state as runs (see module): elements whose interval starts
    at column ``starts`` and ends at column ``ends``, partitioned by ``keys`` in a large
    cycle. ``span``, if known, is the longest an element lives: a merged run spans at most
    a third of it.
    """

    def __init__(self, rt: Runtime, schema: StructType, name: str, starts: str, ends: str,
                 keys: Sequence[str] = (), span: int | None = None):
        self.rt = rt
        self.schema = schema
        self.name = name
        self.starts, self.ends = starts, ends
        self.keys = tuple(keys)
        self.span = span
        self.runs: tuple[Run, ...] = ()
        # the commit's aggregates over a new run: rows, latest start, earliest and latest end
        self.metrics: tuple[Column, ...] = (
            sql_column("count(1) AS `v0`"), sql_column(f"max({q(starts)}) AS `v1`"),
            sql_column(f"min({q(ends)}) AS `v2`"), sql_column(f"max({q(ends)}) AS `v3`"))

    # -- what it holds --------------------------------------------------------------------
    @property
    def rows(self) -> int:
        """Rows the runs hold (those whose commit ran)."""
        return sum(r.rows or 0 for r in self.runs)

    def snapshot(self) -> RunsState:
        """What the state holds now, for a cycle's transaction."""
        return RunsState(self.runs)

    def restore(self, state: RunsState) -> None:
        """Hold ``state`` again (a failed cycle is rolled back)."""
        self.runs = state.runs

    def frames(self) -> tuple[DataFrame, ...]:
        """The frames of the runs held now."""
        return tuple(r.df for r in self.runs)

    # -- a cycle ----------------------------------------------------------------------------
    def add(self, elements: DataFrame, starts_from: int | None = None,
            counted: Counted | None = None) -> DataFrame:
        """Keep a cycle's new ``elements`` as a run, made by the cycle's commit; returns
        the run's frame (read it rather than ``elements``: it is computed once).
        ``starts_from``: no element starts before it, if the caller knows; ``counted``:
        more of what the commit computes over the run.
        """
        if self.rt.single:
            elements = coalesce_partitions(elements, 1)
        elif self.keys:
            elements = self.rt.partition_by(elements, *[col(k) for k in self.keys])
        run = Run(self.rt.checkpoint(elements), 0, self.rt.single, first_start=starts_from)
        self.runs = (*self.runs, run)
        self.observe(run, counted)
        return run.df

    def expire(self, lo: int) -> None:
        """Drop the runs no element of which ends at or after ``lo`` (freed when the cycle
        ends: its plans may still read them).
        """
        gone = [r for r in self.runs if not r.live_at(lo)]
        if gone:
            self.runs = tuple(r for r in self.runs if r.live_at(lo))
            for run in gone:
                self.rt.release_at_cycle_end(run.df)

    def merge(self, lo: int) -> None:
        """Merge runs (see module): in a large cycle every run made in one partition into
        one partitioned run; then, while ``FANOUT`` adjacent runs are of one level and
        their merge spans no more than a third of ``span``, those into one of the next
        level, the lowest level first. The merged run leaves out elements that ended
        before ``lo``.
        """
        if not self.rt.single:
            small = [r for r in self.runs if r.one_partition]
            if small:  # in the place of the newest of them
                merged = self.merged(small, lo, max(r.level for r in small))
                last = max(i for i, r in enumerate(self.runs) if r.one_partition)
                self.runs = tuple(merged if i == last else r for i, r in enumerate(self.runs)
                                  if i == last or not r.one_partition)
        while (at := self.mergeable()) is not None:
            group = self.runs[at:at + FANOUT]
            self.runs = (*self.runs[:at], self.merged(list(group), lo, group[0].level + 1),
                         *self.runs[at + FANOUT:])

    def mergeable(self) -> int | None:
        """Where the first ``FANOUT`` adjacent runs of the lowest level that has them begin
        (each known and holding fewer than ``FINAL_ROWS`` rows, their merge spanning no more
        than ``spans`` allows); None if no level has them.
        """
        for level in sorted({r.level for r in self.runs}):
            for at in range(len(self.runs) - FANOUT + 1):
                group = self.runs[at:at + FANOUT]
                if all(r.level == level and r.known and (r.rows or 0) < FINAL_ROWS
                       for r in group) and self.spans(group):
                    return at
        return None

    def spans(self, runs: Sequence[Run]) -> bool:
        """Whether ``runs`` merged end within a third of ``span`` of one another."""
        if self.span is None:
            return True
        ends = [e for r in runs for e in (r.first_end, r.last_end) if e is not None]
        return not ends or 3 * (max(ends) - min(ends)) <= self.span

    def merged(self, runs: Sequence[Run], lo: int, level: int) -> Run:
        """One run of ``runs``' elements that end at or after ``lo``, made by the commit."""
        union = self.read(runs)
        assert union is not None
        live = union.where(col(self.ends) >= lo)
        # runs of a large cycle are partitioned alike, and so is their union: Spark then
        # plans no shuffle for this (measured: a merge shuffled only the cycle's new rows)
        if not self.rt.single and self.keys:
            live = self.rt.partition_by(live, *[col(k) for k in self.keys])
        for run in runs:
            self.rt.release_at_cycle_end(run.df)
        firsts = [r.first_start for r in runs]
        run = Run(self.rt.checkpoint(live), level, self.rt.single,
                  first_start=None if None in firsts else min(f for f in firsts if f is not None))
        self.observe(run)
        return run

    def observe(self, run: Run, counted: Counted | None = None) -> None:
        """Have the commit that makes ``run`` tell its rows and extent (an empty run is
        dropped then), and what ``counted`` asks of it.
        """
        own = len(self.metrics)

        def made(values: list[int | None]) -> None:
            if counted is not None:
                counted.then(values[own:], run.df)
            rows, last_start, first_end, last_end = values[:own]
            if not any(r is run for r in self.runs):  # cleared in its own cycle
                return
            known = replace(run, rows=rows or 0, last_start=last_start, first_end=first_end,
                            last_end=last_end)
            if not rows:
                self.rt.release_at_cycle_end(run.df)
            self.runs = tuple(known if r is run else r for r in self.runs if r is not run
                              or rows)
        metrics = self.metrics if counted is None else (*self.metrics, *counted.metrics)
        self.rt.observe(run.df, metrics, made, written=True)

    def clear(self) -> None:
        """Drop every run (the input ended, or the operator leaves the plan)."""
        for run in self.runs:
            self.rt.release_at_cycle_end(run.df)
        self.runs = ()

    # -- reading ------------------------------------------------------------------------------
    def read(self, runs: Sequence[Run]) -> DataFrame | None:
        """The union of ``runs`` (None: none): in a small cycle in one partition, in a large
        one partitioned as each run is.
        """
        if not runs:
            return None
        union = runs[0].df if len(runs) == 1 else union_by_name([r.df for r in runs])
        if self.rt.single and not (len(runs) == 1 and runs[0].one_partition):
            return coalesce_partitions(union, 1)
        return union

    def live(self) -> DataFrame | None:
        """Every run."""
        return self.read(self.runs)

    def starting(self, lo: int) -> DataFrame | None:
        """The runs that may hold elements starting at or after ``lo``."""
        return self.read([r for r in self.runs if r.starts_from(lo)])

    def starting_within(self, spans: Sequence[tuple[int, int]]) -> DataFrame | None:
        """The runs that may hold elements starting in any of ``spans`` (``[lo, hi)``)."""
        return self.read([r for r in self.runs
                          if any(r.starts_within(lo, hi) for lo, hi in spans)])

    def ending(self, lo: int, hi: int) -> DataFrame | None:
        """The runs that may hold elements ending in ``[lo, hi)``."""
        return self.read([r for r in self.runs if r.ends_within(lo, hi)])

    def probers(self, lo: int, hi: int) -> DataFrame | None:
        """The runs that may hold elements starting at or after ``lo`` or ending in
        ``[lo, hi)``.
        """
        return self.read([r for r in self.runs
                          if r.starts_from(lo) or r.ends_within(lo, hi)])

    # -- checkpoints --------------------------------------------------------------------------
    def save(self, path: str, frames: FrameWriter) -> None:
        """Save the runs under ``path`` with the checkpoint's other ``frames``: a manifest
        naming each run where it is saved, written now unless an earlier checkpoint beside
        this one saved it (``FrameWriter.reuse``), so a checkpoint writes the runs made
        since the last one.
        """
        os.makedirs(path, exist_ok=True)
        kept, manifest = [], []
        for run in self.runs:
            ref = run.saved
            if ref is None or not frames.reuse(ref):
                ref = frames.add_run(run.df, run.rows)
                run = replace(run, saved=ref)
            kept.append(run)
            manifest.append({"run": ref.to_json(), "level": run.level})
        self.runs = tuple(kept)
        with open(os.path.join(path, f"{self.name}{MANIFEST_SUFFIX}"), "w",
                  encoding="utf-8") as f:
            json.dump(manifest, f)

    def load(self, path: str, frames: FrameReader) -> None:
        """Restore the runs ``save`` named, each made and measured at once (a Spark job
        each), between cycles; a run an earlier checkpoint saved stays where it is.
        """
        self.rt.free([run.df for run in self.runs])
        self.runs = ()
        listed = os.path.join(path, f"{self.name}{MANIFEST_SUFFIX}")
        if os.path.exists(listed):
            with open(listed, encoding="utf-8") as f:
                manifest = json.load(f)
        elif os.path.exists(os.path.join(path, self.name)):  # one frame, before runs
            manifest = [{"frame": os.path.join(path, self.name), "level": 0}]
        else:  # a state the checkpoint's version did not keep
            manifest = []
        runs = []
        for entry in manifest:
            if "frame" in entry:
                frame, ref = frames.read(entry["frame"], self.schema), None
            else:
                frame, ref = frames.read_run(entry["run"], self.schema)
            kept = self.rt.checkpoint(coalesce_partitions(frame, 1))
            row = kept.agg(*self.metrics).first()
            assert row is not None
            rows, last_start, first_end, last_end = row
            if not rows:
                unpersist_checkpoint(kept)
                continue
            # in one partition: a large cycle merges it into a partitioned run first
            runs.append(Run(kept, int(entry["level"]), True, rows, last_start, first_end,
                            last_end, None, ref))
        self.runs = tuple(runs)

    def release(self) -> None:
        """Hold nothing (the operator leaves the plan)."""
        self.clear()
