"""The elements of a ``[RANGE w]`` window that can still be among the first ``n`` of their
partition: what a Top-N above needs to rank (made by ``prune_top_candidates.py``).

Every element holds over ``[ts, ts + w)``, so an element that arrived no earlier than
``e`` outlives it. Once ``n`` such elements that rank above ``e`` have arrived, at ``d``,
``e`` is never again among the first ``n`` rows: its candidacy ends at ``min(ts + w, d)``.
The output is the window's relation with each element ending there, so the Top-N above
gives the same rows at every instant. Values ``5, 9, 7, 8`` arriving at 1, 2, 3, 4 into
``[RANGE 10]``, top 2 by value::

    5 at 1: outranked by 9 (2) and 7 (3)      candidate over [1, 3)
    7 at 3: outranked by 8 (4) only            candidate over [3, 13) (until it ends)
    9 at 2, 8 at 4: nothing later above them   candidates to their ends, 12 and 14

For values in random order the candidates are about ``n`` times the log of the live rows
(the window's ``n``-skyband). State: the candidates, with the end known so far. A cycle
merges its new elements with them, ranks them once per partition (``dense_rank``), pairs
each with the later ones above it (a join of the few candidates with themselves) and finds
where the ``n``-th of those arrived. The window's own ends (its -1 changes) are not read:
each candidate's end is written here.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StructField, StructType

from sparkcq.model.columns import GROUP_HASH, D, T
from sparkcq.model.time import TIME_MAX
from sparkcq.plan.nodes import TopCandidates
from sparkcq.runtime.frames import Runtime, Slice, SqlViews, bound_sql, no_broadcast, q
from sparkcq.runtime.operators.base import CycleContext, Operator
from sparkcq.runtime.operators.multiset import GroupKeys

END = "_end"  # where an element stops being a candidate, as far as known
POS, ID = "_pos", "_id"  # an element's place in its partition's order; its row's


class TopCandidatesOperator(Operator):
    """Each window element until ``n`` later elements rank above it (see module)."""

    def __init__(self, node: TopCandidates, rt: Runtime):
        super().__init__(node, rt)
        self.length = node.length
        self.names = [f.name for f in node.schema.fields]
        keys = GroupKeys(list(node.partition))
        self.k = keys
        cols = ", ".join(map(q, self.names))
        self.kept = self.state(StructType([*node.schema.fields, StructField(T, LongType()),
                                           StructField(D, LongType()),
                                           StructField(END, LongType())]), "candidates")
        part = [f"{q(k)} ASC NULLS FIRST" for k in node.partition]
        order = [k.sql() for k in node.order]
        ties = [f"{q(c)} ASC NULLS FIRST" for c in self.names]
        within = f"PARTITION BY {q(GROUP_HASH)} ORDER BY "
        pos = f"dense_rank() OVER ({within}{', '.join(part + order + (ties if node.ties else []))})"
        ident = f"dense_rank() OVER ({within}{', '.join(part + order + ties)})"
        hashed = (f"xxhash64({', '.join(map(q, node.partition))})" if node.partition
                  else "CAST(0 AS BIGINT)")
        # the cycle's new elements (the window's +n) with the candidates kept, one row per
        # (row, start), placed in their partition's order
        merged = (f"SELECT {cols}, {q(T)}, sum({q(D)}) AS {q(D)} FROM ("
                  f"SELECT {cols}, {q(T)}, {q(D)} FROM {{inp}} WHERE {q(D)} > 0 UNION ALL "
                  f"SELECT {cols}, {q(T)}, {q(D)} FROM {{kept}}) GROUP BY {cols}, {q(T)}")
        self.placed_sql = (f"SELECT *, {pos} AS {POS}, {ident} AS {ID} FROM (SELECT *, "
                           f"{hashed} AS {q(GROUP_HASH)} FROM ({merged}))")
        self.first_sql = self.placed_sql.replace(
            f" UNION ALL SELECT {cols}, {q(T)}, {q(D)} FROM {{kept}}", "")
        # per element, where the n-th later element above it arrived (none: no end yet)
        e, f = "e", "f"
        later_above = (f"SELECT {no_broadcast(f)} {e}.{q(GROUP_HASH)}, {e}.{ID}, {e}.{q(T)}, "
                       f"{f}.{q(T)} AS _at, {f}.{q(D)} AS _n FROM {{placed}} {e} JOIN "
                       f"{{placed2}} {f} ON {keys.on(e, f)} AND {f}.{q(T)} >= {e}.{q(T)} AND "
                       f"{f}.{POS} < {e}.{POS}")
        counted = (f"SELECT *, sum(_n) OVER (PARTITION BY {q(GROUP_HASH)}, {ID}, {q(T)} "
                   f"ORDER BY _at ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _c "
                   f"FROM ({later_above})")
        self.pushed_sql = (f"SELECT {q(GROUP_HASH)}, {ID}, {q(T)}, min(_at) AS _out FROM "
                           f"({counted}) WHERE _c >= {node.n} GROUP BY {q(GROUP_HASH)}, "
                           f"{ID}, {q(T)}")
        self.views = SqlViews(rt.spark, "topcandidates")

    def ended_sql(self) -> str:
        """Every element with its candidacy's end (``_end``): the earlier of its window's
        end and where the ``n``-th later element above it arrived.
        """
        cols = ", ".join(f"p.{q(n)}" for n in self.names)
        own_end = f"p.{q(T)} + {self.length}"
        return (f"SELECT {cols}, p.{q(T)}, p.{q(D)}, least({own_end}, coalesce(o._out, "
                f"{own_end})) AS {END} FROM {{placed}} p LEFT JOIN {{pushed}} o ON "
                f"p.{q(GROUP_HASH)} = o.{q(GROUP_HASH)} AND p.{ID} = o.{ID} AND "
                f"p.{q(T)} = o.{q(T)}")

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        lo, hi = inp.lo, inp.hi
        kept = self.kept.get()
        if inp.df is None and kept is None:
            return Slice(None, lo, hi)
        sql, cache = self.views.sql, self.rt.cache_for_cycle
        new = inp.df if inp.df is not None else self.rt.empty(self.kept.schema).drop(END)
        if kept is None:
            placed = cache(sql(self.first_sql, inp=new))
        else:
            placed = cache(sql(self.placed_sql, inp=new, kept=kept))
        pushed = sql(self.pushed_sql, placed=placed, placed2=placed)
        ended = cache(sql(self.ended_sql(), placed=placed, pushed=pushed))
        cols = ", ".join(map(q, self.names))
        low, high = bound_sql(lo), bound_sql(hi)
        edge = self.views.sql_union([
            f"SELECT {cols}, {q(T)}, {q(D)} FROM {{ended}} WHERE {q(T)} >= {low} "
            f"AND {END} > {q(T)}",
            f"SELECT {cols}, {END} AS {q(T)}, -{q(D)} AS {q(D)} FROM {{ended}} "
            f"WHERE {END} < {high} AND {END} > {q(T)}"], ended=ended)
        self.kept.set(None if hi == TIME_MAX else self.views.sql(
            f"SELECT {cols}, {q(T)}, {q(D)}, {END} FROM {{ended}} WHERE {END} >= {high}",
            ended=ended))
        return Slice(edge, lo, hi)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The candidates holding at ``at``, as +n changes there."""
        kept = self.kept.get()
        if kept is None:
            return None
        cols = ", ".join(map(q, self.names))
        return self.views.sql(f"SELECT {cols}, CAST({at} AS BIGINT) AS {q(T)}, sum({q(D)}) AS "
                              f"{q(D)} FROM {{kept}} WHERE {q(T)} <= {at} AND {END} > {at} "
                              f"GROUP BY {cols}", kept=kept)
