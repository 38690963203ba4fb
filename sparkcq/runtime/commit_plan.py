"""The commit's union built as Catalyst plan nodes, analysed once as a whole.

Every PySpark DataFrame call has Spark analyse the plan it makes before it returns: about
1.5 ms for one small node on a warm JVM (2 cores, 2026-12-01), more in a JVM's first
minutes, whatever the node. A commit's parts are such calls: each observed frame three
(``observe``, a filter that drops its rows, the part's id), each query's records one; a
quiet cycle of the demo made 22 of them, none read before the whole union is. Here each
part is a node whose expressions are left unresolved (``Project``, ``Filter``,
``CollectMetrics`` over the part's frame, itself analysed), and the union of all of them
is analysed once:

    before:  observe -> analyse, where -> analyse, select -> analyse  (x 6 parts)
             union -> analyse
    now:     Project <- Filter <- CollectMetrics <- frame  (x 6, no analysis)
             Repartition <- Union -> analyse (once)

Measured alone (warm), a chain of four such nodes analysed once took 1.95 ms, built as
four DataFrame calls 6 ms. An observed part's three nodes are built by one call into the
JVM (``CycleFrames.observed``), not the seven a node and its lists each took from Python.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from py4j.java_gateway import JavaObject
from pyspark.errors.exceptions.captured import capture_sql_exception
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from sparkcq.runtime.jvm_classes import session_instance

# a CollectMetrics node's id, as a DataFrame's ``observe`` gives its frame's: unique names
# are what Spark checks (one name, one definition per plan)
_IDS = itertools.count(1 << 40)
_METRICS = 4  # aggregates ``CycleFrames.observed`` takes (more: ``observedAll``)


class CommitPlan:
    """Builds one commit's parts as plan nodes; JVM handles looked up once per session."""

    def __init__(self, spark: SparkSession):
        jvm = spark._jvm
        assert jvm is not None
        self.spark = spark
        self.session = spark._jsparkSession
        logical = jvm.org.apache.spark.sql.catalyst.plans.logical
        self.project_node = logical.Project
        self.frames = session_instance(spark, "CycleFrames")
        self.union_node = logical.Union
        self.repartition_node = logical.Repartition
        self.to_seq = jvm.org.apache.spark.api.python.PythonUtils.toSeq
        # called straight into the JVM: its errors become PySpark's (an AnalysisException
        # with Spark's message), as a DataFrame call's do
        self.of_rows = capture_sql_exception(jvm.org.apache.spark.sql.classic.Dataset.ofRows)
        self._expressions: dict[int, tuple[Column, JavaObject]] = {}

    def expression(self, column: Column) -> JavaObject:
        """``column``'s Catalyst expression, unresolved; converted once for a ``Column``
        the caller keeps (the commit's ids and paddings are the same every cycle).
        """
        known = self._expressions.get(id(column))
        if known is not None and known[0] is column:
            return known[1]
        converted = self.session.expression(column._jc)
        if len(self._expressions) > 4096:
            self._expressions.clear()
        self._expressions[id(column)] = (column, converted)
        return converted

    def projected(self, df: DataFrame, columns: Sequence[Column]) -> JavaObject:
        """``df.select(*columns)`` as a node (each column named: an alias or a column)."""
        return self.project_node(self.to_seq([self.expression(c) for c in columns]),
                                 df._jdf.logicalPlan())

    def observed(self, df: DataFrame, name: str, metrics: Sequence[Column],
                 keep: Column, column: Column) -> JavaObject:
        """A part whose tasks compute ``metrics`` (named aggregates, read back under
        ``name``) over ``df`` as they read it, and keep the rows where ``keep`` holds,
        projected to ``column``: one call into the JVM for up to four metrics.
        """
        given = [self.expression(m) for m in metrics]
        if len(given) > _METRICS:
            return self.frames.observedAll(df._jdf, name, next(_IDS), self.expression(keep),
                                           self.expression(column), self.to_seq(given))
        return self.frames.observed(df._jdf, name, next(_IDS), self.expression(keep),
                                    self.expression(column),
                                    *given, *[None] * (_METRICS - len(given)))

    def observed_state(self, df: DataFrame, name: str, rows: Column, earliest: Column,
                       none: Column, time: str, keep: Column, column: Column) -> JavaObject:
        """``observed`` with aggregates ``rows`` and ``earliest``, or ``rows`` and ``none``
        when ``df`` has no column ``time`` (looked at in the JVM, in the same call).
        """
        return self.frames.observedState(
            df._jdf, name, next(_IDS), self.expression(keep), self.expression(column),
            self.expression(rows), self.expression(earliest), self.expression(none), time)

    def union(self, parts: Sequence[JavaObject | DataFrame], partitions: int) -> DataFrame:
        """One frame of all ``parts`` (nodes, or frames), by column name (a column some
        lack is NULL on their rows), in at most ``partitions`` partitions: analysed once.
        The parts' columns of one name must have one type (Spark's n-ary union by name
        does not widen them).
        """
        plans = [p._jdf.logicalPlan() if isinstance(p, DataFrame) else p for p in parts]
        union = plans[0] if len(plans) == 1 else self.union_node(self.to_seq(plans), True,
                                                                  True)
        return self.frame(self.repartition_node(partitions, False, union))

    def frame(self, plan: JavaObject) -> DataFrame:
        """The frame of one node, analysed on its own."""
        return ClassicDataFrame(self.of_rows(self.session, plan), self.spark)
