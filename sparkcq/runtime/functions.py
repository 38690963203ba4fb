"""User Python scalar functions, run by Spark through Arrow (never row by row over Py4J).

A function is registered in the Spark session under its SQL name, so query text calls it
like a built-in and Spark's analyzer types it; its rows travel to the Python worker in Arrow
batches (``useArrow=True``), or whole pandas Series when the function is vectorised.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, _parse_datatype_string

from sparkcq.errors import CatalogError


def function_origin(fn: Callable[..., Any]) -> str:
    """Where a user function lives, for logs and errors: ``module.fn line N``."""
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    try:
        return f"{name} line {inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return name


def ensure_data_type(return_type: str | DataType) -> DataType:
    """A Spark type from its SQL name ('DOUBLE', 'array<int>') or a DataType."""
    if isinstance(return_type, DataType):
        return return_type
    try:
        return _parse_datatype_string(return_type)
    except Exception:  # noqa: BLE001 - Spark raises several kinds of parse errors
        msg = f"unknown return type {return_type!r}; use a Spark SQL type such as 'DOUBLE'"
        raise CatalogError(msg) from None


def ship_module_by_value(fn: Callable[..., Any]) -> None:
    """Pickle ``fn``'s module by value when workers could not import it by name."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if module is None or path is None or module.__name__ == "__main__":
        return
    if any(part in path for part in ("site-packages", "dist-packages")):
        return
    cloudpickle.register_pickle_by_value(module)


def register_python_function(spark: SparkSession, name: str, fn: Callable[..., Any],
                             return_type: DataType, vectorized: bool) -> None:
    """Make ``fn`` callable as ``name(...)`` in Spark SQL.

    The function's module travels to the Python workers by value, unless it is an installed
    package: a function written in a notebook, a script or a test module must not need its
    file importable on every executor.
    """
    ship_module_by_value(fn)
    if vectorized:
        udf = F.pandas_udf(fn, return_type)  # type: ignore[call-overload]
    else:
        udf = F.udf(fn, return_type, useArrow=True)
    spark.udf.register(name, udf)
