"""The console's board: the newest snapshot, put up by the engine thread, read by pages.

The engine thread only builds the snapshot (a few milliseconds) and rings a bell in the
server's event loop; encoding it as JSON is left to the first page that reads it, once per
version however many pages are open. A page waits on the bell for a newer version than the
one it has, so an open page costs nothing while nothing changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from typing import Any

from sparkcq.server.console.history import HealthHistory, summary
from sparkcq.server.console.snapshot import take_snapshot
from sparkcq.server.convert import to_json
from sparkcq.server.loop import EngineLoop


class ConsoleBoard:
    """The newest snapshot of ``loop``'s engine and its version number."""

    def __init__(self, loop: EngineLoop, history: HealthHistory | None = None):
        self.loop = loop
        self.history = history or HealthHistory()
        self.lock = threading.Lock()
        self.version = 0
        self.snapshot: dict[str, Any] = {}
        self.encoded: tuple[int, str] | None = None
        # the server's event loop and the bell its waiting pages wait on (set by the first)
        self.events: asyncio.AbstractEventLoop | None = None
        self.bell: asyncio.Event | None = None

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
            events = self.events
        if events is not None and not events.is_closed():
            events.call_soon_threadsafe(self.ring)

    def ring(self) -> None:
        """Wake every waiting page (in the event loop): a new bell for the next version."""
        if self.bell is not None:
            self.bell.set()
        self.bell = asyncio.Event()

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
        if self.events is None:
            self.events, self.bell = loop, asyncio.Event()
        deadline = loop.time() + timeout
        while self.version <= version:
            left = deadline - loop.time()
            if left <= 0 or self.loop.stopping.is_set():
                return None
            assert self.bell is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.bell.wait(), left)
        return self.encoded_snapshot()
