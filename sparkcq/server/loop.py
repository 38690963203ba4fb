"""The engine thread: runs statements between cycles, and cycles at a steady interval.

The engine is not thread-safe and PySpark calls should come from one thread, so HTTP
handlers never touch it: they submit a function and wait for its future. The loop runs
every queued function, then one cycle, then sleeps out the rest of the interval; a
statement therefore takes effect between two cycles and running queries never pause.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from sparkcq.engine import Engine

log = logging.getLogger("sparkcq.server")


class EngineLoop:
    """Owns the engine; everything reaches it through ``submit``."""

    def __init__(self, engine: Engine, interval: float = 1.0):
        self.engine = engine
        self.interval = interval
        self.started = time.time()
        self.commands: queue.Queue[tuple[Callable[[Engine], Any], Future[Any]]] = queue.Queue()
        self.stopping = threading.Event()
        self.stopped = threading.Event()
        self.cycle_errors = 0
        self.last_error: str | None = None
        self.thread = threading.Thread(target=self._run, name="sparkcq-engine", daemon=True)

    def start(self) -> None:
        """Start cycling in the engine thread."""
        self.thread.start()

    def submit(self, fn: Callable[[Engine], Any]) -> Future[Any]:
        """Run ``fn(engine)`` in the engine thread before the next cycle."""
        fut: Future[Any] = Future()
        if self.stopping.is_set():
            fut.set_exception(RuntimeError("the server is shutting down"))
            return fut
        self.commands.put((fn, fut))
        return fut

    def stop(self, timeout: float = 60.0) -> None:
        """Finish the current cycle, stop the engine (releasing Spark) and the thread."""
        self.stopping.set()
        self.stopped.wait(timeout)

    def _drain_commands(self) -> None:
        while True:
            try:
                fn, fut = self.commands.get_nowait()
            except queue.Empty:
                return
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(self.engine))
            except BaseException as e:  # noqa: BLE001 - handed to the waiting request
                fut.set_exception(e)

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                began = time.monotonic()
                self._drain_commands()
                try:
                    self.engine.run_cycle()
                except Exception as e:  # noqa: BLE001 - one bad cycle must not end the service
                    self.cycle_errors += 1
                    self.last_error = str(e).splitlines()[0] if str(e) else type(e).__name__
                    log.error("cycle failed: %s", self.last_error)
                rest = self.interval - (time.monotonic() - began)
                deadline = time.monotonic() + max(0.0, rest)
                while time.monotonic() < deadline and not self.stopping.is_set():
                    if not self.commands.empty():
                        self._drain_commands()
                    time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            self._drain_commands()
        finally:
            try:
                self.engine.stop()
            finally:
                self.stopped.set()

    def status(self) -> dict[str, Any]:
        """Cycles, timing and query counts (called in the engine thread)."""
        eng = self.engine
        statuses = [q.status for q in eng.catalog.queries.values()]
        last = eng.reports[-1] if eng.reports else None
        return {
            "cycles": eng.cycle,
            "last_cycle_seconds": last.seconds if last else None,
            "queries_running": statuses.count("running"),
            "queries_failed": statuses.count("failed"),
            "cycle_errors": self.cycle_errors,
            "last_error": self.last_error,
            "uptime_seconds": time.time() - self.started,
            "interval_seconds": self.interval,
        }
