"""Statements of the streaming SQL dialect, as parsed and before binding to the catalog."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any

import sqlglot.expressions as exp

from sparkcq.errors import Location
from sparkcq.language.apas.syntax import Program
from sparkcq.model.windows import WindowSpec


class Options(dict[str, str]):
    """A statement's ``WITH (...)`` options by lower-case name, and where each is written.

    A plain ``dict`` for everything that reads the values; ``value_at`` and
    ``assignment_at`` give an error about an option the place to underline: the value the
    parser read, never a search of the text (a value that also appears earlier in the
    statement would be found there).
    """

    def __init__(self, values: Mapping[str, str] | None = None,
                 value_spans: Mapping[str, Location] | None = None,
                 assignment_spans: Mapping[str, Location] | None = None) -> None:
        super().__init__(values or {})
        self.value_spans = dict(value_spans or {})
        self.assignment_spans = dict(assignment_spans or {})

    def copy(self) -> Options:
        """A copy, with the places."""
        return Options(self, self.value_spans, self.assignment_spans)

    def value_at(self, key: str, default: Location | None) -> Location | None:
        """Where option ``key``'s value is written; ``default`` if it is not written."""
        return self.value_spans.get(key, default)

    def assignment_at(self, key: str, default: Location | None) -> Location | None:
        """Where ``key = 'value'`` is written; ``default`` if it is not written."""
        return self.assignment_spans.get(key, default)


def value_at(options: Mapping[str, str], key: str, default: Location | None) -> Location | None:
    """Where option ``key``'s value is written, if ``options`` came from a statement's text;
    else ``default`` (options given from Python, a feed's HEADER).
    """
    return options.value_at(key, default) if isinstance(options, Options) else default


def copy_options(options: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``options``, with their places if they came from a statement's text."""
    return options.copy() if isinstance(options, Options) else dict(options)


def assignment_at(options: Mapping[str, str], key: str,
                  default: Location | None) -> Location | None:
    """Where ``key = 'value'`` is written, if ``options`` came from a statement's text; else
    ``default``.
    """
    return options.assignment_at(key, default) if isinstance(options, Options) else default


class OutputForm(Enum):
    """How a query's result relation becomes output (``docs/semantics.md``)."""

    INTERVALS = "intervals"
    ISTREAM = "istream"
    DSTREAM = "dstream"
    RSTREAM = "rstream"
    CHANGELOG = "changelog"


class ObjectKind(StrEnum):
    """What a DROP names (and what a script's statements create)."""

    QUERY = "QUERY"
    STREAM = "STREAM"
    TABLE = "TABLE"
    AGGREGATE = "AGGREGATE"
    LIBRARY = "LIBRARY"
    FUNCTION = "FUNCTION"


class ShowTarget(StrEnum):
    """What SHOW lists."""

    STREAMS = "STREAMS"
    TABLES = "TABLES"
    QUERIES = "QUERIES"
    FUNCTIONS = "FUNCTIONS"
    AGGREGATES = "AGGREGATES"


class ExplainFormat(StrEnum):
    """How EXPLAIN GLOBAL draws the shared plan."""

    TEXT = "text"
    DOT = "dot"  # Graphviz


@dataclass(frozen=True)
class ColumnDef:
    """A column in a CREATE STREAM/TABLE column list."""

    name: str
    type_sql: str
    loc: Location


@dataclass(frozen=True)
class SourceWindow:
    """A window clause attached to the FROM item whose name ends at ``table_end``."""

    spec: WindowSpec
    table_end: int
    loc: Location


@dataclass(frozen=True)
class TableFunctionCall:
    """A user table function read in FROM: ``f(TABLE s [window] PARTITION BY k, args)``.

    The call's text is replaced by the stream's name (and ``AS f`` when no alias follows),
    so the binder finds the call, like a window, by where that name ends.
    """

    function: str
    partition_by: tuple[str, ...]
    args: tuple[Any, ...]  # literal values; a ``Duration`` for a length of event time
    loc: Location  # the whole call
    function_loc: Location  # the function's name


@dataclass(frozen=True)
class SelectText:
    """A SELECT parsed by sqlglot, with the window clauses cut out of its text.

    ``windows`` maps the character offset where a FROM item's name ends to its window, so
    the binder can find the window of each ``exp.Table`` through its identifier's position;
    ``window_calls`` maps the column each Spark ``window(...)`` call left in the text to its
    window (``window_functions.py``).
    """

    text: str
    expression: exp.Expression
    form: OutputForm
    windows: dict[int, SourceWindow]
    offset: int
    window_calls: dict[str, SourceWindow] = field(default_factory=dict)
    table_functions: dict[int, TableFunctionCall] = field(default_factory=dict)


@dataclass(frozen=True)
class ApasText:
    """A query in the StreamAPAS language (``LANGUAGE apas``), parsed; it is compiled
    against the catalog when its statement runs (``language/apas/compiler.py``).
    """

    program: Program


@dataclass(frozen=True)
class CreateStream:
    """``CREATE STREAM name (cols) WITH (...)``: a source stream."""

    name: str
    columns: tuple[ColumnDef, ...]
    options: dict[str, str]
    loc: Location
    name_loc: Location | None = None  # the name's own place, quotes and all


@dataclass(frozen=True)
class CreateTable:
    """``CREATE TABLE name [(cols)] WITH (format=..., ...)``: a static relation (without
    columns only for a PostgreSQL table, whose columns are then the database's).
    """

    name: str
    columns: tuple[ColumnDef, ...]
    options: dict[str, str]
    loc: Location
    name_loc: Location | None = None  # the name's own place, quotes and all


@dataclass(frozen=True)
class CreateQuery:
    """``CREATE QUERY name [INTO sink] [WITH (...)] [LANGUAGE apas] AS select``: a
    continuous query.
    """

    name: str
    select: SelectText | ApasText
    options: dict[str, str] = field(default_factory=dict)
    loc: Location | None = None
    name_loc: Location | None = None  # the name's own place, quotes and all


@dataclass(frozen=True)
class CreateStreamAs:
    """``CREATE STREAM name AS select``: a derived stream other queries can read."""

    name: str
    select: SelectText
    options: dict[str, str] = field(default_factory=dict)
    loc: Location | None = None
    name_loc: Location | None = None  # the name's own place, quotes and all


@dataclass(frozen=True)
class CreateAggregate:
    """``CREATE AGGREGATE name(arg TYPE, ...) RETURNS TYPE USING 'module:Class'``."""

    name: str
    params: tuple[ColumnDef, ...]
    returns: str
    using: str
    loc: Location
    name_loc: Location | None = None  # the name's own place, quotes and all


@dataclass(frozen=True)
class CreateTableFunction:
    """``CREATE FUNCTION name(param TYPE, ...) RETURNS TABLE (col TYPE, ...) USING
    'module:Class'``: a table function with state (``sparkcq.table_functions``).
    """

    name: str
    params: tuple[ColumnDef, ...]
    columns: tuple[ColumnDef, ...]
    using: str
    loc: Location
    name_loc: Location | None = None  # the name's own place, quotes and all


@dataclass(frozen=True)
class CreateLibrary:
    """``CREATE LIBRARY prefix USING 'package.module'``: a module's functions, callable from
    StreamAPAS queries as ``prefix.name(...)`` (language/apas/libraries.py).
    """

    prefix: str
    using: str
    loc: Location
    name_loc: Location | None = None  # the name's own place, quotes and all

    @property
    def name(self) -> str:
        """The library's prefix, which is its name."""
        return self.prefix


@dataclass(frozen=True)
class Drop:
    """``DROP QUERY|STREAM|TABLE|AGGREGATE|LIBRARY name``."""

    kind: ObjectKind
    name: str
    loc: Location


@dataclass(frozen=True)
class Refresh:
    """``REFRESH TABLE name``: read the table again from where it came from."""

    name: str
    loc: Location


@dataclass(frozen=True)
class InsertValues:
    """``INSERT INTO table [(columns)] VALUES (...), ...``: rows added to a table, each a
    tuple of literal values (``columns``: the order they come in; empty: the table's).
    """

    table: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    loc: Location
    at: Location  # the table's name


@dataclass(frozen=True)
class InsertSelect:
    """``INSERT INTO table [(columns)] SELECT ...``: the rows of a query over tables added
    to a table, once (a query over streams writes into a sink: CREATE QUERY ... INTO).
    """

    table: str
    columns: tuple[str, ...]
    select: SelectText
    loc: Location
    at: Location  # the table's name


@dataclass(frozen=True)
class Explain:
    """``EXPLAIN [GLOBAL [DOT]] [name]``, ``EXPLAIN SELECT ...``, ``EXPLAIN LANGUAGE apas
    '...'`` or ``EXPLAIN ANALYZE`` (the shared plan and what the last cycles cost).
    """

    name: str | None
    glob: bool = False
    select: SelectText | ApasText | None = None
    fmt: ExplainFormat = ExplainFormat.TEXT
    analyze: bool = False


@dataclass(frozen=True)
class Show:
    """``SHOW STREAMS|TABLES|QUERIES|FUNCTIONS|AGGREGATES``."""

    what: ShowTarget


Statement = (CreateStream | CreateTable | CreateQuery | CreateStreamAs | CreateAggregate
             | CreateTableFunction | CreateLibrary | Drop | Refresh | Explain | Show
             | InsertValues | InsertSelect)
