"""Grouped aggregation over a relation, incremental and exact.

Per group and per instant at which the group's input changes, the operator computes the
aggregate of the snapshot with Spark SQL window functions: running sums of the changes on
top of the group's state. The result relation changes exactly at those instants: -1 for the
old row, +1 for the new one. count/sum/avg are invertible and kept as running accumulators;
min and max keep the live rows of their arguments per group, count(DISTINCT) the live
values of its argument (``multiset.py``), so they stay correct when elements leave; user
aggregates keep an instance per group in Spark state and see every element enter and leave
(``user_aggregate.py``). DOUBLE sums accumulate in DECIMAL(38, 10): exact under
retraction, so results do not depend on how input was cut into cycles.

The SQL text is built once per operator; each cycle binds its views and runs it.
"""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import Column, DataFrame
from pyspark.sql.types import (
    DataType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from sparkcq.model.columns import AID, FROM, GROUP_HASH, TO, D, N, T
from sparkcq.model.types import INTEGRAL_TYPES
from sparkcq.plan.nodes import AggCall, Aggregate
from sparkcq.runtime.frames import Runtime, Slice, SqlViews, col, no_broadcast, q
from sparkcq.runtime.operators.base import CycleContext, Operator, as_changes_at
from sparkcq.runtime.operators.multiset import GroupKeys, Multiset, group_hash
from sparkcq.runtime.operators.user_aggregate import UserAggregateInstances, value_column

EXACT_DOUBLE = DecimalType(38, 10)


def accumulator_type(arg: DataType) -> DataType:
    """The exact type sums of ``arg`` accumulate in."""
    if isinstance(arg, INTEGRAL_TYPES):
        return LongType()
    if isinstance(arg, DecimalType):
        return DecimalType(38, arg.scale)
    return EXACT_DOUBLE


def exact_double_parts(x: str) -> tuple[str, str]:
    """The DOUBLE ``x`` as it is in DECIMAL(38, 10), as two BIGINTs: its whole units and its
    ten-billionths (0 to 10^10 - 1), whose sums are the decimal sum exactly, in long
    arithmetic: a DECIMAL(38, 10) is an object per value in Spark's aggregation buffers,
    shuffles and caches, a BIGINT eight bytes.

    Spark casts a double to a decimal through its decimal text (``Double.toString``) rounded
    half up to 10 decimals. For ``|x| < 4096`` that text times 10^10 lies within 0.009 of
    the double ``p = x * 10^10`` (half a unit in the last place of x, times 10^10, plus that
    of p), so where ``p`` is more than 0.02 from a half both round to the same integer,
    ``floor(p + 0.5)``, with no decimal made; any other value (a near tie, a large one, NaN)
    takes the cast itself. A value of 2^63 or more fails the query, as a sum beyond the
    decimal's 28 integer digits did.

        1.25 -> (1, 2500000000)    -0.1 -> (-1, 9000000000)    0.12345678905 -> (0, 1234567891)
    """
    scaled = f"({x}) * 10000000000D"
    fast = (f"abs({x}) < 4096D AND abs({scaled} - floor({scaled}) - 0.5D) > 0.02D")
    units = f"floor({scaled} + 0.5D)"
    exact = f"CAST({x} AS DECIMAL(30, 10))"
    fraction = (f"CASE WHEN {fast} THEN pmod({units}, 10000000000) ELSE "
              f"CAST(CAST({exact} - floor({exact}) AS DECIMAL(11, 10)) * 10000000000 "
              f"AS BIGINT) END")
    whole = (f"CASE WHEN {fast} THEN ({units} - pmod({units}, 10000000000)) div 10000000000 "
             f"ELSE CAST(floor({exact}) AS BIGINT) END")
    return whole, fraction


def exact_double_total(whole: str, fraction: str) -> str:
    """The DECIMAL(38, 10) sum of values given by ``exact_double_parts``, from the sums of
    their parts (each within 27 digits, so their sum is exact, see ``exact_sum_sql``).
    """
    return exact_sum_sql(f"CAST({whole} AS DECIMAL(19, 0))",
                         f"CAST({fraction} AS DECIMAL(19, 0)) * CAST(1E-10 AS DECIMAL(10, 10))",
                         EXACT_DOUBLE)


def exact_double_value(whole: str, fraction: str) -> str:
    """The DOUBLE that ``exact_double_total`` casts to, in long arithmetic where it can be.

    The total's unscaled value is ``whole * 10^10 + fraction``. Below 2^52 it is a DOUBLE
    exactly, and so is 10^10, so one IEEE division gives the quotient correctly rounded,
    the DOUBLE the decimal's own conversion gives (Java's ``BigDecimal.doubleValue`` divides
    the same way there). A DECIMAL(38, 10) is a Java object per value: a per-event RANGE
    average spent about a tenth of its cycle making them. Larger totals take the decimal.
    """
    units = f"({whole} * 10000000000 + {fraction})"
    fast = (f"abs({whole}) < 450359 AND abs({fraction}) < 4000000000000000000 "
            f"AND abs({units}) < 4503599627370496")
    return (f"CASE WHEN {fast} THEN CAST({units} AS DOUBLE) / 10000000000D "
            f"ELSE CAST({exact_double_total(whole, fraction)} AS DOUBLE) END")


def times_change(arg: str, dtype: DataType) -> str:
    """``arg`` times the change's multiplicity ``_d``, in the accumulator type, exactly.

    A DECIMAL(38, s) times a BIGINT would need 59 digits, and Spark's decimal arithmetic
    then rounds the product to 6 decimals; a DECIMAL(27, s) times a DECIMAL(10, 0) needs 38
    (an argument beyond 10^17, or a multiplicity beyond 10^10, fails the query rather than
    losing digits).
    """
    acc = accumulator_type(dtype)
    if not isinstance(acc, DecimalType):
        return f"CAST({arg} AS {acc.simpleString()}) * {q(D)}"
    return (f"CAST(CAST({arg} AS DECIMAL(27, {acc.scale})) * CAST({q(D)} AS DECIMAL(10, 0)) "
            f"AS {acc.simpleString()})")


def exact_sum_sql(left: str, right: str, acc: DataType) -> str:
    """``left + right`` in the accumulator type without rounding: two DECIMAL(38, s) would
    need 39 digits, and Spark then drops a decimal; as DECIMAL(37, s) they fit.
    """
    if not isinstance(acc, DecimalType):
        return f"({left} + {right})"
    narrow = f"DECIMAL(37, {acc.scale})"
    return (f"CAST(CAST({left} AS {narrow}) + CAST({right} AS {narrow}) "
            f"AS {acc.simpleString()})")


def seed_time_sql(seed_at: int | None, fresh: bool) -> tuple[str, str]:
    """The instant of a run row as a view sees it, and a condition on it (`` AND ...``).

    ``seed_at``: the operator started this cycle from its input's contents, given as changes
    just before ``seed_at``; a ``fresh`` view takes them as its own start at ``seed_at``, a
    view that ran before drops them (it has seen that state already).
    """
    if seed_at is None:
        return f"{q(T)}", ""
    if fresh:
        return f"CASE WHEN {q(T)} < {seed_at} THEN CAST({seed_at} AS BIGINT) ELSE {q(T)} END", ""
    return f"{q(T)}", f" AND {q(T)} >= {seed_at}"


class AggregateOperator(Operator):
    """GROUP BY with count, count(DISTINCT), sum, avg, min, max and user aggregates over a
    relation.
    """

    def __init__(self, node: Aggregate, rt: Runtime):
        super().__init__(node, rt)
        self.views = SqlViews(rt.spark, "aggregate")
        self.keys = list(node.keys)
        self.k = GroupKeys(self.keys)
        self.aggs = list(node.aggs)
        child_types = {f.name: f.dataType for f in node.child.schema.fields}
        self.out_types = {f.name: f.dataType for f in node.schema.fields}
        self.arg_types = {a.name: child_types[a.arg] for a in self.aggs if a.arg}
        self.user_aggs = [a for a in self.aggs if a.uda is not None]
        self.extreme_aggs = [a for a in self.aggs if a.uda is None and a.func in ("min", "max")]
        self.distinct_aggs = [a for a in self.aggs if a.distinct]
        key_fields = [StructField(GROUP_HASH, LongType()),
                      *[f for f in node.schema.fields if f.name in self.keys]]
        fields = [*key_fields, StructField(N, LongType())]
        for a in self.aggs:
            if (a.func == "count" and a.arg is None) or a in self.extreme_aggs or a.uda:
                continue  # count(*) is _n; min and max come from the multiset
            fields.append(StructField(f"{a.name}_c", LongType()))
            if a.func in ("sum", "avg"):
                fields.append(StructField(f"{a.name}_s", accumulator_type(self.arg_types[a.name])))
        fields += [f for f in node.schema.fields if f.name not in self.keys]
        self.groups = self.state(StructType(fields), "groups", GROUP_HASH)
        self.multisets: dict[str, Multiset] = {}
        # min and max: one multiset of the live rows of all their arguments, so any number
        # of them costs one state row per distinct live row and the same few Spark stages
        extreme_args = list(dict.fromkeys(a.arg for a in self.extreme_aggs if a.arg))
        if extreme_args:
            frame = self.state(StructType([*key_fields,
                                           *[StructField(a, child_types[a]) for a in extreme_args],
                                           StructField(N, LongType())]), "live-rows",
                               GROUP_HASH)
            self.multisets["rows"] = Multiset.rows(frame, self.keys, extreme_args)
        # count(DISTINCT): the live values of every argument, one multiset per type, rows
        # (keys, argument, value, count)
        self.stacks: dict[str, list[str]] = {}
        for a in self.distinct_aggs:
            assert a.arg is not None
            args = self.stacks.setdefault(child_types[a.arg].simpleString(), [])
            if a.arg not in args:
                args.append(a.arg)
        for tname, args in self.stacks.items():
            frame = self.state(StructType([*key_fields, StructField(AID, StringType()),
                                           StructField("_v", child_types[args[0]]),
                                           StructField(N, LongType())]), f"values-{tname}",
                               GROUP_HASH)
            self.multisets[tname] = Multiset.stacked(frame, self.keys, args)
        self.instances = (UserAggregateInstances(self, self.keys, key_fields, self.user_aggs)
                          if self.user_aggs else None)

    @property
    def live_instances(self) -> int | None:
        """User aggregate instances held now (one per call and live group)."""
        return self.instances.live_instances if self.instances is not None else None

    # -- SQL text ----------------------------------------------------------------------------
    def deltas_sql(self) -> str:
        """Per (group, instant): the change in row count and in each accumulator."""
        cols = [f"sum({q(D)}) AS `_dn`"]
        for a in self.aggs:
            if a.arg is None or a.distinct or a.uda or a.func in ("min", "max"):
                continue
            arg = q(a.arg)
            cols.append(f"sum(CASE WHEN {arg} IS NOT NULL THEN {q(D)} ELSE 0 END) AS "
                        f"{q(a.name + '_dc')}")
            if a.func in ("sum", "avg"):
                acc = accumulator_type(self.arg_types[a.name]).simpleString()
                cols.append(f"coalesce(sum({times_change(arg, self.arg_types[a.name])}), "
                            f"CAST(0 AS {acc})) AS {q(a.name + '_ds')}")
        return (f"SELECT {self.k.cols()}{q(T)}, {', '.join(cols)} FROM {{inp}} "
                f"GROUP BY {self.k.group(q(T))}")

    def distinct_counts_sql(self, calls: list[AggCall]) -> str:
        """Per (group, instant): the change in the number of distinct values of each call."""
        flip = "CAST(`_na` > 0 AS BIGINT) - CAST(`_nb` > 0 AS BIGINT)"
        cols = ", ".join(f"sum(CASE WHEN {q(AID)} = '{a.arg}' THEN {flip} ELSE 0 END) AS "
                         f"{q(a.name + '_dc')}" for a in calls)
        return (f"SELECT {self.k.cols()}{q(T)}, {cols} FROM {{ch}} "
                f"GROUP BY {self.k.group(q(T))}")

    def extreme_sql(self, segments: str) -> str:
        """Min and max of every min/max call at each instant its group changed, over the
        live rows' ``segments`` (``Multiset.live_segments_sql``).
        """
        picks = ", ".join(f"{a.func}(s.{q(a.arg)}) AS {q('_ext' + a.name)}"  # type: ignore[arg-type]
                          for a in self.extreme_aggs)
        k = self.k
        return (f"WITH segs AS ({segments}), inst AS (SELECT DISTINCT {k.cols()}{q(T)} FROM {{d}}) "
                f"SELECT {no_broadcast('i')} {k.cols('i')}i.{q(T)}, {picks} "
                f"FROM inst i JOIN segs s ON "
                f"{k.on('i', 's')} AND (s.{q(FROM)} IS NULL OR s.{q(FROM)} <= i.{q(T)}) "
                f"AND (s.{q(TO)} IS NULL OR i.{q(T)} < s.{q(TO)}) WHERE s.`_cnt` > 0 "
                f"GROUP BY {k.group(f'i.{q(T)}', alias='i')}")

    def join_on_instant_sql(self, right_cols: list[str]) -> str:
        """Left join of the per-instant deltas with more per-instant columns."""
        picked = "".join(f", r.{q(c)}" for c in right_cols)
        return (f"SELECT {no_broadcast('r')} l.*{picked} FROM {{l}} l LEFT JOIN {{r}} r "
                f"ON {self.k.on('l', 'r')} AND l.{q(T)} = r.{q(T)}")

    def running_sql(self, with_base: bool, d_cols: set[str]) -> str:
        """Each (group, instant) with the aggregate values before and after the instant."""
        base = [f for f in self.groups.schema.fields if f.name not in (GROUP_HASH, *self.keys)]
        if with_base:
            picked = ", ".join(f"b.{q(f.name)} AS {q('_b' + f.name)}" for f in base)
            joined = (f"SELECT d.*, {picked} FROM {{d}} d LEFT JOIN {{st}} b "
                      f"ON {self.k.on('d', 'b')}")
        else:
            picked = ", ".join(f"CAST(NULL AS {f.dataType.simpleString()}) AS {q('_b' + f.name)}"
                               for f in base)
            joined = f"SELECT d.*, {picked} FROM {{d}} d"
        w = (f"OVER ({self.k.partition()}ORDER BY {q(T)} "
             "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)")
        lw = f"OVER ({self.k.partition()}ORDER BY {q(T)})"
        run = [f"coalesce(`_b_n`, CAST(0 AS BIGINT)) + sum(`_dn`) {w} AS {q(N)}",
               f"row_number() {lw} AS `_rn`"]
        values = []
        for a in self.aggs:
            name = a.name
            c, s = q(name + "_c"), q(name + "_s")
            if f"{name}_c" in self.groups.schema.fieldNames():
                if f"{name}_dc" in d_cols:
                    run.append(f"coalesce({q('_b' + name + '_c')}, CAST(0 AS BIGINT)) + "
                               f"sum(coalesce({q(name + '_dc')}, CAST(0 AS BIGINT))) {w} AS {c}")
                else:
                    run.append(f"coalesce({q('_b' + name + '_c')}, CAST(0 AS BIGINT)) AS {c}")
            if a.func in ("sum", "avg"):
                run.append(exact_sum_sql(f"coalesce({q('_b' + name + '_s')}, 0)",
                                         f"sum({q(name + '_ds')}) {w}",
                                         accumulator_type(self.arg_types[name])) + f" AS {s}")
            out = self.out_types[name].simpleString()
            if a.func == "count":
                value = f"{q(N)}" if a.arg is None else c
            elif a.func == "sum":
                value = f"CASE WHEN {c} > 0 THEN CAST({s} AS {out}) END"
            elif a.func == "avg" and isinstance(self.out_types[name], DoubleType):
                value = f"CASE WHEN {c} > 0 THEN CAST({s} AS DOUBLE) / CAST({c} AS DOUBLE) END"
            elif a.func == "avg":
                value = f"CASE WHEN {c} > 0 THEN CAST({s} / {c} AS {out}) END"
            elif a.uda is not None:
                value = q(value_column(a))
            else:
                value = q("_ext" + name)
            values.append(f"CASE WHEN {q(N)} > 0 THEN CAST({value} AS {out}) END AS {q(name)}")
        prev = [f"CASE WHEN `_rn` = 1 THEN {q('_b' + a.name)} "
                f"ELSE lag({q(a.name)}) {lw} END AS {q('_p' + a.name)}" for a in self.aggs]
        # only what the state and the outputs read: the cycle caches this relation whole
        kept = ", ".join(q(f.name) for f in self.groups.schema.fields)
        return (f"SELECT {kept}, {q(T)}, {''.join(p + ', ' for p in prev)}{q(N)} - `_dn` AS `_pn` "
                f"FROM (SELECT {''.join(v + ', ' for v in values)}r.* FROM ("
                f"SELECT j.*, {', '.join(run)} FROM ({joined}) j) r) v")

    def output_sql(self, columns: list[tuple[str, str]] | None = None,
                   seed_at: int | None = None, fresh: bool = False) -> str:
        """-1 for a group's old row and +1 for its new row where the row changed.

        ``columns`` picks (output name, column of this operator) pairs: a view of some of the
        aggregates, as a member of a fused family sees it (all columns by default).
        ``seed_at`` and ``fresh``: see ``seed_time_sql``.
        """
        if columns is None:
            columns = [(f.name, f.name) for f in self.node.schema.fields]
        changed = self.changed_sql([src for _out, src in columns if src not in self.keys])
        old = ", ".join(f"{q(src)} AS {q(out)}" if src in self.keys else
                        f"{q('_p' + src)} AS {q(out)}" for out, src in columns)
        new = ", ".join(f"{q(src)} AS {q(out)}" for out, src in columns)
        t, when = seed_time_sql(seed_at, fresh)
        t = f"{t} AS {q(T)}"
        return (f"SELECT {old}, {t}, CAST(-1 AS BIGINT) AS {q(D)} FROM {{run}} "
                f"WHERE ({changed}) AND `_pn` > 0{when} UNION ALL "
                f"SELECT {new}, {t}, CAST(1 AS BIGINT) AS {q(D)} FROM {{run}} "
                f"WHERE ({changed}) AND {q(N)} > 0{when}")

    def changed_sql(self, calls: list[str]) -> str:
        """Whether a run row changes the group's presence or one of the ``calls``' values."""
        return " OR ".join([f"(`_pn` > 0) <> ({q(N)} > 0)",
                            *[f"NOT ({q('_p' + c)} <=> {q(c)})" for c in calls]])

    # -- the cycle ---------------------------------------------------------------------------
    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        run = self.evaluate(inputs[0])
        if run.df is None:
            return run
        return Slice(self.views.sql(self.output_sql(), run=run.df), run.lo, run.hi)

    def evaluate(self, inp: Slice) -> Slice:
        """Each (group, instant) of the slice with every aggregate before and after it
        (cached for the cycle); updates the state; the operator then stands at ``hi``.
        """
        self.progress = replace(self.progress, position=inp.hi)
        if inp.df is None:
            return inp
        sql = self.views.sql
        src = self.rt.cache_for_cycle(self.rt.partition_by(
            inp.df.withColumn(GROUP_HASH, self.group_hash()), col(GROUP_HASH)))
        d = sql(self.deltas_sql(), inp=src)
        changes = {name: self.rt.cache_for_cycle(ms.changes(self.views, src))
                   for name, ms in self.multisets.items()}
        for tname, args in self.stacks.items():
            distinct = [a for a in self.distinct_aggs if a.arg in args]
            flips = sql(self.distinct_counts_sql(distinct), ch=changes[tname])
            d = sql(self.join_on_instant_sql([f"{a.name}_dc" for a in distinct]), l=d, r=flips)
        d = self.rt.cache_for_cycle(d)
        if "rows" in self.multisets:
            rows = self.multisets["rows"]
            views = {"ch": changes["rows"], "d": d}
            if rows.frame.get() is not None:
                views["ms"] = rows.frame.get()  # type: ignore[assignment]
            # cached: joined back onto d, the plan would read d twice (see Multiset.update)
            ext = self.rt.cache_for_cycle(sql(self.extreme_sql(rows.live_segments_sql()),
                                              **views))
            d = sql(self.join_on_instant_sql([f"_ext{a.name}" for a in self.extreme_aggs]),
                    l=d, r=ext)
        instance_rows = None
        if self.instances is not None:
            values, instance_rows = self.instances.evaluate(self.views, src)
            d = sql(self.join_on_instant_sql([value_column(a) for a in self.user_aggs]),
                    l=d, r=values)
        st = self.groups.get()
        views = {"d": d, "st": st} if st is not None else {"d": d}
        run = self.rt.cache_for_cycle(sql(self.running_sql(st is not None, set(d.columns)),
                                          **views))
        self.update_state(run, changes, instance_rows)
        return Slice(run, inp.lo, inp.hi)

    def group_hash(self) -> Column:
        """``_g`` of this aggregate's group keys (``multiset.group_hash``)."""
        return group_hash(self.keys)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """Each live group's current row (the state keeps only groups with elements)."""
        groups = self.groups.get()
        if groups is None:
            return None
        return as_changes_at(groups, [f.name for f in self.node.schema.fields], None, at)

    def update_state(self, run: DataFrame, changes: dict[str, DataFrame],
                     instance_rows: DataFrame | None) -> None:
        """Keep each touched group's values after its last instant, the others' as they
        were; drop emptied groups; keep the user aggregate instances the workers returned
        (``instance_rows``). ``run`` and the state are each read once (see
        ``Multiset.update``).
        """
        names = ", ".join(q(f.name) for f in self.groups.schema.fields)
        rows = f"SELECT {names}, {q(T)} FROM {{run}}"
        views = {"run": run}
        st = self.groups.get()
        if st is not None:
            rows = self.k.distributed(
                f"{rows} UNION ALL SELECT {names}, CAST(NULL AS BIGINT) FROM {{st}}",
                self.rt.single)
            views["st"] = st
        self.groups.set(self.views.sql(
            f"SELECT {names} FROM (SELECT *, row_number() OVER ({self.k.partition()}"
            f"ORDER BY {q(T)} DESC NULLS LAST) AS `_rk` FROM ({rows})) "
            f"WHERE `_rk` = 1 AND {q(N)} > 0",
            **views))
        for name, ch in changes.items():
            self.multisets[name].update(self.views, ch)
        if self.instances is not None:
            assert instance_rows is not None
            self.instances.update(self.views, instance_rows)
