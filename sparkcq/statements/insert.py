"""``INSERT INTO table [(columns)] VALUES (...), ...`` or ``... SELECT ...`` over tables:
rows added to a table as its next version (running queries switch to it in the next cycle;
``tables.py``).
"""

from __future__ import annotations

from sparkcq.errors import AnalysisError, CatalogError, Location
from sparkcq.language.sql.statements import InsertSelect, InsertValues
from sparkcq.plan.binder import bind_query
from sparkcq.plan.nodes import EdgeKind
from sparkcq.runtime.table_queries import table_query_rows
from sparkcq.statements.context import StatementContext
from sparkcq.statements.tables import table_rows


def insert_values(stmt: InsertValues, text: str, ctx: StatementContext) -> int:
    """Add the rows; how many were added."""
    ensure_table(stmt.table, stmt.at, text, ctx)
    try:
        return ctx.tables.append(stmt.table, stmt.rows, stmt.columns, ctx.cycle())
    except CatalogError as e:
        raise AnalysisError(str(e), text, stmt.at) from None


def insert_select(stmt: InsertSelect, text: str, ctx: StatementContext) -> int:
    """Add the rows of a query over tables, evaluated now; how many were added."""
    ensure_table(stmt.table, stmt.at, text, ctx)
    bound = bind_query(stmt.select, text, ctx.catalog, ctx.spark, trusted=ctx.policy.trusted)
    if bound.plan.kind is not EdgeKind.TABLE:
        msg = ("INSERT INTO a table takes the rows of a query over tables, once; a query "
               "over streams writes its results into a sink: CREATE QUERY name INTO sink "
               "AS SELECT ...")
        raise AnalysisError(msg, text, stmt.loc)
    rows = table_query_rows(bound.plan, ctx.queries.rt, table_rows(ctx.catalog))
    try:
        return ctx.tables.append(stmt.table, [tuple(r.values()) for r in rows.to_pylist()],
                                 stmt.columns, ctx.cycle())
    except CatalogError as e:
        raise AnalysisError(str(e), text, stmt.at) from None


def ensure_table(name: str, at: Location, text: str, ctx: StatementContext) -> None:
    """Refuse INSERT INTO a stream, saying how rows reach one."""
    if name.lower() in ctx.catalog.streams:
        msg = (f"{name!r} is a stream; push rows to it (Engine.push, POST "
               f"/streams/{name}/rows, sparkcq push), INSERT INTO fills tables")
        raise AnalysisError(msg, text, at)
