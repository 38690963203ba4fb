"""A table: a static relation, valid at all times, whose rows the catalog may replace.

A table has no time of its own. When the catalog replaces its rows while queries read it,
the cycle that takes the new rows (``TableOperator.switch``, inside the cycle's
transaction) is the moment of the change; each join reading the table maps that moment to
event time at its own input's position (``JoinOperator.replace_table``, docs/semantics.md
"Tables that change").
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame

from sparkcq.model.time import TIME_MAX, TIME_MIN
from sparkcq.plan.nodes import TableScan
from sparkcq.runtime.frames import Runtime, Slice
from sparkcq.runtime.operators.base import Operator


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


class TableOperator(Operator):
    """A static table: the same cached DataFrame every cycle, until a cycle switches it to
    the rows that replaced it in the catalog.
    """

    # a cycle that switches rebinds them, and a failed one puts the old rows back
    CYCLE_FIELDS = (*Operator.CYCLE_FIELDS, "df", "version", "retired", "cache",
                    "cache_retired")

    def __init__(self, node: TableScan, rt: Runtime, rows: TableRows):
        super().__init__(node, rt)
        self.cache = rows.cache
        self.df = rows.df.persist() if rows.cache else rows.df
        self.version = rows.version  # of the rows it serves
        # the rows a switch replaced; freed when the next cycle starts (the switch is then
        # committed: nothing reads them any more)
        self.retired: DataFrame | None = None
        self.cache_retired = True

    def step(self, inputs: list[Slice]) -> Slice:  # noqa: D102
        return Slice(self.df, TIME_MIN, TIME_MAX)

    def serves(self, rows: TableRows) -> bool:
        """Whether it serves ``rows`` already (no switch due)."""
        return rows.df is self.df

    def switch(self, rows: TableRows) -> None:
        """Serve ``rows`` from this cycle on (the old ones are freed once it committed)."""
        self.retire()
        self.retired, self.df, self.version = (
            self.df, rows.df.persist() if rows.cache else rows.df, rows.version)
        self.cache_retired, self.cache = self.cache, rows.cache

    def retire(self) -> None:
        """Free the rows an earlier, committed switch replaced."""
        if self.retired is not None:
            if self.cache_retired:
                self.retired.unpersist()
            self.retired = None

    def release(self) -> None:  # noqa: D102
        self.retire()
        if self.cache:
            self.df.unpersist()
