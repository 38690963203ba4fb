"""Live values per group with their multiplicities: what min, max and count(DISTINCT) need.

count/sum/avg can subtract an element that leaves; min, max and count(DISTINCT) cannot, so
the aggregate keeps the live values themselves. A multiset is a state of rows (identity,
``_n``): the identity is the group keys and some value columns, ``_n`` how many live
elements carry them. Each cycle the input's changes are summed per (identity, instant) and
given their multiplicity before (``_nb``) and after (``_na``) each instant; the state keeps
the multiplicities after the cycle's last instant, dropping values that reached 0.

Two kinds are used by ``AggregateOperator``:

- ``rows``: the identity is the group keys and the arguments of every min/max call, so all
  of them share one multiset with one row per distinct live row, however many calls;
- ``stacked``: for count(DISTINCT), the identity is (keys, argument name, value), one
  multiset per argument type, so a value's presence per argument can be counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sparkcq.model.columns import AID, FROM, GROUP_HASH, NEW, TO, D, N, T
from sparkcq.runtime.frames import SqlViews, StateFrame, col, q


def group_hash(keys: list[str]) -> Column:
    """``_g``: a hash of the group keys; Spark's hash holds equal what GROUP BY holds equal
    (``-0.0`` and ``0.0``, every NaN, also inside structs).
    """
    if not keys:
        return F.lit(0).cast("long")
    return F.xxhash64(*[col(k) for k in keys])


class GroupKeys:
    """SQL fragments over a list of key columns (which may be empty: a global aggregate),
    always led by the group hash ``_g``.

    Every frame of an aggregate (the cycle's input, its per-instant results, its states)
    carries ``_g`` and is hash-partitioned by it alone, and every grouping, window and join
    lists it first, joining on it with plain equality: Spark then sees each step's input
    already distributed as required and shuffles the input once per cycle, not once per
    step (the keys themselves are compared null-safely, which Spark cannot partition on).
    """

    def __init__(self, keys: list[str]):
        self.keys = keys

    def cols(self, alias: str = "") -> str:
        """``_g, k1, k2, `` (with a trailing comma)."""
        pre = f"{alias}." if alias else ""
        return "".join(f"{pre}{q(k)}, " for k in [GROUP_HASH, *self.keys])

    def on(self, a: str, b: str) -> str:
        """Equality of the group hash and null-safe equality of the keys of two relations."""
        return " AND ".join([f"{a}.{q(GROUP_HASH)} = {b}.{q(GROUP_HASH)}",
                             *[f"{a}.{q(k)} <=> {b}.{q(k)}" for k in self.keys]])

    def partition(self, *extra: str) -> str:
        """A PARTITION BY clause over the hash, the keys and ``extra`` columns."""
        cols = [*map(q, [GROUP_HASH, *self.keys]), *extra]
        return f"PARTITION BY {', '.join(cols)} "

    def group(self, *extra: str, alias: str = "") -> str:
        """A GROUP BY list over the hash, the keys and ``extra`` columns."""
        pre = f"{alias}." if alias else ""
        return ", ".join([*[pre + q(k) for k in [GROUP_HASH, *self.keys]], *extra])

    @staticmethod
    def distributed(union: str, single: bool) -> str:
        """``union`` (a UNION ALL of frames partitioned by the hash) shuffled by the hash:
        Spark 4.3 does not carry the children's partitioning through a union of frames read
        from views, so steps above it would shuffle by all their keys instead. In a cycle
        run in one partition (``single``) it stays as it is: there every frame is one
        partition, and a repartition would still be an exchange.
        """
        if single:
            return f"SELECT * FROM ({union})"
        return f"SELECT * FROM ({union}) DISTRIBUTE BY {q(GROUP_HASH)}"


@dataclass
class Multiset:
    """One multiset state and the SQL that maintains it; see the module docstring."""

    frame: StateFrame
    groups: GroupKeys  # the aggregate's group keys
    ident: GroupKeys  # group keys and value columns: what makes two rows the same value
    source: str  # SQL over ``{inp}``: (identity columns, _t, _d) of the values that count

    @classmethod
    def rows(cls, frame: StateFrame, keys: list[str], args: list[str]) -> Multiset:
        """Live rows of ``args`` (the min/max arguments) per group; all-NULL rows skipped."""
        ident = GroupKeys([*keys, *args])
        some = " OR ".join(f"{q(a)} IS NOT NULL" for a in args)
        return cls(frame, GroupKeys(keys), ident,
                   f"SELECT {ident.cols()}{q(T)}, {q(D)} FROM {{inp}} WHERE {some}")

    @classmethod
    def stacked(cls, frame: StateFrame, keys: list[str], args: list[str]) -> Multiset:
        """Live values of each of ``args`` (of one type) per group, as (argument, value)."""
        k = GroupKeys(keys)
        if len(args) == 1:
            stacked = (f"SELECT {k.cols()}'{args[0]}' AS {q(AID)}, {q(args[0])} AS `_v`, "
                       f"{q(T)}, {q(D)} FROM {{inp}}")
        else:
            pairs = ", ".join(f"'{arg}', {q(arg)}" for arg in args)
            stacked = (f"SELECT {k.cols('i')}s.{q(AID)}, s.`_v`, i.{q(T)}, i.{q(D)} FROM {{inp}} i "
                       f"LATERAL VIEW stack({len(args)}, {pairs}) s AS {q(AID)}, `_v`")
        return cls(frame, k, GroupKeys([*keys, AID, "_v"]),
                   f"SELECT * FROM ({stacked}) WHERE `_v` IS NOT NULL")

    def changes_sql(self, with_base: bool) -> str:
        """Per (identity, instant): the change in multiplicity (``_dv``), the multiplicity
        before the cycle (``_n0``), before the instant (``_nb``) and after it (``_na``).
        """
        ident = self.ident
        changes = (f"SELECT {ident.cols()}{q(T)}, sum({q(D)}) AS `_dv` FROM ({self.source}) "
                   f"GROUP BY {ident.group(q(T))} HAVING sum({q(D)}) <> 0")
        if with_base:
            based = (f"SELECT c.*, coalesce(b.{q(N)}, CAST(0 AS BIGINT)) AS `_n0` "
                     f"FROM ({changes}) c "
                     f"LEFT JOIN {{ms}} b ON {ident.on('c', 'b')}")
        else:
            based = f"SELECT c.*, CAST(0 AS BIGINT) AS `_n0` FROM ({changes}) c"
        running = (f"m.`_n0` + sum(m.`_dv`) OVER ({ident.partition()}ORDER BY {q(T)} "
                   "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)")
        return (f"SELECT r.*, r.`_na` - r.`_dv` AS `_nb` FROM "
                f"(SELECT m.*, {running} AS `_na` FROM ({based}) m) r")

    def changes(self, views: SqlViews, src: DataFrame) -> DataFrame:
        """The value changes of the cycle's input changes ``src`` (see ``changes_sql``)."""
        base = self.frame.get()
        bound = {"inp": src, "ms": base} if base is not None else {"inp": src}
        return views.sql(self.changes_sql(base is not None), **bound)

    def live_segments_sql(self) -> str:
        """Every live value with a span over which its multiplicity ``_cnt`` holds:
        ``[_from, _to)``, NULL meaning since before the cycle or beyond it. A value in the
        state holds its count until its first change this cycle; each change holds its
        count until the next. Views: ``{ch}`` (``changes``) and ``{ms}`` (the state, if any).
        """
        ident = self.ident
        counts = f"SELECT {ident.cols()}{q(T)}, `_na` AS `_cnt` FROM {{ch}}"
        if self.frame.get() is not None:
            counts += f" UNION ALL SELECT {ident.cols()}CAST(NULL AS BIGINT), {q(N)} FROM {{ms}}"
            counts = ident.distributed(counts, self.frame.rt.single)
        return (f"SELECT {ident.cols()}{q(T)} AS {q(FROM)}, lead({q(T)}) OVER ({ident.partition()}"
                f"ORDER BY {q(T)} NULLS FIRST) AS {q(TO)}, `_cnt` FROM ({counts})")

    def update(self, views: SqlViews, ch: DataFrame) -> None:
        """Keep the multiplicities after the cycle's changes ``ch``; drop emptied values.

        Changed values take their new count, the others keep theirs: one aggregation over
        the changes and the state, each read once (a frame read twice in one Spark plan
        loses its known partitioning in the second reading).
        """
        ident = self.ident
        counts = (f"SELECT {ident.cols()}max(`_n0`) + sum(`_dv`) AS {q(N)}, 1 AS {q(NEW)} "
                  f"FROM {{ch}} GROUP BY {ident.group()}")
        base = self.frame.get()
        bound = {"ch": ch}
        if base is not None:
            counts = ident.distributed(
                f"{counts} UNION ALL SELECT {ident.cols()}{q(N)}, 0 FROM {{ms}}",
                self.frame.rt.single)
            bound["ms"] = base
        self.frame.set(views.sql(
            f"SELECT {ident.cols()}max_by({q(N)}, {q(NEW)}) AS {q(N)} FROM ({counts}) "
            f"GROUP BY {ident.group()} HAVING max_by({q(N)}, {q(NEW)}) > 0", **bound))
