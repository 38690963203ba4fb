"""A table: a static relation, valid at all times, whose rows the catalog may replace.

A table has no time of its own. When the catalog replaces its rows while queries read it,
the cycle that takes the new rows (``TableOperator.switch``, inside the cycle's
transaction) is the moment of the change; each join reading the table maps that moment to
event time at its own input's position (``JoinOperator.replace_table``, docs/semantics.md
"Tables that change").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pyspark.sql import DataFrame

from sparkcq.model.time import TIME_MAX, TIME_MIN
from sparkcq.plan.nodes import TableScan
from sparkcq.runtime.frames import Runtime, Slice
from sparkcq.runtime.operators.base import CycleContext, Operator, Progress


@dataclass(frozen=True)
class TableRows:
    """A table's rows as the catalog holds them, and their version: how many times rows
    were registered under the table's name before these (0: the first).
    """

    df: DataFrame
    version: int = 0
    # False for a frame that is already a materialised snapshot (a PostgreSQL table's local
    # checkpoint, which the catalog owns and frees): caching it again would hold its rows
    # twice, and unpersisting it would not free them
    cache: bool = True


@dataclass(frozen=True)
class TableProgress(Progress):
    """The rows a table operator serves, and those a switch replaced (a cycle that
    switches changes them, and a failed one puts the old rows back).
    """

    served: TableRows | None = None  # with ``df`` cached when ``cache`` says so
    # the rows a switch replaced; freed when the next cycle starts (the switch is then
    # committed: nothing reads them any more)
    retired: TableRows | None = None
    # the served rows coalesced into one partition, built the first time a cycle run in
    # one partition reads them (see ``TableOperator.step``)
    one_partition: DataFrame | None = None


class TableOperator(Operator):
    """A static table: the same cached DataFrame every cycle, until a cycle switches it to
    the rows that replaced it in the catalog.
    """

    def __init__(self, node: TableScan, rt: Runtime, rows: TableRows):
        super().__init__(node, rt)
        self.progress: TableProgress = TableProgress(served=_cached(rows))

    @property
    def rows(self) -> TableRows:
        """The rows it serves."""
        assert self.progress.served is not None
        return self.progress.served

    @property
    def df(self) -> DataFrame:
        """The rows it serves, as a (cached) DataFrame."""
        return self.rows.df

    @property
    def version(self) -> int:
        """The version of the rows it serves."""
        return self.rows.version

    @property
    def retired(self) -> DataFrame | None:
        """The rows the last switch replaced, until they are freed."""
        return None if self.progress.retired is None else self.progress.retired.df

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:
        """The rows it serves; in a cycle run in one partition, coalesced into one: a join
        of a one-partition stream with them then needs no exchange (Spark reshuffles both
        sides of a join unless both are in one partition). Coalesced once per version.
        """
        if not self.rt.single:
            return Slice(self.df, TIME_MIN, TIME_MAX)
        single = self.progress.one_partition
        if single is None:
            single = self.df.coalesce(1)
            self.progress = replace(self.progress, one_partition=single)
        return Slice(single, TIME_MIN, TIME_MAX)

    def serves(self, rows: TableRows) -> bool:
        """Whether it serves ``rows`` already (no switch due)."""
        return rows.df is self.df

    def switch(self, rows: TableRows) -> None:
        """Serve ``rows`` from this cycle on (the old ones are freed once it committed)."""
        self.retire()
        self.progress = replace(self.progress, served=_cached(rows), retired=self.rows,
                                one_partition=None)

    def retire(self) -> None:
        """Free the rows an earlier, committed switch replaced."""
        retired = self.progress.retired
        if retired is not None:
            if retired.cache:
                retired.df.unpersist()
            self.progress = replace(self.progress, retired=None)

    def release(self) -> None:  # noqa: D102
        self.retire()
        if self.rows.cache:
            self.df.unpersist()


def _cached(rows: TableRows) -> TableRows:
    """``rows`` as a table operator serves them: persisted (``persist`` returns the frame
    itself), unless they are a snapshot already.
    """
    if rows.cache:
        rows.df.persist()
    return rows
