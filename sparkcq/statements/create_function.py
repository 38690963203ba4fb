"""A Python scalar function made callable from queries (``Engine.create_function``): Spark
runs it in its Python workers with rows shipped through Arrow. There is no SQL statement for
it: a function is code, given as a Python object.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

from pyspark.sql.types import DataType

from sparkcq.catalog import FunctionInfo, QueryStatus, ensure_identifier
from sparkcq.errors import CatalogError
from sparkcq.runtime.functions import (
    ensure_data_type,
    function_origin,
    register_python_function,
)
from sparkcq.statements.context import StatementContext


def create_function(ctx: StatementContext, name: str, fn: Callable[..., Any],
                    return_type: str | DataType, vectorized: bool = False) -> None:
    """Register ``fn`` as ``name(...)``; refused while running queries call a function of
    that name, or when an aggregate has it.
    """
    ensure_identifier(name, "function")
    key = name.lower()
    if key in ctx.catalog.aggregates:
        msg = f"an aggregate named {name!r} already exists; pick another name"
        raise CatalogError(msg)
    used = [q.name for q in ctx.catalog.queries.values()
            if q.status in (QueryStatus.RUNNING, QueryStatus.PAUSED)
            and re.search(rf"\b{re.escape(key)}\s*\(", q.text, re.IGNORECASE)]
    if key in ctx.catalog.functions and used:
        msg = f"function {name!r} is used by queries {used}; drop them before replacing it"
        raise CatalogError(msg)
    dtype = ensure_data_type(return_type)
    register_python_function(ctx.spark, name, fn, dtype, vectorized)
    params = ", ".join(inspect.signature(fn).parameters)
    ctx.catalog.functions[key] = FunctionInfo(
        name, f"{name}({params}) -> {dtype.simpleString()}", function_origin(fn))
