"""``CREATE QUERY [name] [INTO sink] [WITH (...)] AS [ISTREAM | ...] SELECT ...``: a
continuous query, planned and optimised on its own, then merged into the global plan
(shared nodes reused) and routed to its sink.

The pipeline reads: parse (done) -> bind against the catalog -> optimise -> check the sink
-> merge into the global plan.
"""

from __future__ import annotations

from dataclasses import replace

from sparkcq.catalog import QueryInfo
from sparkcq.errors import AnalysisError, SparkcqError
from sparkcq.io.postgres import PostgresSink
from sparkcq.io.sinks import FilesSink, QueryOutput, Retention
from sparkcq.language.sql.statements import ApasText, CreateQuery, assignment_at
from sparkcq.model.time import TimeKind
from sparkcq.plan.binder import bind_query
from sparkcq.plan.nodes import (
    EdgeKind,
    Join,
    JoinHow,
    PlanNode,
    Quarantine,
    StreamScan,
    transform_up,
    walk,
)
from sparkcq.plan.notices import window_edge_notes
from sparkcq.plan.options import OperatorError, QueryOptions, Shedding, SinkKind
from sparkcq.plan.rules import optimize
from sparkcq.plan.rules.shed_window_joins import ShedWhere, shed_window_joins
from sparkcq.statements.context import StatementContext


def create_query(stmt: CreateQuery, text: str, ctx: StatementContext) -> str:
    """Start a query; its name (``query_N`` when it has none)."""
    name = stmt.name
    if not name:
        ctx.anonymous += 1
        name = f"query_{ctx.anonymous}"
    ctx.catalog.ensure_free(name)
    options = QueryOptions.parse(stmt.options, text, stmt.loc, ctx.policy.shedding)
    bound = bind_query(stmt.select, text, ctx.catalog, ctx.spark, trusted=ctx.policy.trusted)
    notes = window_edge_notes(bound.plan)
    plan = bound.plan
    if options.on_error is OperatorError.SKIP:  # its streams without the rows it raised on
        plan = transform_up(plan, lambda n: Quarantine(n, name)
                            if isinstance(n, StreamScan) else n)
    plan = optimize(plan, running=ctx.queries.plan.ops)
    if options.shedding is not None:
        if any(isinstance(n, Join) and n.how is not JoinHow.INNER
               and EdgeKind.TABLE not in {c.kind for c in n.children} for n in walk(bound.plan)):
            msg = ("shedding drops pairs of a join, and an outer, semi or anti join would "
                   "then keep rows as unmatched that have partners; shed inner joins only")
            raise AnalysisError(msg, text, assignment_at(stmt.options, "shedding", stmt.loc))
        plan = shed(plan, options.shedding, text, stmt)
    bound = replace(bound, plan=plan)
    output = QueryOutput(name, [f.name for f in bound.plan.schema.fields],
                         bound.plan.time_kind is TimeKind.TIMESTAMP,
                         sink_options(options, text, stmt, ctx), bound.plan.schema, bound.form)
    try:
        ctx.sinks[options.sink].prepare(output)  # before anything is added: no trace left
    except SparkcqError as e:
        raise AnalysisError(str(e), text, stmt.loc) from None
    info = QueryInfo(name, text, bound.plan, options.sink, dict(output.options),
                     language="apas" if isinstance(stmt.select, ApasText) else "sql")
    info.options["form"] = bound.form
    info.log.extend(notes)
    ctx.catalog.add_query(info)
    ctx.queries.start(info, bound.form, ctx.cycle())
    ctx.sinks.route(options.sink, output)
    return name


def shed(plan: PlanNode, shedding: Shedding, text: str, stmt: CreateQuery) -> PlanNode:
    """``plan`` with its windowed stream joins shedding; refused where it would do nothing
    (the error points at the ``shedding`` option, or the statement under a server default).
    """
    plan, where = shed_window_joins(plan, shedding)
    if where is ShedWhere.JOINS:
        return plan
    if where is ShedWhere.SHARED_WINDOW:
        msg = ("shedding applies to a join of two windowed streams computed from their "
               "intervals, and a window of this join already runs for another query, so "
               "the join reads its changes instead; write the window differently (or drop "
               "the other query) to shed this join")
    else:
        msg = ("shedding applies to a join of two streams in RANGE, NOW or CUT windows "
               "(e.g. FROM a [RANGE 60 SECONDS] JOIN b [RANGE 60 SECONDS] ON ...); this "
               "query has none")
    raise AnalysisError(msg, text, assignment_at(stmt.options, "shedding", stmt.loc))


def sink_options(options: QueryOptions, text: str, stmt: CreateQuery,
                 ctx: StatementContext) -> dict[str, str]:
    """The query's options as its sink takes them, checked: a known sink, a files sink's
    path inside the data roots, a configured database, a valid retention.
    """
    sink = options.sink
    if sink not in ctx.sinks:
        msg = f"unknown sink {sink!r}; available: {', '.join(sorted(ctx.sinks))}"
        raise AnalysisError(msg, text, stmt.loc)
    raw = dict(options.options)
    if sink == SinkKind.FILES and (problem := FilesSink.check(raw)):
        raise AnalysisError(problem, text, stmt.loc)
    target = ctx.sinks[sink]
    if isinstance(target, PostgresSink):
        ctx.policy.ensure_database_options(raw, text, stmt.loc)
        if problem := target.check(raw):
            raise AnalysisError(problem, text, stmt.loc)
    if sink == SinkKind.FILES:
        raw = ctx.policy.data_path(raw, text, stmt.loc)
    if problem := Retention.check(raw):
        raise AnalysisError(problem, text, stmt.loc)
    return raw
