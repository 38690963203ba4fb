"""The binder's part for a user table function in FROM: its input, partition columns and
arguments checked against the catalog, as a ``TableFunction`` node.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    MapType,
    StringType,
    StructType,
)

from sparkcq.errors import AnalysisError
from sparkcq.language.sql.statements import TableFunctionCall
from sparkcq.model.time import Duration
from sparkcq.plan.nodes import (
    EACH_CHUNK_ONCE,
    CountCutSpec,
    CutSpec,
    EdgeKind,
    KeyCutSpec,
    PlanNode,
    StreamScan,
    TableFunction,
    Window,
    walk,
)

if TYPE_CHECKING:
    from sparkcq.plan.binder import Binder

_CHUNKS = (CutSpec, CountCutSpec, KeyCutSpec)


def bind_table_function(binder: Binder, call: TableFunctionCall, plan: PlanNode,
                        stream: str) -> TableFunction:
    """``call`` over ``plan`` (stream ``stream``, with its window if it has one)."""
    fn = binder.catalog.table_functions.get(call.function.lower())
    if fn is None:
        known = ", ".join(sorted(binder.catalog.table_functions)) or "none"
        msg = (f"unknown table function {call.function!r}; table functions: {known} "
               "(CREATE FUNCTION ... RETURNS TABLE makes one)")
        raise AnalysisError(msg, binder.text, call.function_loc)
    chunked = isinstance(plan, Window) and isinstance(plan.spec, _CHUNKS)
    if not chunked and plan.kind is not EdgeKind.STREAM:
        what = "a table" if plan.kind is EdgeKind.TABLE else (
            "a window other than a chunk window" if isinstance(plan, Window)
            else "a stream of intervals or a keyed stream")
        msg = (f"table function {fn.name!r} reads a stream chunk by chunk, and {stream!r} "
               f"is {what}: give it the stream as it is (each instant a chunk) or cut it "
               "with [CUT ON t BY d], [CUT EVERY n ROWS] or [CUT ON k]")
        raise AnalysisError(msg, binder.text, call.loc)
    if chunked:
        assert isinstance(plan, Window) and isinstance(plan.spec, _CHUNKS)
        if plan.spec.chunks > 1:
            msg = (f"table function {fn.name!r} reads each chunk once, when it is cut; "
                   f"WINDOW {plan.spec.chunks} CHUNKS says how long a chunk's rows stay valid "
                   "in a relation, which a table function does not read: drop it (keep "
                   "earlier chunks in the function's state instead)")
            raise AnalysisError(msg, binder.text, call.loc)
        plan = replace(plan, spec=replace(plan.spec, chunks=EACH_CHUNK_ONCE))
    columns = {f.name.lower(): f for f in plan.schema.fields}
    keys = []
    for k in call.partition_by:
        if k.lower() not in columns:
            msg = (f"unknown column {k!r} in PARTITION BY of {fn.name!r}; {stream!r} has "
                   f"{', '.join(f.name for f in plan.schema.fields)}")
            raise AnalysisError(msg, binder.text, call.loc)
        keys.append(columns[k.lower()].name)
    taken = {k.lower() for k in keys}
    for f in fn.columns.fields:
        if f.name.lower() in taken:
            msg = (f"table function {fn.name!r} returns column {f.name!r}, which is also a "
                   "PARTITION BY column (the output begins with those); rename one")
            raise AnalysisError(msg, binder.text, call.loc)
    if len(call.args) != len(fn.param_names):
        params = ", ".join(fn.param_names) or "none"
        msg = (f"table function {fn.name!r} takes {len(fn.param_names)} argument(s) after "
               f"the table ({params}), got {len(call.args)}")
        raise AnalysisError(msg, binder.text, call.loc)
    args = tuple(_argument(binder, call, fn.name, name, dtype, value, plan)
                 for name, dtype, value in zip(fn.param_names, fn.param_types, call.args,
                                               strict=True))
    out = StructType([*[columns[k.lower()] for k in keys], *fn.columns.fields])
    return TableFunction(plan, fn, args, tuple(keys), order_columns(plan), out)


def order_columns(plan: PlanNode) -> tuple[str, ...]:
    """The columns a chunk's rows are ordered by: the stream's event time first, then every
    other column whose values Python can order (not structs, maps or arrays).
    """
    scans = [n for n in walk(plan) if isinstance(n, StreamScan)]
    first = [scans[0].time_col] if scans and scans[0].time_col in plan.schema.names else []
    rest = [f.name for f in plan.schema.fields if f.name not in first
            and not isinstance(f.dataType, StructType | MapType | ArrayType)]
    return tuple([*first, *rest])


def _argument(binder: Binder, call: TableFunctionCall, function: str, name: str,
              dtype: DataType, value: Any, plan: PlanNode) -> Any:
    """``value`` as the parameter's type; AnalysisError naming the parameter otherwise."""
    def wrong(why: str) -> AnalysisError:
        msg = (f"table function {function!r}: argument {name!r} is "
               f"{dtype.simpleString().upper()}, {why}")
        return AnalysisError(msg, binder.text, call.loc)

    if isinstance(value, Duration):
        try:
            value = value.to_units(plan.time_kind, plan.time_unit)
        except ValueError as e:
            raise wrong(str(e)) from None
    if value is None:
        return None
    if isinstance(dtype, StringType):
        if not isinstance(value, str):
            why = f"got {value!r}; write a string in quotes"
            raise wrong(why)
        return value
    if isinstance(dtype, BooleanType):
        if not isinstance(value, bool):
            why = f"got {value!r}; write TRUE or FALSE"
            raise wrong(why)
        return value
    if isinstance(value, bool | str):
        why = f"got {value!r}; write a number"
        raise wrong(why)
    if isinstance(dtype, DoubleType | FloatType):
        return float(value)
    if isinstance(dtype, DecimalType):
        return value
    if not isinstance(value, int):
        why = f"got {value!r}; write a whole number"
        raise wrong(why)
    return value


__all__ = ["bind_table_function", "order_columns"]
