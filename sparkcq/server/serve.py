"""``sparkcq serve``: the engine loop plus the control API under uvicorn."""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket
import threading
from dataclasses import dataclass
from types import FrameType

from sparkcq.engine import Engine
from sparkcq.errors import SparkcqError
from sparkcq.io.sinks import MemorySink, Retention
from sparkcq.io.sources import IngestLimits
from sparkcq.plan.options import ShedMode

log = logging.getLogger("sparkcq.server")


class ServerSetupError(SparkcqError):
    """The service cannot start as configured."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class ServerConfig:
    """What ``sparkcq serve`` runs with (its command-line options)."""

    host: str = "127.0.0.1"
    port: int = 8765
    master: str | None = None
    interval: float = 1.0
    token: str | None = None
    allow_udf_modules: tuple[str, ...] = ()
    data_roots: tuple[str, ...] = ()
    max_body_bytes: int = 16 * 2**20
    max_queued_rows: int = 200_000  # per stream; a push beyond it gets 429
    max_rows_per_cycle: int = 100_000  # per stream
    retain_rows: int | None = 100_000  # per query, in the memory sink
    retain_seconds: float | None = None
    stop_timeout: float = 60.0  # SIGTERM, SIGINT or POST /shutdown: the clean stop's bound
    spark_death_grace: float = 5.0  # /status answers 503 this long before exit code 3
    databases: tuple[tuple[str, str], ...] = ()  # PostgreSQL: (name, URL), for database='name'
    checkpoint: str | None = None  # a restart with the same folder resumes (recovery.py)
    checkpoint_every: int = 1  # cycles
    feed_port: int | None = 8766  # the feed's TCP listener (None: only POST /feed/{stream})
    spool: str | None = None  # feed spool folder (default: <checkpoint>/feed)
    max_spool_bytes: int = 2**30  # per feed stream
    shedding: ShedMode = ShedMode.OFF  # windowed stream joins of queries that do not say


class _Terminated(Exception):  # noqa: N818 - a signal, not an error
    """SIGTERM arrived: leave ``server.run`` and stop cleanly."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def serve(config: ServerConfig) -> int:
    """Run the service until SIGINT/SIGTERM or ``POST /shutdown``; returns an exit code:
    0 after a clean stop, 1 if the engine did not stop within ``stop_timeout``, 3 if Spark
    died (a supervisor should restart the service).
    """
    if not is_loopback(config.host) and not config.token:
        msg = (f"binding to {config.host!r} exposes the control API; pass --token "
               "(or SPARKCQ_TOKEN)")
        raise ServerSetupError(msg)
    try:
        import uvicorn

        from sparkcq.server.app import build_app
    except ImportError as e:
        msg = f"the server needs its extra: pip install 'sparkcq[server]' ({e})"
        raise ServerSetupError(msg) from None
    from sparkcq.server.feed import FeedLimits, FeedService
    from sparkcq.server.loop import EngineLoop

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # uvicorn re-raises a SIGTERM it caught once it has closed, which would end the process
    # before the engine stops; this handler turns it (then or earlier) into a clean stop
    signal.signal(signal.SIGTERM, _on_sigterm)
    server: uvicorn.Server | None = None
    exit_code = 0
    loop: EngineLoop | None = None

    def request_exit() -> None:
        log.info("shutdown requested")
        if server is not None:
            server.should_exit = True

    def spark_died(reason: str) -> None:
        nonlocal exit_code
        exit_code = 3
        threading.Timer(config.spark_death_grace, request_exit).start()

    try:
        memory = MemorySink(Retention(config.retain_rows, config.retain_seconds))
        engine = Engine(master=config.master, allow_udf_modules=config.allow_udf_modules,
                        data_roots=config.data_roots, databases=dict(config.databases),
                        ingest_limits=IngestLimits(config.max_queued_rows,
                                                   config.max_rows_per_cycle),
                        checkpoint_dir=config.checkpoint, checkpoint_every=config.checkpoint_every,
                        sinks={"memory": memory}, feed_dir=config.spool,
                        max_spool_bytes=config.max_spool_bytes, shedding=config.shedding)
        loop = EngineLoop(engine, interval=config.interval, on_spark_death=spark_died)
        loop.start()
        feed = FeedService(loop, config.token,
                           FeedLimits(max_message_bytes=config.max_body_bytes))
        app = build_app(loop, token=config.token, on_shutdown=request_exit,
                        max_body_bytes=config.max_body_bytes, feed=feed,
                        feed_address=(config.host, config.feed_port) if config.feed_port
                        else None)
        log.info("console: http://%s:%d/%s", config.host, config.port,
                 " (give it the token)" if config.token else "")
        # open connections (a `tail` client) get 5 s to finish before the server closes them
        server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port,
                                               log_level="warning", timeout_graceful_shutdown=5))
        server.run()  # returns on SIGINT or should_exit; SIGTERM raises _Terminated
    except _Terminated:
        log.info("SIGTERM: stopping")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if loop is not None:
            log.info("control API closed; stopping queries and Spark")
            if loop.stop(config.stop_timeout):
                log.info("stopped")
            else:
                log.error("engine thread did not stop within %.0f s", config.stop_timeout)
                exit_code = exit_code or 1
    return exit_code
