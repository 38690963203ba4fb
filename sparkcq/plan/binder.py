"""Bind a parsed SELECT to the catalog and build its logical plan.

Every name is resolved here, so an unknown stream or column, a window on a table or an
aggregate misused fails before anything runs, with the line and column of the culprit.
Scalar expressions stay Spark SQL: sqlglot renders them with our column names and Spark's own
analyzer types them on an empty DataFrame, so the engine accepts exactly what Spark accepts.

``bind_select`` below binds one SELECT: FROM items and joins (``bind_from``), WHERE, then
GROUP BY and the aggregates (``bind_aggregates``) or the SELECT list, then ORDER BY, LIMIT
and ranking (``bind_ordering``); set operations bind their inputs first (``bind_sets``).
Each pass is a module of functions of the ``Binder``, which holds what they all read; the
names in scope are ``scope.py``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlglot.expressions as exp
from pyspark.sql.types import BooleanType, DataType, NullType, StructType

from sparkcq.errors import AnalysisError, Location
from sparkcq.language.apas.compiler import compile_program
from sparkcq.language.sql.statements import ApasText, OutputForm, SelectText
from sparkcq.model.windows import LookupTime
from sparkcq.plan.allowed_functions import ALLOWED
from sparkcq.plan.bind_aggregates import bind_aggregate, has_aggregates, is_aggregate
from sparkcq.plan.bind_from import (
    bind_from_item,
    bind_join,
    check_lookup_time,
    is_lookup,
    join_how,
    joins_source,
)
from sparkcq.plan.bind_ordering import bind_order_limit, bind_ranking, fold_rank_limit, is_ranking
from sparkcq.plan.bind_over import bind_over, over_windows
from sparkcq.plan.bind_sets import bind_set_operation, bind_union
from sparkcq.plan.bind_windows import assigned_source, bind_window_aggregate, spark_window_call
from sparkcq.plan.counting import distinct, quote
from sparkcq.plan.expressions import Expr
from sparkcq.plan.nodes import EdgeKind, Filter, JoinHow, PlanNode, Project, ToStream
from sparkcq.plan.sandbox import Refusal, find_refusal, locate, unknown_function
from sparkcq.plan.scope import Scope, conjuncts_of, output_name, scope_period
from sparkcq.plan.typer import SparkTyper, Typer, TypingError
from sparkcq.plan.value_checks import literal_problem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sparkcq.catalog import Catalog


@dataclass(frozen=True)
class BoundQuery:
    """A bound SELECT: the plan root and the period RSTREAM evaluates at, if any."""

    plan: PlanNode
    form: OutputForm


def bind_query(
    select: SelectText | ApasText, text: str, catalog: Catalog, spark: SparkSession | None, *,
    trusted: bool = False, typer: Typer | None = None,
) -> BoundQuery:
    """Bind a query of either language: a StreamAPAS query compiles to the SELECT it
    means first, so equal queries in the two languages become equal plans.
    """
    if isinstance(select, ApasText):
        select = compile_program(select.program, catalog, catalog.libraries)
    return bind_select(select, text, catalog, spark, trusted=trusted, typer=typer)


def bind_select(
    select: SelectText, text: str, catalog: Catalog, spark: SparkSession | None, *,
    trusted: bool = False, typer: Typer | None = None,
) -> BoundQuery:
    """Bind a parsed SELECT (with its output form) into a logical plan.

    Unless ``trusted``, its expressions may call only the functions a server client may
    (plan/sandbox.py): a call of any other is an AnalysisError at its place. Expressions
    are typed by ``typer``, Spark's analyzer on ``spark`` by default (``plan/typer.py``;
    the plan layer's tests give ``SchemaTyper``, and no JVM runs).
    """
    binder = Binder(select, text, catalog, spark, trusted, typer)
    plan, period = binder.bind(select.expression)
    for key, window in select.windows.items():
        if key not in binder.used_windows:
            msg = "a window clause applies to a stream named in FROM, not to a subquery"
            raise AnalysisError(msg, text, window.loc)
    if select.form is OutputForm.INTERVALS or select.form is OutputForm.CHANGELOG:
        return BoundQuery(plan, select.form)
    if plan.kind is not EdgeKind.RELATION:
        what = "a table" if plan.kind is EdgeKind.TABLE else "a stream of events"
        msg = (
            f"{select.form.name} turns a relation into a stream, but this query yields {what}; "
            f"add a window such as [RANGE 10 SECONDS] or drop {select.form.name}"
        )
        raise AnalysisError(msg, text, Location.of_span(text, select.offset, select.offset + 7))
    return BoundQuery(ToStream(plan, select.form, period), select.form)


class Binder:
    """Binds one SELECT and the subqueries in it: what every pass reads (the catalog, the
    query text for error places, the typer) and the windows bound so far; the passes are
    functions of it (``bind_from``, ``bind_aggregates``, ``bind_ordering``, ``bind_sets``).
    """

    def __init__(self, select: SelectText, text: str, catalog: Catalog,
                 spark: SparkSession | None, trusted: bool = False, typer: Typer | None = None):
        self.select = select
        self.text = text
        self.catalog = catalog
        self.spark = spark
        if typer is None:
            assert spark is not None, "a binder types with Spark or with the typer it is given"
            typer = SparkTyper(spark)
        self.typer = typer
        self.trusted = trusted
        self.used_windows: set[int] = set()  # keys of select.windows bound to a stream

    def loc(self, node: Any) -> Location:
        starts, ends = [], []
        for n in node.walk():
            meta = getattr(n, "_meta", None) or {}
            if "start" in meta:
                starts.append(meta["start"])
                ends.append(meta["end"] + 1)
        if not starts:
            return Location.of_span(self.text, self.select.offset, self.select.offset + 6)
        off = self.select.offset
        return Location.of_span(self.text, off + min(starts), off + max(ends))

    def error(self, message: str, node: Any) -> AnalysisError:
        return AnalysisError(message, self.text, self.loc(node))

    def typing_error(self, e: TypingError, node: Any, where: str = "") -> AnalysisError:
        """The typer's error about ``node``; a call of an unknown function is said so, with
        the nearest names, and underlines the function's name.
        """
        at = self.loc(node)
        if e.unknown_function is None:
            return AnalysisError(f"{where}{e.reason}", self.text, at)
        reason = unknown_function(e.unknown_function, ALLOWED)
        name_at = rf"(?<![\w$]){re.escape(e.unknown_function)}`?\s*\("
        at = locate(Refusal(reason, (name_at,)), self.text, [(at.start, at.end)], at)
        return AnalysisError(reason, self.text, at)

    def type_of(self, sql: str, schema: StructType) -> DataType:
        """The type of one Spark SQL expression over ``schema`` (``TypingError``)."""
        return self.typer.fields([("_e", sql)], schema).fields[0].dataType

    def allowed_sql(self, tree: exp.Expr, node: exp.Expr) -> str:
        """The Spark SQL of ``tree`` (``node`` with our column names) unless it calls what a
        server client may not: checked before Spark analyses it, since analysing
        ``java_method`` already loads the class it names (plan/sandbox.py).
        """
        sql = tree.sql(dialect="spark")
        if self.trusted:
            return sql
        own = {*self.catalog.functions, *self.catalog.aggregates}
        columns = {c.name.lower() for c in tree.find_all(exp.Column)}
        assert self.spark is not None, "an untrusted binder asks Spark's parser what runs"
        refusal = find_refusal(self.spark, sql, own, columns)
        if refusal is None:
            return sql
        at = self.loc(node)
        start = self.select.offset
        spans = [(at.start, at.end), (start, start + len(self.select.text))]
        raise AnalysisError(refusal.message, self.text, locate(refusal, self.text, spans, at))

    def bind(self, node: Any) -> tuple[PlanNode, int | None]:
        if isinstance(node, exp.Union) and not node.args.get("distinct"):
            return bind_union(self, node)
        if isinstance(node, exp.SetOperation):
            return bind_set_operation(self, node)
        if isinstance(node, exp.Subquery):
            return self.bind(node.this)
        if isinstance(node, exp.Select):
            return self.bind_select(node)
        msg = f"{node.key.upper()} is not supported here; expected SELECT or UNION ALL"
        raise self.error(msg, node)

    def bind_select(self, sel: exp.Select) -> tuple[PlanNode, int | None]:
        for unsupported in ("with", "qualify", "windows", "offset"):
            if sel.args.get(unsupported):
                word = unsupported.upper()
                msg = f"{word} is not supported in a continuous query"
                if unsupported == "offset":
                    msg += "; a Top-N keeps the first n rows (ORDER BY ... LIMIT n)"
                raise self.error(msg, sel.args[unsupported])
        self.refuse_subquery_predicates(sel)
        ranked = [e for e in sel.expressions if is_ranking(e.unalias())]
        if ranked:
            return bind_ranking(self, sel, ranked)
        overs = over_windows(self, sel)
        if overs:
            return bind_over(self, sel, overs), None
        for e in sel.expressions:
            for w in e.find_all(exp.Window):
                msg = (f"window function {w.this.sql(dialect='spark')} is not supported; "
                       "ROW_NUMBER(), RANK() and DENSE_RANK() are, as a whole SELECT item "
                       "(Top-N), and count, sum and avg OVER (PARTITION BY ... ORDER BY "
                       "the event time RANGE BETWEEN ... PRECEDING AND CURRENT ROW)")
                raise self.keyword_error(msg, w, "", r"\s*\)")
        if sel.args.get("distinct") is not None and sel.args["distinct"].args.get("on"):
            msg = "DISTINCT ON is not supported; write SELECT DISTINCT or GROUP BY"
            raise self.keyword_error(msg, sel.args["distinct"], r"\bDISTINCT\s+ON\s*\(\s*",
                                     r"\s*\)")
        from_ = sel.args.get("from_") or sel.args.get("from")
        if from_ is None:
            msg = "a continuous query needs a FROM clause naming a stream"
            raise self.error(msg, sel)
        items = [from_.this, *[j.this for j in sel.args.get("joins") or []]]
        stateful = has_aggregates(self, sel) or any(sel.args.get(a) is not None
                                                    for a in ("distinct", "order", "limit"))
        lookup = any(is_lookup(self, item) for item in items[1:])
        if lookup and stateful:
            msg = ("a lookup join (FOR SYSTEM_TIME AS OF) gives each event once, enriched; "
                   "aggregate it in a query over a derived stream: CREATE STREAM enriched "
                   "AS SELECT ... FOR SYSTEM_TIME AS OF ..., then SELECT ... FROM enriched "
                   "[RANGE ...] GROUP BY ...")
            raise self.error(msg, sel)
        needs_relation = (bool(sel.args.get("joins")) and not lookup) or stateful
        call = spark_window_call(self, sel)
        scope = Scope([bind_from_item(self, item, needs_relation,
                                      i if len(items) > 1 else None, call if i == 0 else None)
                       for i, item in enumerate(items)])
        for src in scope.sources:
            if src.window is not None and isinstance(src.window.spec, LookupTime):
                check_lookup_time(self, src, scope)
        windowed = assigned_source(scope)
        if windowed is not None:
            return bind_window_aggregate(self, sel, scope, windowed), None
        return self.bind_in_scope(sel, scope), scope_period(scope)

    def bind_in_scope(self, sel: exp.Select, scope: Scope) -> PlanNode:
        """The rest of a SELECT once its FROM items are in ``scope``: joins, WHERE, the
        aggregate or the SELECT list, DISTINCT, ORDER BY and LIMIT.
        """
        plan = scope.sources[0].plan
        where = sel.args["where"].this if sel.args.get("where") is not None else None
        rest = conjuncts_of(where) if where is not None else []
        for join, src in zip(sel.args.get("joins") or [], scope.sources[1:], strict=True):
            visible = Scope(scope.sources[: scope.sources.index(src) + 1])
            how = join_how(self, join)
            # a WHERE conjunct is a join condition of an inner join only: above an outer
            # join it filters the padded rows too, as SQL says
            moved = ([c for c in rest if joins_source(self, c, visible, src)]
                     if how is JoinHow.INNER else [])
            rest = [c for c in rest if not any(c is m for m in moved)]
            plan = bind_join(self, join, plan, src, scope, moved)
            if not how.keeps_right_columns:
                src.filters_only = how
        if len(scope.sources) == 1:  # WHERE rn <= n over a ranking: a Top-N of n rows
            for c in list(rest):
                folded = fold_rank_limit(self, plan, c, scope)
                if folded is not None:
                    plan = folded
                    rest = [x for x in rest if x is not c]
        if rest:
            cond = exp.and_(*rest) if len(rest) > 1 else rest[0]
            plan = self.filter(plan, cond, scope, "WHERE")  # type: ignore[arg-type]
        if has_aggregates(self, sel) or sel.args.get("group"):
            plan = bind_aggregate(self, sel, plan, scope)
        else:
            plan = self.project(plan, self.select_list(sel, scope), sel)
        if sel.args.get("distinct") is not None:
            plan = distinct(plan)
        return bind_order_limit(self, sel, plan)

    def refuse_subquery_predicates(self, sel: exp.Select) -> None:
        """``[NOT] EXISTS (SELECT ...)`` and ``x [NOT] IN (SELECT ...)`` are refused with the
        join that says the same (a continuous query reads what its FROM clause names).
        """
        parts = [sel.args.get("where"), sel.args.get("having"), *sel.expressions]
        for part in [p for p in parts if p is not None]:
            for node in part.find_all(exp.Exists, exp.In):
                if isinstance(node, exp.In) and node.args.get("query") is None:
                    continue
                negated = isinstance(node.parent, exp.Not)
                join = "LEFT ANTI JOIN" if negated else "LEFT SEMI JOIN"
                what = "EXISTS (SELECT ...)" if isinstance(node, exp.Exists) else \
                    "IN (SELECT ...)"
                msg = (f"{'NOT ' if negated else ''}{what} is not supported; write the "
                       f"subquery's stream as a {join} ... ON the condition that relates "
                       "them (FROM s [RANGE 5] LEFT SEMI JOIN r [RANGE 5] ON s.k = r.k)")
                raise self.subquery_error(msg, node)

    def subquery_error(self, message: str, node: exp.Exists | exp.In) -> AnalysisError:
        """An error underlining ``[NOT] EXISTS (...)`` or ``x [NOT] IN (...)`` whole: from
        its first word to the parenthesis that closes its subquery.
        """
        at = self.loc(node)
        words = r"\b(?:NOT\s+)?EXISTS\s*\(" if isinstance(node, exp.Exists) else \
            r"\b(?:NOT\s+)?IN\s*\("
        opened = None
        for m in re.finditer(words, self.text[:at.end], re.IGNORECASE):
            opened = m
        if opened is None:
            return self.error(message, node)
        start = min(opened.start(), at.start)
        depth, end = 0, len(self.text)
        for i in range(opened.end() - 1, len(self.text)):
            depth += {"(": 1, ")": -1}.get(self.text[i], 0)
            if depth == 0:
                end = i + 1
                break
        return AnalysisError(message, self.text, Location.of_span(self.text, start, end))

    def keyword_error(self, message: str, node: Any, before: str,
                      after: str = "") -> AnalysisError:
        """An error at ``node`` with the keywords around it underlined too: the text that
        regular expression ``before`` finds right before it, and ``after`` right after.
        """
        at = self.loc(node)
        lead = re.search(before + r"$", self.text[:at.start], re.IGNORECASE) if before else None
        tail = re.match(after, self.text[at.end:]) if after else None
        start = lead.start() if lead else at.start
        end = at.end + (tail.end() if tail else 0)
        return AnalysisError(message, self.text, Location.of_span(self.text, start, end))

    def render(self, node: exp.Expression, scope: Scope) -> str:
        for n in node.walk():
            if is_aggregate(self, n):
                msg = f"aggregate {n.sql(dialect='spark')} is not allowed here"
                raise self.error(msg, n)
        sql = self.allowed_sql(self.resolved(node, scope), node)
        self.check_literals(node, scope)
        return sql

    def resolved(self, node: exp.Expr, scope: Scope) -> exp.Expr:
        """A copy of ``node`` whose columns are the plan's (the user's names resolved)."""
        def rewrite(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
                column, fields = scope.resolve_path(n, self)
                if not fields:
                    return exp.column(column, quoted=True)
                return exp.Dot.build([exp.column(column, quoted=True),
                                      *[exp.to_identifier(f, quoted=True) for f in fields]])
            return n

        return node.copy().transform(rewrite)

    def check_literals(self, node: exp.Expression, scope: Scope) -> None:
        """Refuse a string literal Spark would cast, on the first row, to a type it cannot
        be (``plan/value_checks.py``).
        """
        if not any(isinstance(n, exp.Literal) and n.is_string for n in node.walk()):
            return
        schema = StructType([f for s in scope.sources for f in s.plan.schema.fields])

        def type_of(part: exp.Expr) -> DataType:
            try:
                return self.type_of(self.resolved(part, scope).sql(dialect="spark"), schema)
            except (TypingError, AnalysisError):
                return NullType()  # the typing of the whole says what is wrong

        problem = literal_problem(node, type_of, self.typer.casts)
        if problem is not None:
            raise self.error(problem[1], problem[0])

    def check_predicate(self, schema: StructType, sql: str, node: Any, where: str) -> None:
        try:
            out = self.type_of(sql, schema)
        except TypingError as e:
            raise self.typing_error(e, node, f"{where}: ") from None
        if not isinstance(out, BooleanType):
            msg = f"{where} condition must be BOOLEAN, found {out.simpleString()}"
            raise self.error(msg, node)

    def filter(self, plan: PlanNode, cond: exp.Expression, scope: Scope, where: str) -> PlanNode:
        sql = self.render(cond, scope)
        self.check_predicate(plan.schema, sql, cond, where)
        return Filter(plan, Expr.parse(sql, BooleanType(), shown=cond.sql(dialect="spark")))

    def project(
        self, plan: PlanNode, exprs: list[tuple[str, str]], node: exp.Expression,
        origins: list[exp.Expression] | None = None,
    ) -> PlanNode:
        names = [n for n, _ in exprs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            msg = f"duplicate output column {dupes[0]!r}; give each column a distinct alias"
            raise self.error(msg, node)
        try:
            schema = self.typer.fields(exprs, plan.schema)
        except TypingError as whole:
            # typed one by one only to blame the expression at fault
            for i, named in enumerate(exprs):
                try:
                    self.typer.fields([named], plan.schema)
                except TypingError as e:
                    culprit = origins[i] if origins else node
                    raise self.typing_error(e, culprit) from None
            raise self.typing_error(whole, node) from None
        if isinstance(plan, Project) and all(sql == quote(n) for n, sql in exprs) and [
            f.name for f in plan.schema.fields
        ] == names:
            return plan
        return Project(plan, tuple((n, Expr.parse(sql, f.dataType))
                                   for (n, sql), f in zip(exprs, schema.fields, strict=True)),
                       schema)

    def select_list(self, sel: exp.Select, scope: Scope) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        self._origins: list[exp.Expression] = []
        for e in sel.expressions:
            star = isinstance(e, exp.Column) and isinstance(e.this, exp.Star)
            if isinstance(e, exp.Star) or star:
                table = e.table if isinstance(e, exp.Column) else ""
                for src in scope.sources:
                    if (table and src.alias.lower() != table.lower()) or src.filters_only:
                        continue
                    for user, internal in src.columns.items():
                        out.append((user, quote(internal)))
                        self._origins.append(e)
                continue
            out.append((output_name(e), self.render(e.unalias(), scope)))
            self._origins.append(e)
        return out
