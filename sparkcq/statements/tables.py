"""Tables: registered from data, read from files or PostgreSQL, read again (``REFRESH``,
``refresh='10 MINUTES'``), and replaced while queries read them (docs/semantics.md,
"Tables that change").

A table read from PostgreSQL is a snapshot (a local checkpoint the catalog owns): when a
new version replaces it, the old snapshot is kept until no table and no operator holds it
(a running join still serves it until the next cycle switches), then freed.
"""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, StructType

from sparkcq.catalog import Catalog, TableInfo, TableSource, ensure_identifier
from sparkcq.errors import CatalogError, SourceError, SparkcqError, UnknownNameError
from sparkcq.io.ingest import conform
from sparkcq.model.clock import Clock
from sparkcq.plan.nodes import EdgeKind, PlanNode, TableScan
from sparkcq.runtime.frames import unpersist_checkpoint
from sparkcq.runtime.operators.table import TableOperator, TableRows
from sparkcq.runtime.queries import RunningQueries
from sparkcq.runtime.table_switching import replacement_problems

log = logging.getLogger("sparkcq.tables")


def table_rows(catalog: Catalog) -> dict[str, TableRows]:
    """Every table's rows and their version, by lower-case name; a snapshot (a PostgreSQL
    table's, which the catalog owns) is served as it is, not cached again.
    """
    return {key: TableRows(info.dataframe, info.version,
                           cache=not (info.source is not None and info.source.snapshot))
            for key, info in catalog.tables.items()}


class Tables:
    """The catalog's tables as the statements and the Python API change them."""

    def __init__(self, spark: SparkSession, catalog: Catalog, queries: RunningQueries,
                 clock: Clock):
        self.spark = spark
        self.catalog = catalog
        self.queries = queries
        self.clock = clock
        self.retired: list[DataFrame] = []  # snapshots of replaced tables, to free

    def register(self, name: str, data: Any, schema: StructType | None = None, *,
                 source: TableSource | None = None, cycle: int = 0) -> None:
        """Register a table from a Spark DataFrame, pandas frame or rows (see
        ``Engine.register_table``); rows for a table running queries read replace its
        rows from the next cycle on.
        """
        ensure_identifier(name, "table")
        existing = self.catalog.tables.get(name.lower())
        readers = [] if existing is None else self.readers(existing.name)
        if existing is not None and readers:
            df = self.frame(data, existing.schema, existing.name)
            self.ensure_replaceable(existing, df, readers)
            self.replace(existing, df, readers, source, cycle)
            return
        df = self.frame(data, schema, name)
        version = node_version = 0
        if existing is not None:
            assert isinstance(existing.plan, TableScan)
            version, node_version = existing.version + 1, existing.plan.version + 1
            del self.catalog.tables[name.lower()]
            self.retire(existing)
        node = TableScan(name, df.schema, node_version)
        self.catalog.add_table(self.info(name, df.schema, df, node, version, source))

    def append(self, name: str, rows: Any, columns: tuple[str, ...] = (),
               cycle: int = 0) -> int:
        """Add ``rows`` (dicts, or tuples of ``columns`` or of all the table's columns in
        order) to table ``name`` as its next version; how many. The rows pass the typed door
        of pushed rows (``io/ingest.py``); one that does not fit refuses them all, naming it.
        A table read from a file or a database is refused: its rows come from there.
        """
        info = self.catalog.tables.get(name.lower())
        if info is None:
            known = ", ".join(sorted(self.catalog.tables)) or "none"
            msg = f"unknown table {name!r}; tables: {known}"
            raise UnknownNameError(msg)
        if info.source is not None:
            msg = (f"table {info.name!r} is read from {info.source.origin}; add rows "
                   "there and REFRESH TABLE it")
            raise CatalogError(msg)
        names = [f.name for f in info.schema.fields]
        lower = {n.lower(): n for n in names}
        for c in columns:
            if c.lower() not in lower:
                msg = f"table {info.name!r} has no column {c!r}; its columns: {', '.join(names)}"
                raise CatalogError(msg)
        order = [lower[c.lower()] for c in columns] or names
        for i, row in enumerate(rows):
            if isinstance(row, tuple | list) and len(row) != len(order):
                msg = (f"row {i + 1} has {len(row)} values; table {info.name!r} takes "
                       f"{len(order)} ({', '.join(order)})")
                raise CatalogError(msg)
        records = [dict(zip(order, row, strict=True)) if isinstance(row, tuple | list)
                   else row for row in rows]
        fit = conform(records, info.schema, info.name)
        if fit.errors:
            first = fit.errors[0]
            msg = (f"no rows added to table {info.name!r}: row {first.index + 1}"
                   + (f", column {first.column!r}" if first.column else "")
                   + f": {first.reason}")
            raise CatalogError(msg)
        if not fit.table.num_rows:
            return 0
        old = info.dataframe.toArrow()
        both = pa.concat_tables([old, fit.table.cast(old.schema)])
        self.register(info.name, self.spark.createDataFrame(both), info.schema, cycle=cycle)
        return fit.table.num_rows

    def info(self, name: str, schema: StructType, df: DataFrame, node: PlanNode,
             version: int, source: TableSource | None) -> TableInfo:
        """A table's catalog entry, read now."""
        every = source.refresh_every if source is not None else None
        return TableInfo(name, schema, df, node, version, source, self.clock.time(),
                         None if every is None else self.clock.monotonic() + every)

    def retire(self, info: TableInfo) -> None:
        """``info``'s rows are replaced: a snapshot of them is freed once nothing holds it."""
        if info.source is not None and info.source.snapshot:
            self.retired.append(info.dataframe)

    def put_back(self, info: TableInfo) -> None:
        """Make ``info`` the table's entry again (a failed script undoes a replacement)."""
        current = self.catalog.tables.get(info.name.lower())
        if current is not None:
            self.retire(current)
        self.catalog.tables[info.name.lower()] = info

    def refresh(self, name: str, cycle: int = 0) -> None:
        """Read table ``name`` again from where it came from and replace it with that
        snapshot, as its next version (``REFRESH TABLE name``).

        A table registered from data has nothing to re-read (CatalogError; ``load_table``
        replaces its rows); a failed read (SourceError) leaves the table as it was.
        """
        info = self.catalog.tables.get(name.lower())
        if info is None:
            known = ", ".join(sorted(self.catalog.tables)) or "none"
            msg = f"unknown table {name!r}; tables: {known}"
            raise UnknownNameError(msg)
        if info.source is None:
            msg = (f"table {info.name!r} was registered from data, so there is nothing to read "
                   "again; Engine.load_table replaces its rows")
            raise CatalogError(msg)
        try:
            df = info.source.read()
        except ValueError as e:
            msg = f"REFRESH TABLE {info.name}: {e}; the table keeps version {info.version}"
            raise SourceError(msg) from None
        try:
            self.register(info.name, df, source=info.source, cycle=cycle)
        except BaseException:
            if info.source.snapshot:
                unpersist_checkpoint(df)
            raise

    def refresh_due(self, cycle: int) -> None:
        """Refresh the tables whose ``refresh`` interval has passed (before a cycle).

        A refresh that fails (the database is down, a running query still reads the table)
        keeps the version the table has, says why in SHOW TABLES, and is tried again one
        interval later.
        """
        now = self.clock.monotonic()
        for info in list(self.catalog.tables.values()):
            if info.next_refresh is None or now < info.next_refresh:
                continue
            try:
                self.refresh(info.name, cycle)
            except SparkcqError as e:
                assert info.source is not None and info.source.refresh_every is not None
                info.note = f"refresh at cycle {cycle} failed: {e}"
                info.next_refresh = now + info.source.refresh_every
                log.warning("table %s: %s", info.name, info.note)
        self.free_retired()

    def free_retired(self) -> None:
        """Free the snapshots of replaced tables that no table and no operator holds."""
        if not self.retired:
            return
        held = {id(t.dataframe) for t in self.catalog.tables.values()}
        held |= {id(df) for op in self.queries.plan.ops.values()
                 if isinstance(op, TableOperator) for df in (op.df, op.retired)
                 if df is not None}
        keep = []
        for df in self.retired:
            if id(df) in held:
                keep.append(df)
            else:
                unpersist_checkpoint(df)
        self.retired = keep

    def frame(self, data: Any, schema: StructType | None, name: str) -> DataFrame:
        """``data`` as a DataFrame; rows that are not one take ``schema`` if given, their
        columns matched by name.
        """
        if isinstance(data, DataFrame):
            return data
        frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame.from_records(data)
        if schema is None:
            return self.spark.createDataFrame(frame)
        if frame.empty and len(frame.columns) == 0:
            return self.spark.createDataFrame([], schema)
        names = [f.name for f in schema.fields]
        if list(frame.columns) == list(range(len(names))):  # tuples: by position
            frame = frame.set_axis(names, axis=1)
        if sorted(map(str, frame.columns)) != sorted(names):
            msg = (f"rows for table {name!r} have columns {', '.join(map(str, frame.columns))}; "
                   f"the table has {', '.join(names)}")
            raise CatalogError(msg)
        return self.spark.createDataFrame(frame[names], schema=schema)  # type: ignore[arg-type]

    def readers(self, name: str) -> list[str]:
        """The running queries that read the table called ``name``."""
        key = name.lower()
        return [r.name for r in self.queries.reading(
            lambda n: isinstance(n, TableScan) and n.name.lower() == key)]

    def ensure_replaceable(self, info: TableInfo, df: DataFrame, readers: list[str]) -> None:
        """Refuse new rows for a table that running queries read when they change its
        columns, or when a query could not switch to them correctly.
        """
        def columns(schema: StructType) -> str:
            return ", ".join(f"{f.name} {f.dataType.simpleString().upper()}"
                             for f in schema.fields)

        def shape(schema: StructType) -> list[tuple[str, DataType]]:
            return [(f.name.lower(), f.dataType) for f in schema.fields]

        if shape(df.schema) != shape(info.schema):
            msg = (f"table {info.name!r} is read by running queries {', '.join(readers)}; "
                   f"its new rows must keep its columns ({columns(info.schema)}), got "
                   f"({columns(df.schema)})")
            raise CatalogError(msg)
        problems = [(q, "its result is the table itself, valid at all times, which new "
                        "rows would contradict")
                    for q in readers
                    if self.queries[q.lower()].info.plan.kind is EdgeKind.TABLE]
        problems += replacement_problems(self.queries.plan, info.name)
        if problems:
            query, why = problems[0]
            msg = (f"table {info.name!r} cannot be replaced while query {query!r} runs: "
                   f"{why}; drop {query!r} first")
            raise CatalogError(msg)

    def replace(self, info: TableInfo, df: DataFrame, readers: list[str],
                source: TableSource | None, cycle: int) -> None:
        """Give a table read by running queries new rows: the next cycle switches to them."""
        del self.catalog.tables[info.name.lower()]
        self.retire(info)
        self.catalog.add_table(self.info(info.name, info.schema, df, info.plan,
                                         info.version + 1, source))
        for query in readers:
            self.catalog.query(query).log.append(
                f"cycle {cycle}: table {info.name!r} replaced (version "
                f"{info.version + 1}): its joins switch to the new rows in the next cycle")
        self.queries.compile()
