"""What sources deliver to a cycle: each stream's batch, kept by the cycle driver until a
cycle that took it commits (a failed cycle runs again on the same input).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from sparkcq.model.rows import RowError
from sparkcq.plan.nodes import PlanNode, StreamScan
from sparkcq.runtime.frames import union_all


@dataclass(frozen=True)
class SourceBatch:
    """What a source delivered for one cycle: rows, an explicit watermark, end of input,
    and rows it refused at the door (each becomes a dead letter).
    """

    df: DataFrame | None = None
    watermark: int | None = None
    end: bool = False
    rejected: tuple[RowError, ...] = ()
    # the rows of ``df`` on the driver, when the source has them there (pushed rows): the
    # scan then checks them without a Spark job of its own
    arrow: pa.Table | None = None
    # the source's positions [first, after) the batch covers, when it numbers its input (a
    # feed's spool), so that a checkpoint can describe the batch without copying it
    span: tuple[int, int] | None = None
    # how many rows ``df`` holds, when the source knows without Spark (a generator's ids):
    # whether the cycle is small is decided from it rather than from the last cycle's rows
    rows: int | None = None
    # about how many, when the source can only estimate them (files: ``io/files.py``): a
    # cycle is taken for large by it, never for small (``SmallCycles.uncounted_rows``)
    rows_estimate: int | None = None


def merge_batches(kept: SourceBatch, new: SourceBatch) -> SourceBatch:
    """A batch a failed cycle kept, followed by the source's next one."""
    if kept.df is None and kept.watermark is None and not kept.end and not kept.rejected:
        return new
    df = union_all([kept.df, new.df])
    marks = [w for w in (kept.watermark, new.watermark) if w is not None]
    arrow = None
    if (kept.df is None or kept.arrow is not None) and (new.df is None or new.arrow is not None):
        arrow = pa.concat_tables([t for t in (kept.arrow, new.arrow) if t is not None]) \
            if df is not None else None
    return SourceBatch(df, max(marks) if marks else None, kept.end or new.end,
                       kept.rejected + new.rejected, arrow,
                       rows=_total(kept, new, lambda b: b.rows),
                       rows_estimate=_total(kept, new, lambda b: b.rows_estimate))


def _total(kept: SourceBatch, new: SourceBatch,
           count: Callable[[SourceBatch], int | None]) -> int | None:
    """The sum of ``count`` over the batches that hold rows; None if one of them has none."""
    counts = [count(b) for b in (kept, new) if b.df is not None]
    return None if None in counts else sum(c or 0 for c in counts)


def project_batch(batch: SourceBatch, schema: StructType) -> SourceBatch:
    """``batch`` with the columns of an earlier ``schema`` of its stream: a column of the
    same name and type is kept, another is NULL; rows refused at the door stay with the
    stream's current scan (one dead letter each).
    """
    if batch.df is None:
        return SourceBatch(None, batch.watermark, batch.end)
    have = {f.name.lower(): f for f in batch.df.schema.fields}
    cols = []
    for f in schema.fields:
        same = have.get(f.name.lower())
        cols.append(F.col(same.name).alias(f.name) if same is not None
                    and same.dataType == f.dataType else F.lit(None).cast(f.dataType).alias(f.name))
    extra = [c for c in batch.df.columns if c.startswith("_")]  # the arrival watermark
    df = batch.df.select(*cols, *extra)
    arrow = None
    if batch.arrow is not None:
        arrays, names = [], []
        by_lower = {n.lower(): n for n in batch.arrow.column_names}
        for f, field in zip(schema.fields, to_arrow_schema(schema, timezone="UTC"),
                            strict=True):
            same = have.get(f.name.lower())
            if same is not None and same.dataType == f.dataType:
                arrays.append(batch.arrow.column(by_lower[f.name.lower()]))
            else:
                arrays.append(pa.nulls(batch.arrow.num_rows, field.type))
            names.append(f.name)
        for name in extra:
            arrays.append(batch.arrow.column(name))
            names.append(name)
        arrow = pa.Table.from_arrays(arrays, names=names)
    return SourceBatch(df, batch.watermark, batch.end, (), arrow, batch.span, batch.rows,
                       batch.rows_estimate)


NO_BATCH = SourceBatch()


def idle(batch: SourceBatch, watermark: int) -> bool:
    """Whether ``batch`` brings nothing to a stream at ``watermark``: no rows, refusals or
    end, no higher watermark.
    """
    return (batch.df is None and not batch.end and not batch.rejected
            and (batch.watermark is None or batch.watermark <= watermark))


@dataclass(frozen=True)
class CycleInput:
    """What one cycle takes: its number, the batches by the scan node that reads each
    (a stream's current scan, and the scans of its earlier schemas that running queries
    still read), and the z of each shedding join that adapts it (``runtime/throttles.py``;
    logged with the input, so that a redone cycle sheds as it did).
    """

    number: int = 0
    batches: Mapping[StreamScan, SourceBatch] = field(default_factory=dict)
    throttles: Mapping[PlanNode, float] = field(default_factory=dict)

    def batch(self, scan: StreamScan) -> SourceBatch:
        """The batch of ``scan`` (an empty one when its source brought nothing)."""
        return self.batches.get(scan, NO_BATCH)

    def rows_of(self, scan: PlanNode) -> int | None:
        """The rows of ``scan``'s batch, when the driver has them (pushed rows) or the
        source counted them (a generator); None when only Spark knows.
        """
        batch = self.batches.get(scan, NO_BATCH) if isinstance(scan, StreamScan) else None
        if batch is None:
            return None
        if batch.df is None:
            return 0
        return batch.arrow.num_rows if batch.arrow is not None else batch.rows

    def estimated_rows_of(self, scan: PlanNode) -> int | None:
        """About how many rows ``scan``'s batch holds, when its source estimated them."""
        batch = self.batches.get(scan, NO_BATCH) if isinstance(scan, StreamScan) else None
        return None if batch is None or batch.df is None else batch.rows_estimate

    def then(self, later: CycleInput) -> CycleInput:
        """The batches of this input followed by those of ``later``, under ``later``'s
        number (a failed cycle's input, and the next poll).
        """
        merged = dict(self.batches)
        for scan, batch in later.batches.items():
            merged[scan] = merge_batches(merged[scan], batch) if scan in merged else batch
        return CycleInput(later.number, merged, later.throttles or self.throttles)
