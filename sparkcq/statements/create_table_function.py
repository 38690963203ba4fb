"""``CREATE FUNCTION name(param TYPE, ...) RETURNS TABLE (col TYPE, ...) USING
'module:Class'``: a table function with state, accepted while queries run; queries
submitted afterwards may read from it. ``USING`` loads code only from modules the policy
allows.
"""

from __future__ import annotations

from pyspark.sql.types import DataType, StructField, StructType

from sparkcq.catalog import ensure_identifier
from sparkcq.errors import AnalysisError, CatalogError
from sparkcq.language.sql.statements import ColumnDef, CreateTableFunction
from sparkcq.runtime.functions import ensure_data_type, ship_module_by_value
from sparkcq.statements.context import StatementContext
from sparkcq.table_functions.user import define_table_function, load_table_function_class


def create_table_function(stmt: CreateTableFunction, text: str, ctx: StatementContext) -> None:
    """Load the function's class and add it to the catalog."""
    params = _typed(stmt.params, "parameter", text)
    columns = StructType([StructField(n, t) for n, t in _typed(stmt.columns, "column", text)])
    try:
        cls = load_table_function_class(stmt.using, stmt.name, ctx.policy.allow_udf_modules)
        add_table_function(ctx, stmt.name, cls, params, columns, stmt.using)
    except CatalogError as e:
        raise AnalysisError(str(e), text, stmt.loc) from None


def _typed(defs: tuple[ColumnDef, ...], what: str, text: str) -> list[tuple[str, DataType]]:
    out = []
    for d in defs:
        try:
            out.append((d.name, ensure_data_type(d.type_sql)))
        except CatalogError:
            msg = f"unknown type {d.type_sql!r} for {what} {d.name!r}"
            raise AnalysisError(msg, text, d.loc) from None
    return out


def add_table_function(ctx: StatementContext, name: str, cls: type,
                       params: list[tuple[str, DataType]], columns: StructType,
                       using: str | None = None) -> None:
    """Make class ``cls`` readable from queries as ``FROM name(TABLE s, ...)`` (also from
    Python: ``Engine.create_table_function``); CatalogError when the name is taken.
    """
    ensure_identifier(name, "function")
    key = name.lower()
    for space, kind in ((ctx.catalog.table_functions, "table function"),
                        (ctx.catalog.functions, "function"),
                        (ctx.catalog.aggregates, "aggregate")):
        if key in space:
            msg = f"a {kind} named {name!r} already exists; drop it first or pick another name"
            raise CatalogError(msg)
    fn = define_table_function(name, cls, params, columns, using)
    ship_module_by_value(cls)
    ctx.catalog.table_functions[key] = fn
