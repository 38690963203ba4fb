"""What a statement handler is given: the parts of the system a statement may change, and
the policy that bounds what it may ask for. Handlers receive it as an argument; nothing in
``statements/`` reaches into the ``Engine``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from sparkcq.catalog import Catalog
from sparkcq.errors import AnalysisError, Location
from sparkcq.inspection import SystemView
from sparkcq.io.delivery import Sinks
from sparkcq.io.postgres import Database
from sparkcq.io.sources import IngestLimits, Source
from sparkcq.language.sql.statements import value_at
from sparkcq.model.clock import Clock, SystemClock
from sparkcq.plan.options import ShedMode
from sparkcq.plan.sandbox import database_refusal, ensure_data_path, find_refusal, locate
from sparkcq.runtime.driver import CycleReport
from sparkcq.runtime.queries import RunningQueries
from sparkcq.statements.tables import Tables


@dataclass(frozen=True)
class Policy:
    """What the engine's operator allows statements (``docs/sandbox.md``): a sandboxed
    engine (the default, and the server's) refuses functions that reach the JVM or the file
    system, paths outside ``data_roots`` and databases not configured by name.
    """

    trusted: bool = False
    data_roots: tuple[str, ...] = ()
    allow_udf_modules: tuple[str, ...] = ()  # CREATE AGGREGATE ... USING may load these
    databases: Mapping[str, Database] = field(default_factory=dict)
    ingest_limits: IngestLimits = field(default_factory=IngestLimits)
    feed_dir: str | None = None  # where feed streams spool what they acknowledge
    max_spool_bytes: int = 1 << 30
    shedding: ShedMode = ShedMode.OFF  # for the queries that do not say (``serve --shedding``)

    def data_path(self, options: Mapping[str, str], text: str,
                  loc: Location | None) -> dict[str, str]:
        """``options`` with their ``path`` resolved inside the data roots, as is when
        trusted.
        """
        out = dict(options)
        if not self.trusted and "path" in out:
            where = value_at(options, "path", loc)
            out["path"] = ensure_data_path(out["path"], self.data_roots, text, where)
        return out

    def ensure_database_options(self, options: Mapping[str, str], text: str,
                                loc: Location | None) -> None:
        """Refuse, for server clients, database options other than a configured name."""
        if self.trusted:
            return
        refusal = database_refusal(options, list(self.databases))
        if refusal is not None:
            raw = next(k for k in ("url", "user", "password", "query") if k in options)
            raise AnalysisError(refusal, text, value_at(options, raw, loc))

    def ensure_allowed_expressions(self, spark: SparkSession, catalog: Catalog,
                                   options: Mapping[str, str], text: str,
                                   loc: Location) -> None:
        """Refuse, untrusted, a generator's ``expr_<column>`` that calls what a server
        client may not (``plan/sandbox.py``): Spark evaluates it like a query's SELECT.
        """
        if self.trusted:
            return
        own = {*catalog.functions, *catalog.aggregates}
        for key, sql in options.items():
            refusal = find_refusal(spark, sql, own, ("id", "rnd")) \
                if key.startswith("expr_") else None
            if refusal is not None:
                where = value_at(options, key, loc) or loc
                spans = [(where.start, where.end)] if where is not loc else []
                msg = f"{key}: {refusal.message}"
                raise AnalysisError(msg, text, locate(refusal, text, spans, where))


@dataclass
class StatementContext:
    """The system a statement runs against (see the module)."""

    spark: SparkSession
    catalog: Catalog
    queries: RunningQueries  # the global plan and the running queries
    sources: dict[str, Source]  # of source streams, by lower-case name
    sinks: Sinks
    policy: Policy
    cycle: Callable[[], int]  # the number of the next cycle, for log lines
    tables: Tables
    clock: Clock = field(default_factory=SystemClock)
    anonymous: int = 0  # unnamed queries created so far (query_1, query_2, ...)
    paused: set[str] = field(default_factory=set)  # feed streams a STOP paused (stop.py)
    reports: Sequence[CycleReport] = ()  # what each cycle did, oldest first

    def view(self) -> SystemView:
        """The system as it stands, read (``inspection.py``)."""
        return SystemView(self.catalog, self.queries, self.sinks, self.sources, self.reports)
