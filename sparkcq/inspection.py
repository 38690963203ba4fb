"""What a running system shows of itself: a query's results (memory sink), a stream's dead
letters and state, SHOW's tables, EXPLAIN's plans, metrics, and who uses an aggregate.

A ``SystemView`` reads; it changes nothing. The SHOW and EXPLAIN statement handlers and the
facade's ``results``, ``metrics``, ... ask it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from sparkcq.catalog import Catalog, TableInfo
from sparkcq.errors import CatalogError
from sparkcq.io.delivery import Sinks
from sparkcq.io.feed_source import FeedSource
from sparkcq.io.sinks import MemorySink
from sparkcq.io.sources import Source
from sparkcq.language.sql.statements import ExplainFormat, OutputForm, ShowTarget
from sparkcq.model.columns import OP, TE, TS
from sparkcq.model.time import TIME_MAX
from sparkcq.plan.labels import user_labels
from sparkcq.plan.nodes import (
    Aggregate,
    EdgeKind,
    PlanNode,
    TableFunction,
    render_tree,
    walk,
)
from sparkcq.runtime.cycle_cost import CycleCost, render_costs
from sparkcq.runtime.driver import CycleReport
from sparkcq.runtime.explain import explain_global_dot, explain_global_text
from sparkcq.runtime.queries import RunningQueries
from sparkcq.runtime.spark_work import SparkWork, caught_up, tagged_work


class StreamState(StrEnum):
    """What ``SHOW STREAMS`` says of a stream's input."""

    READY = "ready"  # a memory, generator or files stream
    DERIVED = "derived"  # the result of a query
    NOT_CONNECTED = "not connected"  # a feed stream without an open connection (or HEADER)
    CONNECTED = "connected"  # a feed stream with its schema and a connection
    STOPPED = "stopped"  # a feed stream whose feed sent STOP, no data since
    REMOVED = "removed"  # its feed removed it; queries that kept it still read what it sent


@dataclass(frozen=True)
class SystemView:
    """The catalog, the running queries, the sinks and the sources, read."""

    catalog: Catalog
    queries: RunningQueries
    sinks: Sinks
    sources: Mapping[str, Source]
    reports: Sequence[CycleReport] = ()  # what each cycle did, oldest first

    # -- results and dead letters ----------------------------------------------------------
    def results(self, query: str) -> pd.DataFrame:
        """A query's results so far (memory sink): user columns plus ``_ts`` and ``_te``.

        Interval results show each coalesced element once, with ``_te`` null while open;
        instant results have ``_ts`` = ``_te``; a changelog has ``_op`` '+' or '-'.
        """
        info = self.catalog.query(query)
        sink = self.sinks[info.sink]
        if not isinstance(sink, MemorySink):
            msg = f"query {query!r} writes to the {info.sink!r} sink; results() reads memory"
            raise CatalogError(msg)
        output = self.sinks.destination(info.name).output
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

    def dead_letters(self, stream: str) -> pd.DataFrame:
        """Rows of ``stream`` that were rejected (late, null time, ...) with the reason."""
        info = self.catalog.stream(stream)
        return self.queries.scans[info.name.lower()].dead_letters().toPandas()

    def stream_state(self, stream: str) -> StreamState:
        """Where a stream's input stands (see ``StreamState``)."""
        info = self.catalog.streams.get(stream.lower())
        if info is not None and info.derived:
            return StreamState.DERIVED
        if info is not None and info.removed is not None:
            return StreamState.REMOVED
        source = self.sources.get(stream.lower())
        if not isinstance(source, FeedSource):
            return StreamState.READY
        if source.stopped:
            return StreamState.STOPPED
        if source.connected and source.connections:
            return StreamState.CONNECTED
        return StreamState.NOT_CONNECTED

    def aggregate_users(self, name: str) -> list[str]:
        """The running queries and derived streams whose plans call aggregate ``name``."""
        def calls(node: PlanNode) -> bool:
            return isinstance(node, Aggregate) and any(
                a.uda is not None and a.uda.name.lower() == name.lower() for a in node.aggs)

        users = [r.name for r in self.queries.reading(calls)]
        return users + [s.name for s in self.catalog.streams.values()
                        if s.derived and any(calls(n) for n in walk(s.plan))]

    def table_function_users(self, name: str) -> list[str]:
        """The running queries and derived streams whose plans read table function
        ``name``.
        """
        def calls(node: PlanNode) -> bool:
            return isinstance(node, TableFunction) and node.function.name.lower() == name.lower()

        users = [r.name for r in self.queries.reading(calls)]
        return users + [s.name for s in self.catalog.streams.values()
                        if s.derived and any(calls(n) for n in walk(s.plan))]

    # -- SHOW and EXPLAIN ------------------------------------------------------------------
    def show(self, what: ShowTarget | str) -> pd.DataFrame:
        """One row per stream, table, query, function or aggregate."""
        target = ShowTarget(what.upper())
        catalog = self.catalog
        scans = self.queries.scans
        if target is ShowTarget.STREAMS:
            return pd.DataFrame([
                {"name": s.name, "kind": "derived" if s.derived else s.options.get("source",
                                                                                     "memory"),
                 "schema": s.schema.simpleString(), "event_time": s.time_col,
                 "state": self.stream_state(s.name).value,
                 "key": ", ".join(s.key) or None,
                 "watermark": scans[k].watermark if k in scans else None,
                 "time_kind": s.time_kind.value}
                for k, s in catalog.streams.items()])
        if target is ShowTarget.FUNCTIONS:
            listed = [(f.name, f.signature, f.origin) for f in catalog.functions.values()]
            listed += [(f.name, f.signature, f.origin) for f in catalog.table_functions.values()]
            return pd.DataFrame(listed, columns=["name", "signature", "code"])
        if target is ShowTarget.AGGREGATES:
            return pd.DataFrame([{"name": a.name, "signature": a.signature, "code": a.origin,
                                  "used_by": ", ".join(self.aggregate_users(a.name))}
                                 for a in catalog.aggregates.values()],
                                columns=["name", "signature", "code", "used_by"])
        if target is ShowTarget.TABLES:
            return pd.DataFrame([table_row(t) for t in catalog.tables.values()],
                                columns=["name", "schema", "source", "version", "read_at",
                                         "refresh", "note"])
        return pd.DataFrame([{"name": q.name, "status": q.status, "sink": q.sink,
                              "form": q.options["form"].value}
                             for q in catalog.queries.values()])

    def explain(self, query: str) -> str:
        """The plan of one query; nodes shared with other queries are marked."""
        info = self.catalog.query(query)
        marks = {}
        for node in walk(info.plan):
            users = self.queries.plan.users.get(node, set()) - {info.name}
            if users:
                marks[node] = f"  (shared with {', '.join(sorted(users))})"
        return render_tree(info.plan, marks, user_labels([info.plan]))

    def explain_global(self, fmt: str = ExplainFormat.TEXT) -> str:
        """The shared DAG: each operator, the queries using it, its reference count, state
        rows, rows per cycle and plan-building time; ``dot`` gives Graphviz DOT.
        """
        try:
            fmt = ExplainFormat(fmt)
        except ValueError:
            msg = f"unknown EXPLAIN format {fmt!r}; use 'text' or 'dot'"
            raise CatalogError(msg) from None
        if fmt is ExplainFormat.DOT:
            return explain_global_dot(self.queries.plan)
        return explain_global_text(self.queries.plan)

    def cycle_costs(self, spark: SparkSession, last: int = 10) -> list[CycleCost]:
        """What the last ``last`` cycles cost: their driver phases, and the Spark work each
        ran, read from Spark's status store (a cycle whose jobs Spark no longer keeps shows
        none).
        """
        caught_up(spark)  # once for all the cycles read: their jobs are all recorded
        return [CycleCost(r.cycle, r.seconds, r.rows_in, r.partitions, r.phases,
                          tagged_work(spark, r.job_tag, wait=False) if r.job_tag
                          else SparkWork.of([]), r.state_rows_written)
                for r in list(self.reports)[-last:]]

    def explain_analyze(self, spark: SparkSession) -> str:
        """The shared plan with each operator's rows and plan-building time, then what the
        last cycles cost (``cycle_cost.py``).
        """
        return (explain_global_text(self.queries.plan) + "\n\nlast cycles:\n"
                + render_costs(self.cycle_costs(spark)))

    # -- metrics ---------------------------------------------------------------------------
    def metrics(self, cycle: int, reports: Sequence[CycleReport]) -> dict[str, Any]:
        """Engine metrics: cycles, state rows per operator, user aggregate instances per
        operator that runs them, what each shedding join sheds, dead letters and watermarks
        per stream.
        """
        last = reports[-1] if reports else None
        queries = self.queries
        plan = queries.plan
        scans = queries.scans.values()
        return {
            "cycles": cycle,
            "last_cycle_seconds": last.seconds if last else None,
            # 1: the last cycle was small and ran in one partition (runtime/partitioning.py)
            "last_cycle_partitions": last.partitions if last else None,
            # the driver's seconds by phase (runtime/cycle_cost.py; Spark's side: EXPLAIN ANALYZE)
            "last_cycle_phases": {str(k): v for k, v in last.phases.items()} if last else {},
            # rows of the state frames the last cycle's commit materialised (wrote)
            "last_cycle_state_rows_written": last.state_rows_written if last else None,
            "state_rows": {f"#{i} {n.label()}": op.state_rows
                           for i, (n, op) in enumerate(plan.ops.items())},
            "total_state_rows": sum(op.state_rows for op in plan.state_holders())
            + sum(r.formatter.state_rows for r in queries.running.values())
            + queries.intervals.state_rows,
            "live_instances": {f"#{i} {n.label()}": op.live_instances
                               for i, (n, op) in enumerate(plan.ops.items())
                               if op.live_instances is not None},
            "shedding": {f"#{i} {n.label()}": report
                         for i, (n, op) in enumerate(plan.ops.items())
                         if (report := op.shedding_report()) is not None},
            "dead_letters": {s.scan.name: s.dead_count for s in scans},
            "watermarks": {s.scan.name: (None if s.watermark == TIME_MAX else s.watermark)
                           for s in scans},
        }


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
