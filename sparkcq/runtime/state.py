"""Operator state at a cycle boundary, written and read back (``Engine.save_state``).

Operators are named by a fingerprint of their plan node, so an engine given the same
statements finds its operators' state under the same names and goes on where the saved
one was. Streams keep their watermarks; the cycle number and the engine's id (under which
transactional sinks recognise its commits) come back with them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass

from pyspark.sql import DataFrame

from sparkcq.errors import CatalogError
from sparkcq.plan.nodes import PlanNode, StreamScan
from sparkcq.runtime.frames import FramePins, unpersist_checkpoints
from sparkcq.runtime.operators.base import Operator
from sparkcq.runtime.operators.shared_output import SharedIntervalFormatter
from sparkcq.runtime.queries import RunningQueries
from sparkcq.runtime.saved_frames import FrameReader, FrameWriter

STREAMS_FILE = "streams.json"


def fingerprint(node: PlanNode) -> str:
    """A name for a plan node that is the same in every process (for saved state)."""
    return hashlib.sha1(repr(node).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SavedState:
    """What a saved state says besides the operators' frames."""

    cycle: int  # the next cycle to run
    engine_id: str


def stateful(queries: RunningQueries,
             ) -> list[tuple[str, Operator | SharedIntervalFormatter]]:
    """Every holder of state, each under the name it is saved as."""
    plan = queries.plan
    holders: list[tuple[str, Operator | SharedIntervalFormatter]] = [
        (fingerprint(node), op) for node, op in plan.ops.items()]
    holders.append(("sink-shared-intervals", queries.intervals))
    family_ops = [op for f in plan.families.fused_families() for op in f.operators()]
    family_ops += [op for g in plan.families.sliced_families() for op in g.operators()]
    holders += [(f"family-{fingerprint(op.node)}", op) for op in family_ops]
    holders += [(fingerprint(scan.node), scan) for scan in queries.scans.values()
                if scan.node not in plan.ops]
    holders += [(f"sink-{run.name.lower()}-{fingerprint(run.info.plan)}", run.formatter)
                for run in queries.running.values()]
    return [(key, holder) for key, holder in holders if holder.cycle_states()]


@dataclass(frozen=True)
class StagedState:
    """A state taken at a cycle boundary whose frames are still to be written (``write``),
    possibly in another thread while later cycles run: the frames its holders held then
    (``held``) stay readable until ``done``, whatever those cycles replace.
    """

    frames: FrameWriter
    held: tuple[DataFrame, ...]
    pins: FramePins

    @property
    def kept_inputs(self) -> Mapping[str, Set[int]]:
        """The cycles whose logged input the state reads again, by stream."""
        return self.frames.inputs

    def write(self) -> None:
        """Write the frames (a Spark job); safe in a thread of its own."""
        self.frames.write()

    def done(self) -> None:
        """Written or given up: free what the cycles since then released (the thread that
        runs cycles calls this).
        """
        unpersist_checkpoints(self.pins.unpin(self.held))


def stage_state(path: str, queries: RunningQueries, saved: SavedState,
                as_name: str | None = None, inputs_logged: bool = False) -> StagedState:
    """Take every operator's state and every stream's watermark under ``path`` (between
    cycles): the small files now, the frames when the result is written. A folder that
    will be ``as_name`` beside earlier states (a checkpoint directory's) references their
    runs that are still live (``FrameWriter``); ``inputs_logged``: every cycle's input
    is logged beside it, so events held are named by cycle, not written.
    """
    os.makedirs(path, exist_ok=True)
    frames = FrameWriter(path, as_name, inputs_logged)
    holders = stateful(queries)
    for key, holder in holders:
        holder.save(os.path.join(path, key), frames)
    frames.seal()
    marks = {name: s.marks() for name, s in queries.scans.items()}
    with open(os.path.join(path, STREAMS_FILE), "w", encoding="utf-8") as f:
        json.dump({"cycle": saved.cycle, "engine_id": saved.engine_id, "streams": marks}, f)
    held = [df for _key, holder in holders for state in holder.cycle_states()
            for df in state.frames()]
    held += [df for scan in queries.scans.values() for df in scan.held_frames]
    queries.rt.pins.pin(held)
    return StagedState(frames, tuple(held), queries.rt.pins)


def save_state(path: str, queries: RunningQueries, saved: SavedState,
               as_name: str | None = None) -> None:
    """``stage_state`` written at once."""
    staged = stage_state(path, queries, saved, as_name)
    try:
        staged.write()
    finally:
        staged.done()


def restore_state(path: str, queries: RunningQueries, engine_id: str,
                  logged: Callable[[StreamScan, int], DataFrame | None] | None = None,
                  ) -> SavedState:
    """Load what ``save_state`` wrote (the same streams and queries must exist); the
    cycle and engine id it was saved at (``engine_id`` if it named none). ``logged``
    reads a scan's raw input of a cycle again from the input log, for a state that named
    its events held by cycle.
    """
    with open(os.path.join(path, STREAMS_FILE), encoding="utf-8") as f:
        saved = json.load(f)
    frames = FrameReader(queries.rt.spark, path, logged)
    for key, holder in stateful(queries):
        folder = os.path.join(path, key)
        if not os.path.isdir(folder):
            label = holder.node.label() if isinstance(holder, Operator) else key
            msg = f"no saved state for operator {label!r} under {path!r}"
            raise CatalogError(msg)
        holder.load(folder, frames)
    for name, marks in saved["streams"].items():
        queries.scans[name].resume(marks["watermark"], marks["max_seen"], marks["ended"])
    queries.plan.resume()
    return SavedState(saved["cycle"], saved.get("engine_id", engine_id))
