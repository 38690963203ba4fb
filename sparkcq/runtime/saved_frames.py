"""A checkpoint's state frames, written by one Spark job and read back one by one.

Writing each state frame as its own Parquet dataset costs a Spark job per frame (a plan,
a job, a commit of its files): on the traffic report that made a checkpoint cost as much
as the cycle it followed. Here every frame of a checkpoint goes into one dataset, one job:
frame ``j``'s rows are the struct column ``_f<j>`` of rows whose ``_frame`` is ``j`` (the
others' columns null). An index beside it names each frame by its path under the checkpoint (the
holder's folder and the frame's name), so a holder saves and loads under the same names
as before; a frame that was empty is not written and reads back empty. Every task of the
union writes one frame's rows into files of its own, so reading a frame back skips the
other files by their ``_frame`` statistics (no partitioned write: that sorts every row by
its partition first). A checkpoint written before this layout (no index: a dataset per
frame at its path) still reads back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from sparkcq.errors import CatalogError
from sparkcq.plan.nodes import StreamScan
from sparkcq.runtime.frames import union_all

FRAMES_FOLDER = "frames"
INDEX_FILE = "frames.json"
REFERENCES_FILE = "references.json"  # the earlier checkpoints' folders whose runs it reads
INPUTS_FILE = "inputs.json"  # the logged input it reads again: {stream: [cycle, ...]}
RUNS_FOLDER = "runs"
OWN_FOLDER = "."  # a run saved in the checkpoint that names it
FRAME = "_frame"
ONE_TASK_ROWS = 1_000_000  # a checkpoint of at most these rows is written by one task


@dataclass(frozen=True)
class RunRef:
    """Where a run of state was saved: frame ``j`` of the checkpoint in ``folder`` of
    ``base`` (``OWN_FOLDER``: the checkpoint read).
    """

    base: str
    folder: str
    j: int

    def to_json(self) -> list[str | int]:
        """As a manifest keeps it (the base is the manifest's own)."""
        return [self.folder, self.j]


class FrameWriter:
    """Collects a checkpoint's frames (``add``), then writes them together (``write``).

    A checkpoint of a checkpoint directory is written in a folder that will be ``name``
    beside the states before it: a run of state (``StateRuns``) one of those wrote, and
    still live, is referenced there (``reuse``) rather than written again, and the folders
    this checkpoint references are listed in ``references.json`` (kept while it is the
    newest: ``CheckpointStore.prune``). Without a ``name`` every run is written.

    ``inputs_logged``: every cycle's input is logged beside it (a checkpoint directory's
    ``offsets``), so events a stream holds are named by the cycle that took them
    (``keep_input``) rather than written; the log keeps those cycles' input while this
    checkpoint is the newest.
    """

    def __init__(self, root: str, name: str | None = None, inputs_logged: bool = False):
        self.root = root
        self.name = name
        self.inputs_logged = inputs_logged
        self.inputs: dict[str, set[int]] = {}  # the logged input it reads again
        self.base = os.path.realpath(os.path.dirname(os.path.abspath(root)))
        self.frames: list[tuple[str, DataFrame]] = []
        self.referenced: set[str] = set()
        self.rows: int | None = 0  # the frames' rows, if known of every one
        self.dataset: DataFrame | None = None  # every frame in one (``seal``)

    def add_run(self, df: DataFrame, rows: int | None) -> RunRef:
        """Save ``df``, a run of state of ``rows`` rows (None: not known), with the
        checkpoint's other frames: where it is, for ``FrameReader.read_run`` and for later
        checkpoints to ``reuse``.
        """
        j = len(self.frames)
        self.append(f"{RUNS_FOLDER}/{j}", df, rows)
        return RunRef(self.base, self.name or OWN_FOLDER, j)

    def reuse(self, ref: RunRef) -> bool:
        """Reference a run an earlier checkpoint beside this one saved, if it is there."""
        if (self.name is None or ref.base != self.base or ref.folder == OWN_FOLDER
                or not os.path.isdir(os.path.join(self.base, ref.folder))):
            return False
        self.referenced.add(ref.folder)
        return True

    def keep_input(self, stream: str, cycle: int) -> bool:
        """Whether the input of ``cycle`` of ``stream`` (its source's key: the name in
        lower case) is logged and kept for this checkpoint (``FrameReader.logged_input``
        reads it again); if not, the caller writes it.
        """
        if self.inputs_logged:
            self.inputs.setdefault(stream, set()).add(cycle)
        return self.inputs_logged

    def add(self, path: str, df: DataFrame | None, rows: int | None = None) -> None:
        """Save ``df`` (``rows`` rows; None: not known) as the frame at ``path`` (under
        the root); None saves it empty.
        """
        os.makedirs(path, exist_ok=True)  # the holder's folder, for files of its own
        if df is not None:
            self.append(os.path.relpath(path, self.root), df, rows)

    def append(self, name: str, df: DataFrame, rows: int | None) -> None:
        """Add frame ``name``, counting its rows."""
        self.frames.append((name, df))
        self.rows = None if self.rows is None or rows is None else self.rows + rows

    def seal(self) -> None:
        """Build the one dataset of every frame added (the plan alone: ``write`` runs it,
        in any thread). Frames of few rows in all are written by one task, into one
        file: a file and its commit cost a task more than its rows do (a checkpoint that
        writes a cycle's change is small; ``ONE_TASK_ROWS``).
        """
        if self.frames:
            kinds = [df.schema for _name, df in self.frames]
            parts = []
            for j, (_name, df) in enumerate(self.frames):
                columns = [F.struct(*[df[f"`{f.name}`"] for f in df.schema.fields])
                           if i == j else F.lit(None).cast(kind) for i, kind in enumerate(kinds)]
                parts.append(df.select(F.lit(j).alias(FRAME), *[
                    c.alias(f"_f{i}") for i, c in enumerate(columns)]))
            union = union_all(parts)
            assert union is not None
            if self.rows is not None and self.rows <= ONE_TASK_ROWS:
                union = union.coalesce(1)
            self.dataset = union

    def write(self) -> None:
        """Write every frame added, in one Spark job, and the index naming them."""
        if self.dataset is None:
            self.seal()
        if self.dataset is not None:
            self.dataset.write.mode("overwrite").parquet(os.path.join(self.root, FRAMES_FOLDER))
        index = {name: j for j, (name, _df) in enumerate(self.frames)}
        with open(os.path.join(self.root, INDEX_FILE), "w", encoding="utf-8") as f:
            json.dump(index, f)
        with open(os.path.join(self.root, REFERENCES_FILE), "w", encoding="utf-8") as f:
            json.dump(sorted(self.referenced), f)
        with open(os.path.join(self.root, INPUTS_FILE), "w", encoding="utf-8") as f:
            json.dump({k: sorted(v) for k, v in self.inputs.items()}, f)


class FrameReader:
    """Reads back the frames a ``FrameWriter`` wrote under ``root``, or those of a checkpoint
    written before it, one Parquet dataset per frame at the frame's own path.
    """

    def __init__(self, spark: SparkSession, root: str,
                 logged: Callable[[StreamScan, int], DataFrame | None] | None = None):
        self.spark = spark
        self.root = root
        self.logged = logged  # a scan's raw input of a logged cycle (``logged_input``)
        self.index: dict[str, int] | None = None  # None: a dataset per frame
        index = os.path.join(root, INDEX_FILE)
        if os.path.exists(index):
            with open(index, encoding="utf-8") as f:
                self.index = json.load(f)
        elif not os.path.isdir(root):
            msg = f"no saved frames under {root!r} (no such folder)"
            raise CatalogError(msg)
        self.dataset: DataFrame | None = None

    def logged_input(self, scan: StreamScan, cycle: int) -> DataFrame | None:
        """The raw batch stream scan ``scan`` took in ``cycle``, read again from the input
        log (None: not logged, or no log).
        """
        return None if self.logged is None else self.logged(scan, cycle)

    def read_as_saved(self, path: str) -> DataFrame | None:
        """The frame saved at ``path`` with the columns it was saved with; None if it was
        saved empty (for a holder whose columns follow what runs: ``SharedIntervalFormatter``).
        """
        if self.index is None:  # a dataset per frame: none written if it was empty
            written = os.path.isdir(path) and any(f.endswith(".parquet")
                                                  for f in os.listdir(path))
            return self.spark.read.parquet(path) if written else None
        j = self.index.get(os.path.relpath(path, self.root))
        if j is None:
            return None
        if self.dataset is None:
            self.dataset = self.spark.read.parquet(os.path.join(self.root, FRAMES_FOLDER))
        return self.dataset.where(F.col(FRAME) == j).select(f"_f{j}.*")

    def read_run(self, saved: list[str | int], schema: StructType,
                 ) -> tuple[DataFrame, RunRef | None]:
        """A run a manifest names (``RunRef.to_json``), with the columns of ``schema``, and
        where it is for a later checkpoint beside this one to reuse (None: nowhere it can).
        """
        folder, j = str(saved[0]), int(saved[1])
        own = folder in (OWN_FOLDER, os.path.basename(os.path.normpath(self.root)))
        reader = self if own else FrameReader(
            self.spark, os.path.join(os.path.dirname(os.path.normpath(self.root)), folder))
        frame = reader.read(os.path.join(reader.root, RUNS_FOLDER, str(j)), schema)
        if folder == OWN_FOLDER:
            return frame, None
        base = os.path.realpath(os.path.dirname(os.path.abspath(self.root)))
        return frame, RunRef(base, os.path.basename(os.path.normpath(reader.root)), j)

    def read(self, path: str, schema: StructType) -> DataFrame:
        """The frame saved at ``path``, with the columns of ``schema``."""
        if self.index is None:
            return self.spark.read.schema(schema).parquet(path)
        frame = self.read_as_saved(path)
        if frame is None:
            return self.spark.createDataFrame([], schema)
        return frame.select(*[F.col(f"`{f.name}`").cast(f.dataType) for f in schema.fields])
