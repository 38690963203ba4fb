"""The resource catalog: streams, tables, queries, functions (scalar and table) and
aggregates by name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import StructType

from sparkcq.errors import CatalogError, UnknownNameError
from sparkcq.model.time import TimeKind

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sparkcq.aggregates.user import UserAggregate
    from sparkcq.language.apas.libraries import Library
    from sparkcq.plan.nodes import PlanNode
    from sparkcq.table_functions.user import UserTableFunction


@dataclass
class StreamInfo:
    """A stream: a source stream (``plan`` is its scan) or a derived one (its query's root)."""

    name: str
    schema: StructType
    time_col: str | None
    end_col: str | None
    time_kind: TimeKind
    options: dict[str, str]
    plan: PlanNode
    derived: bool = False
    key: tuple[str, ...] = ()  # a keyed (temporal-tabular) stream's key columns
    # why a feed removed it while queries still read what it sent (statements/remove.py)
    removed: str | None = None

    @property
    def connected(self) -> bool:
        """Whether the stream's columns are known (a feed's are not before its HEADER)."""
        return bool(self.schema.fields)


@dataclass(frozen=True)
class TableSource:
    """Where a table's rows come from, to read them again (``REFRESH TABLE``).

    ``read`` returns a new DataFrame of the rows as they are now; a ``snapshot`` one is
    materialised with its lineage cut (a PostgreSQL table's), so cycles never read the
    source again. ``refresh_every``: re-read at the start of the first cycle that many
    seconds (processing time) after the last read.
    """

    origin: str  # for SHOW TABLES: "postgres inventory: hosts", "parquet /data/hosts"
    read: Callable[[], DataFrame]
    snapshot: bool = False
    refresh_every: float | None = None


@dataclass
class TableInfo:
    """A static relation backed by a Spark DataFrame; ``version`` counts the rows registered
    under its name before these (a replacement while queries read it keeps ``plan``), read
    (or registered) at ``read_at`` (seconds since the epoch).
    """

    name: str
    schema: StructType
    dataframe: DataFrame
    plan: PlanNode
    version: int = 0
    source: TableSource | None = None  # None: registered from data, nothing to re-read
    read_at: float | None = None
    next_refresh: float | None = None  # time.monotonic() when ``refresh_every`` is due
    note: str | None = None  # why the last due refresh did not happen


class QueryStatus(StrEnum):
    """Where a query stands; a string, so JSON and comparisons with text keep working."""

    RUNNING = "running"
    PAUSED = "paused"  # a stream it reads was stopped by its feed; it resumes with the data
    STOPPED = "stopped"  # a stream it read was removed: the reason is in its log
    FAILED = "failed"  # its own operators failed: the reason is in its log
    ENGINE_FAILED = "engine failed"  # Spark died under it: no fault of the query


@dataclass
class QueryInfo:
    """A continuous query: its plan root, output form and where its results go."""

    name: str
    text: str
    plan: PlanNode
    sink: str
    options: dict[str, Any] = field(default_factory=dict)
    status: QueryStatus = QueryStatus.RUNNING
    log: list[str] = field(default_factory=list)
    language: str = "sql"  # or "apas" (docs/apas.md)

    def enter(self, status: QueryStatus, *lines: str) -> None:
        """Move to ``status``, saying why in the log."""
        self.status = status
        self.log.extend(lines)


@dataclass
class FunctionInfo:
    """A user's Python scalar function, callable from query text by ``name``."""

    name: str
    signature: str
    origin: str  # where the code lives: ``module.fn line N``


MAX_NAME_LENGTH = 128
_IDENTIFIER = re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{MAX_NAME_LENGTH - 1}}}")


def is_identifier(name: str) -> bool:
    """Whether ``name`` may name a stream, table, query, function or aggregate."""
    return _IDENTIFIER.fullmatch(name) is not None


def ensure_identifier(name: str, kind: str) -> None:
    """Refuse a name that is not an identifier (ASCII letters, digits and underscores, not
    starting with a digit, at most 128 characters).

    Names become folder names (the files sink writes a folder per query), parts of URLs
    and of plans, so a name is never a path: ``../../x`` or ``a/b`` cannot be one.
    """
    if is_identifier(name):
        return
    suggestion = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")[:MAX_NAME_LENGTH]
    hint = f"; for example {suggestion!r}" if is_identifier(suggestion) else ""
    msg = (f"{kind} name {name!r} is not allowed: a name has only letters, digits and "
           f"underscores, does not start with a digit and has at most {MAX_NAME_LENGTH} "
           f"characters{hint}")
    raise CatalogError(msg)


class Catalog:
    """Names to streams, tables and queries; one namespace for streams and tables."""

    def __init__(self) -> None:
        self.streams: dict[str, StreamInfo] = {}
        self.tables: dict[str, TableInfo] = {}
        self.queries: dict[str, QueryInfo] = {}
        self.functions: dict[str, FunctionInfo] = {}
        self.aggregates: dict[str, UserAggregate] = {}  # by lower-case name
        self.table_functions: dict[str, UserTableFunction] = {}  # by lower-case name
        self.libraries: dict[str, Library] = {}  # the user's APAS libraries, by prefix

    def _key(self, name: str) -> str:
        return name.lower()

    def ensure_free(self, name: str) -> None:
        """Refuse a name already used by a stream, table or query."""
        key = self._key(name)
        for kind, space in (("stream", self.streams), ("table", self.tables)):
            if key in space:
                msg = f"a {kind} named {name!r} already exists; drop it first or pick another name"
                raise CatalogError(msg)
        if key in self.queries:
            msg = f"a query named {name!r} already exists; drop it first or pick another name"
            raise CatalogError(msg)

    def add_stream(self, info: StreamInfo) -> None:
        """Register a stream under a free name."""
        ensure_identifier(info.name, "stream")
        self.ensure_free(info.name)
        self.streams[self._key(info.name)] = info

    def add_table(self, info: TableInfo) -> None:
        """Register a table under a free name."""
        ensure_identifier(info.name, "table")
        self.ensure_free(info.name)
        self.tables[self._key(info.name)] = info

    def add_query(self, info: QueryInfo) -> None:
        """Register a query under a free name."""
        ensure_identifier(info.name, "query")
        self.ensure_free(info.name)
        self.queries[self._key(info.name)] = info

    def relation(self, name: str) -> StreamInfo | TableInfo | None:
        """The stream or table called ``name`` (case-insensitive), or None."""
        key = self._key(name)
        return self.streams.get(key) or self.tables.get(key)

    def stream(self, name: str) -> StreamInfo:
        """The stream called ``name``; CatalogError lists the known streams otherwise."""
        info = self.streams.get(self._key(name))
        if info is None:
            msg = f"unknown stream {name!r}; streams: {', '.join(sorted(self.streams)) or 'none'}"
            raise UnknownNameError(msg)
        return info

    def removed(self, name: str) -> str | None:
        """Why a feed removed stream ``name`` while queries still read what it sent
        (``statements/remove.py``); None for any other name.
        """
        info = self.streams.get(self._key(name))
        return None if info is None else info.removed

    def query(self, name: str) -> QueryInfo:
        """The query called ``name``; CatalogError lists the known queries otherwise."""
        info = self.queries.get(self._key(name))
        if info is None:
            known = ", ".join(sorted(self.queries)) or "none"
            msg = f"unknown query {name!r}; queries: {known}"
            raise UnknownNameError(msg)
        return info

    def known_relations(self) -> str:
        """Comma-separated names of all streams and tables, for error messages."""
        names = sorted([*self.streams, *self.tables])
        return ", ".join(names) or "none"
