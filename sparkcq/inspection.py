"""What a running system shows of itself: a query's results (memory sink) and log, a
stream's dead letters, engine metrics. (``EXPLAIN`` and ``SHOW`` are statements:
``statements/explain.py``, ``statements/show.py``.)
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from sparkcq.errors import CatalogError
from sparkcq.io.sinks import MemorySink
from sparkcq.language.sql.statements import OutputForm
from sparkcq.model.columns import OP, TE, TS
from sparkcq.model.time import TIME_MAX
from sparkcq.plan.nodes import EdgeKind
from sparkcq.runtime.driver import CycleDriver
from sparkcq.statements.context import StatementContext


def results(ctx: StatementContext, query: str) -> pd.DataFrame:
    """A query's results so far (memory sink): user columns plus ``_ts`` and ``_te``.

    Interval results show each coalesced element once, with ``_te`` null while open;
    instant results have ``_ts`` = ``_te``; a changelog has ``_op`` '+' or '-'.
    """
    info = ctx.catalog.query(query)
    sink = ctx.sinks[info.sink]
    if not isinstance(sink, MemorySink):
        msg = f"query {query!r} writes to the {info.sink!r} sink; results() reads memory"
        raise CatalogError(msg)
    output = ctx.sinks.destination(info.name).output
    frame = sink.frame(info.name, output.columns)
    # in time order (records of one cycle come in Spark's partition order)
    frame = frame.sort_values(TS, kind="mergesort", na_position="first")
    if not output.timestamp:  # integral times; keep them integral next to nulls
        for c in (TS, TE):
            frame[c] = frame[c].astype("Int64")
    cols = output.columns
    form = info.options["form"]
    if form is OutputForm.CHANGELOG and info.plan.kind is EdgeKind.RELATION:
        return frame[[*cols, TS, OP]].reset_index(drop=True)
    if info.plan.kind is not EdgeKind.RELATION or form is not OutputForm.INTERVALS:
        return frame[[*cols, TS, TE]].reset_index(drop=True)
    return close_elements(frame, cols)


def dead_letters(ctx: StatementContext, stream: str) -> pd.DataFrame:
    """Rows of ``stream`` that were rejected (late, null time, ...) with the reason."""
    info = ctx.catalog.stream(stream)
    return ctx.queries.scans[info.name.lower()].dead_letters().toPandas()


def metrics(ctx: StatementContext, driver: CycleDriver) -> dict[str, Any]:
    """Engine metrics: cycles, state rows per operator, user aggregate instances per
    operator that runs them, dead letters and watermarks per stream.
    """
    last = driver.reports[-1] if driver.reports else None
    queries = ctx.queries
    plan = queries.plan
    scans = queries.scans.values()
    return {
        "cycles": driver.cycle,
        "last_cycle_seconds": last.seconds if last else None,
        "state_rows": {f"#{i} {n.label()}": op.state_rows
                       for i, (n, op) in enumerate(plan.ops.items())},
        "total_state_rows": sum(op.state_rows for op in plan.state_holders())
        + sum(r.formatter.state_rows for r in queries.running.values())
        + queries.intervals.state_rows,
        "live_instances": {f"#{i} {n.label()}": op.live_instances
                           for i, (n, op) in enumerate(plan.ops.items())
                           if op.live_instances is not None},
        "dead_letters": {s.scan.name: s.dead_count for s in scans},
        "watermarks": {s.scan.name: (None if s.watermark == TIME_MAX else s.watermark)
                       for s in scans},
    }


def close_elements(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Apply close records (C) to the open elements (I) they close: one row per element."""
    opened = frame[frame[OP] == "I"][[*cols, TS, TE]].reset_index(drop=True)
    closes = frame[frame[OP] == "C"]
    if closes.empty:
        return opened
    key = [*cols, TS]
    pending = opened[opened[TE].isna()].copy()
    pending["_rank"] = pending.groupby(key, dropna=False).cumcount()
    closes = closes[[*key, TE]].copy()
    closes["_rank"] = closes.groupby(key, dropna=False).cumcount()
    merged = pending.reset_index().merge(closes, on=[*key, "_rank"], how="left",
                                         suffixes=("", "_c"))
    idx = merged["index"][merged[f"{TE}_c"].notna()]
    opened.loc[idx.to_numpy(), TE] = merged.loc[merged[f"{TE}_c"].notna(), f"{TE}_c"].to_numpy()
    return opened
