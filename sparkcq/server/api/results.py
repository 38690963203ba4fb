"""A query's results from the memory sink: a page of records, or a server-sent event
stream of them as cycles commit. Neither waits for the engine thread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pandas as pd
from pyspark.sql.types import IntegralType
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from sparkcq.engine import Engine
from sparkcq.errors import SparkcqError
from sparkcq.io.sinks import MemorySink
from sparkcq.model.columns import TE, TS
from sparkcq.model.time import TIME_MAX, TIME_MIN
from sparkcq.plan.nodes import StreamScan, walk
from sparkcq.server.api.common import ApiContext, RequestError, handler, int_param
from sparkcq.server.convert import to_json

POLL_SECONDS = 0.25  # how often an event stream looks for new records


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
    rows = integral(frame.iloc[:limit].reset_index(drop=True), eng, query)
    return {"rows": rows, "offset": start + len(rows), "first_offset": first,
            "end_offset": end, "dropped": max(0, first - offset),
            "watermark": final_through(eng, query)}


def final_through(eng: Engine, query: str) -> int | str | None:
    """The event time below which the query's output is final (the least watermark of the
    streams it reads): a number on its time axis, ``"+inf"`` once they all ended (an
    element still open then never ends), None before any watermark. Read without the
    engine thread: one value per stream, each replaced whole by a cycle.
    """
    scans = eng.queries.scans
    streams = {n.name.lower() for n in walk(eng.catalog.query(query).plan)
               if isinstance(n, StreamScan)}
    marks = [scans[s].watermark for s in streams if s in scans]
    if not marks or min(marks) == TIME_MIN:
        return None
    return "+inf" if min(marks) == TIME_MAX else min(marks)


def integral(rows: pd.DataFrame, eng: Engine, query: str) -> pd.DataFrame:
    """``rows`` with the query's whole-number columns (and its times, when they are
    numbers) as integers: pandas holds a column with nulls as floats, and JSON would carry
    a BIGINT end of 20 as ``20.0``.
    """
    output = eng.sinks.destination(query).output
    fields = output.schema.fields if output.schema is not None else []
    whole = [f.name for f in fields if isinstance(f.dataType, IntegralType)]
    if not output.timestamp:
        whole += [TS, TE]
    rows = rows.copy()
    for column in whole:
        if column in rows.columns:
            rows[column] = rows[column].astype("Int64")
    return rows


def routes(ctx: ApiContext) -> list[Route]:
    """``/queries/{name}/results`` and ``/queries/{name}/stream``."""
    async def results(request: Request) -> Any:
        name = request.path_params["name"]
        offset = int_param(request, "offset", 0)
        limit = int_param(request, "limit", 10_000, low=1)
        return records_since(ctx.engine(), name, offset, limit)

    async def stream(request: Request) -> Any:
        """New records as they commit; ``?from=0`` starts with the kept ones."""
        name = request.path_params["name"]
        newest = records_since(ctx.engine(), name, 0, 1)["end_offset"]  # 404 before streaming
        cursor = int_param(request, "from", newest)

        async def events() -> AsyncIterator[str]:
            nonlocal cursor
            while not ctx.loop.stopping.is_set():
                if await request.is_disconnected():
                    return
                try:
                    page = records_since(ctx.engine(), name, cursor)
                except SparkcqError as e:
                    yield f"event: error\ndata: {json.dumps(str(e))}\n\n"
                    return
                if len(page["rows"]):
                    yield f"data: {json.dumps(to_json(page['rows']))}\n\n"
                    cursor = page["offset"]
                else:
                    await asyncio.sleep(POLL_SECONDS)
        return StreamingResponse(events(), media_type="text/event-stream")

    return [Route("/queries/{name}/results", handler(results)),
            Route("/queries/{name}/stream", handler(stream))]
