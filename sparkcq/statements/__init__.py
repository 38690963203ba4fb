"""Statements: one handler per kind, each a function ``handler(statement, text, context)``.

``run_statement`` looks the handler up in ``HANDLERS`` by the statement's type; a script
runs its statements all or nothing (``script.py``). SQL statements come from
``language/sql``; a feed's HEADER, STOP and REMOVE (``feeds.py``) go through the same
handlers. Each handler gets the system it may change as an explicit ``StatementContext``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkcq.catalog import ensure_identifier
from sparkcq.errors import AnalysisError, CatalogError, Location, QuerySyntaxError
from sparkcq.language.sql.statements import (
    CreateAggregate,
    CreateLibrary,
    CreateQuery,
    CreateStream,
    CreateStreamAs,
    CreateTable,
    CreateTableFunction,
    Drop,
    Explain,
    InsertSelect,
    InsertValues,
    Refresh,
    Show,
)
from sparkcq.statements.context import StatementContext
from sparkcq.statements.create_aggregate import create_aggregate
from sparkcq.statements.create_library import create_library
from sparkcq.statements.create_query import create_query
from sparkcq.statements.create_stream import create_stream
from sparkcq.statements.create_stream_as import create_stream_as
from sparkcq.statements.create_table import create_table
from sparkcq.statements.create_table_function import create_table_function
from sparkcq.statements.drop import drop_statement
from sparkcq.statements.explain import explain_statement
from sparkcq.statements.feeds import FeedHeader, FeedRemove, FeedStop
from sparkcq.statements.header import header
from sparkcq.statements.insert import insert_select, insert_values
from sparkcq.statements.refresh import refresh
from sparkcq.statements.remove import remove
from sparkcq.statements.show import show_statement
from sparkcq.statements.stop import stop

Handler = Callable[[Any, str, StatementContext], Any]

HANDLERS: dict[type, Handler] = {
    CreateStream: create_stream,
    CreateStreamAs: create_stream_as,
    CreateTable: create_table,
    CreateQuery: create_query,
    CreateAggregate: create_aggregate,
    CreateTableFunction: create_table_function,
    CreateLibrary: create_library,
    Drop: drop_statement,
    Refresh: refresh,
    InsertValues: insert_values,
    InsertSelect: insert_select,
    Explain: explain_statement,
    Show: show_statement,
    FeedHeader: header,
    FeedStop: stop,
    FeedRemove: remove,
}

#: what each CREATE makes, for the identifier check of its name
CREATED_KINDS = {CreateStream: "stream", CreateStreamAs: "stream", CreateTable: "table",
                 CreateQuery: "query", CreateAggregate: "aggregate", CreateLibrary: "library",
                 CreateTableFunction: "function"}


def run_statement(stmt: Any, text: str, ctx: StatementContext) -> Any:
    """Run one statement through its handler; its result."""
    handler = HANDLERS.get(type(stmt))
    if handler is None:
        msg = f"unsupported statement {type(stmt).__name__}"
        raise QuerySyntaxError(msg)
    ensure_new_name(stmt, text)
    return handler(stmt, text, ctx)


def ensure_new_name(stmt: Any, text: str) -> None:
    """Refuse a CREATE whose name is not an identifier, underlining the name."""
    kind = CREATED_KINDS.get(type(stmt))
    name = getattr(stmt, "name", "")
    if kind is None or not name:
        return
    try:
        ensure_identifier(name, kind)
    except CatalogError as e:
        loc: Location | None = getattr(stmt, "name_loc", None) or getattr(stmt, "loc", None)
        raise AnalysisError(str(e), text, loc) from None


__all__ = ["HANDLERS", "StatementContext", "run_statement"]
