"""One coalescing pass for the interval output of every query.

Turning a relation's changes into coalesced interval records takes four shuffles; done per
query, fifty queries cost two hundred stages a cycle. Here every query's changes carry its
id and its row as one struct column per output schema (``row_column``: the column of the
queries of other schemas is NULL), so one coalescer, partitioned by (query, row), formats
all queries together, and the commit hands each query the records of its own column.

Rows stay Spark values: value-equal rows are equal structs (Spark's grouping and
partitioning hold ``-0.0`` and ``0.0`` equal, and NaN equal to NaN; a top-level ``-0.0`` is
written as ``0.0``, so a record shows one of them). Types Spark cannot group by (maps) or
that never reached this path before (binary, intervals) keep a formatter of their own
(``encodable``). Until 2026-11-29 rows were JSON text: a text per row written and parsed
again every cycle.

Queries whose records a sliced family finds as runs (``runtime/sliced_runs.py``) skip the
coalescing; their open elements are kept here with everyone's, so a query's elements stay
open whichever way its records come.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ArrayType,
    AtomicType,
    BinaryType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StructField,
    StructType,
)

from sparkcq.model.columns import LAYER, OP, QID, ROW, TE, TS, D, T
from sparkcq.model.types import type_sql
from sparkcq.runtime.frames import (
    Runtime,
    SqlViews,
    StateFrame,
    project,
    q,
    sql_literal,
    union_by_name,
)
from sparkcq.runtime.operators.outputs import coalesced
from sparkcq.runtime.saved_frames import FrameReader, FrameWriter
from sparkcq.runtime.transaction import CycleParticipant


def encodable(dtype: DataType) -> bool:
    """Whether rows of ``dtype`` take the shared formatter."""
    if isinstance(dtype, StructType):
        return all(encodable(f.dataType) for f in dtype.fields)
    if isinstance(dtype, ArrayType):
        return encodable(dtype.elementType)
    return isinstance(dtype, AtomicType) and not isinstance(dtype, BinaryType)


def normalised_sql(sql: str, dtype: DataType) -> str:
    """``sql`` with ``-0.0`` as ``0.0``: Spark's grouping holds them equal, so a record shows
    one of them whichever row it came from.
    """
    if isinstance(dtype, DoubleType | FloatType):
        return f"CASE WHEN ({sql}) = 0 THEN CAST(0 AS {dtype.simpleString()}) ELSE ({sql}) END"
    return sql


def row_column(schema: StructType) -> str:
    """The column holding the rows of queries whose output schema is ``schema``: named
    after the schema, so a state saved under it reads back whatever queries run.
    """
    return "_row_" + hashlib.sha1(schema.json().encode()).hexdigest()[:12]


def row_sql(schema: StructType, exprs: Mapping[str, str]) -> str:
    """A row of ``schema`` as a struct of ``exprs`` (by column name), each an atomic
    column cast to its type: rows of one schema from different queries have one type.
    """
    fields = []
    for f in schema.fields:
        value = normalised_sql(exprs[f.name], f.dataType)
        if isinstance(f.dataType, AtomicType):
            value = f"CAST({value} AS {type_sql(f.dataType)})"
        fields.append(f"{value} AS {q(f.name)}")
    return f"struct({', '.join(fields)})"


def encode(changes: DataFrame, schema: StructType, qid: int) -> DataFrame:
    """A query's changes as (query id, row, instant, change)."""
    row = row_sql(schema, {f.name: q(f.name) for f in schema.fields})
    return project(changes, f"CAST({qid} AS INT) AS {QID}",
                   f"{row} AS {q(row_column(schema))}", q(T), q(D))


@dataclass
class OutputShape:
    """Queries whose records have one output schema: the commit collects them as one column.

    Fifty dashboards with the same columns then cost one collected column, not fifty
    mostly NULL ones.
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
        ts, te = q(TS), q(TE)
        if shape.timestamps:
            ts, te = f"timestamp_micros({ts})", f"timestamp_micros({te})"
        ids = ", ".join(map(str, sorted(shape.names)))
        columns.append(f"IF({QID} IN ({ids}), struct({q(row_column(shape.schema))} AS _r, "
                       f"{ts} AS {TS}, {te} AS {TE}, {OP}, {QID}), NULL) AS {shape.column}")
    return project(records, *columns)


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


def aligned(base: DataFrame, shapes: list[OutputShape]) -> DataFrame:
    """The open layers ``base`` keeps, with the row columns of ``shapes`` (a shape new
    since the state was written has none open; a query's that stopped are dropped with
    it). A state written with rows as JSON text (before 2026-11-29) is read into them.
    """
    live = ", ".join(str(qid) for shape in shapes for qid in sorted(shape.names)) or "NULL"
    columns = [QID]
    for schema in dict.fromkeys(s.schema for s in shapes):
        name = row_column(schema)
        if name in base.columns:
            columns.append(q(name))
        elif ROW in base.columns:
            ids = ", ".join(str(qid) for s in shapes if s.schema == schema
                            for qid in sorted(s.names))
            columns.append(f"IF({QID} IN ({ids}), from_json({ROW}, "
                           f"{sql_literal(type_sql(schema))}, {_json_options_sql()}), NULL) "
                           f"AS {q(name)}")
        else:
            columns.append(f"CAST(NULL AS {type_sql(schema)}) AS {q(name)}")
    return project(base.where(f"{QID} IN ({live})"), *columns, q(LAYER), q(TS))


def _json_options_sql() -> str:
    """How rows were written as JSON text (states saved before 2026-11-29)."""
    options = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
               "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}
    return "map(" + ", ".join(f"{sql_literal(k)}, {sql_literal(v)}"
                              for k, v in options.items()) + ")"


@dataclass(frozen=True)
class SlicedRuns:
    """One cycle's runs of a sliced family's queries that keep their group keys
    (``runtime/sliced_runs.py``).

    ``records`` are the runs that begin in the cycle (``_op`` ``I``; ``_te`` NULL while
    open); ``opened_closed`` what changes in the open elements: a run left open (``_te``
    NULL) or an earlier run closed (``_ts`` NULL, to be found among the open elements).
    Both carry the query id and its row in the row column of its output schema.
    """

    qids: frozenset[int]
    records: DataFrame
    opened_closed: DataFrame


class SharedIntervalFormatter(CycleParticipant):
    """Coalesced interval records of all queries whose rows ``encode`` can carry.

    Its state is the open layers of every (query, row); rows of queries no longer running
    are dropped at the next cycle that formats anything.
    """

    def __init__(self, rt: Runtime):
        self.rt = rt
        # its columns follow the running queries' output schemas (``aligned``)
        schema = StructType([StructField(QID, IntegerType()), StructField(LAYER, LongType()),
                             StructField(TS, LongType())])
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
        """Restore what ``save`` saved, with the row columns it was saved with (the next
        cycle aligns them with the queries running then).
        """
        self.open.set(frames.read_as_saved(os.path.join(path, self.open.name)))

    def step(self, encoded: list[DataFrame], shapes: list[OutputShape],
             runs: Sequence[SlicedRuns] = ()) -> DataFrame | None:
        """Records (query id, row columns, ``_ts``, ``_te``, ``_op``) of this cycle's
        changes, for the queries of ``shapes``; and of ``runs``, the runs sliced families
        found for queries that keep their group keys (``runtime/sliced_runs.py``), whose
        open elements are kept here too.
        """
        if not encoded and not runs:
            return None
        rows = list(dict.fromkeys(row_column(shape.schema) for shape in shapes))
        names = [QID, *rows]
        base = self.open.get()
        if base is not None:
            base = aligned(base, shapes)
        general, keyed = base, None
        ids = ", ".join(str(qid) for qid in sorted({i for r in runs for i in r.qids}))
        if base is not None and ids:
            general = base.where(f"{QID} NOT IN ({ids})")
            keyed = base.where(f"{QID} IN ({ids})")
        records: list[DataFrame] = []
        still_open: list[DataFrame] = []
        if encoded:
            changes = _with_rows(union_by_name(encoded, allow_missing=True), shapes, rows)
            found, left_open = coalesced(self.rt, self.views, changes, names, general)
            records.append(found)
            still_open.append(left_open)
        elif general is not None:
            still_open.append(general)
        if runs:
            changed = _with_rows(union_by_name([r.opened_closed for r in runs],
                                               allow_missing=True), shapes, rows)
            matched = self.rt.cache_for_cycle(self.views.sql(
                _opened_closed_sql(tuple(names), keyed is not None),
                **{"changed": changed, **({} if keyed is None else {"base": keyed})}))
            cols = ", ".join(map(q, names))
            # a query's closing records before its new ones, as the general path gives them
            records += [self.views.sql(
                f"SELECT {cols}, _since AS {q(TS)}, {q(TE)}, 'C' AS {q(OP)} FROM {{matched}} "
                f"WHERE NOT _kept AND {q(TE)} IS NOT NULL", matched=matched),
                *(r.records for r in runs)]
            still_open.append(self.views.sql(
                f"SELECT {cols}, CAST(1 AS BIGINT) AS {q(LAYER)}, {q(TS)} FROM {{matched}} "
                f"WHERE IF(_kept, _closed = 0, {q(TE)} IS NULL)", matched=matched))
        self.open.set(union_by_name(still_open) if still_open else None)
        return union_by_name(records, allow_missing=True)


def _with_rows(changes: DataFrame, shapes: list[OutputShape], rows: list[str]) -> DataFrame:
    """``changes`` with every row column of ``shapes``: those of shapes with no change
    this cycle all NULL.
    """
    missing = [r for r in rows if r not in changes.columns]
    if not missing:
        return changes
    types = {row_column(s.schema): s.schema for s in shapes}
    return project(changes, "*", *[f"CAST(NULL AS {type_sql(types[r])}) AS {q(r)}"
                                   for r in missing])


@lru_cache(maxsize=64)
def _opened_closed_sql(names: tuple[str, ...], with_base: bool) -> str:
    """Open and closed runs (view ``{changed}``, see ``SlicedRuns.opened_closed``) beside
    the open elements kept so far (view ``{base}``): each kept element with whether a run
    of its row closed (``_closed``), each closed run with its start (``_since``).
    """
    cols = ", ".join(map(q, names))
    rows = f"SELECT {cols}, {q(TS)}, {q(TE)}, false AS _kept FROM {{changed}}"
    if with_base:
        rows += (f" UNION ALL SELECT {cols}, {q(TS)}, CAST(NULL AS BIGINT) AS {q(TE)}, "
                 f"true AS _kept FROM {{base}}")
    return (f"SELECT {cols}, {q(TS)}, {q(TE)}, _kept, "
            f"max(IF(_kept, {q(TS)}, NULL)) OVER v AS _since, "
            f"max(IF(NOT _kept AND {q(TE)} IS NOT NULL, 1, 0)) OVER v AS _closed "
            f"FROM ({rows}) AS _rows WINDOW v AS (PARTITION BY {cols})")
