"""How many partitions a cycle runs in: one for a small cycle, the configured number else.

A cycle of a few thousand rows costs what its plan is, not what its data is: every
exchange is a stage, every partition of every frame a task. In one partition Spark plans
no exchange at all (a single partition satisfies every distribution an operator requires),
so such a cycle is a handful of tasks. A large cycle needs every core, so above a row
threshold a cycle runs hash-partitioned as before. Results are the same either way; only
the cost differs.

The threshold has hysteresis, so input hovering around it does not switch the layout of
every state frame each cycle:

    SmallCycles(enter=20_000, leave=50_000)
    rows per cycle:   1,000  30,000  60,000  30,000  10,000
    one partition:    yes    yes     no      no      yes

A cycle also reads its operators' state, and in one partition one core reads all of it: a
join of 60 s windows at 10,000 rows/s took 30,000-46,000 rows a cycle in one partition over
1.8 million rows of state, and the first cycle above ``leave`` then rewrote all of them
partitioned (7.3 s, 2026-12-05). So a cycle runs in one partition only while the state
held is at most ``held`` rows: the switch to partitioned comes while the state is small.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from sparkcq.errors import PlanError


@dataclass(frozen=True)
class SmallCycles:
    """Which cycles run in one partition, by the rows of input they take."""

    enter: int = 20_000  # a cycle taking at most this many rows runs in one partition ...
    leave: int = 50_000  # ... and so does every next one, until one takes more than this
    # a cycle of at most this many rows interprets its expressions (``INTERPRETED_CONF``)
    # and takes the other small-cycle settings, in one partition or (forced) not: above it,
    # the work per row pays for compiled code
    interpret: int = 10_000
    # ... and only while the operators hold at most this many rows of state
    held: int = 250_000

    @classmethod
    def never(cls) -> SmallCycles:
        """Every cycle hash-partitioned (tests of the partitioned layout)."""
        return cls(-1, -1)

    @classmethod
    def always(cls) -> SmallCycles:
        """Every cycle in one partition."""
        big = 1 << 62
        return cls(big, big, held=big)

    def single(self, rows: int, was_single: bool, held: int = 0) -> bool:
        """Whether a cycle taking ``rows`` rows runs in one partition, after a cycle that
        did (``was_single``) or did not, its operators holding ``held`` rows of state.
        """
        if held > self.held:
            return False
        return rows <= self.enter or (was_single and rows <= self.leave)

    def uncounted_rows(self, last: int, estimate: int | None) -> int:
        """The rows to decide by for a stream no one counted (files): as many as it took
        ``last`` cycle, or its source's ``estimate`` when that is more than a small cycle
        may take (a backlog of files taken in a stream's first cycle once ran on one core).

        A lower estimate leaves the layout to the last cycle: NEXMark q5's cycles of 46,000
        rows ran 2.2 times as fast in one partition as hash-partitioned (2026-12-01),
        which a first cycle taken for large would have lost for good.
        """
        if estimate is not None and estimate > self.leave:
            return max(last, estimate)
        return last

    def interpreted(self, rows: int) -> bool:
        """Whether a cycle taking ``rows`` rows interprets its expressions rather than
        compiling them, in either layout: a partitioned cycle of few rows (``never``, or
        an ``enter`` below ``interpret``) compiles as many classes as a single one would.
        """
        return rows <= self.interpret

    @classmethod
    def parse(cls, text: str) -> SmallCycles:
        """``auto``, ``single``, ``partitioned`` or ``ENTER[,LEAVE]`` rows (an environment
        variable's or a command line's value).
        """
        word = text.strip().lower()
        if word in ("", "auto"):
            return cls()
        if word == "single":
            return cls.always()
        if word == "partitioned":
            return cls.never()
        enter, _, leave = word.partition(",")
        try:
            low = int(enter)
            return cls(low, int(leave) if leave else max(low, 2 * low))
        except ValueError:
            msg = (f"small cycles {text!r}: expected 'auto', 'single', 'partitioned' or "
                   "a row count ENTER[,LEAVE]")
            raise PlanError(msg) from None


# What a small cycle changes in the session besides its shuffle partitions. Its plans are new
# more often than its data is large: whole-stage code generation writes and compiles a Java
# class per stage of every plan it has not seen (a cycle of thirteen new queries compiled
# 200-900 classes, 5-10 ms each, and each new class is compiled again by the JVM's JIT),
# which a few thousand rows never pay back. The same holds for the code Spark generates for
# each projection, predicate and ordering of an operator outside whole-stage code (the
# factory mode): interpreted, a cycle compiles no class at all, and the JIT compiles
# Spark's interpreters once for every plan; but a sliding window of 20,000 rows interpreted
# took 1.7 times its compiled task time, so only the smallest cycles interpret
# (``INTERPRETED_CONF``). And a broadcast join computes its small side in
# a Spark job of its own before the cycle's job, while in one partition a shuffled join
# needs no exchange at all. And Spark joins single-partition sides as they are only up to
# ``spark.sql.maxSinglePartitionBytes`` of estimated size, above which it shuffles each
# side into one partition: a small cycle's sides are small whatever Spark estimates (the
# product of a join's sides' estimates; runtime/size_estimates.py). (The frames any cycle
# keeps are stored as plain columnar batches: runtime/java/CycleCheckpoint.java.)
SMALL_CYCLE_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.maxSinglePartitionBytes": str(2**62),
}
# What the smallest cycles change besides (``SmallCycles.interpret``).
INTERPRETED_CONF = {"spark.sql.codegen.factoryMode": "NO_CODEGEN"}
# Every setting a cycle may change, whose session values are put back after it.
CHANGED_KEYS = (*SMALL_CYCLE_CONF, *INTERPRETED_CONF)


def large_cycle_conf(spark: SparkSession) -> dict[str, str]:
    """The session's own values of what a small cycle changes (``SMALL_CYCLE_CONF``), for
    large cycles to put back: remembered in the session the first time sparkcq sees it, so
    an engine made while another's small cycle holds the session does not take that
    cycle's values for the session's.
    """
    values = {}
    for key in CHANGED_KEYS:
        kept = f"spark.sparkcq.large.{key}"
        value = spark.conf.get(kept, None)
        if value is None:
            value = spark.conf.get(key)
            assert value is not None
            spark.conf.set(kept, value)
        values[key] = value
    return values
