"""Top-N per snapshot: the first n rows of a relation at every instant, per partition.

Semantics: at every instant the output holds the rows SQL's ``ORDER BY ...
LIMIT n`` (or ``ROW_NUMBER``/``RANK``/``DENSE_RANK() OVER (PARTITION BY ... ORDER BY
...) <= n``) gives on that instant's snapshot. Rows equal in the ORDER BY keys are ordered
by all their columns, ascending with NULLs first, so the rows kept never depend on arrival
order or cycles; every copy of a row is a row (ROW_NUMBER numbers copies one by one).

How: the live rows of every partition are a multiset in Spark (``multiset.py``: one state
row per distinct live row with its count). At each instant where a partition's input
changes, the partition's live rows at that instant are ranked with Spark SQL window
functions and the first n kept; each instant's top rows enter at it and leave at the
partition's next changing instant, and the top rows shown after the last cycle leave at the
partition's first changing instant of this one; summing those changes per row and instant
leaves exactly the rows that entered or left the top. The top rows shown now are the second
state (what a late query starts from).

Cost per cycle: one pass over the input's changes, and per partition and changing instant
a pass over the partition's live rows (a ranking per instant): cheap for a Top-N per window
slide (few instants per cycle), costly for a global Top-N over many rows that change at
many instants of a cycle.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StructField, StructType

from sparkcq.model.columns import FROM, GROUP_HASH, TO, D, N, T
from sparkcq.plan.nodes import RankKind, TopN
from sparkcq.runtime.frames import Runtime, Slice, SqlViews, col, no_broadcast, q
from sparkcq.runtime.operators.base import CycleContext, Operator, as_changes_at
from sparkcq.runtime.operators.multiset import GroupKeys, Multiset, group_hash

COPIES = "_copies"  # copies of a row the top holds at an instant
NEXT, FIRST = "_nx", "_first"  # a partition's next changing instant; its first of the cycle


class TopNOperator(Operator):
    """``ORDER BY ... LIMIT n`` and ranking functions ``<= n`` over a relation."""

    def __init__(self, node: TopN, rt: Runtime):
        super().__init__(node, rt)
        self.top = node
        self.views = SqlViews(rt.spark, "topn")
        fields = {f.name: f for f in node.child.schema.fields}
        self.partition = list(node.partition)
        self.names = [*self.partition, *[n for n in fields if n not in self.partition]]
        self.k = GroupKeys(self.partition)
        ident = GroupKeys(self.names)
        live = self.state(StructType([StructField(GROUP_HASH, LongType()),
                                      *[fields[n] for n in self.names],
                                      StructField(N, LongType())]), "live-rows", GROUP_HASH)
        self.rows = Multiset(live, self.k, ident,
                             f"SELECT {ident.cols()}{q(T)}, {q(D)} FROM {{inp}}")
        self.shown_names = [*self.names, *([node.rank_column] if node.rank_column else [])]
        self.out_names = [f.name for f in node.schema.fields]
        shown_fields = [StructField(GROUP_HASH, LongType()),
                        *[fields[n] for n in self.names],
                        *([StructField(node.rank_column, LongType(), False)]
                          if node.rank_column else []), StructField(N, LongType())]
        self.shown = self.state(StructType(shown_fields), "shown", GROUP_HASH)

    # -- SQL text ----------------------------------------------------------------------------
    def ranked_sql(self, segments: str) -> str:
        """Per partition and changing instant (``{ch}``), the top rows of the snapshot
        there: partition hash and keys, the other columns, the rank column if shown,
        ``_t`` and ``_copies``. ``segments``: the live rows' spans (``Multiset``).
        """
        node, k = self.top, self.k
        cols = ", ".join(q(n) for n in [GROUP_HASH, *self.names])
        ctes = (f"WITH segs AS ({segments}), "
                f"inst AS (SELECT DISTINCT {k.cols()}{q(T)} FROM {{ch}}), "
                f"snap AS (SELECT {no_broadcast('i')} i.{q(T)}, "
                f"{', '.join('s.' + q(n) for n in [GROUP_HASH, *self.names])}, s.`_cnt` "
                f"FROM inst i JOIN segs s ON {k.on('i', 's')} "
                f"AND (s.{q(FROM)} IS NULL OR s.{q(FROM)} <= i.{q(T)}) "
                f"AND (s.{q(TO)} IS NULL OR i.{q(T)} < s.{q(TO)}) WHERE s.`_cnt` > 0)")
        within = k.partition(q(T))
        keys = ", ".join(s.sql() for s in node.order)
        n = node.n
        if node.rank is RankKind.ROW_NUMBER:
            ties = ", ".join(f"{q(c)} ASC NULLS FIRST" for c in self.names)
            before = (f"sum(`_cnt`) OVER ({within}ORDER BY {keys}, {ties} "
                      "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) - `_cnt`")
            copies = "`_cnt`" if n is None else f"least(`_cnt`, {n} - `_before`)"
            kept = (f"SELECT {cols}, {q(T)}, {copies} AS {q(COPIES)}, `_before` "
                    f"FROM (SELECT *, {before} AS `_before` FROM snap)"
                    f"{'' if n is None else f' WHERE `_before` < {n}'}")
            if node.rank_column is None:
                return f"{ctes} SELECT {cols}, {q(T)}, {q(COPIES)} FROM ({kept})"
            return (f"{ctes} SELECT {cols}, explode(sequence(`_before` + 1, `_before` + "
                    f"{q(COPIES)})) AS {q(node.rank_column)}, {q(T)}, "
                    f"CAST(1 AS BIGINT) AS {q(COPIES)} FROM ({kept})")
        if node.rank is RankKind.RANK:  # 1 + the copies before its peers
            peers = k.partition(q(T), *(q(key.column) for key in node.order))
            rank = (f"sum(`_cnt`) OVER ({within}ORDER BY {keys} RANGE BETWEEN UNBOUNDED "
                    f"PRECEDING AND CURRENT ROW) - sum(`_cnt`) OVER ({peers}) + 1")
        else:
            rank = f"CAST(dense_rank() OVER ({within}ORDER BY {keys}) AS BIGINT)"
        shown = f", `_rank` AS {q(node.rank_column)}" if node.rank_column else ""
        return (f"{ctes} SELECT {cols}{shown}, {q(T)}, `_cnt` AS {q(COPIES)} "
                f"FROM (SELECT *, {rank} AS `_rank` FROM snap)"
                f"{'' if n is None else f' WHERE `_rank` <= {n}'}")

    def bounds_sql(self) -> str:
        """Per partition and changing instant: the next one (NULL: the last of the cycle)
        and whether it is the first of the cycle.
        """
        k = self.k
        w = f"OVER ({k.partition()}ORDER BY {q(T)})"
        return (f"SELECT {k.cols()}{q(T)}, lead({q(T)}) {w} AS {q(NEXT)}, "
                f"lag({q(T)}) {w} IS NULL AS {q(FIRST)} "
                f"FROM (SELECT DISTINCT {k.cols()}{q(T)} FROM {{ch}})")

    def edge_sql(self, with_shown: bool) -> str:
        """The output changes: each instant's top rows enter at it and leave at the next
        changing instant; the rows shown before the cycle leave at the first; summed per row
        and instant, only real entries and exits remain.
        """
        k = self.k
        own = ", ".join(f"o.{q(n)}" for n in self.shown_names)
        parts = [f"SELECT {own}, o.{q(T)}, o.{q(COPIES)} AS {q(D)} FROM {{top}} o",
                 f"SELECT {no_broadcast('b')} {own}, b.{q(NEXT)}, -o.{q(COPIES)} "
                 f"FROM {{top}} o JOIN {{b}} b ON {k.on('o', 'b')} AND o.{q(T)} = b.{q(T)} "
                 f"WHERE b.{q(NEXT)} IS NOT NULL"]
        if with_shown:
            parts.append(f"SELECT {own}, b.{q(T)}, -o.{q(N)} FROM {{shown}} o JOIN {{b}} b "
                         f"ON {k.on('o', 'b')} WHERE b.{q(FIRST)}")
        out = ", ".join(q(n) for n in self.out_names)
        return (f"SELECT {out}, {q(T)}, sum({q(D)}) AS {q(D)} FROM ("
                f"{' UNION ALL '.join(parts)}) GROUP BY {out}, {q(T)} HAVING sum({q(D)}) <> 0")

    def shown_sql(self, with_shown: bool) -> str:
        """The top rows shown after the cycle: those of each changed partition's last
        instant, and the others' as they were.
        """
        k = self.k
        own = ", ".join(f"o.{q(n)}" for n in [GROUP_HASH, *self.shown_names])
        last = (f"SELECT {no_broadcast('b')} {own}, o.{q(COPIES)} AS {q(N)} FROM {{top}} o "
                f"JOIN {{b}} b ON {k.on('o', 'b')} AND o.{q(T)} = b.{q(T)} "
                f"WHERE b.{q(NEXT)} IS NULL")
        if not with_shown:
            return last
        return (f"{last} UNION ALL SELECT {own}, o.{q(N)} FROM {{shown}} o "
                f"LEFT ANTI JOIN {{b}} b ON {k.on('o', 'b')}")

    # -- the cycle ---------------------------------------------------------------------------
    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        if inp.df is None:
            return Slice(None, inp.lo, inp.hi)
        sql, cache = self.views.sql, self.rt.cache_for_cycle
        src = cache(self.rt.partition_by(
            inp.df.withColumn(GROUP_HASH, group_hash(self.partition)), col(GROUP_HASH)))
        ch = cache(self.rows.changes(self.views, src))
        live = self.rows.frame.get()
        views = {"ch": ch} if live is None else {"ch": ch, "ms": live}
        top = cache(sql(self.ranked_sql(self.rows.live_segments_sql()), **views))
        bounds = cache(sql(self.bounds_sql(), ch=ch))
        shown = self.shown.get()
        views = {"top": top, "b": bounds} if shown is None else {
            "top": top, "b": bounds, "shown": shown}
        edge = sql(self.edge_sql(shown is not None), **views)
        self.shown.set(sql(self.shown_sql(shown is not None), **views))
        self.rows.update(self.views, ch)
        return Slice(edge, inp.lo, inp.hi)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The top rows shown now, as +n changes at ``at``."""
        shown = self.shown.get()
        return None if shown is None else as_changes_at(shown, self.out_names, N, at)
