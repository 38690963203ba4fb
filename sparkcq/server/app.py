"""The control API: HTTP/JSON routes over the engine loop (Starlette)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pandas as pd
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from sparkcq.engine import Engine
from sparkcq.errors import CatalogError, SparkcqError
from sparkcq.server.convert import to_json
from sparkcq.server.loop import EngineLoop


def error_response(e: BaseException) -> JSONResponse:
    """A user's error as 400 (404 for unknown names); anything else as 500."""
    status = 500
    if isinstance(e, SparkcqError):
        status = 404 if isinstance(e, CatalogError) and str(e).startswith("unknown") else 400
    return JSONResponse({"error": str(e), "kind": type(e).__name__}, status_code=status)


def records_since(eng: Engine, name: str, offset: int) -> tuple[pd.DataFrame, int]:
    """The memory-sink records of query ``name`` after the first ``offset`` ones."""
    info = eng.catalog.query(name)
    sink = eng.sinks.get(info.sink)
    parts = getattr(sink, "records", {}).get(info.name, [])
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return frame.iloc[offset:].reset_index(drop=True), len(frame)


class TokenAuth(BaseHTTPMiddleware):
    """Every request must carry ``Authorization: Bearer <token>`` when a token is set."""

    def __init__(self, app: Any, token: str):
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:  # noqa: D102
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return JSONResponse({"error": "missing or wrong token", "kind": "AuthError"},
                                status_code=401)
        return await call_next(request)


def build_app(loop: EngineLoop, token: str | None = None,
              on_shutdown: Callable[[], None] | None = None) -> Starlette:
    """The Starlette application serving ``loop``'s engine."""

    async def call(fn: Callable[[Engine], Any]) -> Any:
        return await asyncio.wrap_future(loop.submit(fn))

    def handler(fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                result = await fn(request)
            except Exception as e:  # noqa: BLE001 - reported to the client
                return error_response(e)
            if isinstance(result, Response):
                return result
            return JSONResponse(to_json(result))
        return endpoint

    async def statements(request: Request) -> Any:
        body = await request.json()
        sql = body.get("sql") if isinstance(body, dict) else None
        if not isinstance(sql, str):
            msg = 'POST /statements needs a JSON body {"sql": "..."}'
            raise SparkcqError(msg)
        return {"result": await call(lambda e: e.execute(sql))}

    def listing(what: str) -> Callable[[Request], Any]:
        async def list_things(request: Request) -> Any:
            return await call(lambda e: e.show(what))
        return list_things

    async def query(request: Request) -> Any:
        name = request.path_params["name"]

        def describe(e: Engine) -> dict[str, Any]:
            info = e.catalog.query(name)
            return {"name": info.name, "status": info.status, "sink": info.sink,
                    "text": info.text, "log": list(info.log)}
        return await call(describe)

    async def drop(request: Request) -> Any:
        name = request.path_params["name"]
        await call(lambda e: e.drop("QUERY", name))
        return {"dropped": name}

    async def logs(request: Request) -> Any:
        name = request.path_params["name"]
        return {"log": await call(lambda e: e.query_log(name))}

    async def explain_query(request: Request) -> Any:
        name = request.path_params["name"]
        return PlainTextResponse(await call(lambda e: e.explain(name)))

    async def explain(request: Request) -> Any:
        fmt = request.query_params.get("format", "text")
        return PlainTextResponse(await call(lambda e: e.explain_global(fmt)))

    async def metrics(request: Request) -> Any:
        return await call(lambda e: e.metrics())

    async def status(request: Request) -> Any:
        return await call(lambda e: loop.status())

    async def results(request: Request) -> Any:
        name = request.path_params["name"]
        offset = int(request.query_params.get("offset", "0"))
        frame, new_offset = await call(lambda e: records_since(e, name, offset))
        return {"rows": frame, "offset": new_offset}

    async def stream(request: Request) -> Any:
        name = request.path_params["name"]
        _, offset = await call(lambda e: records_since(e, name, 0))  # 404 before streaming

        async def events() -> AsyncIterator[str]:
            cursor = offset
            while not loop.stopping.is_set():
                if await request.is_disconnected():
                    return
                try:
                    frame, cursor_next = await call(
                        lambda e, c=cursor: records_since(e, name, c))  # type: ignore[misc]
                except SparkcqError as e:
                    yield f"event: error\ndata: {json.dumps(str(e))}\n\n"
                    return
                if len(frame):
                    yield f"data: {json.dumps(to_json(frame))}\n\n"
                cursor = cursor_next
                await asyncio.sleep(0.25)
        return StreamingResponse(events(), media_type="text/event-stream")

    async def push(request: Request) -> Any:
        name = request.path_params["name"]
        body = await request.json()
        rows = body.get("rows")
        watermark, end = body.get("watermark"), bool(body.get("end", False))
        frame = pd.DataFrame.from_records(rows) if rows else None
        await call(lambda e: e.push(name, frame, watermark=watermark, end=end))
        return {"accepted": 0 if frame is None else len(frame)}

    async def shutdown(request: Request) -> Any:
        if on_shutdown is not None:
            asyncio.get_running_loop().call_later(0.2, on_shutdown)
        return {"stopping": True}

    routes = [
        Route("/statements", handler(statements), methods=["POST"]),
        Route("/streams", handler(listing("STREAMS"))),
        Route("/tables", handler(listing("TABLES"))),
        Route("/functions", handler(listing("FUNCTIONS"))),
        Route("/aggregates", handler(listing("AGGREGATES"))),
        Route("/queries", handler(listing("QUERIES"))),
        Route("/queries/{name}", handler(query)),
        Route("/queries/{name}", handler(drop), methods=["DELETE"]),
        Route("/queries/{name}/log", handler(logs)),
        Route("/queries/{name}/explain", handler(explain_query)),
        Route("/queries/{name}/results", handler(results)),
        Route("/queries/{name}/stream", handler(stream)),
        Route("/streams/{name}/rows", handler(push), methods=["POST"]),
        Route("/explain", handler(explain)),
        Route("/metrics", handler(metrics)),
        Route("/status", handler(status)),
        Route("/shutdown", handler(shutdown), methods=["POST"]),
    ]
    middleware = [Middleware(TokenAuth, token=token)] if token else []
    return Starlette(routes=routes, middleware=middleware)
