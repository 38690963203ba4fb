"""Relation to stream (ISTREAM, DSTREAM, RSTREAM) and the records sinks receive.

Sink records are the user's columns plus ``_ts``, ``_te`` and ``_op``:
- intervals: ``I`` for a new element (``_te`` null while open), ``C`` closing an element
  emitted open earlier, identified by its values and ``_ts``; elements are coalesced;
- instants (stream edges and ISTREAM/DSTREAM/RSTREAM): ``I`` with ``_ts`` = ``_te``;
- changelog: ``+`` at ``_ts`` when a row enters, ``-`` when it leaves.
"""

from __future__ import annotations

from functools import lru_cache

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from sparkcq.language.sql.statements import OutputForm
from sparkcq.model.columns import FROM, LAYER, NEW, OP, TE, TO, TS, D, N, T
from sparkcq.model.time import TIME_MAX
from sparkcq.model.types import type_sql
from sparkcq.plan.nodes import (
    Aligned,
    ChunkJoin,
    EdgeKind,
    Filter,
    PlanNode,
    Project,
    SlicedAggregate,
    ToStream,
)
from sparkcq.runtime.frames import (
    Runtime,
    Slice,
    SqlViews,
    StateFrame,
    bound,
    bound_sql,
    col,
    project,
    q,
    union_all,
)
from sparkcq.runtime.operators.base import CycleContext, Operator
from sparkcq.runtime.operators.join import net, units


def join_on_values(left: DataFrame, right: DataFrame, names: list[str],
                   how: str = "left") -> DataFrame:
    """Join on equal row values (NULL equal to NULL), keeping ``right``'s other columns."""
    keys = [f"_k{i}" for i in range(len(names))]
    extra = [c for c in right.columns if c not in names]
    r = right.select(*[col(n).alias(k) for n, k in zip(names, keys, strict=True)],
                     *[col(c) for c in extra])
    cond = F.lit(True)
    for n, k in zip(names, keys, strict=True):
        cond = cond & left[f"`{n}`"].eqNullSafe(r[k])
    return left.join(r, cond, how).drop(*keys)


def gives_segments(node: PlanNode) -> bool:
    """Whether ``node``'s slices carry segments whenever the relation has content
    (``Slice.segments``): a sliced aggregate's, a chunk join's or an aligned aggregate's or
    join's, through filters and projections.
    """
    while isinstance(node, Filter | Project) and node.kind is not EdgeKind.TABLE:
        node = node.child
    return isinstance(node, SlicedAggregate | ChunkJoin | Aligned)


class ToStreamOperator(Operator):
    """ISTREAM / DSTREAM: the instants rows enter / leave; RSTREAM: snapshots.

    RSTREAM evaluates the whole snapshot at every instant the relation changes, or, when the
    query has a slide or chunk period p, at every multiple of p where the snapshot is not
    empty (up to the relation's last change once input has ended).
    """

    def __init__(self, node: ToStream, rt: Runtime):
        super().__init__(node, rt)
        self.form = node.form
        self.period = node.period
        self.last_of_group = node.last_of_group
        self.names = [f.name for f in node.schema.fields]
        self.views = SqlViews(rt.spark, "tostream")
        if self.form is OutputForm.RSTREAM:
            self.live = self.state(StructType([*node.schema.fields,
                                               StructField(N, LongType())]), "snapshot")
        # RSTREAM with a period over an input that gives segments reads them alone: no
        # state, so a cycle no one reads its output (``fused_snapshots.py``) reads nothing
        self.from_segments_only = (self.form is OutputForm.RSTREAM and self.period is not None
                                   and gives_segments(node.children[0]))
        self.reads_inputs_unread = not self.from_segments_only

    def reads_edge(self, i: int, own_edge_read: bool) -> bool:
        """RSTREAM with a period reads an input that gives segments through them alone."""
        return not self.from_segments_only

    def pass_unread(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        if self.from_segments_only:
            return Slice(None, inputs[0].lo, inputs[0].hi)
        return self.step(inputs, cycle)

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        if self.form is OutputForm.RSTREAM:
            return self.rstream(inp)
        if inp.df is None:
            return inp
        if self.last_of_group is not None:
            return self.last_rows(inp, inp.df, self.last_of_group)
        if inp.coalesced and inp.segments is not None:
            return self.from_segments(inp, inp.segments)
        # the net change of each row and instant, its entries (ISTREAM) or departures
        # (DSTREAM) one element each: one re-bound text, no DataFrame call (each of
        # which is analysed)
        names = ", ".join(map(q, [*self.names, T]))
        sign = "" if self.form is OutputForm.ISTREAM else "-"
        net_change = f"SELECT {names}, {sign}sum({q(D)}) AS {q(D)} FROM {{inp}} GROUP BY {names}"
        rows = self.views.sql(
            f"SELECT {names}, explode(array_repeat(CAST(1 AS BIGINT), CAST({q(D)} AS INT))) "
            f"AS {q(D)} FROM ({net_change}) AS n WHERE {q(D)} > 0", inp=inp.df)
        return Slice(rows, inp.lo, inp.hi)

    def last_rows(self, inp: Slice, df: DataFrame, group: tuple[str, ...]) -> Slice:
        """The rows that leave at an instant where their group gets no new row: each
        group's last row before it empties. Every change at an instant is in the same
        cycle's slice, so the test needs no state.
        """
        names = ", ".join(map(q, [*self.names, T]))
        by = ", ".join(map(q, [*group, T]))
        net_change = (f"SELECT {names}, sum({q(D)}) AS {q(D)} FROM {{inp}} "
                      f"GROUP BY {names}")
        marked = (f"SELECT {names}, {q(D)}, max({q(D)}) OVER (PARTITION BY {by}) AS _enters "
                  f"FROM ({net_change}) AS n")
        rows = self.views.sql(
            f"SELECT {names}, explode(array_repeat(CAST(1 AS BIGINT), CAST(-{q(D)} AS INT))) "
            f"AS {q(D)} FROM ({marked}) AS m WHERE {q(D)} < 0 AND _enters <= 0", inp=df)
        return Slice(rows, inp.lo, inp.hi)

    def from_segments(self, inp: Slice, segments: DataFrame) -> Slice:
        """ISTREAM / DSTREAM of coalesced segments (``Slice.coalesced``): a row enters where
        its segment starts and leaves where it ends; no grouping of changes, no shuffle.
        """
        at = col(FROM) if self.form is OutputForm.ISTREAM else col(TO)
        rows = segments.where(at.isNotNull() & (at >= bound(inp.lo)) & (at < bound(inp.hi)))
        return Slice(rows.select(*[col(n) for n in self.names], at.alias(T),
                                 F.lit(1).cast("long").alias(D)), inp.lo, inp.hi)

    def rstream(self, inp: Slice) -> Slice:
        """Snapshots at evaluation instants in [lo, hi), each row an instant."""
        if inp.segments is not None and self.period is not None:
            return self.rstream_segments(inp, inp.segments, self.period)
        names = [col(n) for n in self.names]
        base = self.live.get()
        # after the end of input (lo = hi = +inf) nothing is left to evaluate
        if (inp.df is None and (self.period is None or base is None)) or inp.lo >= inp.hi:
            return Slice(None, inp.lo, inp.hi)
        d = net(inp.df, self.names) if inp.df is not None else None
        if d is not None:
            d = self.rt.cache_for_cycle(d)
        # Once input has ended (hi = +inf) evaluation stops at the relation's last change:
        # its snapshots before it, none at it or after (it then holds forever, and RSTREAM
        # would repeat it without end).
        # Earlier changes all lie before lo, which bounds nothing more than lo does, so
        # only the last cycle's changes need this Spark action (not one every cycle).
        last_change = None
        if d is not None and inp.hi == TIME_MAX:
            stats = d.agg(F.max(col(T))).first()
            if stats is not None and stats[0] is not None:
                last_change = stats[0]
        part = Window.partitionBy(*names).orderBy(col(T))
        segs = []
        if d is not None:
            j = d
            if base is not None:
                j = join_on_values(j, base.select(*names, col(N).alias("_n0")), self.names)
            else:
                j = j.withColumn("_n0", F.lit(None).cast("long"))
            run = j.withColumn("_cnt", F.coalesce(col("_n0"), F.lit(0).cast("long"))
                               + F.sum(col(D)).over(part.rowsBetween(Window.unboundedPreceding,
                                                                     Window.currentRow)))
            run = self.rt.cache_for_cycle(run)
            segs.append(run.select(*names, col(T).alias(FROM),
                                   F.lead(col(T)).over(part).alias(TO), col("_cnt")))
            firsts = run.groupBy(*names).agg(F.min(col(T)).alias("_first"),
                                             F.max(col("_n0")).alias("_n0"))
            segs.append(firsts.where(col("_n0") > 0).select(
                *names, F.lit(inp.lo).alias(FROM), col("_first").alias(TO),
                col("_n0").alias("_cnt")))
            if base is not None:
                untouched = join_on_values(base, firsts.select(*names), self.names,
                                           "left_anti")
                segs.append(untouched.select(*names, F.lit(inp.lo).alias(FROM),
                                             F.lit(None).cast("long").alias(TO),
                                             col(N).alias("_cnt")))
        else:
            assert base is not None
            segs.append(base.select(*names, F.lit(inp.lo).alias(FROM),
                                    F.lit(None).cast("long").alias(TO),
                                    col(N).alias("_cnt")))
        seg = union_all(segs)
        assert seg is not None
        seg = self.rt.cache_for_cycle(seg.where(col("_cnt") > 0))
        hi = inp.hi
        if hi == TIME_MAX:
            hi = last_change if last_change is not None else inp.lo
        if self.period is None:
            if d is None:
                out = None
            else:
                inst = d.select(col(T).alias("_it")).distinct()
                cond = (col(FROM) <= col("_it")) & (col(TO).isNull()
                                                        | (col("_it") < col(TO)))
                out = seg.join(inst, cond).select(*names, col("_it").alias(T), col("_cnt"))
        else:
            p = self.period
            start = F.greatest(col(FROM), bound(inp.lo))
            end = F.least(F.coalesce(col(TO), bound(hi)), bound(hi))
            first = start + F.pmod(-start, F.lit(p))
            rows = seg.where(first < end).select(
                *names, F.explode(F.sequence(first, end - F.lit(1), F.lit(p))).alias(T),
                col("_cnt"))
            out = rows
        if d is not None:
            last = Window.partitionBy(*names).orderBy(col(FROM).desc())
            now = seg.withColumn("_rk", F.row_number().over(last)).where(
                (col("_rk") == 1) & col(TO).isNull()).select(*names, col("_cnt").alias(N))
            self.live.set(now)
        if out is None:
            return Slice(None, inp.lo, inp.hi)
        out = units(out, col("_cnt")).drop("_cnt").withColumn(D, F.lit(1).cast("long"))
        return Slice(out, inp.lo, inp.hi)


    def rstream_segments(self, inp: Slice, segments: DataFrame, period: int) -> Slice:
        """Snapshots at the multiples of ``period`` in [lo, hi) from the input's segments,
        which hold the relation's whole content over the slice: no state, no join.
        """
        lo, hi = bound_sql(inp.lo), bound_sql(inp.hi)
        start = f"greatest({q(FROM)}, {lo})"
        end = f"least(coalesce({q(TO)}, {hi}), {hi})"
        first = f"({start} + pmod(-{start}, {period}))"
        # one projection (a filter before it is one more plan to analyse): a segment with
        # no multiple of the period in it explodes an empty array
        times = (f"IF({first} < {end}, sequence({first}, {end} - 1, {period}), "
                 f"CAST(array() AS ARRAY<BIGINT>))")
        out = project(segments, *map(q, self.names), f"explode({times}) AS {q(T)}",
                      f"CAST(1 AS BIGINT) AS {q(D)}")
        return Slice(out, inp.lo, inp.hi)


class SinkFormatter(Operator):
    """Turns a query's output edge into sink records: coalesced intervals, instants or a
    changelog. For intervals it keeps the open layers of each row value as state.
    """

    def __init__(self, node: PlanNode, rt: Runtime, form: OutputForm, query: str):
        super().__init__(node, rt)
        self.form = form
        self.query = query
        self.names = [f.name for f in node.schema.fields]
        self.relation = node.kind.value == "relation"
        if self.relation and form is OutputForm.INTERVALS:
            self.open = self.state(StructType([*node.schema.fields, StructField(LAYER, LongType()),
                                               StructField(TS, LongType())]), "open-elements")
            self.views = SqlViews(rt.spark, "formatter")

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        names = [col(n) for n in self.names]
        if not self.relation:
            if inp.df is None:
                return inp
            out = project(inp.df, *map(q, self.names), f"{q(T)} AS {q(TS)}",
                          f"{q(T)} AS {q(TE)}", f"'I' AS {q(OP)}")
            return Slice(out, inp.lo, inp.hi)
        if self.form is OutputForm.CHANGELOG:
            if inp.df is None:
                return inp
            d = net(inp.df, self.names)
            out = units(d, F.abs(col(D))).select(
                *names, col(T).alias(TS), F.lit(None).cast("long").alias(TE),
                F.when(col(D) > 0, F.lit("+")).otherwise(F.lit("-")).alias(OP))
            return Slice(out, inp.lo, inp.hi)
        return self.coalesce(inp)

    def pass_unread(self, inputs: list[Slice], cycle: CycleContext) -> Slice:
        """A query whose records another path builds (the shared formatter, a fused
        family) only goes through the cycle, for its start: no records of its own.
        """
        return Slice(None, inputs[0].lo, inputs[0].hi)

    def coalesce(self, inp: Slice) -> Slice:
        """Canonical coalescing of the query's rows (see ``coalesce_changes``)."""
        if inp.df is None:
            return inp
        records = coalesce_changes(self.rt, self.views, self.open, inp.df, self.names,
                                   self.open.get())
        return Slice(records, inp.lo, inp.hi)


def coalesce_changes(rt: Runtime, views: SqlViews, open_state: StateFrame,
                     changes: DataFrame, names: list[str], base: DataFrame | None,
                     ) -> DataFrame:
    """Interval records from a relation's changes; ``open_state`` keeps the open layers,
    ``base`` those kept so far (the state's, or what of it the caller keeps).
    """
    records, still_open = coalesced(rt, views, changes, names, base)
    open_state.set(still_open)
    return records


def coalesced(rt: Runtime, views: SqlViews, changes: DataFrame, names: list[str],
              base: DataFrame | None) -> tuple[DataFrame, DataFrame]:
    """Interval records from a relation's changes, and the open layers after them, from
    ``base``, the open layers before them.

    Canonical coalescing: layer k of a row value is open while its count is >= k, so
    value-equal elements whose intervals meet are one element, whatever the cycle cuts.
    Three SQL texts over ``views``, each analysed once (the same steps built from
    ``Column``s were twenty frames, each analysed every cycle).
    """
    cols = ", ".join(map(q, names))
    if base is None:  # none open yet: an empty base, so the cycles after run this one's text
        types = {f.name: type_sql(f.dataType) for f in changes.schema.fields}
        nulls = "".join(f"CAST(NULL AS {types[n]}) AS {q(n)}, " for n in names)
        base = views.sql(f"SELECT {nulls}CAST(NULL AS BIGINT) AS {q(LAYER)}, "
                         f"CAST(NULL AS BIGINT) AS {q(TS)} WHERE {bound_sql(0)} = 1")
        if rt.single:  # in one partition, as the changes are: no exchange for the union
            base = base.coalesce(1)
    paired = rt.cache_for_cycle(views.sql(_paired_sql(tuple(names), not rt.single),
                                          changes=changes, base=base))
    records = views.sql(
        f"SELECT {cols}, {q(T)} AS {q(TS)}, _next AS {q(TE)}, "
        f"IF({q(NEW)}, 'I', 'C') AS {q(OP)} FROM {{paired}} "
        f"WHERE {q(NEW)} OR _next IS NOT NULL", paired=paired)
    still_open = views.sql(
        f"SELECT {cols}, {q(LAYER)}, {q(T)} AS {q(TS)} FROM {{paired}} WHERE _next IS NULL",
        paired=paired)
    return records, still_open


@lru_cache(maxsize=256)
def _paired_sql(names: tuple[str, ...], distributed: bool) -> str:
    """Every open layer's events of this cycle (opening ``_isopen``, new ``_new``, or
    kept from the open state) with the instant of the next event of its layer
    (``_next``: NULL while it stays open); over views ``{changes}`` and ``{base}``.

    The state's rows (no instant, no change) sort first in each value's window and give
    the highest open layer, beside the changes in one window over the value (a join would
    do it too, but Spark estimates a join's size as the product of its sides', which then
    grew with every cycle's state until it planned shuffles into cycles run in one
    partition); the state is read once. Changes and state are shuffled once, together, by
    the value (``distributed``): netting the changes per (value, instant), the layers per
    value and the pairs per (value, layer) all need only that, where netting before the
    union was a shuffle of its own (one stage more in every cycle, for a few rows).
    """
    cols = ", ".join(map(q, names))
    t, d, layer = q(T), q(D), q(LAYER)
    changes_and_base = (
        f"SELECT {cols}, {t}, {d}, CAST(NULL AS BIGINT) AS {layer}, "
        f"CAST(NULL AS BIGINT) AS _since FROM {{changes}} UNION ALL SELECT {cols}, "
        f"CAST(NULL AS BIGINT) AS {t}, CAST(0 AS BIGINT) AS {d}, {layer}, {q(TS)} AS _since "
        f"FROM {{base}}")
    if distributed:
        changes_and_base = f"SELECT * FROM ({changes_and_base}) DISTRIBUTE BY {cols}"
    # a kept layer is one row of its own (an instant NULL, a layer and a start)
    rows = (f"SELECT {cols}, {t}, sum({d}) AS {d}, {layer}, _since "
            f"FROM ({changes_and_base}) AS _cb GROUP BY {cols}, {t}, {layer}, _since "
            f"HAVING sum({d}) != 0 OR {layer} IS NOT NULL")
    by_value = f"PARTITION BY {cols} ORDER BY {t}"
    run = (f"SELECT {cols}, {t}, {d}, {layer}, _since, "
           f"coalesce(max({layer}) OVER ({by_value} ROWS BETWEEN UNBOUNDED PRECEDING "
           f"AND UNBOUNDED FOLLOWING), 0) + sum({d}) OVER ({by_value} ROWS BETWEEN "
           f"UNBOUNDED PRECEDING AND CURRENT ROW) AS _after FROM ({rows}) AS _rows")
    # a kept layer is one event; a change opens the layers above the count before it
    # (an entry) or closes those above the count after it (a departure)
    layers = (f"CASE WHEN {layer} IS NOT NULL THEN array({layer}) "
              f"WHEN {d} > 0 THEN sequence(_after - {d} + 1, _after) "
              f"ELSE sequence(_after + 1, _after - {d}) END")
    events = (f"SELECT {cols}, _l AS {layer}, coalesce({t}, _since) AS {t}, "
              f"({layer} IS NOT NULL OR {d} > 0) AS _isopen, {layer} IS NULL AS {q(NEW)} "
              f"FROM ({run}) AS _run LATERAL VIEW explode({layers}) _layers AS _l")
    paired = (f"SELECT {cols}, {layer}, {t}, _isopen, {q(NEW)}, lead({t}) OVER "
              f"(PARTITION BY {cols}, {layer} ORDER BY {t}) AS _next FROM ({events}) AS _ev")
    return f"SELECT {cols}, {layer}, {t}, {q(NEW)}, _next FROM ({paired}) AS _p WHERE _isopen"
