"""Inner joins: output rows live while both inputs' rows do (interval overlap)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from sparkcq.errors import PlanError
from sparkcq.model.columns import SIGN, TE, TS, D, T
from sparkcq.plan.nodes import EdgeKind, Join, JoinHow
from sparkcq.runtime.frames import Runtime, Slice, StateFrame, col, union_all
from sparkcq.runtime.operators.base import CycleContext, FutureBuffer, Operator, Progress
from sparkcq.runtime.operators.union import AlignedInputs


def _keys_equal(left: DataFrame, right: DataFrame, names: list[str], rkeys: list[str]) -> Column:
    cond: Column = F.lit(True)
    for n, k in zip(names, rkeys, strict=True):
        cond = cond & left[f"`{n}`"].eqNullSafe(right[f"`{k}`"])
    return cond


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
    """

    def __init__(self, op: Operator, names: list[str], schema: StructType, name: str):
        self.names = names
        self.open: StateFrame = op.state(
            StructType([*schema.fields, StructField(TS, LongType())]), name)

    def elements(self, changes: DataFrame | None, lo: int) -> DataFrame | None:
        """Elements alive at some instant >= lo: names, _ts, _te (null: still open), _chg;
        None when the input has none (no open element and no change).
        """
        names = self.names
        old = self.open.get()
        opens = [old] if old is not None else []
        closes = None
        if changes is not None:
            d = net(changes, names)
            opens.append(units(d.where(col(D) > 0), col(D)).select(*[col(n) for n in names],
                                                                    col(T).alias(TS)))
            closes = units(d.where(col(D) < 0), -col(D)).select(*[col(n) for n in names],
                                                                 col(T).alias("_tc"))
        cands = union_all(opens)
        if cands is None:
            return None
        if closes is None:
            return cands.withColumn(TE, F.lit(None).cast("long")).withColumn(
                "_chg", col(TS) >= F.lit(lo))
        part = [col(n) for n in names]
        cands = cands.withColumn("_r", F.row_number().over(Window.partitionBy(*part)
                                                           .orderBy(col(TS))))
        keys = [f"_k{i}" for i in range(len(names))]
        closes = closes.withColumn("_r", F.row_number().over(Window.partitionBy(*part)
                                                             .orderBy(col("_tc"))))
        closes = closes.select(*[col(n).alias(k) for n, k in zip(names, keys, strict=True)],
                               col("_r").alias("_cr"), col("_tc"))
        cond = _keys_equal(cands, closes, names, keys) & (cands["_r"] == closes["_cr"])
        out = cands.join(closes, cond, "left").select(
            *[cands[f"`{n}`"] for n in names], col(TS), col("_tc").alias(TE))
        return out.withColumn("_chg", (col(TS) >= F.lit(lo)) | col(TE).isNotNull())

    def keep_open(self, elements: DataFrame | None) -> None:
        """Carry the elements still open into the next cycle."""
        if elements is None:
            self.open.set(None)
            return
        self.open.set(elements.where(col(TE).isNull()).select(*[col(n) for n in self.names],
                                                               col(TS)))


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
        self.cond = F.expr(node.condition) if node.condition else F.lit(True)
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
        l_ = lel.select(*[col(n) for n in self.lnames], col(TS).alias("_lts"),
                        col(TE).alias("_lte"), col("_chg").alias("_lch"))
        r_ = rel.select(*[col(n) for n in self.rnames], col(TS).alias("_rts"),
                        col(TE).alias("_rte"), col("_chg").alias("_rch"))
        pairs = l_.where(col("_lch")).join(r_, self.cond).unionByName(
            l_.where(~col("_lch")).join(r_.where(col("_rch")), self.cond))
        s = F.greatest(col("_lts"), col("_rts"))
        e = F.least(col("_lte"), col("_rte"))
        pairs = pairs.select(*[col(n) for n in [*self.lnames, *self.rnames]], s.alias("_s"),
                             e.alias("_e"))
        pairs = pairs.where(col("_e").isNull() | (col("_s") < col("_e")))
        names = [col(n) for n in [*self.lnames, *self.rnames]]
        plus = pairs.where(col("_s") >= F.lit(lo)).select(*names, col("_s").alias(T),
                                                          F.lit(1).cast("long").alias(D))
        minus = pairs.where(col("_e").isNotNull()).select(*names, col("_e").alias(T),
                                                          F.lit(-1).cast("long").alias(D))
        self.left.keep_open(lel)
        self.right.keep_open(rel)
        return Slice(plus.unionByName(minus), lo, hi)

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
