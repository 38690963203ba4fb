"""Bind a parsed SELECT to the catalog and build its logical plan.

Every name is resolved here, so an unknown stream or column, a window on a table or an
aggregate misused fails before anything runs, with the line and column of the culprit.
Scalar expressions stay Spark SQL: sqlglot renders them with our column names and Spark's own
analyzer types them on an empty DataFrame, so the engine accepts exactly what Spark accepts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import sqlglot
import sqlglot.expressions as exp
from pyspark.sql.types import BooleanType, DataType, DoubleType, NullType, NumericType, StructType

from sparkcq.aggregates.library import Median
from sparkcq.aggregates.user import UserAggregate, define_aggregate
from sparkcq.errors import AnalysisError, Location
from sparkcq.language.apas.compiler import compile_program
from sparkcq.language.sql.statements import ApasText, OutputForm, SelectText, SourceWindow
from sparkcq.model.aggregate_functions import DERIVED_AGGREGATES, DerivedAggregate
from sparkcq.model.time import TimeKind
from sparkcq.model.types import implicit_cast_sql
from sparkcq.model.windows import (
    CountCutWindow,
    CutWindow,
    KeyCutWindow,
    NowWindow,
    RangeWindow,
    RowsWindow,
    SessionWindow,
    UnboundedWindow,
)
from sparkcq.plan.allowed_functions import ALLOWED
from sparkcq.plan.calls import call_args, called_aggregate
from sparkcq.plan.counting import copies, counts_per_input, distinct, quote
from sparkcq.plan.expressions import Expr
from sparkcq.plan.nodes import (
    AggCall,
    Aggregate,
    CountCutSpec,
    CutSpec,
    EdgeKind,
    Filter,
    Join,
    JoinHow,
    KeyCutSpec,
    KeyedSpec,
    PlanNode,
    Project,
    RangeSpec,
    RankKind,
    ResolvedWindow,
    RowsSpec,
    SessionSpec,
    SortKey,
    StreamScan,
    TopN,
    ToStream,
    UnboundedSpec,
    Union,
    Window,
)
from sparkcq.plan.sandbox import Refusal, find_refusal, locate, unknown_function
from sparkcq.plan.typer import SparkTyper, Typer, TypingError
from sparkcq.plan.value_checks import aggregate_argument_problem, literal_problem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sparkcq.catalog import Catalog

_AGGREGATES = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}

_MEDIAN = define_aggregate("median", Median, [("x", DoubleType())], DoubleType(),
                           "sparkcq.aggregates.library:Median")
#: aggregates that return a tree: name -> field -> (aggregate, user aggregate)
TREE_AGGREGATES: dict[str, dict[str, tuple[str, UserAggregate | None]]] = {
    "stats": {"min": ("min", None), "max": ("max", None), "median": ("median", _MEDIAN),
              "avg": ("avg", None)},
}


@dataclass
class _Source:
    """A FROM item in scope: its alias, plan, and user column -> plan column names."""

    alias: str
    plan: PlanNode
    columns: dict[str, str]
    window: SourceWindow | None
    period: int | None = None
    # joined by a semi or anti join: it only filters the rows before it, its columns are
    # not in the result
    filters_only: JoinHow | None = None


@dataclass
class _Scope:
    sources: list[_Source] = field(default_factory=list)

    def resolve(self, col: Any, ctx: _Binder) -> str:
        """The plan column a column reference names; a path into a struct is an error here
        (``resolve_path`` takes one).
        """
        column, fields = self.resolve_path(col, ctx)
        if fields:
            msg = f"{col.sql(dialect='spark')} is a field of a struct, not a column"
            raise ctx.error(msg, col)
        return column

    def resolve_path(self, col: Any, ctx: _Binder) -> tuple[str, tuple[str, ...]]:
        """The plan column a reference starts from and the struct fields it goes down
        (attribute trees, ``docs/apas.md``): ``s.position.x`` and ``position.x`` are field
        ``x`` of column ``position``, a qualifier first when it names a source in scope.
        """
        parts = [p.name for p in col.parts]
        if len(parts) > 2 or (len(parts) == 2 and not self.is_alias(parts[0])):
            if self.is_alias(parts[0]):
                qualified = exp.column(parts[1], table=parts[0])
                return self.resolve_path(qualified, ctx)[0], tuple(parts[2:])
            if len(parts) <= 4 and any(_lookup(s.columns, parts[0]) for s in self.sources):
                head = exp.column(parts[0])
                head.meta.update(col.meta)
                return self.resolve_path(head, ctx)[0], tuple(parts[1:])
        return self._resolve(col, ctx), ()

    def is_alias(self, name: str) -> bool:
        """Whether ``name`` is the alias of a source in scope."""
        return any(s.alias.lower() == name.lower() for s in self.sources)

    def _resolve(self, col: Any, ctx: _Binder) -> str:
        name = col.name
        table = col.table
        for src in self.sources:
            if src.filters_only is not None and (
                    src.alias.lower() == table.lower() if table
                    else _lookup(src.columns, name) is not None and not any(
                        _lookup(s.columns, name) for s in self.sources if s is not src)):
                msg = (f"{src.alias!r} is joined by a LEFT {src.filters_only.name} JOIN: it "
                       f"only decides which rows before it are kept, its column {name!r} is "
                       "not in the result")
                raise ctx.error(msg, col)
        if table:
            for src in self.sources:
                if src.alias.lower() == table.lower():
                    found = _lookup(src.columns, name)
                    if found is None:
                        cols = ", ".join(src.columns)
                        msg = f"unknown column {name!r} in {src.alias!r}; columns: {cols}"
                        raise ctx.error(msg, col)
                    return found
            aliases = ", ".join(s.alias for s in self.sources)
            msg = f"unknown stream or alias {table!r}; in this query: {aliases}"
            raise ctx.error(msg, col)
        hits = [(s, _lookup(s.columns, name)) for s in self.sources if s.filters_only is None]
        hits = [(s, c) for s, c in hits if c is not None]
        if not hits:
            where = " or ".join(repr(s.alias) for s in self.sources)
            cols = ", ".join(dict.fromkeys(c for s in self.sources for c in s.columns))
            msg = f"unknown column {name!r} in {where}; columns: {cols}"
            raise ctx.error(msg, col)
        if len(hits) > 1:
            which = ", ".join(f"{s.alias}.{name}" for s, _ in hits)
            msg = f"column {name!r} is ambiguous; write one of {which}"
            raise ctx.error(msg, col)
        return hits[0][1]  # type: ignore[return-value]


def source_column(position: int, column: str) -> str:
    """The plan's name of ``column`` of the FROM item at ``position`` (0 the first) in a
    query of several.
    """
    return f"_{position}__{column}"


def _lookup(columns: dict[str, str], name: str) -> str | None:
    if name in columns:
        return columns[name]
    for user, internal in columns.items():
        if user.lower() == name.lower():
            return internal
    return None


def _conjuncts(cond: exp.Expression) -> list[exp.Expression]:
    """``a AND b AND c`` as [a, b, c] (parentheses around a conjunction are looked through)."""
    while isinstance(cond, exp.Paren):
        cond = cond.this
    if isinstance(cond, exp.And):
        return [*_conjuncts(cond.args["this"]), *_conjuncts(cond.args["expression"])]
    return [cond]


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
    binder = _Binder(select, text, catalog, spark, trusted, typer)
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


class _Binder:
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

    # -- errors --------------------------------------------------------------------------
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

    # -- queries -------------------------------------------------------------------------
    def bind(self, node: Any) -> tuple[PlanNode, int | None]:
        if isinstance(node, exp.Union) and not node.args.get("distinct"):
            return self.bind_union(node)
        if isinstance(node, exp.SetOperation):
            return self.bind_set_operation(node)
        if isinstance(node, exp.Subquery):
            return self.bind(node.this)
        if isinstance(node, exp.Select):
            return self.bind_select(node)
        msg = f"{node.key.upper()} is not supported here; expected SELECT or UNION ALL"
        raise self.error(msg, node)

    def set_inputs(self, node: exp.SetOperation, what: str
                   ) -> tuple[PlanNode, PlanNode, int | None]:
        """Both inputs of a set operation, bound, their columns checked and named as the
        left's; raw streams made relations (``[UNBOUNDED]``) unless ``what`` is UNION ALL.
        """
        left, lp = self.bind(node.left)
        right, rp = self.bind(node.right)
        lf, rf = left.schema.fields, right.schema.fields
        if len(lf) != len(rf):
            msg = f"{what} inputs have {len(lf)} and {len(rf)} columns; they must match"
            raise self.error(msg, node)
        for a, b in zip(lf, rf, strict=True):
            if a.dataType != b.dataType:
                msg = (
                    f"{what} column {a.name!r} is {a.dataType.simpleString()} on the left "
                    f"but {b.dataType.simpleString()} on the right; cast one side"
                )
                raise self.error(msg, node)
        kinds = {left.kind, right.kind}
        if what != "UNION ALL":
            left, right = (Window(p, UnboundedSpec()) if p.kind is EdgeKind.STREAM else p
                           for p in (left, right))
        elif EdgeKind.STREAM in kinds and len(kinds) > 1:
            msg = "UNION ALL of a raw stream and a windowed relation; add a window to both sides"
            raise self.error(msg, node)
        if [f.name for f in rf] != [f.name for f in lf]:
            right = self.project(
                right, [(a.name, quote(b.name)) for a, b in zip(lf, rf, strict=True)], node
            )
        periods = {p for p in (lp, rp) if p}
        return left, right, (periods.pop() if len(periods) == 1 else None)

    def bind_union(self, node: exp.Union) -> tuple[PlanNode, int | None]:
        left, right, period = self.set_inputs(node, "UNION ALL")
        inputs: list[PlanNode] = []
        for side in (left, right):
            inputs.extend(side.inputs if isinstance(side, Union) else (side,))
        return Union(tuple(inputs)), period

    def bind_set_operation(self, node: exp.SetOperation) -> tuple[PlanNode, int | None]:
        """UNION, INTERSECT and EXCEPT (ALL or DISTINCT) on every snapshot, from how many
        copies of each row each input holds (``plan/counting.py``).
        """
        every = not node.args.get("distinct")
        what = f"{node.key.upper()}{' ALL' if every else ''}"
        left, right, period = self.set_inputs(node, what)
        if isinstance(node, exp.Union):
            return distinct(Union((left, right))), period
        counted = counts_per_input((left, right), ("_left", "_right"))
        if isinstance(node, exp.Intersect):
            how_many = "least(`_left`, `_right`)" if every else \
                "CAST(`_left` > 0 AND `_right` > 0 AS BIGINT)"
        else:
            how_many = "greatest(`_left` - `_right`, CAST(0 AS BIGINT))" if every else \
                "CAST(`_left` > 0 AND `_right` = 0 AS BIGINT)"
        return copies(counted, how_many), period

    def bind_select(self, sel: exp.Select) -> tuple[PlanNode, int | None]:
        for unsupported in ("with", "qualify", "windows", "offset"):
            if sel.args.get(unsupported):
                word = unsupported.upper()
                msg = f"{word} is not supported in a continuous query"
                if unsupported == "offset":
                    msg += "; a Top-N keeps the first n rows (ORDER BY ... LIMIT n)"
                raise self.error(msg, sel.args[unsupported])
        self.refuse_subquery_predicates(sel)
        ranked = [e for e in sel.expressions if _ranking(e.unalias())]
        if ranked:
            return self.bind_ranking(sel, ranked)
        for e in sel.expressions:
            for w in e.find_all(exp.Window):
                msg = (f"window function {w.this.sql(dialect='spark')} is not supported; "
                       "ROW_NUMBER(), RANK() and DENSE_RANK() are, as a whole SELECT item "
                       "(Top-N); for a windowed aggregate write a window clause in FROM")
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
        needs_relation = (bool(sel.args.get("joins")) or self.has_aggregates(sel)
                          or any(sel.args.get(a) is not None
                                 for a in ("distinct", "order", "limit")))
        scope = _Scope([self.bind_from_item(item, needs_relation,
                                            i if len(items) > 1 else None)
                        for i, item in enumerate(items)])
        plan = scope.sources[0].plan
        where = sel.args["where"].this if sel.args.get("where") is not None else None
        rest = _conjuncts(where) if where is not None else []
        for join, src in zip(sel.args.get("joins") or [], scope.sources[1:], strict=True):
            visible = _Scope(scope.sources[: scope.sources.index(src) + 1])
            how = self.join_how(join)
            # a WHERE conjunct is a join condition of an inner join only: above an outer
            # join it filters the padded rows too, as SQL says
            moved = ([c for c in rest if self.joins_source(c, visible, src)]
                     if how is JoinHow.INNER else [])
            rest = [c for c in rest if not any(c is m for m in moved)]
            plan = self.bind_join(join, plan, src, scope, moved)
            if not how.keeps_right_columns:
                src.filters_only = how
        if len(scope.sources) == 1:  # WHERE rn <= n over a ranking: a Top-N of n rows
            for c in list(rest):
                folded = self.fold_rank_limit(plan, c, scope)
                if folded is not None:
                    plan = folded
                    rest = [x for x in rest if x is not c]
        if rest:
            cond = exp.and_(*rest) if len(rest) > 1 else rest[0]
            plan = self.filter(plan, cond, scope, "WHERE")  # type: ignore[arg-type]
        if self.has_aggregates(sel) or sel.args.get("group"):
            plan = self.bind_aggregate(sel, plan, scope)
        else:
            plan = self.project(plan, self.select_list(sel, scope), sel)
        if sel.args.get("distinct") is not None:
            plan = distinct(plan)
        plan = self.bind_order_limit(sel, plan)
        periods = {s.period for s in scope.sources if s.period}
        return plan, (periods.pop() if len(periods) == 1 else None)

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

    # -- Top-N ---------------------------------------------------------------------------
    def output_column(self, item: exp.Expression, sel: exp.Select, plan: PlanNode,
                      clause: str, ordinals: bool = False) -> str:
        """The output column an ORDER BY or OVER item names: an output column's name, an
        ordinal (ORDER BY only), or an expression written as a SELECT item is.
        """
        names = [f.name for f in plan.schema.fields]
        if isinstance(item, exp.Column) and not item.table:
            for n in names:
                if n.lower() == item.name.lower():
                    return n
        if ordinals and isinstance(item, exp.Literal) and item.is_int:
            i = int(item.this)
            if not 1 <= i <= len(names):
                msg = f"{clause} {i}: the SELECT list has {len(names)} items"
                raise self.error(msg, item)
            return names[i - 1]
        written = self._canon(item)
        items = [e for e in sel.expressions if not _ranking(e.unalias())]
        for e in items:
            if self._canon(e.unalias()) == written:
                return output_name(e)
        msg = (f"{clause} {item.sql(dialect='spark')}: a continuous query orders by a column "
               f"of its SELECT list; add it there with an alias and name the alias; "
               f"columns: {', '.join(names)}")
        raise self.error(msg, item)

    def sort_keys(self, order: exp.Order, sel: exp.Select, plan: PlanNode, clause: str,
                  ordinals: bool = False) -> tuple[SortKey, ...]:
        """The items of an ORDER BY as sort keys over ``plan``'s columns."""
        return tuple(SortKey(self.output_column(o.this, sel, plan, clause, ordinals),
                             bool(o.args.get("desc")), o.args.get("nulls_first"))
                     for o in order.expressions)

    def bind_order_limit(self, sel: exp.Select, plan: PlanNode) -> PlanNode:
        """``ORDER BY ... LIMIT n``: a Top-N of every snapshot (a relation has no order of
        its own, so ORDER BY alone and LIMIT alone are refused, saying why).
        """
        order, limit = sel.args.get("order"), sel.args.get("limit")
        if order is None and limit is None:
            return plan
        if limit is None:
            msg = ("ORDER BY needs LIMIT n in a continuous query: results are ordered by "
                   "time; ORDER BY ... LIMIT n keeps the first n rows of every snapshot")
            raise self.keyword_error(msg, order, r"\bORDER\s+BY\s+")
        if order is None:
            msg = ("LIMIT needs ORDER BY: which n rows a snapshot keeps must not depend "
                   "on arrival order")
            raise self.keyword_error(msg, limit, r"\bLIMIT\s+")
        n = limit.expression
        if not (isinstance(n, exp.Literal) and n.is_int and int(n.this) > 0):
            msg = "LIMIT takes a whole number above 0"
            raise self.keyword_error(msg, limit, r"\bLIMIT\s+")
        return TopN(plan, (), self.sort_keys(order, sel, plan, "ORDER BY", ordinals=True),
                    int(n.this))

    def bind_ranking(self, sel: exp.Select, ranked: list[exp.Expression]
                     ) -> tuple[PlanNode, int | None]:
        """A SELECT with ``ROW_NUMBER()``, ``RANK()`` or ``DENSE_RANK() OVER (PARTITION BY
        ... ORDER BY ...)``: the rest of the SELECT, numbered on every snapshot (a Top-N of
        every row; an outer ``WHERE rn <= n`` keeps n, ``fold_rank_limit``).
        """
        if len(ranked) > 1:
            msg = "one ranking function per SELECT; rank in a subquery to rank twice"
            raise self.error(msg, ranked[1])
        item = ranked[0]
        window = item.unalias()
        for clause in ("order", "limit", "distinct"):
            if sel.args.get(clause) is not None:
                msg = (f"{clause.upper()} beside a ranking function: rank in a subquery "
                       "and write it in the outer SELECT")
                raise self.error(msg, sel.args[clause])
        if window.args.get("spec") is not None:
            msg = "a ranking function takes no window frame (ROWS/RANGE BETWEEN)"
            raise self.error(msg, window)
        rest = sel.copy()
        rest.set("expressions", [e.copy() for e in sel.expressions if e is not item])
        plan, period = self.bind_select(rest)
        if plan.kind is EdgeKind.STREAM:  # ranked like any relation: [UNBOUNDED] by default
            plan = Window(plan, UnboundedSpec())
        order = window.args.get("order")
        if order is None:
            msg = f"{window.this.sql(dialect='spark')} needs ORDER BY in its OVER (...)"
            raise self.error(msg, window)
        partition = tuple(self.output_column(p, rest, plan, "PARTITION BY")
                          for p in window.args.get("partition_by") or [])
        keys = self.sort_keys(order, rest, plan, "ORDER BY")
        name = output_name(item)
        if name in {f.name for f in plan.schema.fields}:
            msg = f"duplicate output column {name!r}; give the ranking another alias"
            raise self.error(msg, item)
        kind = {exp.RowNumber: RankKind.ROW_NUMBER, exp.Rank: RankKind.RANK,
                exp.DenseRank: RankKind.DENSE_RANK}[type(window.this)]
        top: PlanNode = TopN(plan, partition, keys, None, kind, name)
        order_out = [output_name(e) for e in sel.expressions]
        if [f.name for f in top.schema.fields] != order_out:
            top = self.project(top, [(n, quote(n)) for n in order_out], sel)
        return top, period

    def fold_rank_limit(self, plan: PlanNode, cond: exp.Expression,
                        scope: _Scope) -> PlanNode | None:
        """``plan`` with a ranking below it keeping only the rows ``cond`` (``rn <= n``,
        ``rn < n`` or ``rn = 1`` on its rank column) allows, or None when ``cond`` is no
        such bound.
        """
        if not isinstance(cond, exp.LTE | exp.LT | exp.EQ):
            return None
        left, lit = cond.left, cond.args.get("expression")
        if not (isinstance(left, exp.Column) and isinstance(lit, exp.Literal) and lit.is_int):
            return None
        n = int(lit.this) - (1 if isinstance(cond, exp.LT) else 0)
        if isinstance(cond, exp.EQ) and n != 1:
            return None
        try:
            column = scope.resolve(left, self)
        except AnalysisError:
            return None
        above: list[Project] = []
        node = plan
        while isinstance(node, Project):
            found = dict(node.exprs).get(column)
            renamed = re.fullmatch(r"`([^`]+)`", found.sql if found else "")
            if renamed is None:
                return None
            column = renamed[1]
            above.append(node)
            node = node.child
        if not (isinstance(node, TopN) and node.rank_column == column and node.n is None):
            return None
        if n < 1:
            msg = f"{cond.sql(dialect='spark')} keeps no row"
            raise self.error(msg, cond)
        folded: PlanNode = replace(node, n=n)
        for p in reversed(above):
            folded = replace(p, child=folded)
        return folded

    # -- FROM ----------------------------------------------------------------------------
    def bind_from_item(self, item: exp.Expression, needs_relation: bool,
                       position: int | None) -> _Source:
        if isinstance(item, exp.Subquery):
            return self.bind_derived_table(item, needs_relation, position)
        if not isinstance(item, exp.Table) or not isinstance(item.this, exp.Identifier):
            msg = "only streams, tables and subqueries may appear in FROM"
            raise self.error(msg, item)
        name = item.name
        info = self.catalog.relation(name)
        if info is None:
            known = self.catalog.known_relations()
            msg = f"unknown stream or table {name!r}; known: {known}"
            raise self.error(msg, item.this)
        if not info.schema.fields:  # a feed stream before its HEADER
            msg = (f"stream {name!r} is not connected: its columns are unknown until its "
                   "feed sends a HEADER")
            raise self.error(msg, item.this)
        alias = item.alias or name
        key = item.this.meta.get("end", -1)
        window = self.select.windows.get(key)
        plan = info.plan
        period: int | None = None
        if isinstance(plan, StreamScan) and plan.key:
            if window is not None:
                self.used_windows.add(key)
                msg = (f"{name!r} is a keyed stream (key {', '.join(plan.key)}): each row is "
                       "valid until the next row or delete of its key, so a window clause "
                       "does not apply to it; read it without one")
                raise AnalysisError(msg, self.text, window.loc)
            plan = Window(plan, KeyedSpec(plan.key))
        elif window is not None:
            self.used_windows.add(key)
            if plan.kind is EdgeKind.TABLE:
                msg = f"{name!r} is a table; a window applies only to streams"
                raise AnalysisError(msg, self.text, window.loc)
            spec = self.resolve_window(window, plan)
            plan = Window(plan, spec)
            period = spec.slide if isinstance(spec, RangeSpec) else None
            period = spec.by if isinstance(spec, CutSpec) else period
        elif needs_relation and plan.kind is EdgeKind.STREAM:
            plan = Window(plan, UnboundedSpec())
        return self.source(alias, plan, item, position, window, period)

    def source(self, alias: str, plan: PlanNode, item: exp.Expression, position: int | None,
               window: SourceWindow | None, period: int | None) -> _Source:
        """A FROM item in scope; with several items its columns are named by the item's
        position, not its alias (``_1__col``), so a query that names its inputs otherwise
        builds the same plan.
        """
        columns = {f.name: f.name for f in plan.schema.fields}
        if position is not None:
            exprs = [(source_column(position, c), quote(c)) for c in columns]
            plan = self.project(plan, exprs, item)
            columns = {c: source_column(position, c) for c in columns}
        return _Source(alias, plan, columns, window, period)

    def bind_derived_table(self, item: exp.Subquery, needs_relation: bool,
                           position: int | None) -> _Source:
        """``(SELECT ...) AS x`` in FROM: bound like a derived stream, read under its alias;
        a raw stream it yields is ``[UNBOUNDED]`` where a relation is needed, as a named
        stream would be.
        """
        plan, period = self.bind(item.this)
        if needs_relation and plan.kind is EdgeKind.STREAM:
            plan = Window(plan, UnboundedSpec())
        return self.source(item.alias or "subquery", plan, item, position, None, period)

    def resolve_window(self, window: SourceWindow, plan: PlanNode) -> ResolvedWindow:
        spec = window.spec
        kind, unit = plan.time_kind, plan.time_unit
        try:
            if isinstance(spec, RangeWindow):
                size = spec.size.to_units(kind, unit)
                slide = spec.slide.to_units(kind, unit) if spec.slide else None
                return RangeSpec(size, slide if slide != 1 or kind is TimeKind.TIMESTAMP else None)
            if isinstance(spec, NowWindow):
                return RangeSpec(1)
            if isinstance(spec, UnboundedWindow):
                return UnboundedSpec()
            if isinstance(spec, RowsWindow):
                part = self.window_columns(spec.partition_by, plan, window, "partition")
                return RowsSpec(spec.rows, part)
            if isinstance(spec, CutWindow):
                if spec.on is not None:
                    self.ensure_cut_on_event_time(spec.on, plan, window)
                return CutSpec(spec.by.to_units(kind, unit), spec.chunks)
            if isinstance(spec, CountCutWindow):
                return CountCutSpec(spec.rows, spec.chunks)
            if isinstance(spec, KeyCutWindow):
                keys = self.window_columns(spec.keys, plan, window, "CUT ON")
                return KeyCutSpec(keys, spec.chunks)
            if isinstance(spec, SessionWindow):
                part = self.window_columns(spec.partition_by, plan, window, "partition")
                return SessionSpec(spec.gap.to_units(kind, unit), part)
        except ValueError as e:
            raise AnalysisError(str(e), self.text, window.loc) from None
        msg = f"unsupported window {spec}"
        raise AnalysisError(msg, self.text, window.loc)

    def window_columns(self, names: tuple[str, ...], plan: PlanNode, window: SourceWindow,
                       what: str) -> tuple[str, ...]:
        """The stream's columns a window clause names, as the stream spells them."""
        cols = {f.name.lower(): f.name for f in plan.schema.fields}
        for c in names:
            if c.lower() not in cols:
                msg = f"unknown {what} column {c!r}; columns: {', '.join(cols.values())}"
                raise AnalysisError(msg, self.text, window.loc)
        return tuple(cols[c.lower()] for c in names)

    def group_expression(self, g: exp.Expression, sel: exp.Select,
                         scope: _Scope) -> exp.Expression:
        """A GROUP BY item as the expression it names: an ordinal (``GROUP BY 1``) is that
        SELECT item, a name that is no input column is the SELECT item with that alias
        (``GROUP BY minute``), as Spark SQL reads them.
        """
        items = [e.this if isinstance(e, exp.Alias) else e for e in sel.expressions]
        if isinstance(g, exp.Literal) and g.is_int:
            i = int(g.this)
            if not 1 <= i <= len(items):
                msg = f"GROUP BY {i}: the SELECT list has {len(items)} items"
                raise self.error(msg, g)
            target = items[i - 1]
        elif isinstance(g, exp.Column) and not g.table:
            aliases = {e.alias.lower(): e.this for e in sel.expressions
                       if isinstance(e, exp.Alias)}
            if g.name.lower() not in aliases:
                return g
            try:
                self.render(g, scope)
                return g  # an input column of that name wins, as in Spark
            except AnalysisError:
                target = aliases[g.name.lower()]
        else:
            return g
        if any(self.is_aggregate(n) for n in target.walk()):
            msg = f"GROUP BY {g.sql(dialect='spark')} names an aggregate; group by its inputs"
            raise self.error(msg, g)
        return target.copy()

    def ensure_cut_on_event_time(self, on: str, plan: PlanNode, window: SourceWindow) -> None:
        """``CUT ON col``: ``col`` must be a column of the stream, and (for now) its event
        time, which is what chunks are cut on; anything else is refused, never ignored.
        """
        cols = {f.name.lower(): f.name for f in plan.schema.fields}
        if on.lower() not in cols:
            msg = (f"unknown column {on!r} in CUT ON; columns: "
                   f"{', '.join(cols.values())}")
            raise AnalysisError(msg, self.text, window.loc)
        if isinstance(plan, StreamScan) and on.lower() != plan.time_col.lower():
            msg = (f"CUT ON {cols[on.lower()]!r}: chunks are cut on the stream's event time "
                   f"{plan.time_col!r}; cutting on another column is not supported yet")
            raise AnalysisError(msg, self.text, window.loc)

    def joins_source(self, cond: exp.Expression, visible: _Scope, src: _Source) -> bool:
        """Whether a WHERE conjunct belongs in the join that adds ``src``: it relates ``src``
        to a source joined before it and reads no later one (then ``a.k = b.k`` is a join
        key, not a filter over a cross product).
        """
        cols = list(cond.find_all(exp.Column))
        if not cols or any(self.is_aggregate(n) for n in cond.walk()):
            return False
        try:
            names = {visible.resolve_path(c, self)[0] for c in cols}
        except AnalysisError:
            return False  # names a later source (or none): the WHERE reports it
        own = set(src.columns.values())
        return bool(names & own) and bool(names - own)

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

    def join_error(self, message: str, join: exp.Join) -> AnalysisError:
        """An error at a join, its keywords (``LEFT ANTI JOIN``) underlined with it."""
        return self.keyword_error(
            message, join,
            r"(?:\b(?:NATURAL|LEFT|RIGHT|FULL|INNER|CROSS|OUTER|SEMI|ANTI)\s+)*\bJOIN\s+")

    def join_how(self, join: exp.Join) -> JoinHow:
        """Which join ``join`` is; the kinds sparkcq does not run are refused here, with
        what to write instead.
        """
        side = (join.args.get("side") or "").upper()
        kind = (join.args.get("kind") or "").upper()
        if kind in ("SEMI", "ANTI") and side in ("", "LEFT"):
            return JoinHow.SEMI if kind == "SEMI" else JoinHow.ANTI
        if kind in ("", "OUTER") and side in ("LEFT", "RIGHT", "FULL"):
            return JoinHow[side]
        if not side and kind in ("", "INNER", "CROSS"):
            return JoinHow.INNER
        what = " ".join(w for w in (side, kind) if w)
        hint = ("write LEFT SEMI or LEFT ANTI JOIN with the inputs swapped"
                if kind in ("SEMI", "ANTI") else
                "write JOIN, LEFT JOIN, RIGHT JOIN, FULL JOIN, LEFT SEMI JOIN or LEFT ANTI JOIN")
        msg = f"{what} JOIN is not supported; {hint}"
        raise self.join_error(msg, join)

    def bind_join(
        self, join: exp.Join, left: PlanNode, src: _Source, scope: _Scope,
        moved: list[exp.Expression] | None = None,
    ) -> PlanNode:
        how = self.join_how(join)
        for i, side in enumerate((left, src.plan)):
            other = (left, src.plan)[1 - i]
            if how.padded(i) and side.kind is EdgeKind.TABLE and other.kind is not EdgeKind.TABLE:
                msg = (f"{how.name} JOIN keeps the rows of a table that no {other.kind.value} "
                       "row matches, which is not supported; keep the stream's side instead "
                       "(FROM stream LEFT JOIN table)")
                raise self.join_error(msg, join)
        if (not how.keeps_right_columns and left.kind is EdgeKind.TABLE
                and src.plan.kind is not EdgeKind.TABLE):
            msg = (f"LEFT {how.name} JOIN of a table with a {src.plan.kind.value} is not "
                   "supported; join the stream's side first")
            raise self.join_error(msg, join)
        if join.args.get("method"):
            msg = (f"{join.args['method'].upper()} JOIN is not supported; name the columns: "
                   "JOIN ... ON a.k = b.k")
            raise self.join_error(msg, join)
        if join.args.get("using"):
            msg = "JOIN ... USING is not supported; write JOIN ... ON a.k = b.k"
            raise self.error(msg, join)
        timed = [p for p in (left, src.plan) if p.kind is not EdgeKind.TABLE]
        if len(timed) == 2 and timed[0].time_unit != timed[1].time_unit:
            msg = ("the joined streams count event time in different units (time_unit); "
                   "declare the same time_unit on both")
            raise self.error(msg, join)
        on = join.args.get("on")
        if moved:
            conds = [*(_conjuncts(on) if on is not None else []), *moved]
            on = exp.and_(*conds) if len(conds) > 1 else conds[0]
        visible = _Scope(scope.sources[: scope.sources.index(src) + 1])
        condition = self.render(on, visible) if on is not None else None
        equi: list[tuple[str, str]] = []
        if on is not None:
            left_cols = {c for s in visible.sources[:-1] for c in s.columns.values()}
            for conj in on.flatten() if isinstance(on, exp.And) else [on]:
                if isinstance(conj, exp.EQ) and all(
                    isinstance(x, exp.Column) for x in (conj.left, conj.right)
                ):
                    (a, fa), (b, fb) = (visible.resolve_path(conj.left, self),
                                        visible.resolve_path(conj.right, self))
                    if fa or fb:
                        continue  # a struct field: a condition, not a join key
                    if a in left_cols and b in src.columns.values():
                        equi.append((a, b))
                    elif b in left_cols and a in src.columns.values():
                        equi.append((b, a))
        plan = Join(left, src.plan, None, tuple(sorted(equi)), how)  # in any order written
        if condition is None or on is None:
            return plan
        self.check_predicate(replace(plan, how=JoinHow.INNER).schema, condition, on,
                             "ON" if join.args.get("on") is not None else "WHERE")
        return replace(plan, condition=Expr.parse(condition, BooleanType(),
                                                  shown=on.sql(dialect="spark")))

    # -- expressions ---------------------------------------------------------------------
    def render(self, node: exp.Expression, scope: _Scope) -> str:
        for n in node.walk():
            if self.is_aggregate(n):
                msg = f"aggregate {n.sql(dialect='spark')} is not allowed here"
                raise self.error(msg, n)
        sql = self.allowed_sql(self.resolved(node, scope), node)
        self.check_literals(node, scope)
        return sql

    def resolved(self, node: exp.Expr, scope: _Scope) -> exp.Expr:
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

    def check_literals(self, node: exp.Expression, scope: _Scope) -> None:
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

    def filter(self, plan: PlanNode, cond: exp.Expression, scope: _Scope, where: str) -> PlanNode:
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

    def select_list(self, sel: exp.Select, scope: _Scope) -> list[tuple[str, str]]:
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

    # -- aggregation ---------------------------------------------------------------------
    def has_aggregates(self, sel: exp.Select) -> bool:
        nodes = [*sel.expressions, sel.args.get("having")]
        return any(n is not None and any(self.is_aggregate(x) for x in n.walk())
                   for n in nodes)

    def user_aggregate(self, node: Any) -> UserAggregate | None:
        """The user aggregate ``node`` calls, if it calls one."""
        return called_aggregate(node, self.catalog.aggregates, self.text)

    def is_aggregate(self, node: Any) -> bool:
        """Whether ``node`` calls a built-in or a user aggregate."""
        return (isinstance(node, exp.AggFunc) or self.user_aggregate(node) is not None
                or self.is_tree_aggregate(node))

    def is_tree_aggregate(self, node: Any) -> bool:
        """Whether ``node`` calls a built-in aggregate that returns a tree (``stats``),
        and no user aggregate of that name shadows it.
        """
        return (isinstance(node, exp.Anonymous) and node.name.lower() in TREE_AGGREGATES
                and node.name.lower() not in self.catalog.aggregates)

    def user_aggregate_arg(self, node: exp.Func, uda: UserAggregate, plan: PlanNode,
                           scope: _Scope) -> str:
        """The SQL of a user aggregate call's argument column: its one argument, or a
        struct ``(a0, a1, ...)`` of several, each converted to the declared type.
        """
        args = call_args(node)
        if len(args) != len(uda.arg_types):
            msg = (f"aggregate {uda.signature} takes {len(uda.arg_types)} argument"
                   f"{'s' if len(uda.arg_types) != 1 else ''}, got {len(args)}")
            raise self.error(msg, node)
        sqls = []
        for i, (arg, name, want) in enumerate(zip(args, uda.arg_names, uda.arg_types,
                                                  strict=True)):
            for inner in arg.walk():
                if self.is_aggregate(inner):
                    msg = "aggregate functions cannot be nested"
                    raise self.error(msg, inner)
            sql = self.render(arg, scope)
            try:
                got = self.type_of(sql, plan.schema)
            except TypingError as e:
                raise self.typing_error(e, arg) from None
            cast = implicit_cast_sql(sql, got, want)
            if cast is None:
                msg = (f"aggregate {uda.name}: argument {i + 1} ({name}) must be "
                       f"{want.simpleString().upper()}, found {got.simpleString().upper()}; "
                       "cast it explicitly")
                raise self.error(msg, arg)
            sqls.append(cast)
        if len(sqls) == 1:
            return sqls[0]
        fields = ", ".join(f"'a{i}', {sql}" for i, sql in enumerate(sqls))
        return f"named_struct({fields})"

    def bind_aggregate(self, sel: exp.Select, plan: PlanNode, scope: _Scope) -> PlanNode:
        group_exprs = [self.group_expression(g, sel, scope)
                       for g in (sel.args["group"].expressions if sel.args.get("group") else [])]
        pre: list[tuple[str, str]] = []
        key_names: dict[str, str] = {}
        for g in group_exprs:
            sql = self.render(g, scope)
            if sql not in key_names:
                name = f"_g{len(key_names)}"
                key_names[sql] = name
                pre.append((name, sql))
        calls: dict[str, AggCall] = {}
        arg_names: dict[str, str] = {}

        def agg_ref(node: exp.Expression) -> exp.Expression:
            if self.is_tree_aggregate(node):
                return tree_ref(node)
            uda = self.user_aggregate(node)
            if uda is not None:
                assert isinstance(node, exp.Func)
                sql = self.user_aggregate_arg(node, uda, plan, scope)
                if sql not in arg_names:
                    arg_names[sql] = f"_a{len(arg_names)}"
                    pre.append((arg_names[sql], sql))
                key = f"uda:{uda.name}|{arg_names[sql]}"
                if key not in calls:
                    calls[key] = AggCall(uda.name.lower(), arg_names[sql], False,
                                         f"_x{len(calls)}", uda)
                return exp.column(calls[key].name, quoted=True)
            derived = derived_aggregate(node)
            if derived is not None:
                return derived_ref(node, derived)
            func = next((f for t, f in _AGGREGATES.items() if type(node) is t), None)
            if func is None:
                msg = (
                    f"aggregate function {node.sql(dialect='spark')!r} is not supported; "
                    "use count, sum, avg, min, max or a user aggregate (CREATE AGGREGATE)"
                )
                raise self.error(msg, node)
            target = node.this
            distinct = isinstance(target, exp.Distinct)
            if distinct:
                if len(target.expressions) != 1:
                    msg = "count(DISTINCT ...) takes exactly one expression"
                    raise self.error(msg, node)
                target = target.expressions[0]
                if func != "count":
                    distinct = False  # min/max(DISTINCT x) = min/max(x); sum/avg refused below
                    if func in ("sum", "avg"):
                        msg = f"{func}(DISTINCT ...) is not supported; only count(DISTINCT ...)"
                        raise self.error(msg, node)
            for inner in target.walk() if target is not None else []:
                if self.is_aggregate(inner):
                    msg = "aggregate functions cannot be nested"
                    raise self.error(msg, inner)
            arg: str | None = None
            if target is not None and not isinstance(target, exp.Star):
                sql = self.render(target, scope)
                if func in ("sum", "avg"):
                    dtype = self.type_of(sql, plan.schema)
                    problem = aggregate_argument_problem(func, target, dtype)
                    if problem is not None:
                        raise self.error(problem, target)
                if sql not in arg_names:
                    arg_names[sql] = f"_a{len(arg_names)}"
                    pre.append((arg_names[sql], sql))
                arg = arg_names[sql]
            elif func != "count":
                msg = f"{func}(*) is not valid; name a column"
                raise self.error(msg, node)
            call_key = f"{func}|{distinct}|{arg}"
            if call_key not in calls:
                calls[call_key] = AggCall(func, arg, distinct, f"_x{len(calls)}")
            return exp.column(calls[call_key].name, quoted=True)

        def derived_ref(node: exp.Expression, derived: DerivedAggregate) -> exp.Expression:
            """A call of an aggregate made of counts and sums (``model/aggregate_functions.py``):
            its partials, each a call like any other (shared, computed once), and the
            expression of its value over them.
            """
            target = node.this
            if isinstance(target, exp.Distinct) or target is None or node.expressions:
                msg = f"{derived.name}(x) takes one argument, without DISTINCT"
                raise self.error(msg, node)
            for inner in target.walk():
                if self.is_aggregate(inner):
                    msg = "aggregate functions cannot be nested"
                    raise self.error(msg, inner)
            sql = self.render(target, scope)
            dtype = self.type_of(sql, plan.schema)
            if not isinstance(dtype, NumericType):
                msg = (f"{derived.name}({target.sql(dialect='spark')}) takes a number, "
                       f"found {dtype.simpleString().upper()}")
                raise self.error(msg, target)
            x = sql if re.fullmatch(r"`[^`]+`", sql) else f"({sql})"
            parts = []
            for func, template in derived.partials:
                arg_sql = template.format(x=x)
                if arg_sql not in arg_names:
                    arg_names[arg_sql] = f"_a{len(arg_names)}"
                    pre.append((arg_names[arg_sql], arg_sql))
                key = f"{func}|False|{arg_names[arg_sql]}"
                if key not in calls:
                    calls[key] = AggCall(func, arg_names[arg_sql], False, f"_x{len(calls)}")
                parts.append(quote(calls[key].name))
            value = sqlglot.parse_one(derived.final.format(*parts), read="spark")
            assert isinstance(value, exp.Expression)
            return value

        def tree_ref(node: exp.Expression) -> exp.Expression:
            """``stats(x)``: one call per part, then the struct of their values, so the
            parts are partial aggregates like any other (shared, computed once).
            """
            args = call_args(node)  # type: ignore[arg-type]
            if len(args) != 1:
                msg = f"{node.name}(x) takes one argument, got {len(args)}"
                raise self.error(msg, node)
            for inner in args[0].walk():
                if self.is_aggregate(inner):
                    msg = "aggregate functions cannot be nested"
                    raise self.error(msg, inner)
            sql = self.render(args[0], scope)
            got = self.type_of(sql, plan.schema)
            if not isinstance(got, NumericType):
                msg = (f"{node.name}(x) takes a number, found {got.simpleString().upper()}")
                raise self.error(msg, args[0])
            as_double = implicit_cast_sql(sql, got, DoubleType()) or sql
            fields = []
            for part, (func, uda) in TREE_AGGREGATES[node.name.lower()].items():
                arg_sql = as_double if uda is not None else sql
                if arg_sql not in arg_names:
                    arg_names[arg_sql] = f"_a{len(arg_names)}"
                    pre.append((arg_names[arg_sql], arg_sql))
                key = f"{func}|False|{arg_names[arg_sql]}"
                if key not in calls:
                    calls[key] = AggCall(func, arg_names[arg_sql], False, f"_x{len(calls)}",
                                         uda)
                fields.append(f"'{part}', {quote(calls[key].name)}")
            struct = sqlglot.parse_one(f"named_struct({', '.join(fields)})", read="spark")
            assert isinstance(struct, exp.Expression)
            return struct

        group_sql = {self._canon(g): key_names[self.render(g, scope)] for g in group_exprs}

        def rewrite(node: exp.Expression) -> exp.Expression:
            if self.is_aggregate(node):
                return agg_ref(node)
            canon = self._canon(node) if not isinstance(node, exp.Literal) else None
            if canon in group_sql:
                return exp.column(group_sql[canon], quoted=True)
            return node

        def finish(node: exp.Expression) -> str:
            out = node.copy().transform(rewrite)
            for col in out.find_all(exp.Column):
                if not col.name.startswith(("_g", "_x")) or col.table:
                    msg = (
                        f"column {col.sql(dialect='spark')!r} must appear in GROUP BY or be used "
                        "inside an aggregate function"
                    )
                    raise self.error(msg, _original(node, col))
            return self.allowed_sql(out, node)

        outputs: list[tuple[str, str]] = []
        origins: list[exp.Expression] = []
        for e in sel.expressions:
            if isinstance(e, exp.Star):
                msg = "SELECT * cannot be used with GROUP BY or aggregates; list the columns"
                raise self.error(msg, e)
            outputs.append((output_name(e), finish(e.unalias())))
            origins.append(e)
        having = finish(sel.args["having"].this) if sel.args.get("having") is not None else None
        if not calls and not group_exprs:
            msg = "GROUP BY needs at least one aggregate or key"
            raise self.error(msg, sel)
        pre_plan = self.project(plan, pre, sel) if pre else plan
        agg_schema = self.aggregate_schema(pre_plan.schema, list(key_names.values()),
                                           list(calls.values()))
        node: PlanNode = Aggregate(pre_plan, tuple(key_names.values()), tuple(calls.values()),
                                   agg_schema)
        if having is not None:
            self.check_predicate(agg_schema, having, sel.args["having"].this, "HAVING")
            node = Filter(node, Expr.parse(having, BooleanType(),
                                           shown=sel.args["having"].this.sql(dialect="spark")))
        return self.project(node, outputs, sel, origins)

    def _canon(self, node: exp.Expression) -> str:
        return node.sql(dialect="spark").lower()

    def aggregate_schema(
        self, schema: StructType, keys: list[str], calls: list[AggCall]
    ) -> StructType:
        cols = []
        for c in calls:
            arg = quote(c.arg) if c.arg else "*"
            inner = f"DISTINCT {arg}" if c.distinct else arg
            if c.uda is None:
                cols.append((c.name, f"{c.func}({inner})"))
            else:  # its type is declared
                cols.append((c.name, f"first(CAST(NULL AS {c.uda.return_type.simpleString()}))"))
        try:
            return self.typer.aggregates(schema, keys, cols)
        except TypingError as e:
            msg = f"aggregate: {e.reason}"
            raise AnalysisError(msg, self.text, None) from None


def derived_aggregate(node: exp.Expression) -> DerivedAggregate | None:
    """The aggregate made of counts and sums that ``node`` calls, if any."""
    if not isinstance(node, exp.AggFunc) or isinstance(node, exp.Anonymous):
        return None
    return DERIVED_AGGREGATES.get(node.sql_name().lower())


def _original(node: exp.Expression, col: exp.Column) -> exp.Expression:
    for c in node.find_all(exp.Column):
        if c.name == col.name:
            return c
    return node


def _ranking(e: exp.Expression) -> bool:
    """Whether ``e`` is ROW_NUMBER(), RANK() or DENSE_RANK() OVER (...)."""
    return isinstance(e, exp.Window) and isinstance(e.this, exp.RowNumber | exp.Rank
                                                    | exp.DenseRank)


def output_name(e: exp.Expression) -> str:
    """The name a SELECT-list expression gets: its alias, its column name, or its text."""
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column):
        return e.name
    return e.sql(dialect="spark")
