"""One picture of the running system for the console, taken in the engine thread between two
cycles from what the driver already knows: no Spark action, a few milliseconds with 50
queries (the engine's cycle must not pay for pages being open).

Everything is JSON-ready. Event times are numbers on the engine's time axis (microseconds
since the epoch for TIMESTAMP streams, ``time_kind`` says which); ``None`` stands for "no
watermark yet" and for +infinity (ended input).
"""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from sparkcq.catalog import QueryInfo, QueryStatus
from sparkcq.engine import Engine
from sparkcq.inspection import table_row
from sparkcq.io.feed_source import FeedSource
from sparkcq.io.sources import MemorySource
from sparkcq.model.time import TIME_MAX, TIME_MIN
from sparkcq.plan.labels import user_labels
from sparkcq.plan.nodes import StreamScan, walk
from sparkcq.runtime.global_plan import OperatorStats


def finite(at: int | None) -> int | None:
    """An event time, or None for "none yet" and for +infinity."""
    return None if at is None or at in (TIME_MIN, TIME_MAX) else at


def attribute_tree(schema: DataType) -> list[dict[str, Any]]:
    """A schema as a tree: nested attributes (``position.x``) are children of their struct."""
    if not isinstance(schema, StructType):
        return []
    out = []
    for f in schema.fields:
        inner: DataType = f.dataType
        while isinstance(inner, ArrayType | MapType):
            inner = inner.elementType if isinstance(inner, ArrayType) else inner.valueType
        out.append({"name": f.name, "type": f.dataType.simpleString()
                    if not isinstance(f.dataType, StructType) else "struct",
                    "children": attribute_tree(inner)})
    return out


def query_row(engine: Engine, info: QueryInfo, accepted: dict[str, int],
              rows_out: dict[str, int], last_cycle_at: float | None) -> dict[str, Any]:
    """A query as the console lists it, with its freshness.

    ``frontier`` is the event time through which its output is final (the least watermark
    of the streams it reads, as of the last cycle); ``lag`` is how far that trails the
    watermarks its inputs have accepted since (input waiting for the next cycle); ``age``
    is the wall-clock seconds since the last cycle committed.
    """
    scans = engine.queries.scans
    streams = sorted({n.name.lower() for n in walk(info.plan) if isinstance(n, StreamScan)})
    marks = [scans[s].watermark for s in streams if s in scans]
    frontier = finite(min(marks)) if marks else None
    reachable = finite(min(accepted[s] for s in streams if s in accepted)) if marks else None
    lag = None if frontier is None or reachable is None else max(0, reachable - frontier)
    reason = info.log[-1] if info.status is not QueryStatus.RUNNING and info.log else None
    return {"name": info.name, "language": info.language, "status": info.status.value,
            "reason": reason, "sink": info.sink, "form": str(info.options["form"].value),
            "text": info.text, "streams": streams,
            "time_kind": info.plan.time_kind.value,
            "rows_last_cycle": rows_out.get(info.name, 0),
            "frontier": finite(frontier), "lag": lag,
            "age_seconds": None if last_cycle_at is None else time.time() - last_cycle_at,
            "log_lines": len(info.log)}


def plan_picture(engine: Engine, cycle_seconds: float | None) -> dict[str, Any]:
    """The global plan as nodes and edges, with who shares each node and what it costs.

    An operator's ``share`` of the cycle is its driver time (building its part of the plan)
    plus the cycle's Spark time divided among operators by the rows each handled (its output
    and its state): Spark runs the whole cycle as one job, so its time per operator is an
    estimate, and the console says so.
    """
    plan = engine.queries.plan
    ids = {node: i for i, node in enumerate(plan.ops)}
    labels = user_labels(plan.ops)
    stats = {node: plan.stats.get(node, OperatorStats()) for node in plan.ops}
    handled = {node: (stats[node].rows_out or 0) + op.state_rows for node, op in plan.ops.items()}
    driver = sum(s.plan_seconds for s in stats.values())
    spark = max(0.0, (cycle_seconds or 0.0) - driver)
    total_rows = sum(handled.values())
    nodes = []
    for node, op in plan.ops.items():
        st = stats[node]
        seconds = st.plan_seconds + (spark * handled[node] / total_rows if total_rows else 0)
        nodes.append({
            "id": ids[node], "label": labels.get(node) or node.label(),
            "op": type(node).__name__,
            "kind": node.kind.value, "inputs": [ids[c] for c in node.children if c in ids],
            "queries": sorted(plan.users.get(node, set())), "refs": plan.refs[node],
            "state_rows": op.state_rows, "rows_last_cycle": st.rows_out,
            "rows_per_cycle": st.rows_total / st.cycles if st.cycles else None,
            "fused": st.fused, "driver_ms": st.plan_seconds * 1e3,
            "estimated_ms": seconds * 1e3,
            "share": seconds / cycle_seconds if cycle_seconds else 0.0,
            "instances": op.live_instances, "shedding": op.shedding_report()})
    families = [{"name": f"F{n}", "base": ids[f.base], "members": [ids[m] for m in f.members]}
                for n, f in enumerate(plan.families.fused_families())]
    return {"nodes": nodes, "families": families, "driver_ms": driver * 1e3,
            "cycle_ms": (cycle_seconds or 0.0) * 1e3}


def stream_rows(engine: Engine) -> list[dict[str, Any]]:
    """Each stream: schema tree, source, state, watermarks, lateness, input and dead letters."""
    view = engine.context.view()
    scans = engine.queries.scans
    out = []
    for key, info in list(engine.catalog.streams.items()):
        scan = scans.get(key)
        source = engine.sources.get(key)
        out.append({
            "name": info.name, "time_kind": info.time_kind.value,
            "source": "derived" if info.derived else info.options.get("source", "memory"),
            "state": view.stream_state(info.name).value, "event_time": info.time_col,
            "end_time": info.end_col, "key": list(info.key),
            "lateness": info.options.get("lateness"),
            "schema": attribute_tree(info.schema),
            "watermark": finite(scan.watermark) if scan is not None else None,
            "ended": scan is not None and scan.watermark == TIME_MAX,
            "accepted_watermark": finite(source.watermark)
            if isinstance(source, MemorySource) else None,
            "queued_rows": source.queued_rows if isinstance(source, MemorySource) else 0,
            "connections": source.connections if isinstance(source, FeedSource) else None,
            "rows_in": scan.rows_in if scan is not None else 0,
            "dead_letters": scan.dead_count if scan is not None else 0})
    return out


def table_rows(engine: Engine) -> list[dict[str, Any]]:
    """Each table: schema tree, where it is read from, its version and when it was read."""
    return [{**table_row(t), "schema": attribute_tree(t.schema)}
            for t in list(engine.catalog.tables.values())]


def accepted_watermarks(engine: Engine) -> dict[str, int]:
    """The watermark each source stream has accepted, cycles or not: a pushed stream's
    newest, any other's as its scan processed it.
    """
    return {k: source.watermark if isinstance(source := engine.sources.get(k), MemorySource)
            else scan.watermark for k, scan in list(engine.queries.scans.items())}


def take_snapshot(engine: Engine, status: dict[str, Any], health: list[dict[str, Any]],
                  ) -> dict[str, Any]:
    """The whole console picture: status, queries, plan, streams, tables, health history."""
    last = engine.reports[-1] if engine.reports else None
    accepted = accepted_watermarks(engine)
    last_at = health[-1]["at"] if health else None
    return {
        "taken_at": time.time(), "cycle": engine.cycle, "status": status,
        "queries": [query_row(engine, q, accepted, last.rows_out if last else {}, last_at)
                    for q in list(engine.catalog.queries.values())],
        "plan": plan_picture(engine, last.seconds if last else None),
        "streams": stream_rows(engine), "tables": table_rows(engine),
        "aggregates": [{"name": a.name, "signature": a.signature, "code": a.origin}
                       for a in list(engine.catalog.aggregates.values())],
        "health": health,
    }
