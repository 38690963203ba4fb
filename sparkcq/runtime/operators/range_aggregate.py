"""count, sum and avg per group over a per-event ``[RANGE w]`` window: a log and a base.

Each event at t is in the window over [t, t + w), so a group's value changes where one of
its events arrives and w later, where it leaves: its work follows those changes, not the
window's length. The operator keeps two states:
- the **log**: the group's events summed per instant (a pane of one unit, as
  ``SlicedAggregateOperator`` keeps panes), for as long as their departure is still to
  come: the departures are read from it, there is no buffer of future -1 changes. It is
  kept as runs (``state_runs.py``): a cycle writes its own events once, and a run is
  dropped whole once every event in it has left; a cycle reads only the runs with an
  arrival or a departure in it (rewriting one frame of the whole log cost each cycle
  the window's events, 2.6 times a cycle's at 100,000 events a cycle over 60 s);
- the **base**: each group's count and exact sums (``aggregate.accumulator_type``) at the
  end of the last cycle, and the instant its row took that value.

A cycle redistributes its new events by the group hash (the one shuffle), sums them per
(group, instant) into the log, then sorts each group's points of the cycle (arrivals and
departures, after its base) once: running sums from the base give the value at each point
without ever subtracting doubles (the sums are exact, so a result does not depend on how
input was cut into cycles), and only points where the row changed (a value, or whether the
group has a row) start a segment. The work of a cycle is proportional to its events, not
to the window's length.

Example, ``avg(v) [RANGE 10]`` of one key: events (t=1, v=2) and (t=4, v=4) give the
segments ``2.0 over [1, 4)``, ``3.0 over [4, 11)``, ``4.0 over [11, 14)``; a cycle that ends
at 6 keeps the base (count 2, sum 6, since 4) and both events in the log.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StructField, StructType

from sparkcq.model.columns import AT, CHANGED, GROUP_HASH, LAST, NEXT, PANE_END, SINCE, TO, D, N
from sparkcq.model.time import TIME_MAX, TIME_MIN
from sparkcq.plan.nodes import CutSpec, RangeSpec, SlicedAggregate
from sparkcq.runtime.frames import Runtime, Slice, bound_sql, q
from sparkcq.runtime.operators.base import as_changes_at
from sparkcq.runtime.operators.sliced_aggregate import SlicedAggregateOperator


class RangeAggregateOperator(SlicedAggregateOperator):
    """count, sum and avg per group over ``[RANGE w]`` from a log and a base (see module)."""

    coalesced_segments = True
    keeps_panes = False

    def __init__(self, node: SlicedAggregate, rt: Runtime):
        super().__init__(node, rt)
        spec = node.window.spec
        assert isinstance(spec, RangeSpec) and spec.slide is None
        assert all(m.combine == "sum" for m in self.measures.values()), self.measures
        # each logged instant leaves the window ``length`` after it arrived (at ``TO``)
        self.log = self.state_runs(StructType([*self.pane_fields, StructField(TO, LongType())]),
                                   "log", PANE_END, TO, (GROUP_HASH,), self.length)
        self.value_names = {n: f"_v{i}" for i, n in enumerate(self.names) if n not in self.keys}
        key_fields = [f for f in node.aggregate.child.schema.fields if f.name in self.keys]
        out_types = {f.name: f.dataType for f in node.aggregate.schema.fields}
        # the base: each group's last point of the last cycle, and where its row began
        self.base = self.state(StructType([
            StructField(GROUP_HASH, LongType()), *key_fields, StructField(N, LongType()),
            *[StructField(m.name, m.dtype) for m in self.measures.values()],
            *[StructField(v, out_types[n]) for n, v in self.value_names.items()],
            StructField(SINCE, LongType())]), "window-values", GROUP_HASH)

    # -- SQL text ----------------------------------------------------------------------------
    def log_sql(self, single: bool) -> str:
        """The cycle's events redistributed by the group hash (as the log's runs are) and
        summed per (group, instant), each with the instant it leaves.
        """
        measures = "".join(f", {m.combine}({m.sql}) AS {q(m.name)}"
                           for m in self.measures.values())
        by = self.key_list(q(PANE_END))
        names = [f.name for f in self.pane_fields]
        # redistributed first: the sums per (group, instant) then need no shuffle of their
        # own (events rarely share an instant, so summing before would not shrink them)
        # (not in a cycle run in one partition: a repartition would still be an exchange)
        spread = "" if single else f" DISTRIBUTE BY {q(GROUP_HASH)}"
        return (f"SELECT {', '.join(map(q, names))}, {q(PANE_END)} + {self.length} AS {q(TO)} "
                f"FROM (SELECT {by}, sum({q(D)}) AS `{N}`{measures} FROM (SELECT *, "
                f"{self.pane_end} AS {q(PANE_END)}, {self.group_hash()} AS {q(GROUP_HASH)} "
                f"FROM {self.events_sql} WHERE {q(D)} > 0{spread}) GROUP BY {by})")

    def range_points_sql(self, fold_from: int, hi: int, with_base: bool) -> str:
        """The points in [fold_from, hi) where a group's events arrive (at their instant)
        or leave (``length`` later), with the change in count and sums, after the group's
        base (its absolute measures, at the point its row began).
        """
        measures = [q(m.name) for m in self.measures.values()]
        arrive = [q(PANE_END), q(N), *measures]
        depart = [f"{q(PANE_END)} + {self.length}", f"-{q(N)}", *(f"-{m}" for m in measures)]
        cols = ", ".join([q(AT), q(N), *measures])
        due, at = moves_in(fold_from, hi, self.length)
        summed = "".join(f", sum({m}) AS {m}" for m in measures)
        by = self.key_list(q(AT))
        points = (f"SELECT {by}, sum(`{N}`) AS `{N}`{summed} FROM (SELECT {self.key_list()}, "
                  f"stack(2, {', '.join([*arrive, *depart])}) AS ({cols}) "
                  f"FROM {{log}}{due}){at} GROUP BY {by}")
        if not with_base:
            return points
        # every column renamed to itself on both sides: the union keeps the group-hash
        # partitioning both have (as ``log_sql``), so the sort needs no shuffle
        kept = ", ".join(f"{q(n)} AS {q(n)}" for n in [GROUP_HASH, *self.keys])
        rest = ", ".join(f"{q(n)} AS {q(n)}" for n in [N, *self.measures])
        base = (f"SELECT {kept}, {q(SINCE)} AS {q(AT)}, {rest} "
                f"FROM {{base}} WHERE `{N}` > 0")
        return (f"{base} UNION ALL SELECT {kept}, {q(AT)} AS {q(AT)}, {rest} "
                f"FROM ({points})")

    def run_sql(self, fold_from: int, hi: int, with_base: bool) -> str:
        """Each point's absolute measures and row, whether the row changed there, and
        whether the point is the group's last.
        """
        measures = [q(m.name) for m in self.measures.values()]
        order = f"(PARTITION BY {self.key_list()} ORDER BY {q(AT)}"
        running = f"{order} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
        sums = ", ".join(f"sum({c}) OVER {running} AS {c}" for c in [f"`{N}`", *measures])
        absolute = (f"SELECT {self.key_list(q(AT))}, {sums} "
                    f"FROM ({self.range_points_sql(fold_from, hi, with_base)})")
        values = ", ".join(f"{self.values[n]} AS {q(v)}" for n, v in self.value_names.items())
        valued = f"SELECT *, {values} FROM ({absolute})" if values else \
            f"SELECT * FROM ({absolute})"
        same = [f"(`{N}` > 0) <=> (lag(`{N}`) OVER {order}) > 0)",
                *(f"{q(v)} <=> lag({q(v)}) OVER {order})" for v in self.value_names.values())]
        first = f"lag({q(AT)}) OVER {order}) IS NULL"
        changed = (f"SELECT {self.key_list(q(AT))}, `{N}`"
                   f"{''.join(f', {m}' for m in measures)}"
                   f"{''.join(f', {q(v)}' for v in self.value_names.values())}, "
                   f"{first} OR NOT ({' AND '.join(same)}) AS {q(CHANGED)}, "
                   f"lead({q(AT)}) OVER {order}) IS NULL AS {q(LAST)} FROM ({valued})")
        return changed

    def base_sql(self) -> str:
        """Each group's last point (its absolute measures and row) and where its row began
        (the last point where it changed), from the cycle's run: a grouping over rows
        partitioned and sorted by group already, in the place of a running maximum over
        every point (a third window pass).
        """
        kept = [N, *self.measures, *self.value_names.values()]
        last = ", ".join(f"max_by({q(c)}, {q(LAST)}) AS {q(c)}" for c in kept)
        return (f"SELECT {self.key_list()}, {last}, "
                f"max(CASE WHEN {q(CHANGED)} THEN {q(AT)} END) AS {q(SINCE)} "
                f"FROM {{run}} GROUP BY {self.key_list()}")

    def range_segments_sql(self, lo: int, hi: int) -> str:
        """The rows over [a point where the row changed, the next such point), for the
        segments that end at or after ``lo`` (their end is due) and where the group has a
        row.
        """
        order = f"(PARTITION BY {self.key_list()} ORDER BY {q(AT)})"
        out = ", ".join(q(n) if n in self.keys else f"{q(self.value_names[n])} AS {q(n)}"
                        for n in self.names)
        starts = (f"SELECT {self.key_list(q(AT))}, `{N}`"
                  f"{''.join(f', {q(v)}' for v in self.value_names.values())}, "
                  f"lead({q(AT)}) OVER {order} AS {q(NEXT)} FROM {{run}} WHERE {q(CHANGED)}")
        return self.due_segments_sql(out, starts, lo, hi)

    # -- the cycle ---------------------------------------------------------------------------
    def segments_of(self, inp: Slice, blank: frozenset[str], settled: bool = False,
                    spreads: bool = False) -> Slice:
        """Log the slice's events, fold the points before ``hi`` into the base and return
        the segments of [lo, hi) (see module), or no segments when no group has a row.
        ``settled`` skips nothing here: panes of one instant change a row at any instant;
        nor ``spreads``: the log is the events' own rows.
        """
        lo, hi = inp.lo, inp.hi
        sql = self.views.sql
        base = self.base.get()
        events = inp.arrivals if self.reads_arrivals else inp.df
        # the base holds every point before lo (from state alone: a restored checkpoint
        # goes on where it was); without one, every logged point is still to fold
        fold_from = TIME_MIN if base is None else lo
        # runs whose every event left before the points still to fold go; merged ones
        # leave out such events
        self.log.expire(fold_from)
        self.log.merge(fold_from)
        if events is None and not self.log.runs:
            return Slice(None, lo, hi)  # every element left: the base holds no row
        if events is not None:
            text = self.log_sql(self.rt.single)
            if blank:
                text = text.replace(self.events_sql, self.build_events_sql(self.sliced, blank))
            # read next cycles where departures are still to come
            self.log.add(sql(text, inp=events), None if lo == TIME_MIN else lo)
        log = self.log.probers(fold_from, hi)
        if log is None:
            return Slice(None, lo, hi)
        views = {"log": log} if base is None else {"log": log, "base": base}
        run = self.rt.cache_for_cycle(sql(self.run_sql(fold_from, hi, base is not None),
                                          **views))
        if hi == TIME_MAX:
            self.log.clear()
            self.base.set(None)
        else:
            self.base.set(sql(self.base_sql(), run=run))
        # not cached: a filter and a lead over the cached run, in its order already
        return Slice(None, lo, hi, sql(self.range_segments_sql(lo, hi), run=run))

    def spreads_events(self, events: int | None) -> bool:
        """Never: the log's runs are the events redistributed by group (``log_sql``)."""
        return False

    def contents(self, children: list[DataFrame | None], at: int,
                 window: CutSpec | RangeSpec | None = None) -> DataFrame | None:
        """Each group's row at the operator's position ``at``, from the base."""
        base = self.base.get()
        if base is None:
            return None
        out = ", ".join(q(n) if n in self.keys else f"{q(self.value_names[n])} AS {q(n)}"
                        for n in self.names)
        df = self.views.sql(f"SELECT {out} FROM {{b}} WHERE `{N}` > 0", b=base)
        return as_changes_at(df, self.names, None, at)


def moves_in(fold_from: int, hi: int, length: int) -> tuple[str, str]:
    """The WHERE clauses (or '') that take from a per-event window's log the events that
    arrive or leave (``length`` after they arrived) in [fold_from, hi), and that keep, of
    their arrivals and departures as points at ``AT``, those in [fold_from, hi).
    """
    due = []
    if fold_from != TIME_MIN:
        due.append(f"{q(PANE_END)} >= {bound_sql(fold_from - length)}")
    if hi != TIME_MAX:
        due.append(f"{q(PANE_END)} < {bound_sql(hi)}")
    at = [f"{q(AT)} >= {bound_sql(fold_from)}"] if fold_from != TIME_MIN else []
    if hi != TIME_MAX:
        at.append(f"{q(AT)} < {bound_sql(hi)}")

    def where(conds: list[str]) -> str:
        return f" WHERE {' AND '.join(conds)}" if conds else ""

    return where(due), where(at)
