"""A cycle's checkpoints, kept as columnar batches and made without a SQL execution.

Every frame a cycle keeps (an operator's new state, a frame read twice in the cycle) is a
lazy local checkpoint: a leaf for the plans that read it, materialised by the cycle's commit,
its lineage cut once computed. ``Dataset.localCheckpoint`` adds to the planning every such
frame needs a SQL execution of its own (an explain string and a plan description posted to
Spark's listeners) and a closure copying the plan's rows, which Spark's closure cleaner
checks by parsing the class file of ``Dataset``, hundreds of kilobytes, every time: 61% of
a checkpoint's time after planning, sampled with Java Flight Recorder. Timed alone
(2026-11-30, 2 cores, warm), a small grouped frame took 16.5 ms as a lazy local checkpoint
and 7.8 ms to plan at all.

Here the frame's plan builds its RDD, Spark's own columnar cache format copies its rows
into batches (what ``Dataset.cache`` stores; no closure to clean), and those batches are
locally checkpointed: the commit that first computes them keeps them and cuts their
lineage, as a local checkpoint's rows. The frame is a ``LogicalRDD`` over the batches read
back as rows, with the plan's partitioning and order; ``free_columnar`` drops the batches.
In a small cycle it is planned as one byte, as all that cycle's frames are
(``size_estimates``); in a large one at Spark's estimate of the plan it replaces, so joins
over it are chosen as they would be over that plan (a frame of millions of rows planned as
one byte would be broadcast).

    a cycle's frame:   Aggregate <- Filter <- batch       (planned, its RDD built)
    kept as:           LogicalRDD [k, s] <- rows of <- columnar batches (local checkpoint)
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from py4j.java_gateway import JavaObject
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from sparkcq.runtime.size_estimates import SizeEstimates

# the batches behind each such frame, for ``free_columnar``: the frame's own RDD is the rows
# read from them, which hold no blocks
_BATCHES: WeakKeyDictionary[DataFrame, JavaObject] = WeakKeyDictionary()


def columnar_batches(df: DataFrame) -> JavaObject | None:
    """The RDD of batches behind ``df`` (the one that holds its blocks), if
    ``ColumnarCheckpoints`` made it.
    """
    return _BATCHES.get(df)


def free_columnar(df: DataFrame) -> bool:
    """Drop the batches of ``df`` (no wait for them to go); False if it is not a frame
    ``ColumnarCheckpoints`` made (or they were dropped already).
    """
    batches = _BATCHES.pop(df, None)
    if batches is None:
        return False
    batches.unpersist(False)
    return True


class ColumnarCheckpoints:
    """Makes a session's cycle checkpoints; JVM handles looked up once."""

    def __init__(self, spark: SparkSession, estimates: SizeEstimates):
        jvm = spark._jvm
        assert jvm is not None
        self.spark = spark
        self.session = spark._jsparkSession
        execution = jvm.org.apache.spark.sql.execution
        self.logical_rdd = execution.LogicalRDD
        self.serializer = execution.columnar.DefaultCachedBatchSerializer()
        self.level = jvm.org.apache.spark.storage.StorageLevel.MEMORY_AND_DISK()
        self.none = estimates.unknown
        self.one_byte = estimates.one_byte
        self.some = jvm.scala.Some
        # the session's live configuration (one object, read when the batches are built)
        self.conf = self.session.sessionState().conf()
        self.of_rows = jvm.org.apache.spark.sql.classic.Dataset.ofRows
        self.java_map = jvm.java.util.HashMap
        self.java_list = jvm.java.util.ArrayList
        self.as_scala = jvm.scala.jdk.javaapi.CollectionConverters.asScala
        self.to_seq = jvm.org.apache.spark.api.python.PythonUtils.toSeq
        self.no_qualifier = self.to_seq(jvm.java.util.ArrayList())

    def checkpoint(self, df: DataFrame, small: bool) -> DataFrame | None:
        """``df`` kept once the commit computes it, planned as one byte if ``small`` (a
        small cycle's) or as Spark estimates its plan; None if Spark plans it adaptively (a
        session of the user's), whose plan runs its stages as it is executed: a checkpoint
        of Spark's then.
        """
        execution = df._jdf.queryExecution()
        plan = execution.executedPlan()
        if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
            return None
        output, conf = plan.output(), self.conf
        batches = self.serializer.convertInternalRowToCachedBatch(
            plan.execute(), output, self.level, conf)
        batches.localCheckpoint()
        rows = self.serializer.convertCachedBatchToInternalRow(batches, output, output, conf)
        partitioning, ordering = self.over_output(output, plan.outputPartitioning(),
                                                  plan.outputOrdering())
        relation = self.logical_rdd(output, rows, partitioning,
                                    ordering, False, self.none, self.session,
                                    self.one_byte if small else self.some(
                                        execution.optimizedPlan().stats()),
                                    self.none, True)
        # a leaf of resolved attributes: marked analysed, it skips the analyser's ~2 ms
        relation.setAnalyzed()
        kept = ClassicDataFrame(self.of_rows(self.session, relation), self.spark)
        _BATCHES[kept] = batches
        return kept

    def over_output(self, output: JavaObject, partitioning: JavaObject,
                    ordering: JavaObject) -> tuple[JavaObject, JavaObject]:
        """``partitioning`` and ``ordering`` over the very attributes of ``output``.

        A plan's order may name its columns with a subquery's qualifier (``SORT BY k`` over
        ``(...) AS c`` orders by ``c.k``) that its output does not carry. The frame's
        relation keeps both as given, and when a plan reads it twice, Spark renames the
        second reading's columns by a map of its output: the order, naming no column of
        that map, stays on the old names, and every join over the second reading sorted
        it again (the four probes of the demo's window join sorted both of its sides,
        every cycle). Each such column is put in as the output has it.
        """
        hashed = "#" in partitioning.toString()  # by columns (not one or no partition)
        if ordering.isEmpty() and not hashed:
            return partitioning, ordering
        same = self.java_map()
        for n in range(ordering.size()):
            self._named_as_output(ordering.apply(n), output, same)
        if hashed:
            self._named_as_output(partitioning, output, same)
        if same.isEmpty():
            return partitioning, ordering
        renamed = self.as_scala(same)
        orders = self.java_list()
        for n in range(ordering.size()):
            orders.add(ordering.apply(n).transform(renamed))
        if hashed:
            partitioning = partitioning.transform(renamed)
        return partitioning, self.to_seq(orders)

    def _named_as_output(self, expression: JavaObject, output: JavaObject,
                         same: JavaObject) -> None:
        """Map each column ``expression`` names with another qualifier to ``output``'s."""
        columns = expression.references().toSeq()
        for n in range(columns.size()):
            column = columns.apply(n)
            at = output.indexOf(column.withQualifier(self.no_qualifier))
            if at >= 0 and not output.apply(at).equals(column):
                same.put(column, output.apply(at))
