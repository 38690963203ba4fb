"""count, sum and avg ``OVER (PARTITION BY k ORDER BY t RANGE BETWEEN w PRECEDING AND
CURRENT ROW)``: each event once, with its partition's aggregates over ``[t - w, t]``.

An event at t is in the windows of the instants [t, t + w], so it leaves at t + w + 1 (the
length ``L = w + 1`` of the node's window). The operator keeps the **log**: each event's
own row (its partition, instant, count and exact sums, and the columns it goes out with),
kept as runs (``state_runs.py``) until it has left: a cycle writes its own events once (the
one shuffle: redistributed by the partition hash), and a run is dropped whole once every
event in it left. A cycle then takes each event's window one of two ways, both exact (the
sums are, so a value does not depend on how input was cut into cycles):

- **from the context**, when the cycle's slice is at least ``L`` long (the logged events
  of the last ``w`` before it are then no more than its own): its events and those of the
  last ``w`` before it sorted per partition once, and over that one sort the running sums
  through each event's instant less those through ``L`` before it (two RANGE frames);
- **from a base**, in shorter cycles (so a cycle reads what changed in it, not the last
  ``w``, however long): the base is each partition's count and sums at the end of the last
  cycle, kept as state like the per-event RANGE aggregate's (``range_aggregate.py``); the
  cycle sorts each partition's arrivals and departures (``L`` after a logged event) after
  it, and a running sum from it gives each arrival its window.

Either way a RANGE frame takes all rows of an instant at once, so events at one instant all
see each other, whatever order they came in, and only the events go out: one row per event,
where the per-event RANGE aggregate's ISTREAM gives a row at every arrival and departure,
and no segments are built. (A difference of two DECIMAL sums would lose a digit: an
aggregate of a DECIMAL column takes the base every cycle.)

Example, ``avg(v) OVER (ORDER BY t RANGE BETWEEN 10 PRECEDING AND CURRENT ROW)`` of one
partition: events (t=1, v=2), (t=4, v=4), (t=11, v=6) and (t=15, v=8) give 2.0 at 1, 3.0 at
4, 4.0 at 11 (all three: 1 is at 11 - 10) and 7.0 at 15 (4 left at 15, 1 at 12).
"""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StructField, StructType

from sparkcq.model.columns import ARRIVES, AT, GROUP_HASH, PANE_END, TO, D, N, T
from sparkcq.model.time import TIME_MAX, TIME_MIN
from sparkcq.plan.nodes import CutSpec, OverAggregate, Project, RangeSpec
from sparkcq.runtime.frames import Runtime, Slice, bound_sql, q
from sparkcq.runtime.operators.base import CycleContext
from sparkcq.runtime.operators.range_aggregate import moves_in
from sparkcq.runtime.operators.sliced_aggregate import SlicedAggregateOperator


class OverAggregateOperator(SlicedAggregateOperator):
    """Each event with its OVER window's count, sum and avg, from its log of events (and,
    in cycles shorter than its window, a base; see module).
    """

    keeps_panes = False

    def __init__(self, node: OverAggregate, rt: Runtime):
        super().__init__(node, rt)
        spec = node.window.spec
        assert isinstance(spec, RangeSpec) and spec.slide is None
        assert all(m.combine == "sum" for m in self.measures.values()), self.measures
        inputs = {f.name: f for f in node.aggregate.child.schema.fields}
        # a carried column that is also a partition key (``k`` of PARTITION BY k) is logged
        # once, as the key, and goes out from it
        below = node.aggregate.child
        as_key = {e.sql: name for name, e in below.exprs if name in self.keys} \
            if isinstance(below, Project) else {}
        self.logged = [c for c in node.carried if q(c) not in as_key]
        self.carried_fields = [inputs[c] for c in self.logged]
        self.carried = [f"{q(as_key[q(c)])} AS {q(c)}" if q(c) in as_key else q(c)
                        for c in node.carried]
        self.results = [a.name for a in node.aggregate.aggs]
        self.long_measures = all(isinstance(m.dtype, LongType) for m in self.measures.values())
        # whether a value reads the window's row count (``count(*)``: the one call without
        # an argument, ``measures_of``), not only the measures
        self.counts_rows = any(a.arg is None for a in node.aggregate.aggs)
        # each event's row leaves the window ``length`` after it arrived (at ``TO``)
        self.log = self.state_runs(StructType([
            *self.pane_fields, *self.carried_fields,
            StructField(TO, LongType())]), "log", PANE_END, TO, (GROUP_HASH,), self.length)
        key_fields = [f for f in self.pane_fields if f.name in self.keys]
        self.base = self.state(StructType([
            StructField(GROUP_HASH, LongType()), *key_fields, StructField(N, LongType()),
            *[StructField(m.name, m.dtype) for m in self.measures.values()]]),
            "window-sums", GROUP_HASH)

    # -- SQL text ----------------------------------------------------------------------------
    def log_sql(self) -> str:
        """The cycle's events, each with its partition (and its hash, by which the log's
        runs are partitioned: ``StateRuns.add``), count and sums, its columns and the
        instant it leaves.
        """
        items = [q(GROUP_HASH), *map(q, self.keys), q(PANE_END), f"{q(D)} AS `{N}`",
                 *(f"{m.sql} AS {q(m.name)}" for m in self.measures.values()),
                 *map(q, self.logged), f"{q(PANE_END)} + {self.length} AS {q(TO)}"]
        return f"SELECT {', '.join(items)} FROM {self.placed_events_sql()}"

    def moves_sql(self, fold_from: int, hi: int, with_base: bool) -> str:
        """The arrivals and departures in [fold_from, hi), each with its change in count
        and sums (and an arrival with its columns), after the partition's base.
        """
        measures = [q(m.name) for m in self.measures.values()]
        blank = [f"CAST(NULL AS {f.dataType.simpleString()})" for f in self.carried_fields]
        arrive = [q(PANE_END), q(N), *measures, q(N), *map(q, self.logged), "true"]
        depart = [q(TO), f"-{q(N)}", *(f"-{m}" for m in measures), "CAST(0 AS BIGINT)",
                  *blank, "false"]
        names = [q(AT), q(N), *measures, q(D), *map(q, self.logged), q(ARRIVES)]
        due, at = moves_in(fold_from, hi, self.length)
        # every column renamed to itself on both sides: the union keeps the partition-hash
        # partitioning both have (``StateRuns.add``), so the sort needs no shuffle
        out = ", ".join(f"{n} AS {n}" for n in [q(GROUP_HASH), *map(q, self.keys), *names])
        points = (f"SELECT {out} FROM (SELECT {self.key_list()}, stack(2, "
                  f"{', '.join([*arrive, *depart])}) AS ({', '.join(names)}) "
                  f"FROM {{log}}{due}){at}")
        if not with_base:
            return points
        base_items = [q(GROUP_HASH), *map(q, self.keys), f"CAST({TIME_MIN} AS BIGINT)", q(N),
                      *measures, "CAST(0 AS BIGINT)", *blank, "false"]
        base = ", ".join(f"{v} AS {n}" for v, n in zip(
            base_items, [q(GROUP_HASH), *map(q, self.keys), *names], strict=True))
        return f"SELECT {base} FROM {{base}} WHERE `{N}` > 0 UNION ALL {points}"

    def run_sql(self, fold_from: int, hi: int, with_base: bool) -> str:
        """Each point's window count and sums through its instant (a RANGE frame: every
        point of an instant sees the instant whole).
        """
        frame = (f"(PARTITION BY {self.key_list()} ORDER BY {q(AT)} RANGE BETWEEN "
                 "UNBOUNDED PRECEDING AND CURRENT ROW)")
        sums = ", ".join(f"sum({c}) OVER {frame} AS {c}"
                         for c in [f"`{N}`", *(q(m.name) for m in self.measures.values())])
        kept = ", ".join(map(q, [AT, D, ARRIVES, *self.logged]))
        return (f"SELECT {self.key_list()}, {kept}, {sums} "
                f"FROM ({self.moves_sql(fold_from, hi, with_base)})")

    def rows_sql(self, lo: int, run: str = "{run}") -> str:
        """The events of ``run`` (a view, or a query in parentheses) from ``lo`` on, each
        with its window's aggregates.
        """
        values = ", ".join(f"{self.values[n]} AS {q(n)}" for n in self.results)
        since = f" AND {q(AT)} >= {bound_sql(lo)}" if lo != TIME_MIN else ""
        return (f"SELECT {', '.join(self.carried)}, {values}, {q(AT)} AS {q(T)}, "
                f"{q(D)} FROM {run} WHERE {q(ARRIVES)}{since}")

    def base_sql(self, fold_from: int, hi: int, with_base: bool) -> str:
        """Each partition's count and sums at the end of the cycle: its base and every
        point of the cycle summed (a grouping over the points, not over the run: the run is
        then read once, by the output, and is not kept).
        """
        sums = ", ".join(f"sum({q(c)}) AS {q(c)}" for c in [N, *self.measures])
        return (f"SELECT {self.key_list()}, {sums} "
                f"FROM ({self.moves_sql(fold_from, hi, with_base)}) GROUP BY {self.key_list()}")

    def context_sql(self, lo: int, hi: int) -> str:
        """The events of [lo, hi), each with its window, from the logged events of
        ``[lo - w, hi)`` alone (no base): in one sort, the running sums through its
        instant less those through ``length`` before it (two RANGE frames).
        """
        order = (f"PARTITION BY {self.key_list()} ORDER BY {q(PANE_END)} "
                 "RANGE BETWEEN UNBOUNDED PRECEDING AND")
        sums = ", ".join(
            f"sum({c}) OVER ({order} CURRENT ROW) - "
            f"coalesce(sum({c}) OVER ({order} {self.length}L PRECEDING), 0) AS {c}"
            for c in [*([q(N)] if self.counts_rows else []),
                      *(q(m.name) for m in self.measures.values())])
        near = [f"{q(PANE_END)} > {bound_sql(lo - self.length)}"] if lo != TIME_MIN else []
        if hi != TIME_MAX:
            near.append(f"{q(PANE_END)} < {bound_sql(hi)}")
        where = f" WHERE {' AND '.join(near)}" if near else ""
        kept = ", ".join([self.key_list(), *map(q, self.logged), f"{q(PANE_END)} AS {q(AT)}",
                          f"{q(N)} AS {q(D)}", f"true AS {q(ARRIVES)}"])
        run = f"SELECT {kept}, {sums} FROM {{log}}{where}"
        return self.rows_sql(lo, f"({run})")

    def reads_context(self, lo: int, hi: int) -> bool:
        """Whether this cycle takes each window from the logged events of the last ``w``
        before it rather than from a base (``context_sql``): when they are no more than the
        cycle's own (its slice at least a window long) and every measure is a BIGINT (a
        difference of DECIMAL sums would lose a digit).
        """
        return self.long_measures and (lo == TIME_MIN or hi == TIME_MAX
                                       or hi - lo >= self.length)

    # -- the cycle ---------------------------------------------------------------------------
    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        out = self.events_with_windows(inp)
        self.progress = replace(self.progress, position=inp.hi, started=True)
        return out

    def events_with_windows(self, inp: Slice) -> Slice:
        """Log the slice's events and return those of [lo, hi) with their windows'
        aggregates, from the context or from the base (then folding the points before
        ``hi`` into it; see module).
        """
        lo, hi = inp.lo, inp.hi
        sql = self.views.sql
        events = inp.arrivals if self.reads_arrivals else inp.df
        if self.reads_context(lo, hi):
            self.base.set(None)
            self.log_events(events, lo, lo)
            log = self.log.read(self.log.runs)
            if hi == TIME_MAX:
                self.log.clear()
            if log is None:
                return Slice(None, lo, hi)
            return Slice(sql(self.context_sql(lo, hi), log=log), lo, hi)
        base = self.base.get()
        # the base holds every point before lo; without one, every logged point is still
        # to fold (and only the events from lo on go out)
        fold_from = TIME_MIN if base is None else lo
        self.log_events(events, fold_from, lo)
        log = self.log.probers(fold_from, hi)
        if log is None:
            return Slice(None, lo, hi)
        views = {"log": log} if base is None else {"log": log, "base": base}
        run = sql(self.run_sql(fold_from, hi, base is not None), **views)
        if hi == TIME_MAX:
            self.log.clear()
            self.base.set(None)
        else:
            self.base.set(sql(self.base_sql(fold_from, hi, base is not None), **views))
        return Slice(sql(self.rows_sql(lo), run=run), lo, hi)

    def log_events(self, events: DataFrame | None, live_from: int, lo: int) -> None:
        """Drop (and merge away) the logged events that left before ``live_from`` and log
        the slice's new ``events`` (none of them before ``lo``), read by the next cycles
        while their departures are still to come.
        """
        self.log.expire(live_from)
        self.log.merge(live_from)
        if events is not None:
            self.log.add(self.views.sql(self.log_sql(), inp=events),
                         None if lo == TIME_MIN else lo)

    def spreads_events(self, events: int | None) -> bool:
        """Never: the log's runs are the events redistributed by partition."""
        return False

    def contents(self, children: list[DataFrame | None], at: int,
                 window: CutSpec | RangeSpec | None = None) -> DataFrame | None:
        """None: the output is a stream of events, which holds nothing at an instant."""
        return None
