"""PostgreSQL: databases named by the operator, tables read through Spark's JDBC reader, and
a sink that commits each cycle in one transaction.

Databases: ``Engine(databases={"inventory": "postgresql://user:pw@host:5432/db"})`` or
``sparkcq serve --database inventory=postgresql://...``; SQL names them
(``database='inventory'``), so a server client never sees or chooses a URL or a password.
A trusted engine may also write ``url='postgresql://...'`` (or a ``jdbc:postgresql://`` URL)
in a statement.

Tables (``read_table``): read once with Spark's JDBC reader when created or refreshed, into
a local checkpoint (lineage cut), so every cycle's re-scan reads that snapshot and never the
database; a snapshot is never read again from the database behind its back.

The sink (``PostgresSink``), per cycle and per database, in ONE transaction: a row
``(sink_id, cycle)`` in ``sparkcq_commits`` first, then every query's records with COPY. If
the commit row is already there (the cycle is replayed after a crash and a restore), it
writes nothing: committing a cycle twice adds nothing. What "committed" means: a reader
sees all of a cycle's rows of all queries writing to that database, or none.
"""

from __future__ import annotations

import decimal
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import pandas as pd
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    CharType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
)

from sparkcq.errors import CatalogError, ExecutionError, SinkError
from sparkcq.io.sinks import QueryOutput, Sink
from sparkcq.language.sql.statements import OutputForm
from sparkcq.model.columns import CYCLE, OP, TE, TS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("sparkcq.postgres")

COMMITS_TABLE = "sparkcq_commits"
INSTALL_HINT = "pip install 'sparkcq[postgres]' (psycopg 3)"
NO_DRIVER = ("the PostgreSQL JDBC driver is not on Spark's class path: install it (Debian: "
             "apt-get install libpostgresql-jdbc-java, /usr/share/java/postgresql.jar) or "
             "name its jar in SPARKCQ_JDBC_JARS, before the Spark session starts")
# a table name: an identifier, optionally after a schema; unquoted, so PostgreSQL folds it to
# lower case as in any SQL it is given, and nothing else (a subquery, a comment) fits
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?")


@dataclass(frozen=True)
class Database:
    """Where a PostgreSQL database is and how to log in: parsed from a URL."""

    host: str
    port: int
    dbname: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    params: tuple[tuple[str, str], ...] = ()  # e.g. sslmode, for both JDBC and libpq

    @classmethod
    def parse(cls, url: str) -> Database:
        """``postgresql://[user[:password]@]host[:port]/db[?param=value...]`` (also
        ``postgres://``) or ``jdbc:postgresql://host[:port]/db[?user=..&password=..]``;
        ValueError says what is wrong (without repeating a password).
        """
        text = url.strip()
        if text.lower().startswith("jdbc:"):
            text = text[5:]
        parts = urlsplit(text)
        if parts.scheme.lower() not in ("postgresql", "postgres"):
            msg = ("a database URL starts with postgresql:// (or jdbc:postgresql://), e.g. "
                   "postgresql://user:password@host:5432/dbname")
            raise ValueError(msg)
        try:
            port = parts.port or 5432
        except ValueError:
            msg = "the database URL's port is not a number"
            raise ValueError(msg) from None
        dbname = unquote(parts.path.lstrip("/"))
        if not parts.hostname or not dbname:
            msg = "a database URL names a host and a database: postgresql://host:5432/dbname"
            raise ValueError(msg)
        params = dict(parse_qsl(parts.query))
        user = unquote(parts.username) if parts.username else params.pop("user", None)
        password = unquote(parts.password) if parts.password else params.pop("password", None)
        params.pop("user", None)
        params.pop("password", None)
        return cls(parts.hostname, port, dbname, user, password, tuple(sorted(params.items())))

    def jdbc_url(self) -> str:
        """The JDBC URL, without credentials (they go as the reader's options)."""
        query = f"?{urlencode(self.params)}" if self.params else ""
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.dbname}{query}"

    def jdbc_options(self) -> dict[str, str]:
        """Options of Spark's JDBC reader: URL, driver class, user and password."""
        options = {"url": self.jdbc_url(), "driver": "org.postgresql.Driver"}
        if self.user is not None:
            options["user"] = self.user
        if self.password is not None:
            options["password"] = self.password
        return options

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``psycopg.connect``; sessions run in UTC."""
        kwargs: dict[str, Any] = {"host": self.host, "port": self.port, "dbname": self.dbname,
                                  "options": "-c TimeZone=UTC", **dict(self.params)}
        if self.user is not None:
            kwargs["user"] = self.user
        if self.password is not None:
            kwargs["password"] = self.password
        return kwargs

    def label(self) -> str:
        """The URL without the password, for messages and SHOW TABLES."""
        who = f"{self.user}@" if self.user else ""
        return f"postgresql://{who}{self.host}:{self.port}/{self.dbname}"


def parse_databases(urls: Mapping[str, str]) -> dict[str, Database]:
    """The operator's databases by lower-case name; CatalogError names a bad one."""
    out: dict[str, Database] = {}
    for name, url in urls.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            msg = f"database name {name!r} is not an identifier (letters, digits, underscores)"
            raise CatalogError(msg)
        try:
            out[name.lower()] = Database.parse(url)
        except ValueError as e:
            msg = f"database {name!r}: {e}"
            raise CatalogError(msg) from None
    return out


def ensure_table_name(name: str) -> str:
    """``name`` if it is ``table`` or ``schema.table`` (identifiers), else ValueError."""
    if _TABLE_NAME.fullmatch(name):
        return name
    msg = (f"table {name!r} is not a PostgreSQL table name: write table or schema.table "
           "with letters, digits and underscores")
    raise ValueError(msg)


def read_table(spark: SparkSession, db: Database, schema: StructType | None, *,
               table: str | None = None, query: str | None = None) -> DataFrame:
    """Read ``table`` (or the result of ``query``) once into a local checkpoint.

    With ``schema`` the declared columns are taken by name (case-insensitive) and cast to
    the declared types; a declared column the table lacks is a ValueError listing the
    table's columns. Failures to connect or read raise ValueError with the first line of
    the driver's message.
    """
    reader = spark.read.format("jdbc")
    for key, value in db.jdbc_options().items():
        reader = reader.option(key, value)
    reader = reader.option("fetchsize", "10000")
    reader = reader.option("query", query) if query is not None \
        else reader.option("dbtable", ensure_table_name(table or ""))
    what = f"query {query!r}" if query is not None else f"table {table!r}"
    try:
        df = reader.load()
    except Exception as e:  # noqa: BLE001 - py4j and PySpark wrap the driver's error
        msg = f"cannot read {what} from {db.label()}: {_first_line(e)}"
        if "ClassNotFoundException" in str(e) and "org.postgresql.Driver" in str(e):
            msg += f"; {NO_DRIVER}"
        raise ValueError(msg) from None
    if schema is not None and schema.fields:
        found = {c.lower(): c for c in df.columns}
        lacking = [f.name for f in schema.fields if f.name.lower() not in found]
        if lacking:
            msg = (f"{what} in {db.label()} has no column {', '.join(map(repr, lacking))}; "
                   f"its columns: {', '.join(df.columns)}")
            raise ValueError(msg)
        df = df.select(*[df[f"`{found[f.name.lower()]}`"].cast(f.dataType).alias(f.name)
                         for f in schema.fields])
    try:
        return df.localCheckpoint(eager=True)
    except Exception as e:  # noqa: BLE001 - a value the declared type cannot hold, ...
        msg = f"cannot read {what} from {db.label()}: {_first_line(e)}"
        raise ValueError(msg) from None


def _first_line(error: BaseException) -> str:
    """The line of a (Java) error that says what went wrong, without the class names."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    said = [ln for ln in lines if re.search(r"(Exception|Error): ", ln)]
    text = said[0] if said else lines[0] if lines else type(error).__name__
    return re.sub(r"^[:\s]*([\w$]+\.)*[\w$]+(Exception|Error): ", "", text)


# -- the sink -------------------------------------------------------------------------------

def postgres_type(dtype: DataType) -> str | None:
    """The PostgreSQL column type for a Spark type, or None if the sink has none."""
    if isinstance(dtype, ByteType | ShortType):
        return "smallint"
    if isinstance(dtype, IntegerType):
        return "integer"
    if isinstance(dtype, LongType):
        return "bigint"
    if isinstance(dtype, FloatType):
        return "real"
    if isinstance(dtype, DoubleType):
        return "double precision"
    if isinstance(dtype, BooleanType):
        return "boolean"
    if isinstance(dtype, StringType | VarcharType | CharType):
        return "text"
    if isinstance(dtype, TimestampType):
        return "timestamptz"
    if isinstance(dtype, TimestampNTZType):
        return "timestamp"
    if isinstance(dtype, DecimalType):
        return f"numeric({dtype.precision},{dtype.scale})"
    if isinstance(dtype, DateType):
        return "date"
    if isinstance(dtype, BinaryType):
        return "bytea"
    return None


def _values(series: pd.Series, dtype: DataType) -> list[Any]:
    """A column's values as Python objects for COPY, None for null (NaN and NaT too)."""
    missing = series.isna().to_numpy()
    if isinstance(dtype, TimestampType | TimestampNTZType) \
            or pd.api.types.is_datetime64_any_dtype(series):
        stamps = pd.to_datetime(series)
        if not isinstance(dtype, TimestampNTZType) and stamps.dt.tz is None:
            stamps = stamps.dt.tz_localize("UTC")  # Spark's session time zone is UTC
        return [None if m else v.to_pydatetime() for v, m in zip(stamps, missing, strict=True)]
    values = series.astype(object).tolist()
    convert: Callable[[Any], Any] | None = None
    if isinstance(dtype, ByteType | ShortType | IntegerType | LongType):
        convert = int
    elif isinstance(dtype, FloatType | DoubleType):
        convert = float
    elif isinstance(dtype, BooleanType):
        convert = bool
    elif isinstance(dtype, DecimalType):
        convert = decimal.Decimal
    return [None if m else (convert(v) if convert else v)
            for v, m in zip(values, missing, strict=True)]


@dataclass(frozen=True)
class _Target:
    """One query's table: its name and the columns COPY writes, in order."""

    table: str
    columns: tuple[str, ...]
    types: tuple[DataType, ...]
    changelog: bool


@dataclass
class PostgresSink(Sink):
    """``CREATE QUERY q INTO postgres WITH (database='name', table='traffic') AS ...``.

    Each cycle's records of every query writing to one database are committed in one
    transaction with a row ``(sink_id, cycle)`` in ``sparkcq_commits`` (see the module's
    docstring). The table is created when missing, at CREATE QUERY, with the query's
    columns (Spark types mapped by ``postgres_type``) plus ``_ts`` and ``_te``
    (``timestamptz`` for timestamp streams, ``bigint`` for numeric time), ``_cycle`` (the
    cycle that wrote the row) and, for a CHANGELOG query, ``_op`` ('+' or '-'). An existing
    table must have those columns.

    Rows are elements as the query's form gives them: a new element is inserted with its
    ``_te`` (null while open); the record that closes an open element later sets the
    ``_te`` of that row (same values and ``_ts``) in the same transaction. Instants have
    ``_ts`` = ``_te``.
    """

    databases: Mapping[str, Database] = field(default_factory=dict)
    sink_id: str = "sparkcq"
    trusted: bool = False
    _connections: dict[Database, Any] = field(default_factory=dict)
    _targets: dict[str, _Target] = field(default_factory=dict)
    replayable = True  # a cycle written again is skipped: written before the others' sinks

    # -- options -----------------------------------------------------------------------
    def check(self, options: Mapping[str, str]) -> str | None:
        """What is wrong with a query's postgres-sink options, or None."""
        if not options.get("table"):
            return "the postgres sink needs WITH (table='name', database='name')"
        try:
            ensure_table_name(options["table"])
            self.database_of(options)
        except (ValueError, CatalogError) as e:
            return str(e)
        return None

    def database_of(self, options: Mapping[str, str]) -> Database:
        """The database ``options`` name (``database=``, or ``url=`` when trusted)."""
        return resolve_database(options, self.databases, self.trusted)

    # -- the contract --------------------------------------------------------------------
    def prepare(self, output: QueryOutput) -> None:
        """Create the query's table when missing, or check the columns of the one there."""
        schema = output.schema or StructType([])
        db = self.database_of(output.options)
        table = ensure_table_name(output.options["table"])
        time_type = "timestamptz" if output.timestamp else "bigint"
        time_dtype = TimestampType() if output.timestamp else LongType()
        cols: list[tuple[str, str, DataType]] = []
        for f in schema.fields:
            pg = postgres_type(f.dataType)
            if pg is None:
                msg = (f"postgres sink: column {f.name!r} of query {output.name!r} is "
                       f"{f.dataType.simpleString()}, which has no PostgreSQL column type "
                       "here; cast it (to STRING, for example) in the SELECT")
                raise SinkError(msg)
            cols.append((f.name, pg, f.dataType))
        cols += [(TS, time_type, time_dtype), (TE, time_type, time_dtype),
                 (CYCLE, "bigint", LongType())]
        changelog = output.form is OutputForm.CHANGELOG
        if changelog:
            cols.append((OP, "text", StringType()))
        _, sql = _psycopg()
        with self._transaction(db, output.name, table) as cur:
            cur.execute("SELECT to_regclass(%s)", (table,))
            if cur.fetchone()[0] is None:
                cur.execute(sql.SQL("CREATE TABLE {} ({})").format(
                    sql.SQL(table), sql.SQL(", ").join(
                        sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t))
                        for n, t, _ in cols)))
                if output.form is OutputForm.INTERVALS:
                    # the open elements a later cycle closes, found by their _ts
                    index = f"{table.rsplit('.', 1)[-1]}_sparkcq_open"[:63]
                    cur.execute(sql.SQL("CREATE INDEX {} ON {} (_ts) WHERE _te IS NULL")
                                .format(sql.Identifier(index), sql.SQL(table)))
            self._ensure_commits_table(cur)
            cur.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass "
                        "AND attnum > 0 AND NOT attisdropped", (table,))
            present = {row[0] for row in cur.fetchall()}
        lacking = [n for n, _, _ in cols if n not in present]
        if lacking:
            msg = (f"postgres sink: table {table!r} in {db.label()} exists without the "
                   f"column(s) {', '.join(map(repr, lacking))} query {output.name!r} writes; "
                   f"it has {', '.join(sorted(present))}: pick another table or add them")
            raise SinkError(msg)
        self._targets[output.name] = _Target(
            table, tuple(n for n, _, _ in cols), tuple(t for _, _, t in cols), changelog)

    def write(self, cycle: int, records: dict[str, tuple[QueryOutput, pd.DataFrame]]) -> None:
        """Commit the cycle's records, one transaction per database (see the class)."""
        by_db: dict[Database, list[tuple[QueryOutput, pd.DataFrame]]] = {}
        for out, frame in records.values():
            by_db.setdefault(self.database_of(out.options), []).append((out, frame))
        for db, items in by_db.items():
            self._write_database(db, cycle, items)

    def forget(self, query: str) -> None:  # noqa: D102 - its table and rows stay
        self._targets.pop(query, None)

    def resume(self, engine_id: str) -> None:
        """Record commits under ``engine_id``: a restored engine's replayed cycles are the
        cycles that engine committed.
        """
        self.sink_id = engine_id

    def close(self) -> None:
        """Close the connections."""
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    # -- writing -------------------------------------------------------------------------
    def _write_database(self, db: Database, cycle: int,
                        items: list[tuple[QueryOutput, pd.DataFrame]]) -> None:
        _, sql = _psycopg()
        names = ", ".join(out.name for out, _ in items)
        where = {"query": names, "table": None}
        log.debug("postgres sink %s: cycle %d: writing %s", self.sink_id, cycle, names)
        with self._transaction(db, names, None, cycle, where) as cur:
            self._ensure_commits_table(cur)
            cur.execute(f"INSERT INTO {COMMITS_TABLE} (sink_id, cycle, queries, rows) "
                        "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                        (self.sink_id, cycle, names, sum(len(f) for _, f in items)))
            if cur.rowcount == 0:
                log.warning("postgres sink %s: cycle %d is already committed in %s; "
                            "its records are not written again", self.sink_id, cycle,
                            db.label())
                return
            for out, frame in items:
                target = self._targets.get(out.name)
                if target is None:
                    msg = f"query {out.name!r} was not prepared for the postgres sink"
                    raise ExecutionError(msg)
                where["query"], where["table"] = out.name, target.table
                self._write_query(cur, sql, target, frame, cycle)

    def _write_query(self, cur: Any, sql: Any, target: _Target, frame: pd.DataFrame,
                     cycle: int) -> None:
        ops = frame[OP] if OP in frame.columns else pd.Series(["I"] * len(frame))
        closes = frame[(ops == "C").to_numpy()]
        rows = frame if closes.empty else frame[(ops != "C").to_numpy()]
        table = sql.SQL(target.table)
        if len(rows):
            self._copy(cur, sql, table, target, rows, cycle)
        if not closes.empty:
            self._close_elements(cur, sql, table, target, closes)

    @staticmethod
    def _copy(cur: Any, sql: Any, table: Any, target: _Target, frame: pd.DataFrame,
              cycle: int) -> None:
        columns = []
        for name, dtype in zip(target.columns, target.types, strict=True):
            if name == CYCLE:
                columns.append([cycle] * len(frame))
            else:
                columns.append(_values(frame[name], dtype))
        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
            table, sql.SQL(", ").join(map(sql.Identifier, target.columns)))
        with cur.copy(statement) as copy:
            for row in zip(*columns, strict=True):
                copy.write_row(row)

    @staticmethod
    def _close_elements(cur: Any, sql: Any, table: Any, target: _Target,
                        closes: pd.DataFrame) -> None:
        """Set ``_te`` of the open rows the close records name (values and ``_ts``); equal
        open rows are closed one per record.
        """
        values = [c for c in target.columns if c not in (TS, TE, CYCLE, OP)]
        keys = [*values, TS]
        # one per target: queries of a cycle writing to different tables have other columns
        cur.execute("DROP TABLE IF EXISTS pg_temp.sparkcq_closes")
        cur.execute(sql.SQL("CREATE TEMP TABLE sparkcq_closes "
                            "(LIKE {} INCLUDING DEFAULTS) ON COMMIT DROP").format(table))
        types = dict(zip(target.columns, target.types, strict=True))
        columns = [_values(closes[c], types[c]) for c in (*keys, TE)]
        with cur.copy(sql.SQL("COPY sparkcq_closes ({}) FROM STDIN").format(
                sql.SQL(", ").join(map(sql.Identifier, (*keys, TE))))) as copy:
            for row in zip(*columns, strict=True):
                copy.write_row(row)
        # a row's values and _ts as one text (a record's text form tells NULL from '' and
        # quotes what needs it): an equi-join key PostgreSQL can hash, where a join on each
        # column IS NOT DISTINCT FROM would compare every open row with every close record
        ident = [sql.Identifier(k) for k in keys]
        key = sql.SQL("ROW({})::text").format(sql.SQL(", ").join(ident))
        key_t = sql.SQL("ROW({})::text").format(
            sql.SQL(", ").join(sql.SQL("t.{}").format(k) for k in ident))
        # the CTEs' names are no query's table name (a table named c would be the CTE c)
        cur.execute(sql.SQL(
            "WITH sparkcq_close_rows AS (SELECT _te, {key} AS _key, row_number() OVER "
            "(PARTITION BY {key}) AS _n FROM sparkcq_closes), "
            "sparkcq_open_rows AS (SELECT t.ctid AS _row, {key_t} AS _key, row_number() OVER "
            "(PARTITION BY {key_t} ORDER BY t.ctid) AS _n FROM {table} t "
            "WHERE t._te IS NULL AND t._ts IN (SELECT _ts FROM sparkcq_closes)) "
            "UPDATE {table} t SET _te = c._te "
            "FROM sparkcq_open_rows o JOIN sparkcq_close_rows c "
            "ON o._key = c._key AND o._n = c._n WHERE t.ctid = o._row").format(
                key=key, key_t=key_t, table=table))
        if cur.rowcount != len(closes):
            log.warning("postgres sink: %d of %d elements to close were not open in %s",
                        len(closes) - cur.rowcount, len(closes), target.table)

    @staticmethod
    def _ensure_commits_table(cur: Any) -> None:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {COMMITS_TABLE} ("
                    "sink_id text NOT NULL, cycle bigint NOT NULL, "
                    "committed_at timestamptz NOT NULL DEFAULT now(), queries text NOT NULL, "
                    "rows bigint NOT NULL, PRIMARY KEY (sink_id, cycle))")

    # -- connections ---------------------------------------------------------------------
    def _transaction(self, db: Database, query: str, table: str | None, cycle: int | None = None,
                     where: dict[str, str | None] | None = None) -> _Transaction:
        return _Transaction(self, db, query, table, cycle, where)

    def _connection(self, db: Database) -> Any:
        conn = self._connections.get(db)
        if conn is None or conn.closed or conn.broken:
            psycopg, _sql = _psycopg()
            conn = psycopg.connect(autocommit=True, connect_timeout=10, **db.connect_kwargs())
            self._connections[db] = conn
        return conn


@dataclass
class _Transaction:
    """One transaction of the sink; any failure in it rolls it back and becomes a SinkError
    naming the sink, the query (``where`` tells which one was being written) and the table.
    """

    sink: PostgresSink
    db: Database
    query: str
    table: str | None
    cycle: int | None
    where: dict[str, str | None] | None
    _tx: Any = None

    def __enter__(self) -> Any:
        try:
            conn = self.sink._connection(self.db)
            self._tx = conn.transaction()
            self._tx.__enter__()
            return conn.cursor()
        except Exception as e:  # noqa: BLE001 - connection refused, bad password, ...
            raise self._error(e) from e

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        try:
            self._tx.__exit__(kind, error, tb)  # rolls back when ``error`` is set
        except Exception as e:  # noqa: BLE001 - the commit itself failed
            error = error or e
        if error is None or isinstance(error, SinkError):
            return  # committed, or raised as it is (already rolled back)
        raise self._error(error) from error

    def _error(self, error: BaseException) -> SinkError:
        query = (self.where or {}).get("query") or self.query
        table = (self.where or {}).get("table") or self.table
        into = f" into table {table!r}" if table else ""
        cycle = f"cycle {self.cycle} of " if self.cycle is not None else ""
        undone = "; nothing of the cycle was written (rolled back)" \
            if self.cycle is not None else ""
        msg = (f"postgres sink: writing {cycle}query {query}{into} in {self.db.label()} "
               f"failed{undone}: {_first_line(error)}")
        return SinkError(msg)


def resolve_database(options: Mapping[str, str], databases: Mapping[str, Database],
                     trusted: bool) -> Database:
    """The database a statement's options name: ``database='name'`` (one the operator
    configured) or, in a trusted engine, ``url='postgresql://...'`` with optional ``user``
    and ``password``. CatalogError lists the configured names (never their URLs).
    """
    name, url = options.get("database"), options.get("url")
    if (name is None) == (url is None):
        msg = ("name the PostgreSQL database with database='name' (configured by the "
               "engine's operator)" + (" or url='postgresql://...'" if trusted else ""))
        raise CatalogError(msg)
    if name is not None:
        db = databases.get(name.lower())
        if db is None:
            known = ", ".join(sorted(databases)) or "none"
            msg = (f"unknown database {name!r}; configured databases: {known} "
                   "(sparkcq serve --database NAME=URL; in process "
                   "Engine(databases={NAME: URL}))")
            raise CatalogError(msg)
        return db
    assert url is not None
    try:
        db = Database.parse(url)
    except ValueError as e:
        raise CatalogError(str(e)) from None
    if "user" in options or "password" in options:
        db = Database(db.host, db.port, db.dbname, options.get("user", db.user),
                      options.get("password", db.password), db.params)
    return db


def _psycopg() -> tuple[Any, Any]:
    """The psycopg module and its ``sql`` helpers; SinkError naming the extra if missing."""
    try:
        import psycopg
        from psycopg import sql
    except ImportError:
        msg = f"the postgres sink needs psycopg: {INSTALL_HINT}"
        raise SinkError(msg) from None
    return psycopg, sql

