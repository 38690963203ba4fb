"""A stream's write-ahead spool: accepted feed input on disk before it is acknowledged.

Each append is one Arrow IPC file named by its sequence number, written to a temporary name,
flushed to disk (fsync) and renamed, so after a crash every file is whole and every append
that was acknowledged is there. The metadata of a file carries what is not rows: the
explicit watermark, the end of input, rows refused at the door, and the highest message
``seq`` of each producer (so a resend after a reconnect is recognised).

The engine reads entries by sequence number (``read``), a checkpoint's source position is a
sequence number, and ``trim`` deletes the entries before one once no restart can need them.
``trimmed.json`` keeps what the trimmed entries leave behind: the producers' numbers, and the
sequence number after them (numbers are never used twice: after a restart whose spool was
trimmed empty, an entry numbered from 1 again would sort before the checkpoint's position,
and the next restart would skip it).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sparkcq.model.rows import RowError

_META = b"sparkcq.spool"
_SUFFIX = ".arrow"
TRIMMED_FILE = "trimmed.json"


@dataclass(frozen=True)
class SpoolEntry:
    """One append: rows (None: none), an explicit watermark, end, refusals, producers."""

    seq: int
    table: pa.Table | None
    watermark: int | None = None
    end: bool = False
    rejected: tuple[RowError, ...] = ()
    producers: dict[str, int] = field(default_factory=dict)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """The spool folder of one stream; appends from any thread, in order."""

    def __init__(self, folder: str, durable: bool = True):
        self.folder = folder
        self.durable = durable  # fsync (off only in tests that measure nothing of a crash)
        os.makedirs(folder, exist_ok=True)
        self.lock = threading.Lock()
        self.sizes: dict[int, int] = {}
        for name in os.listdir(folder):
            if name.endswith(".tmp"):
                os.remove(os.path.join(folder, name))  # an append that never completed
            elif name.endswith(_SUFFIX) and name[: -len(_SUFFIX)].isdigit():
                self.sizes[int(name[: -len(_SUFFIX)])] = os.path.getsize(
                    os.path.join(folder, name))
        trimmed = self._trimmed()
        self.next_seq = max(max(self.sizes, default=0) + 1, int(trimmed.get("next", 1)))
        self.producers = {str(k): int(v) for k, v in trimmed.get("producers", {}).items()}
        for seq in sorted(self.sizes):
            for name, number in self.read(seq).producers.items():
                self.producers[name] = max(self.producers.get(name, 0), number)

    @property
    def bytes(self) -> int:
        """Bytes the spool holds on disk."""
        return sum(self.sizes.values())

    def seqs(self) -> list[int]:
        """The sequence numbers of the entries held, in order."""
        with self.lock:
            return sorted(self.sizes)

    def _path(self, seq: int) -> str:
        return os.path.join(self.folder, f"{seq:016d}{_SUFFIX}")

    def append(self, table: pa.Table | None, schema: pa.Schema, watermark: int | None,
               end: bool, rejected: tuple[RowError, ...], producers: dict[str, int]) -> int:
        """Write one entry durably; its sequence number."""
        meta = json.dumps({
            "watermark": watermark, "end": end, "producers": producers,
            "rejected": [[e.index, e.column, e.reason, e.raw] for e in rejected]})
        data = table if table is not None else schema.empty_table()
        data = data.replace_schema_metadata({_META: meta.encode()})
        with self.lock:
            seq = self.next_seq
            self.next_seq += 1
            path = self._path(seq)
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                with pa.ipc.new_file(f, data.schema) as writer:
                    writer.write_table(data)
                f.flush()
                if self.durable:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
            if self.durable:
                _fsync_dir(self.folder)
            self.sizes[seq] = os.path.getsize(path)
            for name, number in producers.items():
                self.producers[name] = max(self.producers.get(name, 0), number)
        return seq

    def read(self, seq: int) -> SpoolEntry:
        """The entry ``seq`` as it was appended."""
        with pa.memory_map(self._path(seq)) as f:
            table = pa.ipc.open_file(f).read_all()
        meta = json.loads((table.schema.metadata or {})[_META])
        table = table.replace_schema_metadata(None)
        rejected = tuple(RowError(i, c, r, raw) for i, c, r, raw in meta["rejected"])
        return SpoolEntry(seq, table if table.num_rows else None, meta["watermark"],
                          meta["end"], rejected, dict(meta["producers"]))

    def trim(self, before: int) -> int:
        """Delete the entries with a sequence number below ``before``; how many."""
        with self.lock:
            gone = sorted(s for s in self.sizes if s < before)
            if not gone:
                return 0
            write_json(os.path.join(self.folder, TRIMMED_FILE),
                       {"next": self.next_seq, "producers": self.producers}, self.durable)
            for seq in gone:
                os.remove(self._path(seq))
                del self.sizes[seq]
        return len(gone)

    def _trimmed(self) -> dict[str, Any]:
        path = os.path.join(self.folder, TRIMMED_FILE)
        if not os.path.exists(path):
            return {}
        with open(path, encoding="utf-8") as f:
            return dict(json.load(f))

    def delete(self) -> None:
        """Remove the spool and its folder (the stream was removed)."""
        with self.lock:
            for name in os.listdir(self.folder):
                os.remove(os.path.join(self.folder, name))
            os.rmdir(self.folder)
            self.sizes.clear()


def write_json(path: str, value: Any, durable: bool = True) -> None:
    """Replace ``path`` with ``value`` as JSON, whole or not at all (and, if ``durable``,
    on disk before the caller goes on: the trim deletes entries only after it).
    """
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        _fsync_dir(os.path.dirname(path) or ".")
