"""``SHOW STREAMS | TABLES | QUERIES | FUNCTIONS | AGGREGATES``: the catalog as small tables."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd

from sparkcq.catalog import TableInfo
from sparkcq.language.sql.statements import Show, ShowTarget
from sparkcq.statements.context import StatementContext
from sparkcq.statements.drop import aggregate_users
from sparkcq.statements.feeds import stream_state


def show_statement(stmt: Show, text: str, ctx: StatementContext) -> pd.DataFrame:
    """The SHOW's table."""
    return show(ctx, stmt.what)


def show(ctx: StatementContext, what: ShowTarget | str) -> pd.DataFrame:
    """One row per stream, table, query, function or aggregate."""
    target = ShowTarget(what.upper())
    catalog = ctx.catalog
    scans = ctx.queries.scans
    if target is ShowTarget.STREAMS:
        return pd.DataFrame([
            {"name": s.name, "kind": "derived" if s.derived else s.options.get("source",
                                                                                 "memory"),
             "schema": s.schema.simpleString(), "event_time": s.time_col,
             "state": stream_state(ctx, s.name).value,
             "key": ", ".join(s.key) or None,
             "watermark": scans[k].watermark if k in scans else None}
            for k, s in catalog.streams.items()])
    if target is ShowTarget.FUNCTIONS:
        return pd.DataFrame([{"name": f.name, "signature": f.signature, "code": f.origin}
                             for f in catalog.functions.values()],
                            columns=["name", "signature", "code"])
    if target is ShowTarget.AGGREGATES:
        return pd.DataFrame([{"name": a.name, "signature": a.signature, "code": a.origin,
                              "used_by": ", ".join(aggregate_users(ctx, a.name))}
                             for a in catalog.aggregates.values()],
                            columns=["name", "signature", "code", "used_by"])
    if target is ShowTarget.TABLES:
        return pd.DataFrame([table_row(t) for t in catalog.tables.values()],
                            columns=["name", "schema", "source", "version", "read_at",
                                     "refresh", "note"])
    return pd.DataFrame([{"name": q.name, "status": q.status, "sink": q.sink,
                          "form": q.options["form"].value} for q in catalog.queries.values()])


def table_row(info: TableInfo) -> dict[str, Any]:
    """A table's row of SHOW TABLES: where it is read from, its version, when it was read."""
    every = info.source.refresh_every if info.source is not None else None
    read_at = None if info.read_at is None else dt.datetime.fromtimestamp(
        info.read_at, dt.UTC).isoformat(timespec="seconds")
    return {"name": info.name, "schema": info.schema.simpleString(),
            "source": info.source.origin if info.source is not None else "data",
            "version": info.version,
            "read_at": read_at, "refresh": None if every is None else f"{every:g} SECONDS",
            "note": info.note}

