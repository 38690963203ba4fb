"""What every route module shares: the context routes are built with, reading bodies and
parameters, and turning errors into JSON answers with the right status.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sparkcq.engine import Engine
from sparkcq.errors import (
    BackpressureError,
    QueryTextError,
    SparkcqError,
    SparkDiedError,
    UnknownNameError,
)
from sparkcq.server.convert import to_json
from sparkcq.server.loop import RETRY_AFTER_SECONDS, BusyError, EngineLoop, ServerStoppingError


class RequestError(SparkcqError, ValueError):
    """A request the API cannot read: not JSON, a wrong shape, a bad parameter (400)."""


class PayloadTooLargeError(RequestError):
    """A body over the server's limit (413)."""


#: HTTP status per error class, most specific first; any other SparkcqError is 400
STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (UnknownNameError, 404), (PayloadTooLargeError, 413), (BackpressureError, 429),
    (BusyError, 429), (SparkDiedError, 503), (ServerStoppingError, 503), (SparkcqError, 400),
)


def error_response(e: BaseException) -> JSONResponse:
    """An error as JSON with the status its class maps to (500 for anything unexpected);
    an error in query text also gives its place (``line``, ``col`` and the 0-based
    ``start``/``end`` offsets of the fragment in the submitted text), so an editor can
    underline it.
    """
    status = next((code for kind, code in STATUS if isinstance(e, kind)), 500)
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status in (429, 503) else None
    body: dict[str, Any] = {"error": str(e), "kind": type(e).__name__}
    if isinstance(e, QueryTextError) and e.loc is not None:
        body["message"] = e.message
        body["location"] = {"line": e.loc.line, "col": e.loc.col, "start": e.loc.start,
                            "end": e.loc.end}
    return JSONResponse(body, status_code=status, headers=headers)


@dataclass(frozen=True)
class ApiContext:
    """What the routes work with: the engine loop and the server's limits."""

    loop: EngineLoop
    max_body_bytes: int = 16 * 2**20

    async def call(self, fn: Callable[[Engine], Any]) -> Any:
        """``fn(engine)`` run in the engine thread between two cycles."""
        return await asyncio.wrap_future(self.loop.submit(fn))

    def engine(self) -> Engine:
        """The engine, for reads that take any thread (refused once Spark is gone)."""
        self.loop.check_alive()
        return self.loop.engine

    def refuse_when_stopping(self) -> None:
        """Raise ``ServerStoppingError`` once the server takes no more input."""
        if self.loop.stopping.is_set():
            msg = "the server is stopping; it takes no more input"
            raise ServerStoppingError(msg)


Endpoint = Callable[[Request], Awaitable[Response]]


def handler(fn: Callable[[Request], Awaitable[Any]]) -> Endpoint:
    """An endpoint answering ``fn``'s value as JSON, and any error by ``error_response``."""
    async def endpoint(request: Request) -> Response:
        try:
            result = await fn(request)
        except Exception as e:  # noqa: BLE001 - reported to the client
            return error_response(e)
        if isinstance(result, Response):
            return result
        return JSONResponse(to_json(result))
    return endpoint


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused past ``limit`` bytes before it is all read."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        msg = f"the body has {int(declared):,} bytes; the limit is {limit:,} (--max-body-bytes)"
        raise PayloadTooLargeError(msg)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            msg = f"the body is over the limit of {limit:,} bytes (--max-body-bytes)"
            raise PayloadTooLargeError(msg)
    return bytes(body)


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body, refused past ``limit`` bytes before it is all read."""
    body = await read_body(request, limit)
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        msg = f"the body is not JSON: {e}"
        raise RequestError(msg) from None


def int_param(request: Request, name: str, default: int, low: int = 0) -> int:
    """A whole-number query parameter, at least ``low``."""
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        msg = f"query parameter {name}={text!r} must be a whole number >= {low}"
        raise RequestError(msg)
    return value
