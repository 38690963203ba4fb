"""Statements and what the catalog holds: ``POST /statements``, the listings, one query
(its status, log and plan) and dropping it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from sparkcq.errors import SparkcqError
from sparkcq.server.api.common import ApiContext, handler, read_json


def routes(ctx: ApiContext) -> list[Route]:
    """The routes of statements, listings and queries."""
    async def statements(request: Request) -> Any:
        body = await read_json(request, ctx.max_body_bytes)
        sql = body.get("sql") if isinstance(body, dict) else None
        if not isinstance(sql, str):
            msg = 'POST /statements needs a JSON body {"sql": "..."}'
            raise SparkcqError(msg)
        return {"result": await ctx.call(lambda e: e.execute(sql))}

    def listing(what: str) -> Callable[[Request], Any]:
        async def list_things(request: Request) -> Any:
            return await ctx.call(lambda e: e.show(what))
        return list_things

    async def query(request: Request) -> Any:
        info = ctx.loop.engine.catalog.query(request.path_params["name"])  # no Spark: here
        return {"name": info.name, "status": info.status, "sink": info.sink,
                "text": info.text, "log": list(info.log)}

    async def drop(request: Request) -> Any:
        name = request.path_params["name"]
        await ctx.call(lambda e: e.drop("QUERY", name))
        return {"dropped": name}

    async def logs(request: Request) -> Any:
        return {"log": list(ctx.loop.engine.catalog.query(request.path_params["name"]).log)}

    async def explain_query(request: Request) -> Any:
        name = request.path_params["name"]
        return PlainTextResponse(await ctx.call(lambda e: e.explain(name)))

    return [
        Route("/statements", handler(statements), methods=["POST"]),
        *(Route(f"/{what.lower()}", handler(listing(what)))
          for what in ("STREAMS", "TABLES", "FUNCTIONS", "AGGREGATES", "QUERIES")),
        Route("/queries/{name}", handler(query)),
        Route("/queries/{name}", handler(drop), methods=["DELETE"]),
        Route("/queries/{name}/log", handler(logs)),
        Route("/queries/{name}/explain", handler(explain_query)),
    ]
