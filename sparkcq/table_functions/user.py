"""User table functions with state: the protocol, their definition, loading by name.

A table function reads a stream one **chunk** at a time and keeps what it wants across
chunks. It is a class; one instance follows the whole query, or, with ``PARTITION BY``, one
key's rows::

    class Deduplicate:
        def __init__(self, horizon): ...     # query scope: lives across chunks and cycles
        def begin_chunk(self, chunk): ...    # optional: a chunk starts (chunk.at: its cut)
        def process(self, rows): ...         # the chunk's rows, a pandas DataFrame; called
                                             # once per batch of at most ``batch_rows`` rows
                                             # (a class attribute; 10,000 if not set)
        def end_chunk(self): ...             # optional: the chunk is over

``process`` and ``end_chunk`` return the rows to emit: a pandas DataFrame with the declared
columns, a list of tuples (in the declared order) or of dicts, one dict, or None. What the
instance holds is its query-scope state; what ``begin_chunk`` sets up and ``end_chunk``
drops, its chunk-scope state; what one ``process`` call keeps in local variables, its
call-scope state.

A chunk is what a chunk window (``[CUT ...]``) cuts; over a stream without one, each instant
is a chunk (the events with one event time). Chunks come in event-time order, each whole and
once, and a chunk's rows in a fixed order (event time first, then the values), so the
output does not depend on how input was split into cycles. Instances must be picklable:
between cycles they are kept in Spark state, pickled (the class itself by reference).

``CREATE FUNCTION dedup(horizon BIGINT) RETURNS TABLE (callee STRING, t BIGINT) USING
'sparkcq.table_functions.library:Deduplicate'`` loads the class by module path, only from
modules the engine allows; ``Engine.create_table_function`` takes a class object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.types import DataType, StructType

from sparkcq.aggregates.user import class_origin, ensure_scalar_type, load_named_class
from sparkcq.errors import CatalogError

#: rows one ``process`` call receives at most (a chunk's rows are split in their order)
BATCH_ROWS = 10_000
_METHODS = ("process",)


@dataclass(frozen=True)
class Chunk:
    """What ``begin_chunk`` learns about the chunk that starts.

    ``at``: its cut point on the stream's time axis (microseconds since the epoch for a
    timestamp stream), which is also the event time of every row emitted for it;
    ``rows``: how many rows of the instance's key it holds.
    """

    at: int
    rows: int


@dataclass(frozen=True)
class UserTableFunction:
    """A user table function as the plan knows it: name, class, parameters, output columns.

    Plan nodes compare by value, so two queries calling one function with equal arguments
    over one input share its operator and its state.
    """

    name: str
    cls: type = field(repr=False)
    param_names: tuple[str, ...]
    param_types: tuple[DataType, ...]
    columns: StructType  # what ``process`` and ``end_chunk`` emit
    origin: str  # ``module:Class line N``, for SHOW and logs

    @property
    def signature(self) -> str:
        """``name(horizon BIGINT) -> TABLE (callee STRING, t BIGINT)``."""
        params = ", ".join(f"{n} {t.simpleString().upper()}"
                           for n, t in zip(self.param_names, self.param_types, strict=True))
        cols = ", ".join(f"{f.name} {f.dataType.simpleString().upper()}"
                         for f in self.columns.fields)
        return f"{self.name}({params}) -> TABLE ({cols})"


def ensure_table_function_class(cls: Any, name: str) -> type:
    """``cls`` if it is a class with the protocol; CatalogError naming what it lacks."""
    if not isinstance(cls, type):
        msg = f"table function {name!r} must be a class, not {type(cls).__name__}"
        raise CatalogError(msg)
    missing = [m for m in _METHODS if not callable(getattr(cls, m, None))]
    if missing:
        msg = (f"table function {name!r}: class {cls.__qualname__} lacks "
               f"{', '.join(missing)}; a table function needs process(rows), and may have "
               "begin_chunk(chunk) and end_chunk()")
        raise CatalogError(msg)
    return cls


def load_table_function_class(path: str, name: str, allowed: tuple[str, ...]) -> type:
    """The class named by ``'package.module:Class'``, if its module is allowed."""
    cls = load_named_class(path, f"table function {name!r}", allowed)
    return ensure_table_function_class(cls, name)


def define_table_function(name: str, cls: Any, params: list[tuple[str, DataType]],
                          columns: StructType, using: str | None = None) -> UserTableFunction:
    """A checked definition: an identifier, a class with the protocol, scalar parameters
    and at least one output column of a type the workers can build; CatalogError otherwise.
    """
    if not name.isidentifier():
        msg = f"table function name {name!r} must be an identifier"
        raise CatalogError(msg)
    for param, dtype in params:
        ensure_scalar_type(dtype, f"table function {name!r}: parameter {param!r}")
    if not columns.fields:
        msg = f"table function {name!r} needs at least one column in RETURNS TABLE (...)"
        raise CatalogError(msg)
    seen: set[str] = set()
    for f in columns.fields:
        if f.name.lower() in seen:
            msg = f"table function {name!r}: column {f.name!r} is declared twice"
            raise CatalogError(msg)
        seen.add(f.name.lower())
        if f.name.startswith("_"):
            msg = (f"table function {name!r}: column {f.name!r} begins with '_', which "
                   "sparkcq keeps for its own columns")
            raise CatalogError(msg)
        ensure_scalar_type(f.dataType, f"table function {name!r}: column {f.name!r}")
    cls = ensure_table_function_class(cls, name)
    origin = class_origin(cls) if using is None else f"{using} ({class_origin(cls)})"
    return UserTableFunction(name, cls, tuple(p for p, _ in params),
                             tuple(t for _, t in params), columns, origin)


__all__ = ["BATCH_ROWS", "Chunk", "UserTableFunction", "define_table_function",
           "ensure_table_function_class", "load_table_function_class"]
