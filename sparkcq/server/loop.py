"""The engine thread: runs statements between cycles, and cycles at a steady interval.

The engine is not thread-safe and PySpark calls should come from one thread, so HTTP
handlers hand statements to it: they submit a function and wait for its future. The loop
runs every queued function, then one cycle, then sleeps out the rest of the interval; a
statement therefore takes effect between two cycles and running queries never pause.
Pushes and result reads do not wait for the thread (``Engine.push`` and the memory sink
take any thread), so the API answers them during a long cycle.

If Spark's JVM dies, no query is blamed: the loop stops cycling, every running query shows
``engine failed``, ``/status`` answers 503 with the reason, and ``on_spark_death`` is called
(``sparkcq serve`` then exits with code 3 so that a supervisor restarts it).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from sparkcq.catalog import QueryStatus
from sparkcq.engine import Engine
from sparkcq.errors import SparkcqError, SparkDiedError
from sparkcq.heap import FrozenHeap
from sparkcq.io.feed_source import FeedSource, spool_size
from sparkcq.io.sources import MemorySource
from sparkcq.server.procs import descendants, rss_bytes
from sparkcq.session import spark_alive

log = logging.getLogger("sparkcq.server")

RETRY_AFTER_SECONDS = 1  # advised to a client refused for a full queue or a stop


def memory() -> dict[str, int]:
    """Resident bytes of this process and of the processes it started (Spark's JVM)."""
    me = os.getpid()
    return {"server": rss_bytes(me),
            "spark": sum(rss_bytes(p) for p in descendants(me) if p != me)}


class ServerStoppingError(SparkcqError):
    """The server is stopping: it takes no more statements or input (503)."""


class BusyError(SparkcqError):
    """Too many statements wait for the engine thread (429)."""


class EngineLoop:
    """Owns the engine; statements reach it through ``submit``."""

    def __init__(self, engine: Engine, interval: float = 1.0, max_pending: int = 64,
                 on_spark_death: Callable[[str], None] | None = None):
        self.engine = engine
        self.interval = interval
        self.started = time.time()
        self.commands: queue.Queue[tuple[Callable[[Engine], Any], Future[Any]]] = queue.Queue(
            maxsize=max_pending)
        self.stopping = threading.Event()
        self.stopped = threading.Event()
        self.cycle_errors = 0
        self.last_error: str | None = None
        self.spark_failure: str | None = None
        self.on_spark_death = on_spark_death
        self.drain_deadline = 0.0
        # called in the engine thread after each cycle and each batch of statements
        self.watchers: list[Callable[[], None]] = []
        self.thread = threading.Thread(target=self._run, name="sparkcq-engine", daemon=True)

    def start(self) -> None:
        """Start cycling in the engine thread."""
        self.thread.start()

    def check_alive(self) -> None:
        """Raise ``SparkDiedError`` once Spark's JVM is known to be gone."""
        if self.spark_failure is not None:
            msg = f"Spark is gone ({self.spark_failure}); the server must be restarted"
            raise SparkDiedError(msg)

    def submit(self, fn: Callable[[Engine], Any]) -> Future[Any]:
        """Run ``fn(engine)`` in the engine thread before the next cycle."""
        fut: Future[Any] = Future()
        try:
            self.check_alive()
            if self.stopping.is_set():
                msg = "the server is stopping; it takes no more statements"
                raise ServerStoppingError(msg)
            self.commands.put_nowait((fn, fut))
        except queue.Full:
            msg = (f"{self.commands.maxsize} statements already wait for the engine; "
                   "send this one again later")
            fut.set_exception(BusyError(msg))
        except SparkcqError as e:
            fut.set_exception(e)
        return fut

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop taking input, process what pushes were acknowledged (for at most
        ``timeout`` seconds), stop the engine (releasing Spark) and the thread. Whether it
        stopped in time.
        """
        self.drain_deadline = time.monotonic() + timeout * 0.8
        self.stopping.set()
        return self.stopped.wait(timeout)

    def watch(self, watcher: Callable[[], None]) -> None:
        """Call ``watcher()`` in the engine thread after each cycle and each batch of
        statements, while the engine is between two cycles (the console's snapshot).
        """
        self.watchers.append(watcher)

    def _tell_watchers(self) -> None:
        for watcher in self.watchers:
            try:
                watcher()
            except Exception:  # noqa: BLE001 - a watcher's fault must not stop the engine
                log.exception("console snapshot failed")

    def _drain_commands(self) -> None:
        ran = False
        while True:
            try:
                fn, fut = self.commands.get_nowait()
            except queue.Empty:
                if ran:
                    self._tell_watchers()
                return
            ran = True
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(self.engine))
            except BaseException as e:  # noqa: BLE001 - handed to the waiting request
                fut.set_exception(e)

    def _cycle(self) -> None:
        try:
            self.engine.run_cycle()
        except Exception as e:  # noqa: BLE001 - one bad cycle must not end the service
            self.cycle_errors += 1
            self.last_error = str(e).splitlines()[0] if str(e) else type(e).__name__
            log.error("cycle failed: %s", self.last_error)
            if isinstance(e, SparkDiedError) or not spark_alive(self.engine.spark):
                self._spark_died(self.last_error)
        self._tell_watchers()

    def _spark_died(self, reason: str) -> None:
        self.spark_failure = reason
        for info in self.engine.catalog.queries.values():
            if info.status in (QueryStatus.RUNNING, QueryStatus.PAUSED):
                info.status = QueryStatus.ENGINE_FAILED
                info.log.append(f"cycle {self.engine.cycle}: stopped: Spark is gone ({reason})")
        log.error("Spark is gone (%s); no query can run", reason)
        while True:  # statements waiting for the engine get the reason
            try:
                _, fut = self.commands.get_nowait()
            except queue.Empty:
                break
            if fut.set_running_or_notify_cancel():
                fut.set_exception(SparkDiedError(f"Spark is gone ({reason})"))
        if self.on_spark_death is not None:
            self.on_spark_death(reason)

    def _pending_pushes(self) -> bool:
        return any(isinstance(s, MemorySource) and s.has_pending()
                   for s in self.engine.sources.values())

    def _run(self) -> None:
        heap = FrozenHeap()  # full collections kept off long-lived objects
        try:
            while not self.stopping.is_set() and self.spark_failure is None:
                began = time.monotonic()
                if not spark_alive(self.engine.spark):
                    self._spark_died("its JVM does not answer")
                    break
                self._drain_commands()
                self._cycle()
                heap.after_cycle()
                rest = self.interval - (time.monotonic() - began)
                deadline = time.monotonic() + max(0.0, rest)
                while time.monotonic() < deadline and not self.stopping.is_set():
                    if not self.commands.empty():
                        self._drain_commands()
                    time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            if self.spark_failure is None:
                self._drain_commands()
                # acknowledged pushes are processed before the stop, within its bound
                while self._pending_pushes() and time.monotonic() < self.drain_deadline:
                    self._cycle()
                    if self.spark_failure is not None:
                        break
                if self._pending_pushes():
                    left = sum(s.queued_rows for s in self.engine.sources.values()
                               if isinstance(s, MemorySource))
                    log.error("stop timeout: %d acknowledged rows were not processed", left)
        finally:
            heap.release()
            try:
                if self.spark_failure is None:
                    self.engine.stop()
            finally:
                self.stopped.set()

    def status(self) -> dict[str, Any]:
        """Spark's state, cycles, timing and query counts (read from any thread)."""
        eng = self.engine
        statuses = [q.status for q in list(eng.catalog.queries.values())]
        last = eng.reports[-1] if eng.reports else None
        queued = {name: s.queued_rows for name, s in list(eng.sources.items())
                  if isinstance(s, MemorySource)}
        return {
            "spark": "failed" if self.spark_failure else "running",
            "spark_failure": self.spark_failure,
            "cycles": eng.cycle,
            "last_cycle_seconds": last.seconds if last else None,
            "queries_running": statuses.count(QueryStatus.RUNNING),
            "queries_paused": statuses.count(QueryStatus.PAUSED),
            "queries_failed": statuses.count(QueryStatus.FAILED),
            "queries_engine_failed": statuses.count(QueryStatus.ENGINE_FAILED),
            "cycle_errors": self.cycle_errors,
            "last_error": self.last_error,
            "queued_rows": queued,
            "spool_bytes": {name: spool_size(s) for name, s in list(eng.sources.items())
                            if isinstance(s, FeedSource)},
            "last_checkpoint_seconds": eng.recovery.last_checkpoint_seconds
            if eng.recovery is not None else None,
            "rows_processed": {name: scan.rows_in for name, scan in list(eng.scans.items())},
            # the z each adapting shedding join runs its next cycle with (docs/shedding.md)
            "shedding_z": {node.label(): z
                           for node, z in list(eng.driver.throttles.current.items())},
            "rss_bytes": memory(),
            "uptime_seconds": time.time() - self.started,
            "interval_seconds": self.interval,
        }
