"""Crash recovery: journal the catalog, log each cycle's input, checkpoint committed cycles,
and replay them after a restart (DESIGN 2.5, 4.3, 5).

A cycle is committed when its sinks returned; the state ready for the next cycle is then
written (every ``every`` cycles). A restart with the same directory rebuilds the catalog
from the journal, loads the newest state, and redoes every cycle whose input was logged
after it, with that same input: a transactional sink (PostgreSQL) recognises the cycles it
committed already, so it ends up with every cycle's rows exactly once. Rows pushed but not
yet taken by a cycle are not in the log: pushed ones are lost with the process; a feed
stream's are in its spool, which keeps every entry after the newest checkpoint's position
(``io/feed_source.py``), so they are queued again.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparkcq.errors import CatalogError
from sparkcq.language.sql.parser import parse_script
from sparkcq.language.sql.statements import Explain, Show
from sparkcq.runtime.checkpoint import CheckpointStore, write_atomically

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sparkcq.engine import Engine

SOURCES_FILE = "sources.json"


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


class Recovery:
    """An engine's checkpoint directory in use: the journal, the input log, the states."""

    def __init__(self, engine: Engine, store: CheckpointStore, every: int = 1):
        if every < 1:
            msg = f"checkpoint_every must be at least 1, got {every}"
            raise CatalogError(msg)
        self.engine = engine
        self.store = store
        self.every = every
        self.replaying = False
        self.cycle_input: dict[str, list[dict[str, Any]]] = {}  # this cycle's, per stream
        self.last_checkpoint_seconds = 0.0  # writing the last checkpoint (0: none written)
        self.taken = 0  # cycles that took input, since the start of this process

    # -- journal --------------------------------------------------------------------------
    def journal_script(self, sql: str) -> None:
        """Record a script that ran (unless it only showed or explained something)."""
        if self.replaying:
            return
        if all(isinstance(s, Show | Explain) for s in parse_script(sql)):
            return
        self.log({"sql": sql})

    def journal_table(self, name: str, df: DataFrame) -> None:
        """Record a table registered from Python: its rows, as they are now."""
        if self.replaying:
            return
        path = self.store.table_path(name)
        df.write.mode("overwrite").parquet(path)
        self.log({"table": name, "path": path})

    def journal(self, entry: dict[str, Any]) -> None:
        """Record another catalog change made from Python (see ``apply``)."""
        if not self.replaying:
            self.log(entry)

    def log(self, entry: dict[str, Any]) -> None:
        self.store.log({"cycle": self.engine.cycle, **entry})

    def apply(self, entry: dict[str, Any]) -> None:
        """Redo one journal entry on the engine."""
        eng = self.engine
        if "sql" in entry:
            eng.execute(entry["sql"])
        elif "table" in entry:
            eng.register_table(entry["table"], eng.spark.read.parquet(entry["path"]))
        elif "drop" in entry:
            eng.drop(entry["drop"], entry["name"])
        elif "aggregate" in entry:
            eng.create_aggregate(entry["aggregate"], import_name(entry["class"]),
                                 dict(entry["params"]), entry["returns"])
        elif "header" in entry:
            eng.feeds.header(entry["header"], [tuple(c) for c in entry["columns"]],
                             entry["options"])
        elif "remove" in entry:
            eng.feeds.remove(entry["remove"], entry["reason"])
        elif "function" in entry:
            eng.create_function(entry["function"], import_name(entry["ref"]),
                                entry["returns"], entry["vectorized"])
        else:
            msg = f"unknown entry in the checkpoint journal: {entry!r}"
            raise CatalogError(msg)

    # -- cycles ---------------------------------------------------------------------------
    def record_input(self, stream: str, describe: Callable[[str], dict[str, Any]]) -> None:
        """Add what a source delivered to this cycle's input (``describe(folder)``)."""
        attempts = self.cycle_input.setdefault(stream, [])
        folder = os.path.join(self.store.offsets_folder(self.engine.cycle), str(len(attempts)))
        attempts.append(describe(folder))

    def before_cycle(self) -> None:
        """Log this cycle's input before it runs (again, if a failed attempt kept some).

        A cycle that takes nothing (no source brought rows, an end or a higher watermark)
        is not logged: a restart runs it again with no input, as it ran (``recover``).
        """
        if not self.replaying and self.cycle_input:
            self.store.write_offsets(self.engine.cycle, self.cycle_input)

    def after_cycle(self) -> None:
        """The cycle committed: its input is done; every ``every`` cycles that took input,
        checkpoint (an idle server does not rewrite its state every cycle).
        """
        idle = not self.cycle_input
        self.cycle_input = {}
        eng = self.engine
        self.last_checkpoint_seconds = 0.0
        if idle:
            return
        self.taken += 1
        if self.taken % self.every:
            return
        began = time.perf_counter()
        staging = self.store.staging_folder(eng.cycle)
        eng.save_state(staging)
        positions = {name: source.position() for name, source in eng.sources.items()}
        write_atomically(os.path.join(staging, SOURCES_FILE), json.dumps(positions))
        self.store.commit_state(eng.cycle)
        for name, source in eng.sources.items():
            source.release_before(positions[name])  # a restart starts from here on
        self.last_checkpoint_seconds = time.perf_counter() - began

    # -- restart --------------------------------------------------------------------------
    def recover(self) -> int:
        """Rebuild the catalog, load the newest state, redo the logged cycles after it;
        returns the number of cycles redone.
        """
        store, eng = self.store, self.engine
        entries = store.entries()
        start = store.latest()
        self.replaying = True
        try:
            for entry in entries:
                if start is not None and entry["cycle"] < start:
                    self.apply(entry)
            cycle = 0
            if start is not None:
                eng.restore_state(store.state_folder(start))
                with open(os.path.join(store.state_folder(start), SOURCES_FILE),
                          encoding="utf-8") as f:
                    for name, position in json.load(f).items():
                        if name in eng.sources:
                            eng.sources[name].seek(position)
                cycle = start
            redone = 0
            last = store.last_logged()
            while last is not None and cycle <= last:
                for entry in entries:
                    if entry["cycle"] == cycle:
                        self.apply(entry)
                offsets = store.offsets(cycle)  # None: the cycle took no input
                eng.take_logged_input(offsets or {})
                eng.run_taken_input()
                redone += 1
                cycle += 1
            # the changes made after the last logged cycle, at the cycle they were made in:
            # idle cycles are not logged, so the crashed process may have counted past the
            # last logged one; counting again from there would log the next cycles' input
            # under numbers the journal's later entries come after
            for entry in entries:
                if entry["cycle"] >= cycle:
                    eng.cycle = cycle = entry["cycle"]
                    self.apply(entry)
        finally:
            self.replaying = False
        return redone
