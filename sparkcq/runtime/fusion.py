"""Aggregate families: the aggregates of many queries over one input, computed as one.

Fifty queries that group one shared filtered window by the same keys and differ only in
their aggregates would each run an aggregation of a dozen Spark stages per cycle. A family
gathers every aggregate node over the same input (below its argument projection) with the
same group-key expressions and computes the union of their aggregate calls, each distinct
call once (``count(*)`` is shared by all), with one ``AggregateOperator`` over one projection
of the input. Each member then reads its own columns from the family's per-cycle result:
its changes are the rows where one of its own values (or the group's presence) changed, so
a member's output is exactly what its own operator would emit.

Members come and go at run time. A family whose call set changes is rebuilt between cycles:
the new operator starts from the input's current contents, given as changes just before the
seed instant; members that ran before drop those (they have seen that state), new members
take them as their start, so a late query's first results are complete. The previous
operator is kept until the rebuilt one has run, so a member's contents can still be read
in between. When the input cannot tell its contents, a running family is not rebuilt: a
new member starts a family of its own, and a dropped member's calls are computed until the
family empties.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructField, StructType

from sparkcq.aggregates.user import UserAggregate
from sparkcq.model.columns import D, T, family_key
from sparkcq.plan.nodes import AggCall, Aggregate, EdgeKind, PlanNode, Project, project_sql
from sparkcq.runtime.frames import Runtime, Slice, SqlViews, col, q, union_all
from sparkcq.runtime.operators.aggregate import AggregateOperator
from sparkcq.runtime.operators.base import CycleContext, Operator, as_changes_at
from sparkcq.runtime.transaction import CycleParticipant

FusionKey = tuple[PlanNode, tuple[str, ...]]
# function, argument expression, DISTINCT, user aggregate
CallKey = tuple[str, str | None, bool, UserAggregate | None]


def split_aggregate(node: Aggregate) -> tuple[PlanNode, dict[str, str], StructType]:
    """The input below an aggregate's argument projection, the projection's expressions by
    column name (SQL over that input) and its output schema.
    """
    child = node.child
    if isinstance(child, Project) and child.child.kind is EdgeKind.RELATION:
        return child.child, {n: e.sql for n, e in child.exprs}, child.schema
    return child, {f.name: q(f.name) for f in child.schema.fields}, child.schema


def fusion_key(node: PlanNode) -> FusionKey | None:
    """What aggregates must share to be fused: input and group-key expressions."""
    if not isinstance(node, Aggregate) or node.child.kind is not EdgeKind.RELATION:
        return None
    base, exprs, _schema = split_aggregate(node)
    return base, tuple(exprs[k] for k in node.keys)


@dataclass
class StableNames:
    """Stable names of the family's projected arguments and calls: a name is never reused,
    so members keep their columns when the family is rebuilt.
    """

    # argument SQL -> column; a user aggregate's argument ("uda", SQL) has a column of its
    # own, so evaluating a built-in's argument for one query never feeds another's user code
    args: dict[str | tuple[str, str], str] = field(default_factory=dict)
    calls: dict[CallKey, str] = field(default_factory=dict)  # call -> column
    made: int = 0

    def keep(self, args: set[str | tuple[str, str]], calls: set[CallKey]) -> None:
        """Forget the names of arguments and calls no member uses any more."""
        self.args = {a: n for a, n in self.args.items() if a in args}
        self.calls = {c: n for c, n in self.calls.items() if c in calls}

    def name(self, table: dict, key: object, prefix: str) -> str:  # noqa: ANN001
        if key not in table:
            table[key] = f"{prefix}{self.made}"
            self.made += 1
        return table[key]


class AggregateFamily(CycleParticipant):
    """The fused aggregates over one input and key list; see the module docstring."""

    def __init__(self, key: FusionKey, rt: Runtime):
        self.base, self.key_sqls = key
        self.rt = rt
        self.members: dict[Aggregate, list[tuple[str, str]]] = {}  # output col -> family col
        self.names = StableNames()
        self.arg_types: dict[str, DataType] = {}
        self.op: AggregateOperator | None = None
        self.progress: FamilyProgress = FamilyProgress()

    @property
    def previous(self) -> AggregateOperator | None:
        """The operator that ran before a rebuild, until the rebuilt one has run."""
        return self.progress.previous

    @property
    def fresh(self) -> frozenset[Aggregate]:
        """The members that have not run yet."""
        return self.progress.fresh

    @property
    def needs_seed(self) -> bool:
        """Whether the (rebuilt) operator starts from the input's contents next cycle."""
        return self.progress.needs_seed

    # -- membership (between cycles) ---------------------------------------------------------
    @property
    def has_run(self) -> bool:
        """Whether the family holds state a rebuild would have to carry over."""
        return self.previous is not None or (self.op is not None and self.op.position is not None)

    def add(self, node: Aggregate) -> None:
        """Take ``node`` in; it starts from the family's input contents at the next cycle."""
        self.members = {**self.members, node: []}
        self.progress = replace(self.progress, fresh=self.fresh | {node})
        self.rebuild()

    def remove(self, node: Aggregate, rebuild: bool) -> None:
        """Let ``node`` go; ``rebuild`` drops its calls (needs the input's contents)."""
        self.members = {m: c for m, c in self.members.items() if m != node}
        self.progress = replace(self.progress, fresh=self.fresh - {node})
        if not self.members:
            self.release()
        elif rebuild:
            self.rebuild()

    def rebuild(self) -> None:
        """A new operator over the union of the members' calls, seeded at its first cycle."""
        key_cols = [family_key(i) for i in range(len(self.key_sqls))]
        exprs = dict(zip(key_cols, self.key_sqls, strict=True))
        fields: dict[str, StructField] = {}
        calls: dict[str, AggCall] = {}
        out_fields: dict[str, StructField] = {}
        used_args: set[str | tuple[str, str]] = set()
        used_calls: set[CallKey] = set()
        for node in self.members:
            _base, node_exprs, node_schema = split_aggregate(node)
            in_types = {f.name: f.dataType for f in node_schema.fields}
            out_types = {f.name: f for f in node.schema.fields}
            for k, kc in zip(node.keys, key_cols, strict=True):
                fields[kc] = StructField(kc, in_types[k])
                out_fields[kc] = StructField(kc, out_types[k].dataType)
            columns = [(k, kc) for k, kc in zip(node.keys, key_cols, strict=True)]
            for call in node.aggs:
                arg_sql = node_exprs[call.arg] if call.arg is not None else None
                arg_col = None
                if arg_sql is not None:
                    arg_key = ("uda", arg_sql) if call.uda is not None else arg_sql
                    arg_col = self.names.name(self.names.args, arg_key, "_f")
                    used_args.add(arg_key)
                    exprs[arg_col] = arg_sql
                    fields[arg_col] = StructField(arg_col, in_types[call.arg])  # type: ignore[index]
                    self.arg_types[arg_sql] = in_types[call.arg]  # type: ignore[index]
                ckey = (call.func, arg_sql, call.distinct, call.uda)
                used_calls.add(ckey)
                name = self.names.name(self.names.calls, ckey, "_c")
                calls[name] = AggCall(call.func, arg_col, call.distinct, name, call.uda)
                out_fields[name] = StructField(name, out_types[call.name].dataType)
            self.members[node] = [(c, dict(columns).get(c) or _call_column(node, c, node_exprs,
                                                                           self.names))
                                  for c in [f.name for f in node.schema.fields]]
        self.names.keep(used_args, used_calls)
        project = project_sql(self.base, exprs.items(), StructType(list(fields.values())))
        node = Aggregate(project, tuple(key_cols), tuple(calls.values()),
                         StructType([*[out_fields[k] for k in key_cols],
                                     *[out_fields[c] for c in calls]]))
        previous = self.previous
        if self.op is not None:
            if previous is None and self.op.position is not None:
                previous = self.op  # read until the new operator has run
            else:
                self.op.release()
        self.op = AggregateOperator(node, self.rt)
        self.progress = replace(self.progress, previous=previous, needs_seed=True)

    def release(self) -> None:
        """Free every state the family holds."""
        for op in (self.op, self.previous):
            if op is not None:
                op.release()
        self.op = None
        self.progress = replace(self.progress, previous=None)

    def operators(self) -> list[Operator]:
        """The physical operators whose state the family holds (for transactions, metrics)."""
        return [op for op in (self.op, self.previous) if op is not None]

    def cycle_parts(self) -> tuple[CycleParticipant, ...]:  # noqa: D102
        return tuple(self.operators())

    # -- the cycle ---------------------------------------------------------------------------
    def evaluate(self, base: Slice, cycle: CycleContext) -> FamilyRun:
        """Per (group, instant) of the cycle: the values of every call, computed once for
        all members (kept in ``cycle.evaluations``).

        When ``cycle.only`` names some nodes, only those members' arguments are evaluated
        (the others read NULL), to find which query fails without others' expressions
        failing it (such a cycle is never committed).
        """
        done = cycle.evaluations.get(id(self))
        if done is not None:
            return done  # type: ignore[no-any-return]
        run = self.compute(base, cycle)
        cycle.evaluations[id(self)] = run
        return run

    def compute(self, base: Slice, cycle: CycleContext) -> FamilyRun:
        """What ``evaluate`` returns, computed."""
        assert self.op is not None and isinstance(self.op.node, Aggregate)
        proj = self.op.node.child
        assert isinstance(proj, Project)
        live, active = None, cycle.only
        seed = cycle.family_starts.get(id(self)) if self.needs_seed else None
        if active is not None and not set(self.members) <= active:
            calls = {a.name: a.arg for a in self.op.node.aggs}
            live = {calls[c] for m in active if m in self.members
                    for _out, c in self.members[m] if calls.get(c) is not None}
        cols = []
        for name, e in proj.exprs:
            sql = e.sql
            if live is not None and name.startswith("_f") and name not in live:
                dtype = self.arg_types[sql].simpleString()
                sql = f"CAST(NULL AS {dtype})"
            cols.append(F.expr(sql).alias(name))
        seed_at = None if seed is None else seed.at
        if seed_at is not None and base.hi <= seed_at:
            # the base has not passed the seed's position: the rebuilt operator starts a
            # cycle later (see ``Start``); nothing changed for anyone this cycle
            return FamilyRun(Slice(None, base.lo, base.hi), seed_at, waits=True)
        inp = base.df
        if seed is not None and seed.df is not None:
            inp = union_all([seed.df.withColumn(T, F.lit(seed.at - 1).cast("long")), inp])
        got = self.op.evaluate(Slice(None if inp is None else inp.select(*cols, col(T), col(D)),
                                     base.lo, base.hi))
        return FamilyRun(got, seed_at)

    def finish_cycle(self, run: FamilyRun | None) -> None:
        """The cycle was built: members have run, the seed is spent, the previous operator
        is no longer needed (unless the seed still waits: then all stays for next cycle).
        """
        if run is None or run.waits:
            return
        if self.previous is not None:
            self.previous.release()
        self.progress = FamilyProgress()

    def resumed(self) -> None:
        """State was restored from a checkpoint: its operator carries on as it was."""

    def seeded_from(self) -> PlanNode | None:
        """The input a rebuilt family starts from this cycle (its contents), or None."""
        return self.base if self.needs_seed else None

    def as_sliced(self) -> None:
        """Not a sliced family: its records come from its result's changes."""
        return None

    def as_fused(self) -> AggregateFamily:
        """Itself: its records are its result's changes (``fused_outputs.tail_changes``)."""
        return self


@dataclass(frozen=True)
class FamilyProgress:
    """What a family keeps between cycles on the driver, besides its operators' own."""

    previous: AggregateOperator | None = None  # the running one, until a rebuilt op has run
    fresh: frozenset[Aggregate] = frozenset()  # members that have not run yet
    needs_seed: bool = False  # the (rebuilt) operator starts from the input's contents


@dataclass(frozen=True)
class FamilyRun:
    """A family's evaluation in one cycle, which every member reads."""

    run: Slice  # per (group, instant): every call's value before and after it
    seed_at: int | None = None  # the instant the operator started from its input's contents
    waits: bool = False  # the seed is not due: the operator starts next cycle


def _call_column(node: Aggregate, name: str, exprs: dict[str, str], names: StableNames) -> str:
    call = next(a for a in node.aggs if a.name == name)
    arg_sql = exprs[call.arg] if call.arg is not None else None
    return names.calls[(call.func, arg_sql, call.distinct, call.uda)]


class FamilyMemberOperator(Operator):
    """One query's aggregate node, answered from its family's per-cycle evaluation."""

    family: AggregateFamily

    def __init__(self, node: Aggregate, family: AggregateFamily):
        super().__init__(node, family.rt)
        self.family = family
        self.views = SqlViews(family.rt.spark, "member")

    def cycle_parts(self) -> tuple[CycleParticipant, ...]:  # noqa: D102
        return (self.family,)

    @property
    def state_rows(self) -> int:
        """The rows of the family's state this member shares (counted once in totals)."""
        return sum(op.state_rows for op in self.family.operators())

    @property
    def live_instances(self) -> int | None:
        """The family's user aggregate instances of this member's calls."""
        node = self.node
        assert isinstance(node, Aggregate)
        if not any(a.uda for a in node.aggs):
            return None
        op = self.family.previous or self.family.op
        if op is None or op.instances is None:
            return 0
        return op.instances.live_instances_of({src for _out, src in self.family.members[node]})

    def input_nodes(self) -> tuple[PlanNode, ...]:
        """The family's input: the family evaluates it once for all members."""
        return (self.family.base,)

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        return self.output(self.family.evaluate(inputs[0], cycle))

    def pass_unread(self, inputs: list[Slice], cycle: CycleContext) -> Slice:
        """The family is evaluated (its result feeds fused query outputs); the member's
        own changes are not built.
        """
        run = self.family.evaluate(inputs[0], cycle).run
        return Slice(None, run.lo, run.hi)

    def output(self, evaluation: FamilyRun) -> Slice:
        """The member's changes: rows where one of its values or the group's presence
        changed.
        """
        run = evaluation.run
        if run.df is None:
            return run
        fam = self.family
        assert fam.op is not None
        node = self.node
        assert isinstance(node, Aggregate)
        text = fam.op.output_sql(fam.members[node], evaluation.seed_at, node in fam.fresh)
        return Slice(self.views.sql(text, run=run.df), run.lo, run.hi)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The member's current rows, from the family's state (the running operator's)."""
        fam = self.family
        op = fam.previous if fam.previous is not None else fam.op
        assert op is not None and isinstance(self.node, Aggregate)
        groups = op.groups.get()
        if groups is None:
            return None
        columns = fam.members[self.node]
        picked = groups.select(*[col(src).alias(out) for out, src in columns])
        return as_changes_at(picked, [out for out, _src in columns], None, at)
