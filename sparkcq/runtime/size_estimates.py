"""The size Spark's planner assumes for a checkpointed frame, so a small cycle plans no
exchange.

Spark estimates a join's size as the product of its sides' sizes, and a local checkpoint
keeps the estimate of the plan it was made from. A state made each cycle by joining the
new changes with the previous state therefore carries an estimate that multiplies cycle
after cycle: a grouped aggregate's state was estimated at 10^43 bytes after six cycles of
20 rows, 10^92 after eight. In a small cycle every frame is one partition, and Spark joins
two single-partition sides as they are only if each is estimated at most
``spark.sql.maxSinglePartitionBytes``; otherwise it shuffles each side (into one
partition), a stage per side: that aggregate's cycle ran 11 stages where one would do.

So a frame checkpointed in a small cycle is planned as one byte, the size of Spark's own
one-row relation. The estimate only tells the planner what the cycle's layout decided
already, that the frame is read by one task; it gives no broadcast (a small cycle plans
none) and no reordering (cost-based optimisation is off). A frame made in a small cycle and
read by a large one is planned with no estimate at all (Spark's default, the largest size),
as a checkpoint's multiplied estimate planned it before: a large cycle then broadcasts no
state.

For example, ``SELECT ... FROM {d} d LEFT JOIN {st} b ON ...`` over a small cycle's
checkpointed deltas ``d`` and state ``st``:

    estimated from their plans (10^15 and 10^43 bytes):  Exchange <- d, Exchange <- st
    estimated at one byte each:                          the join reads d and st as they are
"""

from __future__ import annotations

from py4j.java_gateway import JavaObject
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame


class SizeEstimates:
    """Re-estimates local checkpoints; the JVM handles are looked up once per session."""

    def __init__(self, spark: SparkSession):
        jvm = spark._jvm
        assert jvm is not None
        self.spark = spark
        logical = jvm.org.apache.spark.sql.catalyst.plans.logical
        # a Statistics of one byte made in the JVM: a Scala BigInt passed through py4j
        # comes back as a Python int
        self.one_byte = jvm.scala.Some(logical.OneRowRelation().computeStats())
        self.unknown = getattr(getattr(jvm.scala, "None$"), "MODULE$")
        self.of_rows = jvm.org.apache.spark.sql.classic.Dataset.ofRows

    def planned_small(self, checkpoint: DataFrame) -> DataFrame:
        """``checkpoint`` (a ``localCheckpoint``) planned as one byte; same rows, same RDD."""
        return self._estimated(checkpoint, self.one_byte)

    def planned_unknown(self, checkpoint: DataFrame) -> DataFrame:
        """``checkpoint`` planned with Spark's default estimate (the largest size)."""
        return self._estimated(checkpoint, self.unknown)

    def _estimated(self, checkpoint: DataFrame, stats: JavaObject) -> DataFrame:
        plan = checkpoint._jdf.logicalPlan()  # a LogicalRDD over the checkpoint's RDD
        rest = plan.otherCopyArgs()  # the session, the estimate, constraints, a flag
        copied = plan.copy(plan.output(), plan.rdd(), plan.outputPartitioning(),
                           plan.outputOrdering(), plan.isStreaming(), plan.stream(),
                           rest.apply(0), stats, rest.apply(2), rest.apply(3))
        copied.setAnalyzed()  # a resolved leaf, as ``ColumnarCheckpoints`` makes it
        return ClassicDataFrame(self.of_rows(self.spark._jsparkSession, copied), self.spark)
