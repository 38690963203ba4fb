"""The server's application: the control API's routes (``server/api/``, one module per
resource group) and the console (``server/console/``) behind one token check (Starlette).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware

from sparkcq.server.api import catalog, results, streams, system
from sparkcq.server.api.auth import TokenAuth
from sparkcq.server.api.common import ApiContext
from sparkcq.server.console import routes as console
from sparkcq.server.console.board import ConsoleBoard
from sparkcq.server.feed import FeedService
from sparkcq.server.loop import EngineLoop


def build_app(loop: EngineLoop, token: str | None = None,
              on_shutdown: Callable[[], None] | None = None,
              max_body_bytes: int = 16 * 2**20, feed: FeedService | None = None,
              feed_address: tuple[str, int] | None = None) -> Starlette:
    """The Starlette application serving ``loop``'s engine.

    Statements and reads of Spark state wait for the engine thread (between two cycles);
    pushes, results, status and the console do not, so they answer at once during a long
    cycle. With ``feed_address``, the feed's TCP listener runs in the same event loop.
    """
    feed = feed or FeedService(loop, token)
    ctx = ApiContext(loop, max_body_bytes)
    board = ConsoleBoard(loop)
    loop.watch(board.refresh)
    loop.submit(lambda _engine: board.refresh())  # the first picture, before any cycle
    routes = [*catalog.routes(ctx), *results.routes(ctx), *streams.routes(ctx, feed),
              *system.routes(ctx, on_shutdown), *console.routes(board)]
    middleware = [Middleware(TokenAuth, token=token)] if token else []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        listener = await feed.start(*feed_address) if feed_address else None
        try:
            yield
        finally:
            if listener is not None:
                listener.close()

    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
