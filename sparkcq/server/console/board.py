"""The console's board: the newest snapshot, put up by the engine thread, read by pages.

The engine thread only builds the snapshot (a few milliseconds); encoding it as JSON is
left to the first page that reads it, in the server's event loop, once per version however
many pages are open. A page waits for a newer version than the one it has, so an open page
costs the engine thread nothing while nothing changes.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from sparkcq.server.console.history import HealthHistory, summary
from sparkcq.server.console.snapshot import take_snapshot
from sparkcq.server.convert import to_json
from sparkcq.server.loop import EngineLoop

WAIT_STEP_SECONDS = 0.05  # how often a waiting page looks for a newer version


class ConsoleBoard:
    """The newest snapshot of ``loop``'s engine and its version number."""

    def __init__(self, loop: EngineLoop, history: HealthHistory | None = None):
        self.loop = loop
        self.history = history or HealthHistory()
        self.lock = threading.Lock()
        self.version = 0
        self.snapshot: dict[str, Any] = {}
        self.encoded: tuple[int, str] | None = None

    def refresh(self) -> None:
        """Take a new snapshot (in the engine thread, between two cycles)."""
        began = time.perf_counter()
        engine = self.loop.engine
        self.history.record(engine)
        recent = self.history.recent()
        snapshot = take_snapshot(engine, self.loop.status(), recent)
        snapshot["summary"] = summary(recent)
        snapshot["last_checkpoint"] = self.history.last_checkpoint
        # what taking it cost the engine thread (docs/console.md, "What the console costs")
        snapshot["build_ms"] = (time.perf_counter() - began) * 1e3
        with self.lock:
            self.version += 1
            snapshot["version"] = self.version
            self.snapshot = snapshot

    def encoded_snapshot(self) -> tuple[int, str]:
        """The newest snapshot's version and JSON text (encoded once per version)."""
        with self.lock:
            version, snapshot, encoded = self.version, self.snapshot, self.encoded
        if encoded is None or encoded[0] != version:
            encoded = (version, json.dumps(to_json(snapshot)))
            with self.lock:
                if self.version == version:
                    self.encoded = encoded
        return encoded

    async def newer_than(self, version: int, timeout: float) -> tuple[int, str] | None:
        """The snapshot once its version is past ``version``; None after ``timeout`` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.version <= version:
            if loop.time() >= deadline or self.loop.stopping.is_set():
                return None
            await asyncio.sleep(WAIT_STEP_SECONDS)
        return self.encoded_snapshot()
