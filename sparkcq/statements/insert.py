"""``INSERT INTO table [(columns)] VALUES (...), ...``: rows added to a table as its next
version (running queries switch to it in the next cycle; ``tables.py``).
"""

from __future__ import annotations

from sparkcq.errors import AnalysisError, CatalogError
from sparkcq.language.sql.statements import InsertValues
from sparkcq.statements.context import StatementContext


def insert_values(stmt: InsertValues, text: str, ctx: StatementContext) -> int:
    """Add the rows; how many were added."""
    if stmt.table.lower() in ctx.catalog.streams:
        msg = (f"{stmt.table!r} is a stream; push rows to it (Engine.push, POST "
               f"/streams/{stmt.table}/rows, sparkcq push), INSERT INTO fills tables")
        raise AnalysisError(msg, text, stmt.at)
    try:
        return ctx.tables.append(stmt.table, stmt.rows, stmt.columns, ctx.cycle())
    except CatalogError as e:
        raise AnalysisError(str(e), text, stmt.at) from None
