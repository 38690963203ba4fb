"""Grouped aggregation over a relation, incremental and exact (DESIGN 2.1, 4.5).

Per group and per instant at which the group's input changes, the operator computes the
aggregate of the snapshot with Spark window functions: running sums of the changes on top
of the group's state. The result relation changes exactly at those instants: -1 for the old
row, +1 for the new one. count/sum/avg are invertible and kept as running accumulators;
count(DISTINCT), min and max keep the multiset of live values per group, so they stay
correct when elements leave. DOUBLE sums accumulate in DECIMAL(38, 10): exact under
retraction, so results do not depend on how input was cut into cycles.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DataType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    ShortType,
    StructField,
    StructType,
)

from sparkcq.plan.nodes import AggCall, Aggregate
from sparkcq.runtime.frames import D, Runtime, Slice, T, col, union_all
from sparkcq.runtime.operators.base import Operator

N = "_n"
_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
EXACT_DOUBLE = DecimalType(38, 10)


def accumulator_type(arg: DataType) -> DataType:
    """The exact type sums of ``arg`` accumulate in."""
    if isinstance(arg, _INTEGRAL):
        return LongType()
    if isinstance(arg, DecimalType):
        return DecimalType(38, arg.scale)
    return EXACT_DOUBLE


def _keys_cond(left: DataFrame, right: DataFrame, keys: list[str], rkeys: list[str]) -> Column:
    cond: Column = F.lit(True)
    for k, rk in zip(keys, rkeys, strict=True):
        cond = cond & left[f"`{k}`"].eqNullSafe(right[f"`{rk}`"])
    return cond


class AggregateOperator(Operator):
    """GROUP BY with count, count(DISTINCT), sum, avg, min and max over a relation."""

    def __init__(self, node: Aggregate, rt: Runtime):
        super().__init__(node, rt)
        self.keys = list(node.keys)
        self.aggs = list(node.aggs)
        child_types = {f.name: f.dataType for f in node.child.schema.fields}
        self.out_types = {f.name: f.dataType for f in node.schema.fields}
        self.arg_types = {a.name: child_types[a.arg] for a in self.aggs if a.arg}
        self.multiset_aggs = [a for a in self.aggs if a.distinct or a.func in ("min", "max")]
        key_fields = [f for f in node.schema.fields if f.name in self.keys]
        fields = [*key_fields, StructField(N, LongType())]
        for a in self.aggs:
            if a.func == "count" and a.arg is None:
                continue
            fields.append(StructField(f"{a.name}_c", LongType()))
            if a.func in ("sum", "avg"):
                fields.append(StructField(f"{a.name}_s", accumulator_type(self.arg_types[a.name])))
        fields += [f for f in node.schema.fields if f.name not in self.keys]
        self.groups = self.state(StructType(fields), "groups")
        self.multisets = {
            a.name: self.state(StructType([*key_fields, StructField("_v", child_types[a.arg]),
                                           StructField(N, LongType())]), f"values-{a.name}")
            for a in self.multiset_aggs if a.arg
        }

    # -- per-instant deltas ------------------------------------------------------------------
    def deltas(self, inp: DataFrame) -> DataFrame:
        """Per (group, instant): the change in row count and in each accumulator."""
        aggs = [F.sum(col(D)).alias("_dn")]
        for a in self.aggs:
            if a.arg is None or a.distinct or a.func in ("min", "max"):
                continue
            present = col(a.arg).isNotNull()
            aggs.append(F.sum(F.when(present, col(D)).otherwise(0)).alias(f"{a.name}_dc"))
            if a.func in ("sum", "avg"):
                acc = accumulator_type(self.arg_types[a.name])
                aggs.append(F.coalesce(F.sum(col(a.arg).cast(acc) * col(D).cast(acc)),
                                       F.lit(0).cast(acc)).alias(f"{a.name}_ds"))
        return inp.groupBy(*[col(k) for k in self.keys], col(T)).agg(*aggs)

    def value_changes(self, inp: DataFrame, a: AggCall) -> DataFrame:
        """Per (group, value, instant): the change in the value's multiplicity and its count
        after the change, on top of the multiset state.
        """
        assert a.arg is not None
        md = inp.where(col(a.arg).isNotNull()).groupBy(
            *[col(k) for k in self.keys], col(a.arg).alias("_v"), col(T)
        ).agg(F.sum(col(D)).alias("_dv")).where(col("_dv") != 0)
        base = self.multisets[a.name].get()
        if base is None:
            md = md.withColumn("_n0", F.lit(0).cast("long"))
        else:
            bkeys = [f"_b{i}" for i in range(len(self.keys))]
            b = base.select(*[col(k).alias(bk) for k, bk in zip(self.keys, bkeys, strict=True)],
                            col("_v").alias("_bv"), col(N).alias("_n0"))
            cond = _keys_cond(md, b, self.keys, bkeys) & md["_v"].eqNullSafe(b["_bv"])
            md = md.join(b, cond, "left").drop(*bkeys, "_bv").withColumn(
                "_n0", F.coalesce(col("_n0"), F.lit(0).cast("long")))
        w = (Window.partitionBy(*[col(k) for k in self.keys], col("_v")).orderBy(col(T))
             .rowsBetween(Window.unboundedPreceding, Window.currentRow))
        md = md.withColumn("_na", col("_n0") + F.sum(col("_dv")).over(w))
        return md.withColumn("_nb", col("_na") - col("_dv"))

    def extreme_at_instants(
        self, instants: DataFrame, changes: DataFrame, a: AggCall
    ) -> DataFrame:
        """Min or max of the live values of each group at each instant the group changed."""
        keys = [col(k) for k in self.keys]
        seg_w = Window.partitionBy(*keys, col("_v")).orderBy(col(T))
        segs = changes.select(*keys, col("_v"), col(T).alias("_from"),
                              F.lead(col(T)).over(seg_w).alias("_to"), col("_na").alias("_cnt"))
        firsts = changes.groupBy(*keys, col("_v")).agg(F.min(col(T)).alias("_first"))
        base = self.multisets[a.name].get()
        if base is not None:
            touched = instants.select(*keys).distinct()
            bkeys = [f"_b{i}" for i in range(len(self.keys))]
            t = touched.select(*[col(k).alias(bk) for k, bk in zip(self.keys, bkeys, strict=True)])
            live = base.join(t, _keys_cond(base, t, self.keys, bkeys), "left_semi")
            fk = [f"_f{i}" for i in range(len(self.keys))]
            f = firsts.select(*[col(k).alias(x) for k, x in zip(self.keys, fk, strict=True)],
                              col("_v").alias("_fv"), col("_first"))
            cond = _keys_cond(live, f, self.keys, fk) & live["_v"].eqNullSafe(f["_fv"])
            old = live.join(f, cond, "left").select(
                *keys, col("_v"), F.lit(None).cast("long").alias("_from"),
                col("_first").alias("_to"), col(N).alias("_cnt"))
            segs = segs.unionByName(old)
        segs = segs.where(col("_cnt") > 0)
        ikeys = [f"_i{i}" for i in range(len(self.keys))]
        inst = instants.select(*[col(k).alias(ik) for k, ik in zip(self.keys, ikeys, strict=True)],
                               col(T).alias("_it"))
        cond = (_keys_cond(segs, inst, self.keys, ikeys)
                & (col("_from").isNull() | (col("_from") <= col("_it")))
                & (col("_to").isNull() | (col("_it") < col("_to"))))
        pick = F.min if a.func == "min" else F.max
        return segs.join(inst, cond).groupBy(*[col(k) for k in ikeys], col("_it")).agg(
            pick(col("_v")).alias(a.name)).select(
            *[col(ik).alias(k) for k, ik in zip(self.keys, ikeys, strict=True)],
            col("_it").alias(T), col(a.name))

    # -- the cycle ---------------------------------------------------------------------------
    def step(self, inputs: list[Slice]) -> Slice:  # noqa: D102
        (inp,) = inputs
        if inp.df is None:
            return inp
        src = self.rt.cache_for_cycle(inp.df)
        d = self.deltas(src)
        changes = {a.name: self.rt.cache_for_cycle(self.value_changes(src, a))
                   for a in self.multiset_aggs if a.arg}
        for a in self.multiset_aggs:
            if a.distinct:
                flips = changes[a.name].groupBy(*[col(k) for k in self.keys], col(T)).agg(
                    F.sum((col("_na") > 0).cast("long") - (col("_nb") > 0).cast("long"))
                    .alias(f"{a.name}_dc"))
                d = self.join_on_instant(d, flips)
        d = self.rt.cache_for_cycle(d)
        for a in self.multiset_aggs:
            if not a.distinct:
                d = self.join_on_instant(d, self.extreme_at_instants(
                    d.select(*[col(k) for k in self.keys], col(T)), changes[a.name], a))
        run = self.rt.cache_for_cycle(self.running(d))
        out = self.output_changes(run)
        self.update_state(run, changes)
        return Slice(out, inp.lo, inp.hi)

    def join_on_instant(self, left: DataFrame, right: DataFrame) -> DataFrame:
        """Left join on (group keys, instant), null keys equal."""
        rk = [f"_j{i}" for i in range(len(self.keys))]
        r = right.select(*[col(k).alias(x) for k, x in zip(self.keys, rk, strict=True)],
                         col(T).alias("_jt"),
                         *[col(c) for c in right.columns if c not in (*self.keys, T)])
        cond = _keys_cond(left, r, self.keys, rk) & (left[T] == r["_jt"])
        return left.join(r, cond, "left").drop(*rk, "_jt")

    def running(self, d: DataFrame) -> DataFrame:
        """Each (group, instant) with the aggregate values before and after the instant."""
        st = self.groups.get()
        base_names = [f.name for f in self.groups.schema.fields if f.name not in self.keys]
        if st is None:
            j = d
            for f in self.groups.schema.fields:
                if f.name not in self.keys:
                    j = j.withColumn(f"_b{f.name}", F.lit(None).cast(f.dataType))
        else:
            bk = [f"_bk{i}" for i in range(len(self.keys))]
            b = st.select(*[col(k).alias(x) for k, x in zip(self.keys, bk, strict=True)],
                          *[col(n).alias(f"_b{n}") for n in base_names])
            j = d.join(b, _keys_cond(d, b, self.keys, bk), "left").drop(*bk)
        w = (Window.partitionBy(*[col(k) for k in self.keys]).orderBy(col(T))
             .rowsBetween(Window.unboundedPreceding, Window.currentRow))
        lag_w = Window.partitionBy(*[col(k) for k in self.keys]).orderBy(col(T))
        zero = F.lit(0).cast("long")
        j = j.withColumn(N, F.coalesce(col(f"_b{N}"), zero) + F.sum(col("_dn")).over(w))
        for a in self.aggs:
            if a.func == "count" and a.arg is None:
                continue
            c = f"{a.name}_c"
            dc = col(f"{a.name}_dc") if f"{a.name}_dc" in j.columns else None
            if dc is not None:
                j = j.withColumn(c, F.coalesce(col(f"_b{c}"), zero)
                                 + F.sum(F.coalesce(dc, zero)).over(w))
            else:  # min/max: number of non-null live values is not needed, keep it as is
                j = j.withColumn(c, F.coalesce(col(f"_b{c}"), zero))
            if a.func in ("sum", "avg"):
                acc = accumulator_type(self.arg_types[a.name])
                s = f"{a.name}_s"
                j = j.withColumn(s, F.coalesce(col(f"_b{s}"), F.lit(0).cast(acc))
                                 + F.sum(col(f"{a.name}_ds")).over(w))
            if a.func in ("sum", "avg"):
                j = j.withColumn(a.name, self.value(a, j))
            elif a.func == "count":
                j = j.withColumn(a.name, col(c))
        for a in self.aggs:
            if a.func == "count" and a.arg is None:
                j = j.withColumn(a.name, col(N))
            if a.name in self.out_types:
                j = j.withColumn(a.name, F.when(col(N) > 0, col(a.name).cast(
                    self.out_types[a.name])))
        first = F.row_number().over(lag_w) == 1
        for a in self.aggs:
            j = j.withColumn(f"_p{a.name}", F.when(first, col(f"_b{a.name}")).otherwise(
                F.lag(col(a.name)).over(lag_w)))
        return j.withColumn("_pn", col(N) - col("_dn"))

    def value(self, a: AggCall, j: DataFrame) -> Column:
        """Sum or avg from its accumulators (NULL over no non-null values)."""
        c, s = col(f"{a.name}_c"), col(f"{a.name}_s")
        out_type = self.out_types[a.name]
        if a.func == "sum":
            return F.when(c > 0, s.cast(out_type))
        if isinstance(out_type, DoubleType):
            return F.when(c > 0, s.cast("double") / c.cast("double"))
        return F.when(c > 0, (s / c).cast(out_type))

    def output_changes(self, run: DataFrame) -> DataFrame:
        """-1 for the group's old row and +1 for its new row where the row changed."""
        names = [a.name for a in self.aggs]
        changed = (col("_pn") > 0) != (col(N) > 0)
        for n in names:
            changed = changed | ~col(f"_p{n}").eqNullSafe(col(n))
        run = run.where(changed)
        keys = [col(k) for k in self.keys]
        order = [f.name for f in self.node.schema.fields]
        old = run.where(col("_pn") > 0).select(
            *keys, *[col(f"_p{n}").alias(n) for n in names], col(T),
            F.lit(-1).cast("long").alias(D))
        new = run.where(col(N) > 0).select(*keys, *[col(n) for n in names], col(T),
                                           F.lit(1).cast("long").alias(D))
        return old.unionByName(new).select(*[col(n) for n in order], col(T), col(D))

    def update_state(self, run: DataFrame, changes: dict[str, DataFrame]) -> None:
        """Keep each touched group's values after its last instant; drop emptied groups."""
        keys = [col(k) for k in self.keys]
        last = Window.partitionBy(*keys).orderBy(col(T).desc())
        names = [f.name for f in self.groups.schema.fields]
        latest = run.withColumn("_rk", F.row_number().over(last)).where(
            (col("_rk") == 1) & (col(N) > 0)).select(*[col(n) for n in names])
        old = self.groups.get()
        if old is not None and self.keys:
            bk = [f"_u{i}" for i in range(len(self.keys))]
            touched = run.select(*[col(k).alias(x) for k, x in zip(self.keys, bk, strict=True)])
            old = old.join(touched, _keys_cond(old, touched, self.keys, bk), "left_anti")
        elif old is not None:
            old = None
        self.groups.set(union_all([old, latest]))
        for name, ch in changes.items():
            ms = self.multisets[name]
            totals = ch.groupBy(*keys, col("_v")).agg(F.max(col("_n0")).alias("_n0"),
                                                     F.sum(col("_dv")).alias("_dv"))
            updated = totals.select(*keys, col("_v"), (col("_n0") + col("_dv")).alias(N))
            base = ms.get()
            if base is not None:
                bk = [f"_u{i}" for i in range(len(self.keys))]
                t = ch.select(*[col(k).alias(x) for k, x in zip(self.keys, bk, strict=True)],
                              col("_v").alias("_uv"))
                cond = _keys_cond(base, t, self.keys, bk) & base["_v"].eqNullSafe(t["_uv"])
                base = base.join(t, cond, "left_anti")
            ms.set(union_all([base, updated.where(col(N) > 0)]))
