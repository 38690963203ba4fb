"""``CREATE LIBRARY prefix USING 'package.module'``: a module's annotated functions, its
classes with ``plus``, ``minus`` and ``value`` (aggregates) and its classes with
``process`` (table functions) become ``prefix.name(...)`` in
StreamAPAS queries (``docs/apas.md``, "Libraries"), accepted while queries run; queries
submitted afterwards may call them. The grammar does not change: it knows only
``NAME.NAME(args)``. Like ``CREATE AGGREGATE ... USING``, it loads code only from modules
the policy allows. Each function runs in Spark's Python workers through Arrow.
"""

from __future__ import annotations

import re

from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sparkcq.aggregates.user import ensure_module_allowed
from sparkcq.catalog import FunctionInfo, QueryStatus, ensure_identifier
from sparkcq.errors import AnalysisError, CatalogError
from sparkcq.language.apas.libraries import Library, Role, load_library
from sparkcq.language.apas.types import ApasType
from sparkcq.language.sql.statements import CreateLibrary
from sparkcq.runtime.functions import function_origin, register_python_function
from sparkcq.statements.context import StatementContext
from sparkcq.statements.create_aggregate import add_aggregate
from sparkcq.statements.create_table_function import add_table_function

_SPARK_TYPES: dict[ApasType, DataType] = {
    ApasType.INTEGER: LongType(), ApasType.DOUBLE: DoubleType(),
    ApasType.BOOLEAN: BooleanType(), ApasType.STRING: StringType(),
    ApasType.DATETIME: TimestampType(),
}


def create_library(stmt: CreateLibrary, text: str, ctx: StatementContext) -> None:
    """Load the library's module and add its functions to the catalog."""
    try:
        add_library(ctx, stmt.prefix, stmt.using)
    except CatalogError as e:
        raise AnalysisError(str(e), text, stmt.loc) from None


def add_library(ctx: StatementContext, prefix: str, module: str) -> Library:
    """Make ``module``'s functions callable as ``prefix.name(...)``; CatalogError when the
    prefix is taken or the module may not load code.
    """
    ensure_identifier(prefix, "library")
    key = prefix.lower()
    if key in ctx.catalog.libraries:
        msg = f"a library {prefix!r} exists already; DROP LIBRARY {prefix} first"
        raise CatalogError(msg)
    ensure_module_allowed(module, ctx.policy.allow_udf_modules, f"library {prefix!r}")
    library = load_library(key, module)
    for fn in library.functions.values():
        assert fn.fn is not None
        if fn.role is Role.TABLE and isinstance(fn.fn, type):  # a table function's class
            params = [(n, _SPARK_TYPES[t]) for n, t in zip(fn.param_names, fn.params,
                                                            strict=True)]
            columns = StructType([StructField(c, _SPARK_TYPES[t]) for c, t in fn.columns])
            add_table_function(ctx, fn.spark_name, fn.fn, params, columns,
                               f"{module}:{fn.fn.__name__}")
            continue
        assert fn.returns is not None
        if fn.role is Role.AGGREGATE and isinstance(fn.fn, type):  # a user aggregate's class
            params = [(f"x{i + 1}", _SPARK_TYPES[t]) for i, t in enumerate(fn.params)]
            add_aggregate(ctx, fn.spark_name, fn.fn, params, _SPARK_TYPES[fn.returns],
                          f"{module}:{fn.fn.__name__}")
            continue
        register_python_function(ctx.spark, fn.spark_name, fn.fn, _SPARK_TYPES[fn.returns],
                                 vectorized=False)
        args = ", ".join(t.value for t in fn.params)
        ctx.catalog.functions[fn.spark_name] = FunctionInfo(
            fn.spark_name, f"{fn.shown}({args}) -> {fn.returns.value}", function_origin(fn.fn))
    ctx.catalog.libraries[key] = library
    return library


def library_users(ctx: StatementContext, prefix: str) -> list[str]:
    """The running queries whose text calls a function of library ``prefix``."""
    call = re.compile(rf"\b{re.escape(prefix)}\s*\.\s*\w+\s*\(", re.IGNORECASE)
    return [q.name for q in ctx.catalog.queries.values()
            if q.status in (QueryStatus.RUNNING, QueryStatus.PAUSED) and call.search(q.text)]


def remove_library(ctx: StatementContext, prefix: str) -> None:
    """Take library ``prefix`` and its functions out of the catalog and of Spark."""
    library = ctx.catalog.libraries.pop(prefix.lower())
    for fn in library.functions.values():
        ctx.catalog.aggregates.pop(fn.spark_name, None)
        ctx.catalog.table_functions.pop(fn.spark_name, None)
        ctx.catalog.functions.pop(fn.spark_name, None)
        ctx.spark.sql(f"DROP TEMPORARY FUNCTION IF EXISTS {fn.spark_name}")
