"""The system as a whole: the global plan, metrics, status and shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from sparkcq.server.api.common import ApiContext, handler
from sparkcq.server.convert import to_json


def routes(ctx: ApiContext, on_shutdown: Callable[[], None] | None) -> list[Route]:
    """``/explain``, ``/metrics``, ``/status`` (answers at once) and ``POST /shutdown``."""
    async def explain(request: Request) -> Any:
        fmt = request.query_params.get("format", "text")
        return PlainTextResponse(await ctx.call(lambda e: e.explain_global(fmt)))

    async def metrics(request: Request) -> Any:
        return await ctx.call(lambda e: e.metrics())

    async def status(request: Request) -> Any:
        report = ctx.loop.status()
        if report["spark"] != "running":
            return JSONResponse(to_json(report), status_code=503)
        return report

    async def shutdown(request: Request) -> Any:
        if on_shutdown is not None:
            asyncio.get_running_loop().call_later(0.2, on_shutdown)
        return {"stopping": True}

    return [Route("/explain", handler(explain)),
            Route("/metrics", handler(metrics)),
            Route("/status", handler(status)),
            Route("/shutdown", handler(shutdown), methods=["POST"])]
