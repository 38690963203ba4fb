"""The control API: HTTP/JSON routes over the engine loop (Starlette)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from sparkcq.engine import Engine
from sparkcq.errors import BackpressureError, SparkcqError, SparkDiedError, UnknownNameError
from sparkcq.io.feed_protocol import FeedMessageError, parse_message, raw_text
from sparkcq.io.feed_protocol import read_json as read_feed_json
from sparkcq.io.sinks import MemorySink
from sparkcq.server.convert import to_json
from sparkcq.server.feed import FeedService, Frame
from sparkcq.server.loop import RETRY_AFTER_SECONDS, BusyError, EngineLoop, ServerStoppingError

ARROW_MEDIA_TYPE = "application/vnd.apache.arrow.stream"


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
    """An error as JSON with the status its class maps to (500 for anything unexpected)."""
    status = next((code for kind, code in STATUS if isinstance(e, kind)), 500)
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status in (429, 503) else None
    return JSONResponse({"error": str(e), "kind": type(e).__name__}, status_code=status,
                        headers=headers)


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


def memory_sink(eng: Engine, name: str) -> tuple[MemorySink, str]:
    """The memory sink query ``name`` writes to, and the query's name as created."""
    info = eng.catalog.query(name)
    sink = eng.sinks.get(info.sink)
    if not isinstance(sink, MemorySink):
        msg = f"query {info.name!r} writes to the {info.sink!r} sink; only memory is served"
        raise RequestError(msg)
    return sink, info.name


def records_since(eng: Engine, name: str, offset: int,
                  limit: int = 10_000) -> dict[str, Any]:
    """At most ``limit`` records of query ``name`` from ``offset`` on (read without the engine
    thread). ``first_offset`` is where the kept records begin: rows before it were dropped by
    the query's retention; ``dropped`` counts those the caller asked for and missed.
    """
    sink, query = memory_sink(eng, name)
    frame, end, first = sink.since(query, offset)
    start = max(offset, first)
    rows = frame.iloc[:limit].reset_index(drop=True)
    return {"rows": rows, "offset": start + len(rows), "first_offset": first,
            "end_offset": end, "dropped": max(0, first - offset)}


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
              on_shutdown: Callable[[], None] | None = None,
              max_body_bytes: int = 16 * 2**20, feed: FeedService | None = None,
              feed_address: tuple[str, int] | None = None) -> Starlette:
    """The Starlette application serving ``loop``'s engine.

    Statements and reads of Spark state wait for the engine thread (between two cycles);
    pushes, results and status do not, so they answer at once during a long cycle. With
    ``feed_address``, the feed's TCP listener runs in the same event loop.
    """
    feed = feed or FeedService(loop, token)

    async def call(fn: Callable[[Engine], Any]) -> Any:
        return await asyncio.wrap_future(loop.submit(fn))

    def engine() -> Engine:
        loop.check_alive()
        return loop.engine

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
        body = await read_json(request, max_body_bytes)
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
        info = loop.engine.catalog.query(request.path_params["name"])  # no Spark: read here
        return {"name": info.name, "status": info.status, "sink": info.sink,
                "text": info.text, "log": list(info.log)}

    async def drop(request: Request) -> Any:
        name = request.path_params["name"]
        await call(lambda e: e.drop("QUERY", name))
        return {"dropped": name}

    async def logs(request: Request) -> Any:
        return {"log": list(loop.engine.catalog.query(request.path_params["name"]).log)}

    async def explain_query(request: Request) -> Any:
        name = request.path_params["name"]
        return PlainTextResponse(await call(lambda e: e.explain(name)))

    async def explain(request: Request) -> Any:
        fmt = request.query_params.get("format", "text")
        return PlainTextResponse(await call(lambda e: e.explain_global(fmt)))

    async def metrics(request: Request) -> Any:
        return await call(lambda e: e.metrics())

    async def status(request: Request) -> Any:
        report = loop.status()
        if report["spark"] != "running":
            return JSONResponse(to_json(report), status_code=503)
        return report

    async def results(request: Request) -> Any:
        name = request.path_params["name"]
        offset = int_param(request, "offset", 0)
        limit = int_param(request, "limit", 10_000, low=1)
        return records_since(engine(), name, offset, limit)

    async def stream(request: Request) -> Any:
        name = request.path_params["name"]
        cursor = records_since(engine(), name, 0, 1)["end_offset"]  # 404 before streaming

        async def events() -> AsyncIterator[str]:
            nonlocal cursor
            while not loop.stopping.is_set():
                if await request.is_disconnected():
                    return
                try:
                    page = records_since(engine(), name, cursor)
                except SparkcqError as e:
                    yield f"event: error\ndata: {json.dumps(str(e))}\n\n"
                    return
                if len(page["rows"]):
                    yield f"data: {json.dumps(to_json(page['rows']))}\n\n"
                    cursor = page["offset"]
                else:
                    await asyncio.sleep(0.25)
        return StreamingResponse(events(), media_type="text/event-stream")

    async def push(request: Request) -> Any:
        name = request.path_params["name"]
        body = await read_json(request, max_body_bytes)
        shape = ('a JSON object {"rows": [{...}, ...], "deletes": [{...}, ...], '
                 '"watermark": W, "end": false}')
        if not isinstance(body, dict):
            msg = f"POST /streams/{name}/rows needs {shape}; got {type(body).__name__}"
            raise RequestError(msg)
        if unknown := sorted(set(body) - {"rows", "deletes", "watermark", "end"}):
            msg = f"unknown field(s) {', '.join(map(repr, unknown))}; send {shape}"
            raise RequestError(msg)
        rows = body.get("rows") or []
        deletes = body.get("deletes") or []
        for field, given in (("rows", rows), ("deletes", deletes)):
            if not isinstance(given, list):
                msg = f"{field} must be a list of objects; got {type(given).__name__}"
                raise RequestError(msg)
        end = body.get("end", False)
        if not isinstance(end, bool):
            msg = f"end must be true or false; got {end!r}"
            raise RequestError(msg)
        if loop.stopping.is_set():
            msg = "the server is stopping; it takes no more input"
            raise ServerStoppingError(msg)
        eng = engine()
        receipt = await run_in_threadpool(eng.push, name, rows, body.get("watermark"), end,
                                          deletes or None)
        answer: dict[str, Any] = {
            "accepted": receipt.accepted,
            "rejected": [{"index": e.index, "column": e.column, "reason": e.reason,
                          **({"delete": True} if e.what == "delete" else {})}
                         for e in receipt.rejected]}
        if deletes:
            answer["deleted"] = receipt.deleted
        return answer

    async def feed_messages(request: Request) -> Any:
        name = request.path_params["name"]
        producer = request.query_params.get("producer")
        if loop.stopping.is_set():
            msg = "the server is stopping; it takes no more input"
            raise ServerStoppingError(msg)
        frames: list[Frame] = []
        if request.headers.get("content-type", "").startswith(ARROW_MEDIA_TYPE):
            body = await read_body(request, max_body_bytes)
            seq = int_param(request, "seq", 0)
            try:
                frames.append(parse_message({"kind": "INSERTION", **({"seq": seq} if seq
                                                                     else {})}, body))
            except FeedMessageError as e:
                frames.append(e)
        else:
            body = await read_body(request, max_body_bytes)
            for line in body.splitlines():
                if not line.strip():
                    continue
                try:
                    frames.append(parse_message(read_feed_json(line)))
                except FeedMessageError as e:
                    e.raw = raw_text(line)
                    frames.append(e)
        feed.source(name)  # 404 for an unknown stream, 400 for one that is not a feed
        return {"answers": await feed.take(name, producer, frames)}

    async def dead_letters(request: Request) -> Any:
        name = request.path_params["name"]
        offset = int_param(request, "offset", 0)
        limit = int_param(request, "limit", 10_000, low=1)
        frame = await call(lambda e: e.dead_letters(name))
        rows = frame.iloc[offset:offset + limit].reset_index(drop=True)
        return {"rows": rows, "offset": offset + len(rows), "total": len(frame)}

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
        Route("/streams/{name}/dead-letters", handler(dead_letters)),
        Route("/feed/{name}", handler(feed_messages), methods=["POST"]),
        Route("/explain", handler(explain)),
        Route("/metrics", handler(metrics)),
        Route("/status", handler(status)),
        Route("/shutdown", handler(shutdown), methods=["POST"]),
    ]
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
