"""Inner joins: output rows live while both inputs' rows do (interval overlap)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from sparkcq.errors import PlanError
from sparkcq.model.columns import SIGN, TE, TS, D, T
from sparkcq.plan.nodes import EdgeKind, Join, JoinHow
from sparkcq.runtime.frames import (
    Runtime,
    Slice,
    SqlViews,
    StateFrame,
    bound_sql,
    col,
    q,
    union_all,
)
from sparkcq.runtime.operators.base import CycleContext, FutureBuffer, Operator, Progress
from sparkcq.runtime.operators.union import AlignedInputs


def net(df: DataFrame, names: list[str]) -> DataFrame:
    """Sum the changes of equal rows at equal instants; drop the ones that cancel."""
    out = df.groupBy(*[col(n) for n in names], col(T)).agg(F.sum(col(D)).alias(D))
    return out.where(col(D) != 0)


def units(df: DataFrame, count: Column) -> DataFrame:
    """Repeat each row ``count`` times (multiplicities become single elements)."""
    return df.withColumn("_u", F.explode(F.array_repeat(F.lit(1), count.cast("int")))).drop("_u")


class ElementTracker:
    """Turns a relation's changes back into elements [ts, te) for operators that need both ends.

    Open elements are state. A -1 change closes the oldest open element of the same row
    value (first in, first out): any pairing gives the same snapshots, this one is
    deterministic and never closes an element before it opened.

    One SQL text a cycle, reading the open elements and the changes once each, so it is
    analysed once and re-bound every later cycle (``runtime/templates.py``): each row
    value's opens (the open elements and +n changes as n units) and closes (-n as n units)
    are numbered in one window, opens first, and the k-th close meets the k-th open:

        open (v, ts 3); changes (v, t 5, +1), (v, t 7, -1)
        numbered: open 3 -> 1, open 5 -> 2, close 7 -> 3 - 2 opens = 1
        elements: (v, 3, 7), (v, 5, NULL)
    """

    def __init__(self, op: Operator, names: list[str], schema: StructType, name: str):
        self.names = names
        self.cols = "".join(f"{q(n)}, " for n in names)  # the row's columns in SQL, then ", "
        self.open: StateFrame = op.state(
            StructType([*schema.fields, StructField(TS, LongType())]), name)
        self.views = SqlViews(op.rt.spark, "elements")

    def elements(self, changes: DataFrame | None, lo: int) -> DataFrame | None:
        """Elements alive at some instant >= lo: names, _ts, _te (null: still open), _chg;
        None when the input has none (no open element and no change).
        """
        old, cols = self.open.get(), self.cols
        if changes is None:
            if old is None:
                return None
            return self.views.sql(
                f"SELECT {cols}{q(TS)}, CAST(NULL AS BIGINT) AS {q(TE)}, "
                f"{q(TS)} >= {bound_sql(lo)} AS `_chg` FROM {{old}}", old=old)
        netted = (f"SELECT {cols}{q(T)}, sum({q(D)}) AS `_n` FROM {{ch}} "
                  f"GROUP BY {cols}{q(T)} HAVING sum({q(D)}) <> 0")
        marks = (f"SELECT {cols}{q(T)} AS `_at`, IF(`_n` > 0, 0, 1) AS `_close` "
                 f"FROM ({netted}) n LATERAL VIEW explode(array_repeat(1, "
                 f"CAST(abs(`_n`) AS INT))) u AS `_u`")
        if old is not None:
            marks += f" UNION ALL SELECT {cols}{q(TS)}, 0 FROM {{old}}"
        part = f"PARTITION BY {cols.rstrip(', ')} " if self.names else ""
        numbered = (f"SELECT *, row_number() OVER ({part}ORDER BY `_close`, `_at`) - "
                    f"IF(`_close` = 1, sum(1 - `_close`) OVER ({part.rstrip()}), 0) AS `_r` "
                    f"FROM ({marks})")
        paired = (f"SELECT {cols}max(IF(`_close` = 0, `_at`, NULL)) AS {q(TS)}, "
                  f"max(IF(`_close` = 1, `_at`, NULL)) AS {q(TE)} FROM ({numbered}) "
                  f"GROUP BY {cols}`_r`")
        text = (f"SELECT {cols}{q(TS)}, {q(TE)}, {q(TS)} >= {bound_sql(lo)} OR {q(TE)} IS NOT "
                f"NULL AS `_chg` FROM ({paired}) WHERE {q(TS)} IS NOT NULL")
        return self.views.sql(text, ch=changes, **({"old": old} if old is not None else {}))

    def keep_open(self, elements: DataFrame | None) -> None:
        """Carry the elements still open into the next cycle."""
        if elements is None:
            self.open.set(None)
            return
        self.open.set(self.views.sql(f"SELECT {self.cols}{q(TS)} FROM {{el}} WHERE {q(TE)} IS NULL",
                                     el=elements))


@dataclass(frozen=True)
class JoinProgress(Progress):
    """A join's position, and where it switched to the rows of tables replaced while it ran."""

    tables: tuple[tuple[str, int, int], ...] = ()  # (table, version, instant)


class JoinOperator(Operator):
    """Inner join of two relations, or a join of a relation (or stream) with a static table.

    With a static table each change joins the table on its own, as Spark joins: inner, or
    outer, semi or anti keeping the changing side's rows (a row without a match in the
    table is one without a match at every instant of its interval). Between two relations
    an output row lives on [max(ts), min(te)) of its inputs: it appears when the later
    input does and leaves when the first one leaves. Only pairs where one side changed in
    this cycle are computed; both sides' open elements are the state. (Outer joins of two
    relations are inner joins and counts: ``plan/rules/outer_joins_from_inner.py``.)
    """

    def __init__(self, node: Join, rt: Runtime):
        super().__init__(node, rt)
        self.join = node
        self.lnames = [f.name for f in node.left.schema.fields]
        self.rnames = [f.name for f in node.right.schema.fields]
        self.cond = F.expr(node.condition.sql) if node.condition else F.lit(True)
        self.static = [c.kind is EdgeKind.TABLE for c in node.children]
        self.out_names = [f.name for f in node.schema.fields]
        # with a table: the changing side, joined with the table, keeps what the join keeps
        self.static_how = {JoinHow.INNER: "inner", JoinHow.SEMI: "left_semi",
                           JoinHow.ANTI: "left_anti"}.get(node.how, "left")
        if node.how is not JoinHow.INNER and not any(self.static):
            msg = (f"{node.label()}: an outer join of two relations runs as inner joins "
                   "and counts (plan/rules/outer_joins_from_inner.py); plan it with optimize()")
            raise PlanError(msg)
        # with a table, contents come from the dynamic input; else from the open elements
        self.contents_from_inputs = any(self.static)
        self.progress: JoinProgress = JoinProgress()
        if any(self.static) and not all(self.static):
            # what a replaced table changes, -(old) +(new), at the instant it switched:
            # waits here until the dynamic input's slice passes that instant
            self.switches = FutureBuffer(self, StructType([
                *node.schema.fields, StructField(T, LongType()), StructField(D, LongType())]),
                "table-switch")
        if not any(self.static):
            self.aligned = AlignedInputs(self, node.children)
            self.left = ElementTracker(self, self.lnames, node.left.schema, "left-open")
            self.right = ElementTracker(self, self.rnames, node.right.schema, "right-open")
            self.views = SqlViews(rt.spark, "join")

    @property
    def dynamic(self) -> int:
        """Which input is not a table, in a join of a relation with a table."""
        return 1 if self.static[0] else 0

    @property
    def tables(self) -> tuple[tuple[str, int, int], ...]:
        """(table, version, instant): the versions of the tables it joins with and where it
        switched to them, for those it switched to while running (``replace_table``).
        """
        return self.progress.tables

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        left, right = inputs
        if all(self.static):
            assert left.df is not None and right.df is not None
            return Slice(left.df.join(right.df, self.cond, self.join.how.spark), left.lo,
                         left.hi)
        if any(self.static):
            return self.step_static(left, right)
        left, right = self.aligned.align(inputs, self.progress.position)
        lo, hi = left.lo, left.hi
        if left.df is None and right.df is None:
            return Slice(None, lo, hi)
        lel, rel = self.left.elements(left.df, lo), self.right.elements(right.df, lo)
        if lel is None or rel is None:  # one side holds nothing: no pairs, the other's state
            self.left.keep_open(lel)
            self.right.keep_open(rel)
            return Slice(None, lo, hi)
        lel, rel = self.rt.cache_for_cycle(lel), self.rt.cache_for_cycle(rel)
        self.left.keep_open(lel)
        self.right.keep_open(rel)
        return Slice(self.views.sql(self.pairs_sql(lo), l=lel, r=rel), lo, hi)

    def pairs_sql(self, lo: int) -> str:
        """The changes of the pairs of elements ``{l}`` and ``{r}`` meeting the condition
        where either changed: +1 where a pair begins (at or after ``lo``), -1 where it ends.

        One text reading each side once (analysed once, re-bound every cycle): the pairs
        where the left one changed and those where only the right one did are one join on
        ``l._chg OR r._chg``, and each pair's begin and end come from one generator.
        """
        names = "".join(f"{q(n)}, " for n in [*self.lnames, *self.rnames])
        sides = "".join(f"l.{q(n)}, " for n in self.lnames) + "".join(
            f"r.{q(n)}, " for n in self.rnames)
        cond = self.join.condition.sql if self.join.condition else "TRUE"
        pairs = (f"SELECT {sides}greatest(l.{q(TS)}, r.{q(TS)}) AS `_s`, "
                 f"least(l.{q(TE)}, r.{q(TE)}) AS `_e` FROM {{l}} l JOIN {{r}} r "
                 f"ON ({cond}) AND (l.`_chg` OR r.`_chg`)")
        ends = ("inline(array(named_struct('_at', `_s`, '_d', CAST(1 AS BIGINT)), "
                "named_struct('_at', `_e`, '_d', CAST(-1 AS BIGINT))))")
        return (f"SELECT {names}e.`_at` AS {q(T)}, e.`_d` AS {q(D)} FROM ({pairs}) p "
                f"LATERAL VIEW {ends} e WHERE (`_e` IS NULL OR `_s` < `_e`) AND "
                f"(e.`_d` = 1 AND e.`_at` >= {bound_sql(lo)} OR e.`_d` = -1 AND "
                f"e.`_at` IS NOT NULL)")

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """Pairs of live elements (both still open) meeting the condition; with a static
        table, the dynamic side's contents joined with the table, as the join emitted them:
        a switch to new rows still waiting (``replace_table``) is taken back out.
        """
        names = [col(n) for n in self.out_names]
        if any(self.static):
            dyn, table = (children[1], children[0]) if self.static[0] else children
            joined = (None if dyn is None or table is None
                      else self.with_table(dyn, table).select(*names, col(T), col(D)))
            waiting = self.switches.frame.get()
            if waiting is None:
                return joined
            undone = waiting.select(*names, F.lit(at).cast("long").alias(T),
                                    (-col(D)).alias(D))
            merged = union_all([joined, undone])
            assert merged is not None
            return net(merged, self.out_names)
        left, right = self.left.open.get(), self.right.open.get()
        if left is None or right is None:
            return None
        pairs = left.drop(TS).join(right.drop(TS), self.cond)
        return pairs.select(*names, F.lit(at).cast("long").alias(T),
                            F.lit(1).cast("long").alias(D))

    def step_static(self, left: Slice, right: Slice) -> Slice:
        """Changes of the dynamic side joined with the whole static table, and a switch to
        a replaced table's new rows once the dynamic side's slice passes its instant.
        """
        dyn, table = (right, left) if self.static[0] else (left, right)
        switched = self.switches.emit(None, dyn.lo, dyn.hi).df
        if dyn.df is None:
            return Slice(switched, dyn.lo, dyn.hi)
        assert table.df is not None
        out = self.with_table(dyn.df, table.df)
        names = [col(n) for n in self.out_names]
        return Slice(union_all([out.select(*names, col(T), col(D)), switched]), dyn.lo, dyn.hi)

    def with_table(self, changes: DataFrame, table: DataFrame) -> DataFrame:
        """Changes of the relation joined with the table's rows as the join keeps them."""
        return changes.join(table, self.cond, self.static_how)

    def replace_table(self, contents: DataFrame | None, old: DataFrame, new: DataFrame,
                      at: int, versions: tuple[tuple[str, int], ...]) -> None:
        """Switch from the static side's ``old`` rows to its ``new`` ones at ``at``, the
        join's position (every change before it is emitted): emit at ``at``
        -(contents ⋈ old) +(contents ⋈ new), where ``contents`` are the dynamic side's
        rows at ``at`` (+n changes; None: none); its later changes meet the new rows.

        Called before the cycle steps, with the tables already switched. The switch waits
        (``switches``) until the dynamic side's slice passes ``at``: a slice that stays at
        ``at`` (an idle input) must not emit at an instant that is not final yet. Rows of
        both versions cancel, so only the matches of changed table rows move.
        """
        names = [f.name for f in self.join.children[1 - self.dynamic].schema.fields]
        one = F.lit(1).cast("long")
        diff = (new.select(*[col(n) for n in names], one.alias(SIGN))
                .unionByName(old.select(*[col(n) for n in names], (-one).alias(SIGN)))
                .groupBy(*[col(n) for n in names]).agg(F.sum(col(SIGN)).alias(SIGN))
                .where(col(SIGN) != 0))
        tables = (*[(t, v, a) for t, v, a in self.progress.tables
                    if t not in {name for name, _ in versions}],
                  *[(name, version, at) for name, version in versions])
        self.progress = replace(self.progress, tables=tables)
        if contents is None:
            return
        out = [col(n) for n in self.out_names]
        if self.join.how is JoinHow.INNER:  # linear in the table: only changed rows move
            pairs = contents.join(diff, self.cond)
            delta = pairs.select(*out, F.lit(at).cast("long").alias(T),
                                 (col(D) * col(SIGN)).alias(D))
        else:  # a row's padding or presence depends on all its matches: both versions
            new_rows, old_rows = (self.with_table(contents, rows).select(
                *out, F.lit(at).cast("long").alias(T), (col(D) * F.lit(sign)).alias(D))
                for rows, sign in ((new, 1), (old, -1)))
            delta = net(new_rows.unionByName(old_rows), self.out_names)
        self.switches.emit(delta, at, at)  # a slice [at, at) emits nothing: it all waits
