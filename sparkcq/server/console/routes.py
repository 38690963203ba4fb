"""The console's routes: the page at ``/``, its static files, the newest snapshot as JSON and
as a server-sent event stream (one event per snapshot version).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from sparkcq.errors import UnknownNameError
from sparkcq.server.api.common import handler
from sparkcq.server.console.board import ConsoleBoard

KEEPALIVE_SECONDS = 15.0  # a comment line this often keeps proxies from closing the stream
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8"}
#: the page's files, read once; only these names are served (no path from a request
#: ever reaches the file system)
STATIC = {entry.name: (entry.read_bytes(), MEDIA_TYPES[entry.name[entry.name.rfind("."):]])
          for entry in resources.files("sparkcq.server.console").joinpath("static").iterdir()
          if entry.name[entry.name.rfind("."):] in MEDIA_TYPES}
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
           "Content-Security-Policy": "default-src 'self'; style-src 'self'; "
           "img-src 'self' data:; frame-ancestors 'none'"}


def routes(board: ConsoleBoard) -> list[Route]:
    """``/``, ``/console/static/{name}``, ``/console/snapshot`` and ``/console/events``."""
    async def page(request: Request) -> Response:
        return static_file("index.html")

    async def static(request: Request) -> Response:
        return static_file(request.path_params["name"])

    async def snapshot(request: Request) -> Response:
        _, text = board.encoded_snapshot()
        return Response(text, media_type="application/json", headers=HEADERS)

    async def events(request: Request) -> Response:
        async def stream() -> AsyncIterator[str]:
            version, text = board.encoded_snapshot()
            yield f"event: snapshot\ndata: {text}\n\n"
            while not board.loop.stopping.is_set():
                if await request.is_disconnected():
                    return
                newer = await board.newer_than(version, KEEPALIVE_SECONDS)
                if newer is None:
                    yield ": keep-alive\n\n"
                    continue
                version, text = newer
                yield f"event: snapshot\ndata: {text}\n\n"
        return StreamingResponse(stream(), media_type="text/event-stream", headers=HEADERS)

    return [Route("/", page), Route("/console/static/{name}", handler(static)),
            Route("/console/snapshot", snapshot), Route("/console/events", events)]


def static_file(name: str) -> Response:
    """One of the page's files by name (404 for any other name)."""
    found = STATIC.get(name)
    if found is None:
        msg = f"no console file {name!r}"
        raise UnknownNameError(msg)
    body, media_type = found
    return Response(body, media_type=media_type, headers=HEADERS)
