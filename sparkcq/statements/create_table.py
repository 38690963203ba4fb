"""``CREATE TABLE name (columns) [WITH (format=..., path=... | format='postgres', ...)]``:
a static relation, read once into a snapshot (``tables.py``), from files under the data
roots, from a configured PostgreSQL database, or empty (rows come from Python).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from sparkcq.catalog import TableSource
from sparkcq.errors import AnalysisError, CatalogError
from sparkcq.io.postgres import ensure_table_name, read_table, resolve_database
from sparkcq.language.sql.statements import CreateTable, value_at
from sparkcq.plan.definitions import declared_schema
from sparkcq.plan.options import TableOptions
from sparkcq.plan.sandbox import HOW_TO_TRUST, TABLE_FORMATS
from sparkcq.statements.context import StatementContext


def create_table(stmt: CreateTable, text: str, ctx: StatementContext) -> None:
    """Read a table and add it to the catalog (a replaced table's new version)."""
    schema = declared_schema(stmt.columns, text)
    options = TableOptions.parse(stmt.options, text, stmt.loc)
    if options.postgres:
        source = postgres_source(stmt, schema, options, text, ctx)
    elif not stmt.columns:
        msg = (f"CREATE TABLE {stmt.name} needs its columns: CREATE TABLE {stmt.name} "
               "(name TYPE, ...); only a format='postgres' table takes the database's")
        raise AnalysisError(msg, text, stmt.loc)
    elif options.format is not None:
        source = files_source(stmt, schema, options, text, ctx)
    else:
        ctx.tables.register(stmt.name, ctx.spark.createDataFrame([], schema), schema,
                            cycle=ctx.cycle())
        return
    try:
        df = source.read()
    except ValueError as e:
        raise AnalysisError(str(e), text, stmt.loc) from None
    ctx.tables.register(stmt.name, df, source=source, cycle=ctx.cycle())


def files_source(stmt: CreateTable, schema: StructType, options: TableOptions, text: str,
                 ctx: StatementContext) -> TableSource:
    """How a table of files (csv, parquet, json, under the data roots) is read."""
    fmt = options.format
    assert fmt is not None
    if options.path is None:
        msg = f"CREATE TABLE {stmt.name} WITH (format={fmt!r}) also needs path='...'"
        raise AnalysisError(msg, text, stmt.loc)
    if not ctx.policy.trusted and fmt not in TABLE_FORMATS:
        msg = (f"format {fmt!r} is not allowed for server clients; tables read "
               f"{', '.join(TABLE_FORMATS)} files, or format='postgres' from a "
               f"configured database; {HOW_TO_TRUST}")
        raise AnalysisError(msg, text, value_at(stmt.options, "format", stmt.loc))
    path = ctx.policy.data_path(options.options, text, stmt.loc)["path"]
    reader = ctx.spark.read.schema(schema)
    if fmt == "csv":
        reader = reader.option("header", options.options.get("header", "true"))
    reader = reader.format(fmt)
    return TableSource(f"{fmt} {path}", lambda: reader.load(path),
                       refresh_every=options.refresh_seconds)


def postgres_source(stmt: CreateTable, schema: StructType, options: TableOptions, text: str,
                    ctx: StatementContext) -> TableSource:
    """How a ``format='postgres'`` table is read: ``database`` (configured) or, trusted,
    ``url`` [``user``, ``password``]; ``table`` or, trusted, ``query``; ``refresh``.
    """
    opts = options.options
    ctx.policy.ensure_database_options(opts, text, stmt.loc)
    try:
        db = resolve_database(opts, ctx.policy.databases, ctx.policy.trusted)
    except CatalogError as e:
        raise AnalysisError(str(e), text, stmt.loc) from None
    table, query = opts.get("table"), opts.get("query")
    if (table is None) == (query is None):
        msg = (f"CREATE TABLE {stmt.name} WITH (format='postgres') reads table='name' "
               "(or, in a trusted engine, query='SELECT ...')")
        raise AnalysisError(msg, text, stmt.loc)
    if table is not None:
        try:
            ensure_table_name(table)
        except ValueError as e:
            raise AnalysisError(str(e), text, value_at(opts, "table", stmt.loc)) from None
    where = f"{opts['database']}: " if "database" in opts else f"{db.label()} "
    origin = f"postgres {where}{table if table is not None else 'query'}"
    declared = schema if schema.fields else None
    spark = ctx.spark

    def read() -> DataFrame:
        return read_table(spark, db, declared, table=table, query=query)

    return TableSource(origin, read, snapshot=True, refresh_every=options.refresh_seconds)
