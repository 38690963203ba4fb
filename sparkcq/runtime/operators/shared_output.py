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
coalescing. Their open elements are kept here too, in the form the runs read them: per
family, one row per group with the start of each query's open run (``HeldRuns``). A query
whose elements were opened here (its first cycle formatted as any other's, from shared
state) hands them over to its family's runs the first cycle it runs there.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

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
    HeldState,
    Runtime,
    SqlViews,
    StateFrame,
    project,
    q,
    sql_literal,
    union_by_name,
)
from sparkcq.runtime.operators.element_intervals import ElementIntervals
from sparkcq.runtime.operators.outputs import coalesced
from sparkcq.runtime.saved_frames import FrameReader, FrameWriter
from sparkcq.runtime.transaction import CycleParticipant

RUNS_PREFIX = "runs-"  # the folder of a family's open runs in a saved state
BY_END_PREFIX = "by-end-"  # a query's open layers by provisional end, in a saved state
BY_END_FILE = "by-end.json"  # which queries have them, with their columns


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
    open), after the closing records (``C``) of runs open since an earlier cycle that end
    in it; both carry the query id and its row in the row column of its output schema.
    ``open_runs`` are the runs left open, per group of the family (``HeldRuns.state``).
    """

    family: str  # the family's name for its open runs (``SlicedFamily.runs_name``)
    qids: frozenset[int]
    records: DataFrame
    open_runs: DataFrame


@dataclass(frozen=True)
class HeldRuns:
    """A sliced family's open runs as the last cycle left them, for the runs it finds next.

    ``state``: per group of the family (its keys ``_k<i>``), the start ``_o<query id>`` of
    each query's open run (NULL: none open). ``handed``: the open elements kept among
    everyone's (query id, row columns, ``_ts``) of queries whose records came another way
    until now (a query that started from shared state formats its first cycle as any
    other, or a state saved before the runs kept their own).
    """

    state: DataFrame | None
    handed: DataFrame | None


@dataclass(frozen=True)
class QueryElements:
    """A query's elements starting in its cycle ``[lo, hi)`` with their ends (query id,
    row, ``_ts``, ``_te``: ``encode_elements``; None: none started), for its open layers
    kept by provisional end (``element_intervals.py``).
    """

    qid: int
    schema: StructType
    lo: int
    hi: int
    df: DataFrame | None
    span: int | None  # the longest an element lasts, if known


def encode_elements(elements: DataFrame, schema: StructType, qid: int) -> DataFrame:
    """A query's elements (``Slice.elements``) as (query id, row, start, end)."""
    row = row_sql(schema, {f.name: q(f.name) for f in schema.fields})
    return project(elements, f"CAST({qid} AS INT) AS {QID}",
                   f"{row} AS {q(row_column(schema))}", q(TS), q(TE))


@dataclass(frozen=True)
class FormatterProgress:
    """The open runs of each sliced family (by ``SlicedFamily.runs_name``), and which
    queries' open elements they hold (the others' are still among everyone's); the open
    layers of the queries whose elements come with their ends, by query id.
    """

    runs: Mapping[str, StateFrame] = field(default_factory=dict)
    holds: Mapping[str, frozenset[int]] = field(default_factory=dict)
    by_end: Mapping[int, ElementIntervals] = field(default_factory=dict)


class SharedIntervalFormatter(CycleParticipant):
    """Coalesced interval records of all queries whose rows ``encode`` can carry.

    Its state is the open layers of every (query, row), and the open runs of sliced
    families' queries that keep their group keys (one row per group: a run's end needs
    only its start); rows of queries no longer running are dropped at the next cycle
    that rewrites the state they are in (a change to coalesce, or a family's runs).
    """

    def __init__(self, rt: Runtime):
        self.rt = rt
        # its columns follow the running queries' output schemas (``aligned``)
        schema = StructType([StructField(QID, IntegerType()), StructField(LAYER, LongType()),
                             StructField(TS, LongType())])
        self.open = StateFrame(rt, schema, "shared-intervals-open")
        self.views = SqlViews(rt.spark, "intervals")
        self.progress: FormatterProgress = FormatterProgress()

    def clear(self) -> None:
        """Drop every open element (no query it formats runs any more)."""
        self.open.set(None)
        for frame in self.progress.runs.values():
            frame.set(None)
        for held in self.progress.by_end.values():
            held.release()
        self.progress = FormatterProgress()

    def cycle_states(self) -> list[HeldState]:  # noqa: D102
        return [self.open, *self.progress.runs.values(),
                *(held.layers for held in self.progress.by_end.values())]

    @property
    def state_rows(self) -> int:
        """Open element layers held for all queries, and groups with open runs."""
        return (self.open.rows + sum(f.rows for f in self.progress.runs.values())
                + sum(held.state_rows for held in self.progress.by_end.values()))

    def takes_elements(self, qid: int, fresh: bool) -> bool:
        """Whether query ``qid``'s records come from its elements (``QueryElements``): it
        does once it did, and from its first cycle when it starts from nothing (a query
        that starts from a shared relation's contents has no ends for them, and keeps
        taking changes).
        """
        return fresh or qid in self.progress.by_end

    def save(self, path: str, frames: FrameWriter) -> None:
        """Save the open layers and runs under ``path`` (a checkpoint at a cycle boundary)."""
        self.open.save(path, frames)
        for frame in self.progress.runs.values():
            frame.save(path, frames)
        holders = {}
        for qid, held in self.progress.by_end.items():
            held.save(path, frames)
            holders[str(qid)] = {"columns": held.schema.jsonValue(), "span": held.span}
        with open(os.path.join(path, BY_END_FILE), "w", encoding="utf-8") as f:
            json.dump(holders, f)

    def load(self, path: str, frames: FrameReader) -> None:
        """Restore what ``save`` saved, with the row columns it was saved with (the next
        cycle aligns them with the queries running then).
        """
        self.open.set(frames.read_as_saved(os.path.join(path, self.open.name)))
        runs: dict[str, StateFrame] = {}
        holds: dict[str, frozenset[int]] = {}
        for folder in sorted(os.listdir(path)):
            if folder.startswith(RUNS_PREFIX):
                name = folder[len(RUNS_PREFIX):]
                runs[name] = frame = StateFrame(self.rt, StructType(), folder)
                frame.set(frames.read_as_saved(os.path.join(path, folder)))
                holds[name] = frozenset() if frame.df is None else frozenset(
                    int(c[2:]) for c in frame.df.columns if c.startswith("_o"))
        by_end: dict[int, ElementIntervals] = {}
        listed = os.path.join(path, BY_END_FILE)
        if os.path.exists(listed):
            with open(listed, encoding="utf-8") as f:
                saved = json.load(f)
            for qid, holder in saved.items():
                row = StructType.fromJson(holder["columns"]).fields[1]
                assert isinstance(row.dataType, StructType)
                held = self.by_end_of(int(qid), row.name, row.dataType, holder["span"])
                held.load(path, frames)
                by_end[int(qid)] = held
        self.progress = FormatterProgress(runs, holds, by_end)

    def by_end_of(self, qid: int, row: str, row_type: StructType,
                  span: int | None) -> ElementIntervals:
        """The holder of query ``qid``'s open layers by provisional end, named after it."""
        return ElementIntervals(self.rt, row, row_type, f"{BY_END_PREFIX}{qid}", span)

    def held_runs(self, family: str, qids: Iterable[int],
                  shapes: list[OutputShape]) -> HeldRuns:
        """The open runs of ``family``'s queries ``qids`` (see ``HeldRuns``)."""
        frame = self.progress.runs.get(family)
        new = sorted(set(qids) - self.progress.holds.get(family, frozenset()))
        base = self.open.get()
        handed = None
        if new and base is not None:
            handed = aligned(base, shapes).where(f"{QID} IN ({', '.join(map(str, new))})")
        return HeldRuns(None if frame is None else frame.get(), handed)

    def step(self, encoded: list[DataFrame], shapes: list[OutputShape],
             runs: Sequence[SlicedRuns] = (),
             elements: Sequence[QueryElements] = ()) -> DataFrame | None:
        """Records (query id, row columns, ``_ts``, ``_te``, ``_op``) of this cycle's
        changes, for the queries of ``shapes``; of ``runs``, the runs sliced families
        found for queries that keep their group keys (``runtime/sliced_runs.py``), whose
        open runs are kept here too; and of ``elements``, those of the queries whose
        elements come with their ends (``element_intervals.py``).
        """
        self._forget_runs(shapes, {r.family for r in runs})
        by_end = self._by_end(shapes, elements)
        if not encoded and not runs and not by_end:
            return None
        rows = list(dict.fromkeys(row_column(shape.schema) for shape in shapes))
        names = [QID, *rows]
        base = self.open.get()
        # queries new to their family's runs: their open elements, if any were here, were
        # handed over (``held_runs``)
        handed = sorted({i for r in runs
                         for i in r.qids - self.progress.holds.get(r.family, frozenset())})
        if base is not None:
            base = aligned(base, shapes)
            if handed:
                base = base.where(f"{QID} NOT IN ({', '.join(map(str, handed))})")
        records: list[DataFrame] = []
        if encoded:
            changes = _with_rows(union_by_name(encoded, allow_missing=True), shapes, rows)
            found, left_open = coalesced(self.rt, self.views, changes, names, base)
            records.append(found)
            self.open.set(left_open)
        elif handed:
            self.open.set(base)
        frames = dict(self.progress.runs)
        holds = dict(self.progress.holds)
        for r in runs:
            records.append(r.records)
            if r.family not in frames:
                frames[r.family] = StateFrame(self.rt, StructType(), RUNS_PREFIX + r.family)
            frames[r.family].set(r.open_runs)
            holds[r.family] = r.qids
        records += by_end
        self.progress = replace(self.progress, runs=frames, holds=holds)
        if not records:
            return None
        return _with_rows(union_by_name(records, allow_missing=True), shapes, rows)

    def _by_end(self, shapes: list[OutputShape],
                elements: Sequence[QueryElements]) -> list[DataFrame]:
        """The records of the queries whose elements come with their ends; the holders of
        queries no longer running are dropped.
        """
        live = {qid for shape in shapes for qid in shape.names}
        held = dict(self.progress.by_end)
        for qid in [qid for qid in held if qid not in live]:
            held.pop(qid).release()
        records = []
        for query in elements:
            holder = held.get(query.qid)
            if holder is None:
                holder = held[query.qid] = self.by_end_of(
                    query.qid, row_column(query.schema), query.schema, query.span)
            found = holder.step(query.df, query.lo, query.hi)
            if found is not None:
                records.append(found)
        self.progress = replace(self.progress, by_end=held)
        return records

    def _forget_runs(self, shapes: list[OutputShape], stepped: set[str]) -> None:
        """Drop the open runs of families none of whose queries runs any more."""
        live = {qid for shape in shapes for qid in shape.names}
        gone = [name for name, qids in self.progress.holds.items()
                if name not in stepped and not qids & live]
        if not gone:
            return
        for name in gone:
            self.progress.runs[name].set(None)
        self.progress = replace(
            self.progress, runs={n: f for n, f in self.progress.runs.items() if n not in gone},
            holds={n: h for n, h in self.progress.holds.items() if n not in gone})


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
