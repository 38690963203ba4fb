"""A user table function over its input's chunks, its instances kept in Spark state.

The input's rows entering at one instant are a chunk: a chunk window's rows at its cut
point, or a stream's events of one event time. Only instants below the safe time reach
the operator, so each chunk arrives whole, in one cycle. Per cycle the chunks' rows are
grouped by the ``PARTITION BY`` hash, cogrouped with the keys' pickled instances and handed
through Arrow to the Python workers (``table_functions/runner.py``), which call the
function chunk by chunk and return the rows it emitted and the instances after the cycle::

    CUT EVERY 2 ROWS over rows at 1, 2, 4, 7, 9 (one key), a function emitting each
    chunk's row count:  chunk {1, 2} cut at 4 -> (2) at 4;  chunk {4, 7} cut at 9 -> (2) at 9

Keys without rows in the cycle are not read by Python at all; their state rows stay as
they are. The state is part of the cycle's transaction and of checkpoints like every
operator's state frame, so a failed cycle or a restart finds each instance as it was after
the last committed cycle.
"""

from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from sparkcq.model.columns import GROUP_HASH, D, T
from sparkcq.plan.nodes import TableFunction
from sparkcq.runtime.frames import Runtime, Slice, col
from sparkcq.runtime.operators.base import CycleContext, Operator
from sparkcq.runtime.operators.multiset import group_hash
from sparkcq.table_functions.runner import INSTANCE, ChunkRunner, cogroup_function


class TableFunctionOperator(Operator):
    """Runs one ``TableFunction`` node's instances; see the module docstring."""

    def __init__(self, node: TableFunction, rt: Runtime):
        super().__init__(node, rt)
        self.fn = node
        child = node.child.schema
        self.inputs = [f.name for f in child.fields]
        key_fields = [child[k] for k in node.partition_by]
        hash_field = StructField(GROUP_HASH, LongType(), False)
        self.frame = self.state(StructType([hash_field, *key_fields,
                                            StructField(INSTANCE, BinaryType())]),
                                "instances", GROUP_HASH)
        self.out_schema = StructType([
            hash_field, *key_fields, StructField(T, LongType()),
            *node.function.columns.fields, StructField(INSTANCE, BinaryType())])
        self.runner = ChunkRunner(
            node.function.name, node.function.origin, node.function.cls, node.args,
            node.partition_by, tuple(self.inputs), node.order,
            to_arrow_schema(self.out_schema, timezone="UTC"),
            tuple(f.dataType.simpleString().upper() for f in node.function.columns.fields))

    def await_starts(self, seeded: frozenset[int]) -> None:
        """Nothing to start from: a query reading a table function started above a running
        chunk window sees the chunks cut from its first cycle on, as a query over a stream
        sees the events from its start (a relation's contents are no chunk).
        """

    @property
    def live_instances(self) -> int:
        """Instances held now: one per key that has had a chunk."""
        return self.frame.rows

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        if inp.df is None:
            return Slice(None, inp.lo, inp.hi)
        keys = list(self.fn.partition_by)
        entering = inp.df.where(col(D) > 0)
        rows = entering.withColumn(D, F.explode(F.array_repeat(F.lit(1), col(D).cast("int"))))
        rows = rows.select(group_hash(keys).alias(GROUP_HASH), *[col(c) for c in self.inputs],
                           col(T))
        state = self.frame.get()
        if state is None:
            touched = self.rt.empty(self.frame.schema)
        else:
            touched = state.join(rows.select(GROUP_HASH).distinct(), GROUP_HASH, "left_semi")
        out = (rows.groupBy(GROUP_HASH).cogroup(touched.groupBy(GROUP_HASH))
               .applyInArrow(cogroup_function(self.runner), self.out_schema))
        out = self.rt.cache_for_cycle(out)
        kept = [GROUP_HASH, *keys, INSTANCE]
        new_state = out.where(col(T).isNull()).select(*kept)
        if state is not None:
            untouched = state.join(new_state.select(GROUP_HASH).distinct(), GROUP_HASH,
                                   "left_anti")
            new_state = new_state.unionByName(untouched.select(*kept))
        self.frame.set(new_state)
        names = [*keys, *[f.name for f in self.fn.function.columns.fields]]
        emitted = out.where(col(T).isNotNull()).select(
            *[col(c) for c in names], col(T), F.lit(1).cast("long").alias(D))
        return Slice(emitted, inp.lo, inp.hi)
