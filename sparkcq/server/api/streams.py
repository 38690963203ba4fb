"""Input and what was refused of it: pushing rows, feed messages over HTTP, and a stream's
dead letters.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Route

from sparkcq.io.feed_protocol import FeedMessageError, parse_message, raw_text
from sparkcq.io.feed_protocol import read_json as read_feed_json
from sparkcq.server.api.common import (
    ApiContext,
    RequestError,
    handler,
    int_param,
    read_body,
    read_json,
)
from sparkcq.server.feed import FeedService, Frame

ARROW_MEDIA_TYPE = "application/vnd.apache.arrow.stream"
PUSH_SHAPE = ('a JSON object {"rows": [{...}, ...], "deletes": [{...}, ...], '
              '"watermark": W, "end": false}')


def routes(ctx: ApiContext, feed: FeedService) -> list[Route]:
    """``/streams/{name}/rows``, ``/tables/{name}/rows``, ``/feed/{name}`` and
    ``/streams/{name}/dead-letters``.
    """
    async def push(request: Request) -> Any:
        name = request.path_params["name"]
        body = await read_json(request, ctx.max_body_bytes)
        if not isinstance(body, dict):
            msg = f"POST /streams/{name}/rows needs {PUSH_SHAPE}; got {type(body).__name__}"
            raise RequestError(msg)
        if unknown := sorted(set(body) - {"rows", "deletes", "watermark", "end"}):
            msg = f"unknown field(s) {', '.join(map(repr, unknown))}; send {PUSH_SHAPE}"
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
        ctx.refuse_when_stopping()
        receipt = await run_in_threadpool(ctx.engine().push, name, rows,
                                          body.get("watermark"), end, deletes or None)
        answer: dict[str, Any] = {
            "accepted": receipt.accepted,
            "rejected": [{"index": e.index, "column": e.column, "reason": e.reason,
                          **({"delete": True} if e.what == "delete" else {})}
                         for e in receipt.rejected],
            "late": [{"index": e.index, "column": e.column, "reason": e.reason}
                     for e in receipt.late],
            "late_rows": receipt.late_rows}
        if deletes:
            answer["deleted"] = receipt.deleted
        return answer

    async def feed_messages(request: Request) -> Any:
        name = request.path_params["name"]
        producer = request.query_params.get("producer")
        ctx.refuse_when_stopping()
        frames: list[Frame] = []
        body = await read_body(request, ctx.max_body_bytes)
        if request.headers.get("content-type", "").startswith(ARROW_MEDIA_TYPE):
            seq = int_param(request, "seq", 0)
            try:
                frames.append(parse_message({"kind": "INSERTION", **({"seq": seq} if seq
                                                                     else {})}, body))
            except FeedMessageError as e:
                frames.append(e)
        else:
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
        frame = await ctx.call(lambda e: e.dead_letters(name))
        rows = frame.iloc[offset:offset + limit].reset_index(drop=True)
        return {"rows": rows, "offset": offset + len(rows), "total": len(frame)}

    async def insert(request: Request) -> Any:
        """Rows added to a table as its next version: ``{"rows": [{...}, ...]}``."""
        name = request.path_params["name"]
        body = await read_json(request, ctx.max_body_bytes)
        rows = body.get("rows") if isinstance(body, dict) else None
        if not isinstance(rows, list) or set(body) - {"rows"}:
            msg = f'POST /tables/{name}/rows needs a JSON object {{"rows": [{{...}}, ...]}}'
            raise RequestError(msg)
        ctx.refuse_when_stopping()
        return {"inserted": await ctx.call(lambda e: e.insert_rows(name, rows))}

    return [Route("/streams/{name}/rows", handler(push), methods=["POST"]),
            Route("/tables/{name}/rows", handler(insert), methods=["POST"]),
            Route("/streams/{name}/dead-letters", handler(dead_letters)),
            Route("/feed/{name}", handler(feed_messages), methods=["POST"])]
