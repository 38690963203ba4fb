"""``sparkcq serve``: the engine loop plus the control API under uvicorn."""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Sequence

from sparkcq.engine import Engine
from sparkcq.errors import SparkcqError

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


def serve(host: str = "127.0.0.1", port: int = 8765, master: str | None = None,
          interval: float = 1.0, token: str | None = None,
          allow_udf_modules: Sequence[str] = (), data_roots: Sequence[str] = ()) -> int:
    """Run the service until SIGINT/SIGTERM or ``POST /shutdown``; returns an exit code."""
    if not is_loopback(host) and not token:
        msg = f"binding to {host!r} exposes the control API; pass --token (or SPARKCQ_TOKEN)"
        raise ServerSetupError(msg)
    try:
        import uvicorn

        from sparkcq.server.app import build_app
    except ImportError as e:
        msg = f"the server needs its extra: pip install 'sparkcq[server]' ({e})"
        raise ServerSetupError(msg) from None
    from sparkcq.server.loop import EngineLoop

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    loop = EngineLoop(Engine(master=master, allow_udf_modules=allow_udf_modules,
                             data_roots=data_roots),
                      interval=interval)
    loop.start()
    server: uvicorn.Server | None = None

    def request_exit() -> None:
        log.info("shutdown requested")
        if server is not None:
            server.should_exit = True

    app = build_app(loop, token=token, on_shutdown=request_exit)
    # open connections (a `tail` client) get 5 s to finish before the server closes them
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           timeout_graceful_shutdown=5))
    try:
        server.run()  # returns on SIGINT/SIGTERM or should_exit
    finally:
        log.info("control API closed; stopping queries and Spark")
        loop.stop()
        log.info("stopped" if loop.stopped.is_set() else "engine thread did not stop in time")
    return 0
