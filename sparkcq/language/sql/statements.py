"""Statements of the streaming SQL dialect, as parsed and before binding to the catalog."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, StrEnum

import sqlglot.expressions as exp

from sparkcq.errors import Location
from sparkcq.language.apas.syntax import Program
from sparkcq.model.windows import WindowSpec


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
class SelectText:
    """A SELECT parsed by sqlglot, with the window clauses cut out of its text.

    ``windows`` maps the character offset where a FROM item's name ends to its window, so
    the binder can find the window of each ``exp.Table`` through its identifier's position.
    """

    text: str
    expression: exp.Expression
    form: OutputForm
    windows: dict[int, SourceWindow]
    offset: int


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


@dataclass(frozen=True)
class CreateTable:
    """``CREATE TABLE name [(cols)] WITH (format=..., ...)``: a static relation (without
    columns only for a PostgreSQL table, whose columns are then the database's).
    """

    name: str
    columns: tuple[ColumnDef, ...]
    options: dict[str, str]
    loc: Location


@dataclass(frozen=True)
class CreateQuery:
    """``CREATE QUERY name [INTO sink] [WITH (...)] [LANGUAGE apas] AS select``: a
    continuous query.
    """

    name: str
    select: SelectText | ApasText
    options: dict[str, str] = field(default_factory=dict)
    loc: Location | None = None


@dataclass(frozen=True)
class CreateStreamAs:
    """``CREATE STREAM name AS select``: a derived stream other queries can read."""

    name: str
    select: SelectText
    options: dict[str, str] = field(default_factory=dict)
    loc: Location | None = None


@dataclass(frozen=True)
class CreateAggregate:
    """``CREATE AGGREGATE name(arg TYPE, ...) RETURNS TYPE USING 'module:Class'``."""

    name: str
    params: tuple[ColumnDef, ...]
    returns: str
    using: str
    loc: Location


@dataclass(frozen=True)
class CreateLibrary:
    """``CREATE LIBRARY prefix USING 'package.module'``: a module's functions, callable from
    StreamAPAS queries as ``prefix.name(...)`` (language/apas/libraries.py).
    """

    prefix: str
    using: str
    loc: Location

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
             | CreateLibrary | Drop | Refresh | Explain | Show)
