"""The checkpoint directory: what a restart needs to resume after the last committed cycle.

An engine given ``checkpoint_dir`` writes, in that directory:

- ``catalog.jsonl``: every statement that changed the catalog (and tables, aggregates and
  functions registered from Python), each with the number of the cycle it ran before;
- ``offsets/<c>.json`` (and files under ``offsets/<c>/``): the input of cycle c, written
  **before** the cycle runs, so that a cycle which ran but was not checkpointed is redone
  after a crash with exactly the same input, giving the same rows (a transactional sink
  recognises the cycle's number and keeps what it committed);
- ``state/<c>/``: every operator's state and every stream's and source's position once
  cycles before c are committed (cycle c is next), then ``LATEST`` names it. Older
  states and offsets are deleted after that, but the states whose runs of state it still
  reads (``runtime/state_runs.py``: a checkpoint writes only the runs made since the
  last one, and names the others where they were saved).

Every file is written under a temporary name, synced and renamed into place, so a crash
leaves either the old or the new version, never half of one.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from sparkcq.runtime.saved_frames import INPUTS_FILE, REFERENCES_FILE


def write_atomically(path: str, text: str) -> None:
    """Replace ``path`` by ``text`` at once: a temporary file, synced, renamed, dir synced."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    sync_folder(os.path.dirname(path))


def sync_folder(path: str) -> None:
    """Make a rename in ``path`` durable."""
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    """Reads and writes one checkpoint directory (layout in the module docstring)."""

    def __init__(self, path: str):
        self.path = os.path.realpath(path)
        for sub in ("offsets", "state", "tables"):
            os.makedirs(os.path.join(self.path, sub), exist_ok=True)
        self.catalog_path = os.path.join(self.path, "catalog.jsonl")

    def engine_id(self, proposed: str) -> str:
        """The id the engine using this directory commits under: ``proposed`` the first
        time, the same one on every restart after that.
        """
        path = os.path.join(self.path, "ENGINE_ID")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
        write_atomically(path, proposed)
        return proposed

    # -- the catalog's journal ------------------------------------------------------------
    def log(self, entry: dict[str, Any]) -> None:
        """Append one catalog change, durably, before the caller reports it done."""
        with open(self.catalog_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def entries(self) -> list[dict[str, Any]]:
        """The catalog changes in the order they were made; a torn last line is ignored."""
        if not os.path.exists(self.catalog_path):
            return []
        out = []
        with open(self.catalog_path, encoding="utf-8") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # the process died while appending it: it was never reported done
        return out

    def table_path(self, name: str) -> str:
        """A new folder for the rows of table ``name`` as registered from Python."""
        n = len(os.listdir(os.path.join(self.path, "tables")))
        return os.path.join(self.path, "tables", f"{name.lower()}-{n}")

    # -- a cycle's input ------------------------------------------------------------------
    def offsets_folder(self, cycle: int) -> str:
        """Where files the input of ``cycle`` refers to are kept."""
        return os.path.join(self.path, "offsets", str(cycle))

    def write_offsets(self, cycle: int, offsets: dict[str, Any]) -> None:
        """Record the input of ``cycle`` before it runs."""
        write_atomically(os.path.join(self.path, "offsets", f"{cycle}.json"),
                         json.dumps(offsets))

    def offsets(self, cycle: int) -> dict[str, Any] | None:
        """The recorded input of ``cycle``, if it was recorded."""
        path = os.path.join(self.path, "offsets", f"{cycle}.json")
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            return dict(json.load(f))

    def last_logged(self) -> int | None:
        """The last cycle whose input was logged, if any."""
        cycles = [int(n.removesuffix(".json")) for n in os.listdir(
            os.path.join(self.path, "offsets")) if n.endswith(".json")
            and n.removesuffix(".json").isdigit()]
        return max(cycles) if cycles else None

    # -- state after a committed cycle -----------------------------------------------------
    def latest(self) -> int | None:
        """The cycle the newest complete state is ready to run, if any."""
        path = os.path.join(self.path, "LATEST")
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            return int(f.read().strip())

    def state_folder(self, cycle: int) -> str:
        """The folder of the state ready to run ``cycle``."""
        return os.path.join(self.path, "state", str(cycle))

    def staging_folder(self, cycle: int) -> str:
        """Where the state ready to run ``cycle`` is written before ``commit_state``."""
        return os.path.join(self.path, "state", f".{cycle}.tmp")

    def commit_state(self, cycle: int) -> None:
        """Make the staged state of ``cycle`` the latest, then drop what it supersedes."""
        final = self.state_folder(cycle)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(self.staging_folder(cycle), final)
        sync_folder(os.path.dirname(final))
        write_atomically(os.path.join(self.path, "LATEST"), str(cycle))
        self.prune(cycle)

    def prune(self, cycle: int) -> None:
        """Delete states older than ``cycle`` but those whose runs of state it still
        reads (its ``references.json``), and the input of cycles before it but those
        whose events its streams still hold (its ``inputs.json``).
        """
        kept: set[str] = set()
        references = os.path.join(self.state_folder(cycle), REFERENCES_FILE)
        if os.path.exists(references):
            with open(references, encoding="utf-8") as f:
                kept = set(json.load(f))
        inputs: set[int] = set()
        listed = os.path.join(self.state_folder(cycle), INPUTS_FILE)
        if os.path.exists(listed):
            with open(listed, encoding="utf-8") as f:
                inputs = {c for cycles in json.load(f).values() for c in cycles}
        for name in os.listdir(os.path.join(self.path, "state")):
            if name in kept:
                continue
            if name.isdigit() and int(name) < cycle or name.startswith("."):
                shutil.rmtree(os.path.join(self.path, "state", name), ignore_errors=True)
        offsets = os.path.join(self.path, "offsets")
        for name in os.listdir(offsets):
            stem = name.removesuffix(".json").removesuffix(".tmp")
            if stem.isdigit() and int(stem) < cycle and int(stem) not in inputs:
                target = os.path.join(offsets, name)
                if os.path.isdir(target):
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    os.remove(target)
