"""Crash recovery: journal the catalog, log each cycle's input, checkpoint committed cycles,
and replay them after a restart (``docs/architecture.md``, "Checkpoints and recovery").

The journal is a list of typed entries, each a change to the catalog: a script that ran,
a table registered from Python, a DROP, an aggregate or function created from Python, a
feed's HEADER or REMOVE. A cycle is committed when its sinks returned; the state ready for
the next cycle is then written (every ``every`` cycles that took input). A restart with the
same directory replays the journal onto a new engine (a ``Replay`` target: the facade),
loads the newest state, and redoes every cycle whose input was logged after it, with that
same input: a transactional sink (PostgreSQL) recognises the cycles it committed already,
so it ends up with every cycle's rows exactly once. Rows pushed but not yet taken by a
cycle are not in the log: pushed ones are lost with the process; a feed stream's are in
its spool, which keeps every entry after the newest checkpoint's position
(``io/feed_source.py``), so they are queued again.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pyspark.sql import DataFrame, SparkSession

from sparkcq.errors import CatalogError
from sparkcq.language.sql.parser import parse_script
from sparkcq.language.sql.statements import Explain, Show
from sparkcq.runtime.checkpoint import CheckpointStore, write_atomically
from sparkcq.runtime.throttles import JOURNAL_KEY

if TYPE_CHECKING:
    from sparkcq.statements.remove import Removal

SOURCES_FILE = "sources.json"
log = logging.getLogger("sparkcq.recovery")


def importable_name(obj: Callable[..., Any] | type) -> str:
    """``module:qualname`` of a function or class a restart can import again."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        msg = (f"{obj!r} is defined in {module or 'no module'}; an engine with a checkpoint "
               "directory must import it again after a restart: define it at the top of a "
               "module")
        raise CatalogError(msg)
    return f"{module}:{qualname}"


def import_name(ref: str) -> Any:
    """The object ``importable_name`` named."""
    module, _, qualname = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


# -- the journal's entries ---------------------------------------------------------------
@dataclass(frozen=True)
class ScriptEntry:
    """A script of statements that ran (and changed the catalog)."""

    sql: str


@dataclass(frozen=True)
class TableEntry:
    """A table registered from Python: its rows, written as Parquet under ``path``."""

    name: str
    path: str


@dataclass(frozen=True)
class DropEntry:
    """``Engine.drop(kind, name)`` called from Python."""

    kind: str
    name: str


@dataclass(frozen=True)
class AggregateEntry:
    """``Engine.create_aggregate``: the class by its importable name."""

    name: str
    cls: str
    params: tuple[tuple[str, str], ...]
    returns: str


@dataclass(frozen=True)
class FunctionEntry:
    """``Engine.create_function``: the function by its importable name."""

    name: str
    ref: str
    returns: str
    vectorized: bool


@dataclass(frozen=True)
class TableFunctionEntry:
    """``Engine.create_table_function``: the class by its importable name."""

    name: str
    cls: str
    params: tuple[tuple[str, str], ...]
    columns: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class HeaderEntry:
    """A feed's HEADER."""

    stream: str
    columns: tuple[tuple[str, str], ...]
    options: Mapping[str, str]


@dataclass(frozen=True)
class RemoveEntry:
    """A feed's REMOVE."""

    stream: str
    reason: str


JournalEntry = (ScriptEntry | TableEntry | DropEntry | AggregateEntry | FunctionEntry
                | TableFunctionEntry | HeaderEntry | RemoveEntry)


def entry_json(entry: JournalEntry) -> dict[str, Any]:
    """How an entry is written in ``catalog.jsonl``."""
    match entry:
        case ScriptEntry(sql):
            return {"sql": sql}
        case TableEntry(name, path):
            return {"table": name, "path": path}
        case DropEntry(kind, name):
            return {"drop": kind, "name": name}
        case AggregateEntry(name, cls, params, returns):
            return {"aggregate": name, "class": cls, "returns": returns,
                    "params": [list(p) for p in params]}
        case FunctionEntry(name, ref, returns, vectorized):
            return {"function": name, "ref": ref, "returns": returns, "vectorized": vectorized}
        case TableFunctionEntry(name, cls, params, columns):
            return {"table_function": name, "class": cls,
                    "params": [list(p) for p in params], "columns": [list(c) for c in columns]}
        case HeaderEntry(stream, columns, options):
            return {"header": stream, "columns": [list(c) for c in columns],
                    "options": dict(options)}
        case RemoveEntry(stream, reason):
            return {"remove": stream, "reason": reason}
    msg = f"no JSON for journal entry {entry!r}"
    raise CatalogError(msg)


def entry_of(data: Mapping[str, Any]) -> JournalEntry:
    """The entry ``entry_json`` wrote."""
    if "sql" in data:
        return ScriptEntry(data["sql"])
    if "table" in data:
        return TableEntry(data["table"], data["path"])
    if "drop" in data:
        return DropEntry(data["drop"], data["name"])
    if "aggregate" in data:
        return AggregateEntry(data["aggregate"], data["class"],
                              tuple((n, t) for n, t in data["params"]), data["returns"])
    if "function" in data:
        return FunctionEntry(data["function"], data["ref"], data["returns"],
                             data["vectorized"])
    if "table_function" in data:
        return TableFunctionEntry(data["table_function"], data["class"],
                                  tuple((n, t) for n, t in data["params"]),
                                  tuple((n, t) for n, t in data["columns"]))
    if "header" in data:
        return HeaderEntry(data["header"], tuple((n, t) for n, t in data["columns"]),
                           data["options"])
    if "remove" in data:
        return RemoveEntry(data["remove"], data["reason"])
    msg = f"unknown entry in the checkpoint journal: {dict(data)!r}"
    raise CatalogError(msg)


class CheckpointSource(Protocol):
    """What recovery asks of a source: where it is, to go back there after a restart."""

    def position(self) -> dict[str, Any]:
        """Where the source stands."""
        ...

    def seek(self, position: dict[str, Any]) -> None:
        """Go back to ``position``."""
        ...

    def release_before(self, position: dict[str, Any]) -> None:
        """Input before ``position`` is checkpointed: no restart needs it."""
        ...

    def start_of(self, described: dict[str, Any]) -> dict[str, Any] | None:
        """The position where a logged batch begins, if reading it again needs the
        source's input from there (None: the log alone holds it).
        """
        ...


class Replay(Protocol):
    """What recovery drives: the engine's facade, rebuilt from the journal."""

    spark: SparkSession

    def execute(self, sql: str) -> Any:
        """Run a script."""
        ...

    def register_table(self, name: str, data: Any) -> None:
        """Register a table from data."""
        ...

    def drop(self, kind: str, name: str) -> None:
        """Drop something."""
        ...

    def create_aggregate(self, name: str, cls: type, arg_types: Mapping[str, str],
                         return_type: str) -> None:
        """Add a user aggregate."""
        ...

    def create_function(self, name: str, fn: Callable[..., Any], return_type: str,
                        vectorized: bool = False) -> None:
        """Add a Python function."""
        ...

    def create_table_function(self, name: str, cls: type, params: Mapping[str, str],
                              columns: Mapping[str, str]) -> None:
        """Add a user table function."""
        ...

    def feed_header(self, stream: str, columns: Sequence[tuple[str, str]],
                    options: Mapping[str, str]) -> dict[str, Any]:
        """Apply a feed's HEADER."""
        ...

    def feed_remove(self, stream: str, reason: str = ...) -> Removal:
        """Apply a feed's REMOVE."""
        ...

    def stage_state(self, path: str, as_name: str | None = None,
                    inputs_logged: bool = False) -> StagedWrite:
        """Take every operator's state (between cycles) to write in a folder that becomes
        ``as_name`` beside the states saved before (``inputs_logged``: naming the events
        streams hold by the logged cycles that took them).
        """
        ...

    def restore_state(self, path: str) -> None:
        """Load a saved state."""
        ...

    def redo_cycle(self, number: int, offsets: Mapping[str, list[dict[str, Any]]]) -> None:
        """Run cycle ``number`` again on the input its journal described."""
        ...

    def resume_at(self, cycle: int) -> None:
        """Number the next cycle ``cycle``."""
        ...


def apply(entry: JournalEntry, target: Replay) -> None:
    """Redo one journal entry on ``target``."""
    match entry:
        case ScriptEntry(sql):
            target.execute(sql)
        case TableEntry(name, path):
            target.register_table(name, target.spark.read.parquet(path))
        case DropEntry(kind, name):
            target.drop(kind, name)
        case AggregateEntry(name, cls, params, returns):
            target.create_aggregate(name, import_name(cls), dict(params), returns)
        case FunctionEntry(name, ref, returns, vectorized):
            target.create_function(name, import_name(ref), returns, vectorized)
        case TableFunctionEntry(name, cls, params, columns):
            target.create_table_function(name, import_name(cls), dict(params), dict(columns))
        case HeaderEntry(stream, columns, options):
            target.feed_header(stream, columns, options)
        case RemoveEntry(stream, reason):
            target.feed_remove(stream, reason)


class StagedWrite(Protocol):
    """A state taken at a cycle boundary, its frames still to write."""

    @property
    def kept_inputs(self) -> Mapping[str, AbstractSet[int]]:
        """The cycles whose logged input the state reads again, by stream."""
        ...

    def write(self) -> None:
        """Write the frames (in any thread)."""
        ...

    def done(self) -> None:
        """Written or given up (in the thread that runs cycles)."""
        ...


@dataclass
class PendingCheckpoint:
    """A checkpoint being written in a thread of its own while the next cycles run."""

    cycle: int  # the state written is ready to run this cycle
    staged: StagedWrite
    # what each source may let go of once it is written (``Recovery.releases``)
    releases: dict[str, dict[str, Any]]
    began: float
    thread: threading.Thread | None = None
    failure: BaseException | None = None
    seconds: float = 0.0  # writing it, in its thread


class Recovery:
    """An engine's checkpoint directory in use: the journal, the input log, the states.

    A checkpoint is taken between cycles: the small files (manifests, positions) at once,
    the frames of state (a Spark job) in a thread of its own while the next cycles run
    (``background``), as Flink writes a snapshot's state asynchronously. The frames it
    writes stay readable until it is written (``FramePins``); one is written at a time
    (a checkpoint due while the last is still written waits for it); the state becomes
    the latest, and the sources let go of the input before it, only once written. A
    crash meanwhile restarts from the checkpoint before, redoing the logged cycles since.
    """

    def __init__(self, store: CheckpointStore, sources: Mapping[str, CheckpointSource],
                 every: int = 1, background: bool = True):
        if every < 1:
            msg = f"checkpoint_every must be at least 1, got {every}"
            raise CatalogError(msg)
        self.store = store
        self.sources = sources
        self.every = every
        self.replaying = False
        self.cycle_input: dict[str, list[dict[str, Any]]] = {}  # this cycle's, per stream
        # what the last cycle spent on checkpointing (0: none taken): taking it, and
        # waiting for the one before if it was still being written
        self.last_checkpoint_seconds = 0.0
        self.last_write_seconds = 0.0  # writing the last checkpoint written, in its thread
        self.background = background
        self.pending: PendingCheckpoint | None = None
        self.failed_checkpoints = 0
        self.last_failure = ""
        self.taken = 0  # cycles that took input, since the start of this process
        self.target: Replay | None = None

    # -- journal --------------------------------------------------------------------------
    def record(self, entry: JournalEntry, cycle: int) -> None:
        """Add a catalog change made before cycle ``cycle`` (not while replaying; a script
        that only shows or explains something is not a change).
        """
        if self.replaying:
            return
        if isinstance(entry, ScriptEntry) and all(
                isinstance(s, Show | Explain) for s in parse_script(entry.sql)):
            return
        self.store.log({"cycle": cycle, **entry_json(entry)})

    def table_entry(self, name: str, df: DataFrame) -> TableEntry:
        """A table registered from Python, its rows written where a restart reads them."""
        path = self.store.table_path(name)
        if not self.replaying:
            df.write.mode("overwrite").parquet(path)
        return TableEntry(name, path)

    # -- cycles ---------------------------------------------------------------------------
    def record_input(self, stream: str, describe: Callable[[str], dict[str, Any]],
                     cycle: int) -> None:
        """Add what a source delivered to this cycle's input (``describe(folder)``)."""
        attempts = self.cycle_input.setdefault(stream, [])
        folder = os.path.join(self.store.offsets_folder(cycle), str(len(attempts)))
        attempts.append(describe(folder))

    def record_throttles(self, throttles: dict[str, float]) -> None:
        """Log the z of the coming cycle's adapting shedding joins with its input."""
        self.cycle_input[JOURNAL_KEY] = [throttles]

    def before_cycle(self, cycle: int) -> None:
        """Log this cycle's input before it runs (again, if a failed attempt kept some).

        A cycle that takes nothing (no source brought rows, an end or a higher watermark)
        is not logged: a restart runs it again with no input, as it ran (``recover``).
        """
        if not self.replaying and any(k != JOURNAL_KEY for k in self.cycle_input):
            self.store.write_offsets(cycle, self.cycle_input)

    def after_cycle(self, cycle: int) -> None:
        """Cycle ``cycle`` committed: its input is done; every ``every`` cycles that took
        input, checkpoint (an idle server does not rewrite its state every cycle).
        """
        idle = not any(k != JOURNAL_KEY for k in self.cycle_input)
        self.cycle_input = {}
        self.last_checkpoint_seconds = 0.0
        self.settle(wait=False)
        if idle:
            return
        self.taken += 1
        if self.taken % self.every or self.target is None:
            return
        began = time.perf_counter()
        self.settle(wait=True)  # one at a time
        staging = self.store.staging_folder(cycle + 1)
        staged = self.target.stage_state(staging, as_name=os.path.basename(
            self.store.state_folder(cycle + 1)), inputs_logged=True)
        positions = {name: source.position() for name, source in self.sources.items()}
        write_atomically(os.path.join(staging, SOURCES_FILE), json.dumps(positions))
        pending = PendingCheckpoint(cycle + 1, staged, self.releases(positions, staged),
                                    began)
        if self.background:
            pending.thread = threading.Thread(target=self.write, args=(pending,),
                                              name=f"sparkcq-checkpoint-{cycle + 1}",
                                              daemon=True)
            self.pending = pending
            pending.thread.start()
        else:
            self.write(pending)
            self.pending = pending
            self.settle(wait=True)
        self.last_checkpoint_seconds = time.perf_counter() - began

    def releases(self, positions: dict[str, dict[str, Any]],
                 staged: StagedWrite) -> dict[str, dict[str, Any]]:
        """What each source may let go of once ``staged`` is written: the input before
        its positions, but what the batches the state names by cycle (events held) are
        read again from (a feed's spool entries).
        """
        releases = dict(positions)
        for stream, cycles in staged.kept_inputs.items():
            described = (self.store.offsets(min(cycles)) or {}).get(stream)
            start = (self.sources[stream].start_of(described[0])
                     if described and stream in self.sources else None)
            if start is not None:
                releases[stream] = start
        return releases

    def write(self, pending: PendingCheckpoint) -> None:
        """Write a staged checkpoint and make it the latest (in the writer's thread)."""
        try:
            pending.staged.write()
            self.store.commit_state(pending.cycle)
        except Exception as e:  # noqa: BLE001 - told by ``settle``, in the cycles' thread
            pending.failure = e
        pending.seconds = time.perf_counter() - pending.began

    def settle(self, wait: bool) -> None:
        """Finish the checkpoint being written once it is (``wait``: wait for it): free
        what it kept, let the sources go of the input before it, or tell that it failed
        (the checkpoint before stays the latest; the next one is taken as due).
        """
        pending = self.pending
        if pending is None or (pending.thread is not None and pending.thread.is_alive()
                               and not wait):
            return
        if pending.thread is not None:
            pending.thread.join()
        self.pending = None
        pending.staged.done()
        if pending.failure is not None:
            self.failed_checkpoints += 1
            self.last_failure = f"{type(pending.failure).__name__}: {pending.failure}"
            log.warning("checkpoint before cycle %d failed: %s", pending.cycle,
                        self.last_failure)
            return
        self.last_write_seconds = pending.seconds
        for name, position in pending.releases.items():
            if name in self.sources:  # a restart starts from here on
                self.sources[name].release_before(position)

    # -- restart --------------------------------------------------------------------------
    def recover(self, target: Replay) -> int:
        """Rebuild ``target``'s catalog, load the newest state, redo the logged cycles
        after it; the number of cycles redone. ``target`` is checkpointed from now on.
        """
        store = self.store
        self.target = target
        entries = [(e["cycle"], entry_of(e)) for e in store.entries()]
        start = store.latest()
        self.replaying = True
        try:
            for cycle, entry in entries:
                if start is not None and cycle < start:
                    apply(entry, target)
            cycle = 0
            if start is not None:
                target.restore_state(store.state_folder(start))
                with open(os.path.join(store.state_folder(start), SOURCES_FILE),
                          encoding="utf-8") as f:
                    for name, position in json.load(f).items():
                        if name in self.sources:
                            self.sources[name].seek(position)
                cycle = start
            target.resume_at(cycle)
            redone = 0
            last = store.last_logged()
            while last is not None and cycle <= last:
                for at, entry in entries:
                    if at == cycle:
                        apply(entry, target)
                target.redo_cycle(cycle, store.offsets(cycle) or {})  # None: took no input
                redone += 1
                cycle += 1
            # the changes made after the last logged cycle, at the cycle they were made in:
            # idle cycles are not logged, so the crashed process may have counted past the
            # last logged one; counting again from there would log the next cycles' input
            # under numbers the journal's later entries come after
            for at, entry in entries:
                if at >= cycle:
                    cycle = at
                    target.resume_at(cycle)
                    apply(entry, target)
        finally:
            self.replaying = False
        return redone
