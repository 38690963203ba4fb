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

from collections.abc import Sequence
from weakref import WeakKeyDictionary

from py4j.java_gateway import JavaObject
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from sparkcq.runtime.jvm_classes import prototype
from sparkcq.runtime.size_estimates import SizeEstimates

# the frames made here, each with the keeper that made it (which frees their batches)
_MADE: WeakKeyDictionary[DataFrame, JavaObject] = WeakKeyDictionary()
_FREED_PER_CALL = 8  # frames ``CycleCheckpoint.free`` takes in one call


def columnar_batches_id(df: DataFrame) -> int | None:
    """The id of the RDD of batches behind ``df`` (the one that holds its blocks), if
    ``ColumnarCheckpoints`` made it.
    """
    keeper = _MADE.get(df)
    return None if keeper is None else int(keeper.batchesId(df._jdf))


def free_columnar(frames: Sequence[DataFrame]) -> list[DataFrame]:
    """Drop the batches of ``frames`` (no wait for them to go), eight in one call into the
    JVM; returns the frames ``ColumnarCheckpoints`` did not make (or freed already).
    """
    others: list[DataFrame] = []
    by_keeper: dict[int, tuple[JavaObject, list[JavaObject]]] = {}
    for df in frames:
        keeper = _MADE.pop(df, None)
        if keeper is None:
            others.append(df)
        else:
            by_keeper.setdefault(id(keeper), (keeper, []))[1].append(df._jdf)
    for keeper, made in by_keeper.values():
        for i in range(0, len(made), _FREED_PER_CALL):
            chunk = made[i:i + _FREED_PER_CALL]
            keeper.free(*chunk, *[None] * (_FREED_PER_CALL - len(chunk)))
    return others


class ColumnarCheckpoints:
    """Makes a session's cycle checkpoints, each in one call into the JVM
    (``runtime/java/CycleCheckpoint.java``, which also explains how a kept frame's order
    is named by its own columns).
    """

    def __init__(self, spark: SparkSession, estimates: SizeEstimates):
        self.spark = spark
        self.keeper = prototype(spark, "CycleCheckpoint").create(
            spark._jsparkSession, estimates.unknown, estimates.one_byte)
        # frames made since the last ``settle``
        self.unsettled: list[DataFrame] = []

    def checkpoint(self, df: DataFrame, small: bool) -> DataFrame | None:
        """``df`` kept once the commit computes it, planned as one byte if ``small`` (a
        small cycle's) or as Spark estimates its plan; None if Spark plans it adaptively (a
        session of the user's), whose plan runs its stages as it is executed: a checkpoint
        of Spark's then.
        """
        made = self.keeper.keep(df._jdf, small)
        if made is None:
            return None
        kept = ClassicDataFrame(made, self.spark)
        _MADE[kept] = self.keeper
        self.unsettled.append(kept)
        return kept

    def settle(self) -> None:
        """After a commit: the frames made since the last one whose batches it computed
        take their partitions from those batches from now on, not from the plans that made
        them (``CycleCheckpoint.settle``), so a task reading a frame kept for hundreds of
        cycles carries no partition of the cycles before it.
        """
        made, self.unsettled = self.unsettled, []
        for i in range(0, len(made), _FREED_PER_CALL):
            chunk = [df._jdf for df in made[i:i + _FREED_PER_CALL]]
            self.keeper.settle(*chunk, *[None] * (_FREED_PER_CALL - len(chunk)))

    def forget_unsettled(self) -> None:
        """A failed cycle's frames are freed: nothing of them to settle."""
        self.unsettled.clear()
