"""Function libraries of the StreamAPAS language: functions by prefix.

``agg``, ``window`` and ``util`` are built in; a user's library is a Python module whose
public, annotated functions become ``prefix.name(...)``, added at run time
(``CREATE LIBRARY geo USING 'mypkg.geo'``, ``Engine.register_library``) without a grammar
change: the grammar knows only ``NAME.NAME(args)``. A user library's functions run as
Python functions in Spark's workers through Arrow (``runtime/functions.py``); run-time user
aggregates (``CREATE AGGREGATE``) are callable as ``agg.<name>``.
"""

from __future__ import annotations

import datetime as dt
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, get_type_hints

from sparkcq.errors import CatalogError
from sparkcq.language.apas.types import ApasType
from sparkcq.model.aggregate_functions import BUILTIN, DERIVED_AGGREGATES


class Role(Enum):
    """What a function does in a query."""

    SCALAR = "scalar"  # a value per row: ``geo.dist($a.x, $a.y)``
    AGGREGATE = "aggregate"  # a value per group: ``agg.avg($I.val)``
    WINDOW = "window"  # a where-clause that puts a window on an input
    UNION = "union"  # a where-clause whose result is the input ``$new``
    JOIN = "join"  # a where-clause that says how two inputs join: ``util.left_join($a, $b)``
    TABLE = "table"  # a where-clause that reads a stream through a table function


@dataclass(frozen=True)
class LibraryFunction:
    """One function of a library; ``params``/``returns`` for scalar functions and a user
    library's aggregates (``fn`` the function, or the aggregate's class).
    """

    library: str
    name: str
    role: Role
    doc: str
    params: tuple[ApasType, ...] = ()
    returns: ApasType | None = None
    spark_name: str = ""  # the name it is called by in Spark SQL
    fn: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    columns: tuple[tuple[str, ApasType], ...] = ()  # what a table function emits
    param_names: tuple[str, ...] = ()  # a table function's parameters, for messages

    @property
    def shown(self) -> str:
        """``library.name``."""
        return f"{self.library}.{self.name}"


@dataclass(frozen=True)
class Library:
    """Functions under one prefix; ``module`` is where a user library's code lives."""

    prefix: str
    functions: dict[str, LibraryFunction]
    module: str = "built-in"


def _builtin(prefix: str, role: Role, docs: dict[str, str]) -> Library:
    return Library(prefix, {n: LibraryFunction(prefix, n, role, d) for n, d in docs.items()})


#: aggregates every engine has (user aggregates join them by name); ``stats`` returns a tree
AGGREGATES = {
    **{name: builtin.doc for name, builtin in BUILTIN.items()},
    "stats": "agg.stats(x): a tree [min, max, median, avg] of INTEGER or DOUBLE x",
    "count_distinct": "agg.count_distinct(x): how many distinct values of x (not NULL) "
                      "the group holds, an INTEGER",
    **{name: f"agg.{name}(x): {derived.doc}, a DOUBLE"
       for name, derived in DERIVED_AGGREGATES.items()},
}

#: how ``util.<kind>_join($a, $b)`` joins its two inputs, as SQL's joins do
JOINS = {
    "left": "util.left_join($a, $b): every element of $a, with its partners in $b or NULLs",
    "right": "util.right_join($a, $b): every element of $b, with its partners in $a or NULLs",
    "full": "util.full_join($a, $b): the elements of both, with their partners or NULLs",
    "semi": "util.semi_join($a, $b): the elements of $a that have a partner in $b",
    "anti": "util.anti_join($a, $b): the elements of $a that have no partner in $b",
}

BUILT_IN: dict[str, Library] = {
    "agg": _builtin("agg", Role.AGGREGATE, AGGREGATES),
    "window": _builtin("window", Role.WINDOW, {
        "range": "window.range($s, 1h [, slide]): each element lives for the range",
        "now": "window.now($s): each element lives for one time unit",
        "unbounded": "window.unbounded($s): elements never leave",
        "rows": "window.rows($s, n [, $s.k ...]): the last n elements (of each k)",
        "session": "window.session($s, gap [, $s.k ...]): an element lives until gap after "
                   "the last event of its session (of its k)",
        "cut": "window.cut($s, d [, m]): chunks of d of event time, each valid for m chunks",
        "cut_rows": "window.cut_rows($s, n [, m]): chunks of n rows, each valid for m chunks",
        "cut_key": "window.cut_key($s, $s.k ...): a chunk whenever k changes",
    }),
    "util": Library("util", {
        "union": LibraryFunction("util", "union", Role.UNION,
                                 "util.union($a[T], $b[T], ...): all elements of the inputs, "
                                 "as $new"),
        **{f"{kind}_join": LibraryFunction("util", f"{kind}_join", Role.JOIN, doc)
           for kind, doc in JOINS.items()},
    }),
}

_PYTHON_TYPES = {int: ApasType.INTEGER, float: ApasType.DOUBLE, bool: ApasType.BOOLEAN,
                 str: ApasType.STRING, dt.datetime: ApasType.DATETIME}


def spark_function_name(prefix: str, name: str) -> str:
    """The name a user library's function is registered under in Spark SQL."""
    return f"{prefix}__{name}".lower()


def load_library(prefix: str, module_path: str) -> Library:
    """The public functions of ``module_path`` as library ``prefix``; each needs annotated
    parameters and return type of int, float, bool, str or datetime (the language's
    INTEGER, DOUBLE, BOOLEAN, STRING, DATETIME).
    """
    if prefix.lower() in BUILT_IN:
        msg = f"library prefix {prefix!r} is built in; pick another prefix"
        raise CatalogError(msg)
    try:
        module = importlib.import_module(module_path)
    except ImportError as e:
        msg = f"cannot import library module {module_path!r}: {e}"
        raise CatalogError(msg) from None
    functions: dict[str, LibraryFunction] = {}
    for name, fn in vars(module).items():
        if name.startswith("_") or getattr(fn, "__module__", None) != module.__name__:
            continue  # private, or imported into the module, not its own
        if inspect.isfunction(fn):
            functions[name.lower()] = _library_function(prefix, name, fn, module_path)
        elif inspect.isclass(fn) and all(callable(getattr(fn, m, None))
                                         for m in ("plus", "minus", "value")):
            functions[name.lower()] = _library_aggregate(prefix, name, fn, module_path)
        elif inspect.isclass(fn) and callable(getattr(fn, "process", None)):
            functions[name.lower()] = _library_table_function(prefix, name, fn, module_path)
    if not functions:
        msg = (f"module {module_path!r} defines no public functions, aggregate classes or "
               "table function classes to make a library of")
        raise CatalogError(msg)
    return Library(prefix.lower(), functions, module_path)


def _library_aggregate(prefix: str, name: str, cls: type,
                       module_path: str) -> LibraryFunction:
    """A class with ``plus``, ``minus`` and ``value`` (``docs/user-aggregates``' protocol):
    its arguments are ``plus``'s annotated parameters, its type ``value``'s return.
    """
    params = _parameters(cls.plus, f"{module_path}.{name}.plus", skip_first=True)  # type: ignore[attr-defined]
    returns = _returned(cls.value, f"{module_path}.{name}.value")  # type: ignore[attr-defined]
    if not params:
        msg = f"{module_path}.{name}.plus takes no argument; an aggregate needs one or more"
        raise CatalogError(msg)
    doc = (inspect.getdoc(cls) or "").split("\n")[0]
    return LibraryFunction(prefix.lower(), name.lower(), Role.AGGREGATE, doc, params,
                           returns, spark_function_name(prefix, name), cls)


def _library_table_function(prefix: str, name: str, cls: type,
                            module_path: str) -> LibraryFunction:
    """A class with ``process`` (``sparkcq.table_functions``' protocol): its arguments are
    ``__init__``'s annotated parameters, its columns the class attribute ``returns`` (names
    to ``int``, ``float``, ``bool``, ``str`` or ``datetime``).
    """
    where = f"{module_path}.{name}"
    params = _parameters(cls.__init__, f"{where}.__init__", skip_first=True)  # type: ignore[misc]
    declared = getattr(cls, "returns", None)
    if not isinstance(declared, dict) or not declared:
        msg = (f"{where}: a table function class needs a class attribute returns = {{'column': "
               "type, ...}} naming the columns it emits (int, float, bool, str or datetime)")
        raise CatalogError(msg)
    columns = []
    for column, kind in declared.items():
        if _PYTHON_TYPES.get(kind) is None:
            msg = f"{where}.returns: column {column!r} needs int, float, bool, str or datetime"
            raise CatalogError(msg)
        columns.append((str(column), _PYTHON_TYPES[kind]))
    doc = (inspect.getdoc(cls) or "").split("\n")[0]
    names = tuple(list(inspect.signature(cls.__init__).parameters)[1:])  # type: ignore[misc]
    return LibraryFunction(prefix.lower(), name.lower(), Role.TABLE, doc, params, None,
                           spark_function_name(prefix, name), cls, tuple(columns), names)


def _library_function(prefix: str, name: str, fn: Callable[..., Any],
                      module_path: str) -> LibraryFunction:
    where = f"{module_path}.{name}"
    params, returns = _parameters(fn, where), _returned(fn, where)
    doc = (inspect.getdoc(fn) or "").split("\n")[0]
    return LibraryFunction(prefix.lower(), name.lower(), Role.SCALAR, doc, params,
                           returns, spark_function_name(prefix, name), fn)


def _hints(fn: Callable[..., Any], where: str) -> dict[str, Any]:
    try:
        return get_type_hints(fn)
    except Exception as e:  # noqa: BLE001 - any failure to evaluate annotations
        msg = f"{where}: cannot read its type annotations: {e}"
        raise CatalogError(msg) from None


def _parameters(fn: Callable[..., Any], where: str,
                skip_first: bool = False) -> tuple[ApasType, ...]:
    """The language's types of ``fn``'s annotated parameters (``self`` skipped)."""
    hints = _hints(fn, where)
    params = []
    for param in list(inspect.signature(fn).parameters.values())[1 if skip_first else 0:]:
        kind = _PYTHON_TYPES.get(hints.get(param.name))  # type: ignore[arg-type]
        if kind is None:
            msg = (f"{where}: parameter {param.name!r} needs an annotation of int, float, "
                   "bool, str or datetime")
            raise CatalogError(msg)
        params.append(kind)
    return tuple(params)


def _returned(fn: Callable[..., Any], where: str) -> ApasType:
    """The language's type of ``fn``'s annotated return."""
    returns = _PYTHON_TYPES.get(_hints(fn, where).get("return"))  # type: ignore[arg-type]
    if returns is None:
        msg = f"{where}: its return annotation must be int, float, bool, str or datetime"
        raise CatalogError(msg)
    return returns
