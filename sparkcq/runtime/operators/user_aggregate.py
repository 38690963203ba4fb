"""User aggregate calls of an aggregate operator: instances kept in Spark state.

The operator's state holds one row per live group: its count of live elements and, per
call, the pickled instance (``_i0, _i1, ...``). Each cycle the groups the input touches
are cogrouped by the group hash with their state rows and handed through Arrow to the
Python workers (``cogroup(...).applyInArrow`` running ``aggregates/runner.py``), which
replay the changes on the instances and return every call's value after each instant
and the instances after the cycle. The instances never travel to the driver; groups the
cycle does not touch are not read by Python at all.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from sparkcq.aggregates.runner import CallSpec, InstanceRunner, cogroup_function, value_check
from sparkcq.model.columns import GROUP_HASH, NEW, D, N, T
from sparkcq.plan.nodes import AggCall
from sparkcq.runtime.frames import SqlViews, StateFrame, q
from sparkcq.runtime.operators.base import Operator
from sparkcq.runtime.operators.multiset import GroupKeys


def value_column(call: AggCall) -> str:
    """The per-instant value column of a user aggregate call (joined onto the deltas)."""
    return f"_uda{call.name}"


class UserAggregateInstances:
    """The instances of one operator's user aggregate calls and the Spark steps that run
    them (state frames of the operator's); see the module docstring.
    """

    def __init__(self, op: Operator, keys: list[str], key_fields: list[StructField],
                 calls: list[AggCall]):
        self.rt = op.rt
        self.k = GroupKeys(keys)
        self.calls = calls
        instance_fields = [StructField(f"_i{j}", BinaryType()) for j in range(len(calls))]
        schema = StructType([*key_fields, StructField(N, LongType()), *instance_fields])
        self.frame: StateFrame = op.state(schema, "instances", GROUP_HASH)
        self.inputs: list[str] = []  # SQL of the columns the workers read
        specs = []
        for j, c in enumerate(calls):
            uda = c.uda
            assert uda is not None and c.arg is not None
            if len(uda.arg_types) == 1:
                picks = [q(c.arg)]
            else:
                picks = [f"{q(c.arg)}.a{i}" for i in range(len(uda.arg_types))]
            names = tuple(f"_u{j}_{i}" for i in range(len(picks)))
            self.inputs += [f"{p} AS {q(n)}" for p, n in zip(picks, names, strict=True)]
            declared = uda.return_type.simpleString().upper()
            specs.append(CallSpec(uda.name, uda.origin, uda.cls, names, value_column(c),
                                  f"_i{j}", value_check(to_arrow_type(uda.return_type,
                                                                      timezone="UTC"),
                                                        uda.name, declared)))
        self.out_schema = StructType([
            *key_fields, StructField(T, LongType()), StructField(N, LongType()),
            *[StructField(value_column(c), c.uda.return_type) for c in calls],  # type: ignore[union-attr]
            *instance_fields])
        self.runner = InstanceRunner(tuple(keys), tuple(specs),
                                     to_arrow_schema(self.out_schema, timezone="UTC"))

    @property
    def live_instances(self) -> int:
        """Instances held now: one per call and live group."""
        return self.live_instances_of({c.name for c in self.calls})

    def live_instances_of(self, calls: set[str]) -> int:
        """Instances held now for the calls (by output column) in ``calls``."""
        return self.frame.rows * sum(1 for c in self.calls if c.name in calls)

    def evaluate(self, views: SqlViews, src: DataFrame) -> tuple[DataFrame, DataFrame]:
        """Per (group, instant) of the cycle's changes ``src`` (partitioned by the group
        hash): the value of every call after the instant; and the workers' output rows,
        which ``update`` keeps.
        """
        k = self.k
        inp = views.sql(f"SELECT {k.cols()}{', '.join(self.inputs)}, {q(T)}, {q(D)} "
                        "FROM {src}", src=src)
        st = self.frame.get()
        if st is None:
            touched = self.rt.empty(self.frame.schema)
        else:
            touched = views.sql(f"SELECT s.* FROM {{st}} s LEFT SEMI JOIN {{src}} i "
                                f"ON s.{q(GROUP_HASH)} = i.{q(GROUP_HASH)}", st=st, src=src)
        out = (inp.groupBy(GROUP_HASH).cogroup(touched.groupBy(GROUP_HASH))
               .applyInArrow(cogroup_function(self.runner), self.out_schema))
        out = self.rt.cache_for_cycle(out)
        values = ", ".join(q(value_column(c)) for c in self.calls)
        return views.sql(f"SELECT {k.cols()}{q(T)}, {values} FROM {{out}} "
                         f"WHERE {q(T)} IS NOT NULL", out=out), out

    def update(self, views: SqlViews, out: DataFrame) -> None:
        """Keep the instances after the cycle from ``evaluate``'s output rows ``out``:
        touched groups take their new row (or leave, emptied), the others keep theirs; the
        state is read once (see ``Multiset.update``).
        """
        k = self.k
        kept = [N, *[f"_i{j}" for j in range(len(self.calls))]]
        cols = ", ".join(map(q, kept))
        rows = f"SELECT {k.cols()}{cols}, 1 AS {q(NEW)} FROM {{out}} WHERE {q(T)} IS NULL"
        bound = {"out": out}
        st = self.frame.get()
        if st is not None:
            rows = k.distributed(f"{rows} UNION ALL SELECT {k.cols()}{cols}, 0 FROM {{st}}",
                                 self.rt.single)
            bound["st"] = st
        picked = ", ".join(f"max_by({q(c)}, {q(NEW)}) AS {q(c)}" for c in kept)
        self.frame.set(views.sql(
            f"SELECT {k.cols()}{picked} FROM ({rows}) GROUP BY {k.group()} "
            f"HAVING max_by({q(N)}, {q(NEW)}) > 0", **bound))

