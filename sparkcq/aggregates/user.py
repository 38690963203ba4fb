"""User-defined aggregates: the protocol, their definition, loading by name.

A user aggregate is a class whose instances follow one group's relation as elements enter
and leave it::

    class Median:
        def __init__(self): ...          # a group's relation became non-empty
        def plus(self, x): ...           # an element with argument x entered
        def minus(self, x): ...          # an element with argument x left
        def value(self): ...             # the aggregate of what is in the relation now
        def merge(self, other): ...      # optional: absorb another instance's elements
                                         # (for partial aggregation; not called yet)

Instances must be picklable: between cycles they are kept in Spark state, pickled (the
class itself is not pickled with them). Like the built-in aggregates, an element whose
arguments include a NULL is not passed. ``value()`` is read after every instant at which
the group's relation changed and must return a value of the declared type (or None).

``CREATE AGGREGATE median(x DOUBLE) RETURNS DOUBLE USING 'sparkcq.aggregates.library:Median'``
loads the class by module path, only from modules the engine allows
(``Engine(allow_udf_modules=[...])``, ``sparkcq serve --allow-udf-module``);
``Engine.create_aggregate`` takes a class object directly.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampType,
)

from sparkcq.errors import CatalogError
from sparkcq.model.aggregate_functions import BUILTIN

#: modules whose aggregates and table functions any engine may load by name: the ones
#: sparkcq ships
BUILTIN_MODULES = ("sparkcq.aggregates.library", "sparkcq.table_functions.library")
_METHODS = ("plus", "minus", "value")


@dataclass(frozen=True)
class UserAggregate:
    """A user aggregate as the plan knows it: name, class, signature, where the code is.

    Plan nodes compare by value, so two queries calling the same aggregate share an
    operator; a redefinition under the same name is a different class, never shared.
    """

    name: str
    cls: type = field(repr=False)
    arg_names: tuple[str, ...]
    arg_types: tuple[DataType, ...]
    return_type: DataType
    origin: str  # ``module:Class line N``, for SHOW and logs

    @property
    def signature(self) -> str:
        """``name(x DOUBLE, p DOUBLE) -> DOUBLE``."""
        args = ", ".join(f"{n} {t.simpleString().upper()}"
                         for n, t in zip(self.arg_names, self.arg_types, strict=True))
        return f"{self.name}({args}) -> {self.return_type.simpleString().upper()}"


#: types a user aggregate takes and returns: those with a plain Python value
SCALAR_TYPES = (BooleanType, ByteType, ShortType, IntegerType, LongType, FloatType,
                DoubleType, DecimalType, StringType, TimestampType, DateType, BinaryType)


def ensure_scalar_type(dtype: DataType, what: str) -> DataType:
    """``dtype`` if a user aggregate may take or return it; CatalogError otherwise."""
    if not isinstance(dtype, SCALAR_TYPES):
        msg = (f"{what} is {dtype.simpleString().upper()}; user aggregates take and return "
               "BOOLEAN, integral, FLOAT, DOUBLE, DECIMAL, STRING, TIMESTAMP, DATE or BINARY")
        raise CatalogError(msg)
    return dtype


def class_origin(cls: type) -> str:
    """Where a class's code lives: ``module:Class line N``."""
    name = f"{cls.__module__}:{cls.__qualname__}"
    try:
        return f"{name} line {inspect.getsourcelines(cls)[1]}"
    except (OSError, TypeError):
        return name


def ensure_aggregate_class(cls: Any, name: str) -> type:
    """``cls`` if it is a class with the aggregate protocol; CatalogError naming what lacks."""
    if not isinstance(cls, type):
        msg = f"aggregate {name!r} must be a class, not {type(cls).__name__}"
        raise CatalogError(msg)
    missing = [m for m in _METHODS if not callable(getattr(cls, m, None))]
    if missing:
        msg = (f"aggregate {name!r}: class {cls.__qualname__} lacks {', '.join(missing)}; "
               "a user aggregate needs plus(*args), minus(*args) and value()")
        raise CatalogError(msg)
    try:
        cls()
    except Exception as e:  # noqa: BLE001 - user code may raise anything
        msg = f"aggregate {name!r}: {cls.__qualname__}() cannot be created without arguments: {e}"
        raise CatalogError(msg) from e
    return cls


def module_allowed(module: str, allowed: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``allowed`` or inside one of them (a package)."""
    return any(module == a or module.startswith(a + ".") for a in (*BUILTIN_MODULES, *allowed))


def ensure_module_allowed(module: str, allowed: tuple[str, ...], what: str) -> None:
    """CatalogError naming ``what`` loads it unless ``module`` may load code."""
    if not module_allowed(module, allowed):
        listed = ", ".join((*BUILTIN_MODULES, *allowed))
        msg = (f"{what}: module {module!r} is not allowed to load code; "
               f"allowed: {listed} (start the server with --allow-udf-module {module})")
        raise CatalogError(msg)


def load_named_class(path: str, what: str, allowed: tuple[str, ...]) -> Any:
    """What ``'package.module:Class'`` names, if its module is allowed; ``what`` (``aggregate
    'median'``) begins every error.
    """
    module_name, sep, class_name = path.partition(":")
    if not sep or not module_name or not class_name:
        msg = f"{what}: USING {path!r} must name 'package.module:Class'"
        raise CatalogError(msg)
    ensure_module_allowed(module_name, allowed, what)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        msg = f"{what}: cannot import {module_name!r}: {e}"
        raise CatalogError(msg) from e
    cls = getattr(module, class_name, None)
    if cls is None:
        msg = f"{what}: module {module_name!r} has no {class_name!r}"
        raise CatalogError(msg)
    return cls


def load_aggregate_class(path: str, name: str, allowed: tuple[str, ...]) -> type:
    """The class named by ``'package.module:Class'``, if its module is allowed."""
    return ensure_aggregate_class(load_named_class(path, f"aggregate {name!r}", allowed), name)


#: names a user aggregate may not take: the built-in aggregates
BUILTIN_AGGREGATES = (*BUILTIN, "stats")


def define_aggregate(name: str, cls: Any, params: list[tuple[str, DataType]],
                     return_type: DataType, using: str | None = None) -> UserAggregate:
    """A checked definition: a free-standing name, a class with the protocol, types a user
    aggregate may take and return; CatalogError saying what is wrong otherwise. ``using``:
    the module path it was loaded by, if any.
    """
    if not name.isidentifier():
        msg = f"aggregate name {name!r} must be an identifier"
        raise CatalogError(msg)
    if name.lower() in BUILTIN_AGGREGATES:
        msg = f"{name!r} is a built-in aggregate; give the user aggregate another name"
        raise CatalogError(msg)
    if not params:
        msg = f"aggregate {name!r} needs at least one argument"
        raise CatalogError(msg)
    for arg, dtype in params:
        ensure_scalar_type(dtype, f"aggregate {name!r}: argument {arg!r}")
    ensure_scalar_type(return_type, f"aggregate {name!r}: the return type")
    cls = ensure_aggregate_class(cls, name)
    origin = class_origin(cls) if using is None else f"{using} ({class_origin(cls)})"
    return UserAggregate(name, cls, tuple(a for a, _ in params), tuple(t for _, t in params),
                         return_type, origin)
