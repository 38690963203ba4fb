"""One coalescing pass for the interval output of every query (DESIGN 3.1).

Turning a relation's changes into coalesced interval records takes four shuffles; done per
query, fifty queries cost two hundred stages a cycle. Here every query's changes are encoded
as (query id, row as JSON text) — value-equal rows have equal text — so one coalescer,
partitioned by (query, row), formats all queries together. The commit decodes each query's
records back to its column types in the same Spark action (``decode``).

JSON keeps values exactly: doubles print their shortest round-trip form, timestamps are
written with microseconds, decimals with their scale; a top-level ``-0.0`` is written as
``0.0`` as Spark's grouping treats them as one value (inside a struct or array it is not:
such a row may then coalesce as two value-equal elements). Types JSON cannot carry
(binary, maps with non-string keys, intervals) keep a formatter of their own
(``encodable``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    AtomicType,
    BinaryType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from sparkcq.model.columns import LAYER, OP, QID, ROW, TE, TS, D, T
from sparkcq.runtime.frames import Runtime, SqlViews, StateFrame, col, project, q, union_all
from sparkcq.runtime.operators.outputs import coalesce_changes
from sparkcq.runtime.saved_frames import FrameReader, FrameWriter
from sparkcq.runtime.transaction import CycleParticipant

JSON_OPTIONS = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
    "ignoreNullFields": "true",
}


def encodable(dtype: DataType) -> bool:
    """Whether values of ``dtype`` survive the trip through JSON unchanged."""
    if isinstance(dtype, StructType):
        return all(encodable(f.dataType) for f in dtype.fields)
    if isinstance(dtype, ArrayType):
        return encodable(dtype.elementType)
    return isinstance(dtype, AtomicType) and not isinstance(dtype, BinaryType)


def normalised_sql(sql: str, dtype: DataType) -> str:
    """``sql`` with ``-0.0`` as ``0.0``: Spark's grouping holds them equal, so must their text."""
    if isinstance(dtype, DoubleType | FloatType):
        return f"CASE WHEN ({sql}) = 0 THEN CAST(0 AS {dtype.simpleString()}) ELSE ({sql}) END"
    return sql


def _literal(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def json_options_sql() -> str:
    """``JSON_OPTIONS`` as a SQL map for ``to_json``."""
    pairs = ", ".join(f"{_literal(k)}, {_literal(v)}" for k, v in JSON_OPTIONS.items())
    return f"map({pairs})"


def encode(changes: DataFrame, schema: StructType, qid: int) -> DataFrame:
    """A query's changes as (query id, row text, instant, change)."""
    row = ", ".join(f"{normalised_sql(q(f.name), f.dataType)} AS {q(f.name)}"
                    for f in schema.fields)
    return project(changes, f"CAST({qid} AS INT) AS {QID}",
                   f"to_json(struct({row}), {json_options_sql()}) AS {ROW}", q(T), q(D))


@dataclass
class OutputShape:
    """Queries whose records have one output schema: the commit decodes them as one column.

    Fifty dashboards with the same columns then cost one JSON parser and one collected
    column, not fifty mostly NULL ones.
    """

    schema: StructType
    timestamps: bool
    names: dict[int, str] = field(default_factory=dict)  # query id -> query name

    @property
    def column(self) -> str:
        """The name of this shape's column in the decoded records."""
        return f"_shape{min(self.names)}"


def output_shapes(queries: Iterable[tuple[int, str, StructType, bool]]) -> list[OutputShape]:
    """Queries (id, name, schema, timestamps) grouped by output schema."""
    shapes: dict[tuple[str, bool], OutputShape] = {}
    for qid, name, schema, timestamps in queries:
        shape = shapes.setdefault((schema.json(), timestamps), OutputShape(schema, timestamps))
        shape.names[qid] = name
    return list(shapes.values())


def decode(records: DataFrame, shapes: list[OutputShape]) -> DataFrame:
    """The formatter's records, one struct column per shape (row ``_r``, ``_ts``, ``_te``,
    ``_op``, ``_qid``), NULL on the rows of other shapes' queries.
    """
    columns = []
    for shape in shapes:
        ts, te = col(TS), col(TE)
        if shape.timestamps:
            ts, te = F.timestamp_micros(ts), F.timestamp_micros(te)
        value = F.struct(F.from_json(col(ROW), shape.schema, JSON_OPTIONS).alias("_r"),
                         ts.alias(TS), te.alias(TE), col(OP), col(QID))
        columns.append(F.when(col(QID).isin(list(shape.names)), value).alias(shape.column))
    return records.select(*columns)


def split_by_query(tables: dict[str, pa.Table], shapes: list[OutputShape]) -> None:
    """Replace each shape's decoded records in ``tables`` by a table per query name."""
    for shape in shapes:
        records = tables.pop(shape.column, None)
        if records is None:
            continue
        qid = records.column(QID)
        rest = records.drop_columns([QID])
        for query_id, name in shape.names.items():
            tables[name] = rest.filter(pc.equal(qid, query_id))


class SharedIntervalFormatter(CycleParticipant):
    """Coalesced interval records of all queries whose rows ``encode`` can carry.

    Its state is the open layers of every (query, row); rows of queries no longer running
    are dropped at the next cycle that formats anything.
    """

    def __init__(self, rt: Runtime):
        self.rt = rt
        schema = StructType([StructField(QID, IntegerType()), StructField(ROW, StringType()),
                             StructField(LAYER, LongType()), StructField(TS, LongType())])
        self.open = StateFrame(rt, schema, "shared-intervals-open")
        self.views = SqlViews(rt.spark, "intervals")
        self.states = [self.open]

    def clear(self) -> None:
        """Drop every open element (no query it formats runs any more)."""
        self.open.set(None)

    def cycle_states(self) -> list[StateFrame]:  # noqa: D102
        return self.states

    @property
    def state_rows(self) -> int:
        """Open element layers held for all queries."""
        return self.open.rows

    def save(self, path: str, frames: FrameWriter) -> None:
        """Save the open layers under ``path`` (a checkpoint at a cycle boundary)."""
        self.open.save(path, frames)

    def load(self, path: str, frames: FrameReader) -> None:
        """Restore what ``save`` saved."""
        self.open.load(path, frames)

    def step(self, encoded: list[DataFrame], live: list[int]) -> DataFrame | None:
        """Records (query id, row text, ``_ts``, ``_te``, ``_op``) of this cycle's changes."""
        if not encoded:
            return None
        changes = union_all(encoded)
        assert changes is not None
        kept = ", ".join(str(qid) for qid in sorted(live)) or "NULL"
        return coalesce_changes(self.rt, self.views, self.open, changes, [QID, ROW],
                                keep=f"{QID} IN ({kept})")
