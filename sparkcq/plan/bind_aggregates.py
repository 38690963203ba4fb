"""The binder's pass over GROUP BY and aggregate calls: keys, arguments and calls named
once each (``aggregate_columns``), user aggregates, aggregates made of counts and sums, and
those that return a tree; HAVING and the SELECT list over the results.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import sqlglot
import sqlglot.expressions as exp
from pyspark.sql.types import BooleanType, DoubleType, NumericType, StructType

from sparkcq.aggregates.library import Median
from sparkcq.aggregates.user import UserAggregate, define_aggregate
from sparkcq.errors import AnalysisError
from sparkcq.model.aggregate_functions import DERIVED_AGGREGATES, DerivedAggregate, adds
from sparkcq.model.columns import KEY_OR_RESULT
from sparkcq.model.types import implicit_cast_sql
from sparkcq.plan.aggregate_columns import AggregateColumns
from sparkcq.plan.calls import call_args, called_aggregate
from sparkcq.plan.counting import quote
from sparkcq.plan.expressions import Expr
from sparkcq.plan.nodes import AggCall, Aggregate, Filter, PlanNode
from sparkcq.plan.scope import Scope, canonical_text, output_name
from sparkcq.plan.typer import TypingError
from sparkcq.plan.value_checks import aggregate_argument_problem

if TYPE_CHECKING:
    from sparkcq.plan.binder import Binder


_AGGREGATES = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}

_MEDIAN = define_aggregate("median", Median, [("x", DoubleType())], DoubleType(),
                           "sparkcq.aggregates.library:Median")
#: aggregates that return a tree: name -> field -> (aggregate, user aggregate)
TREE_AGGREGATES: dict[str, dict[str, tuple[str, UserAggregate | None]]] = {
    "stats": {"min": ("min", None), "max": ("max", None), "median": ("median", _MEDIAN),
              "avg": ("avg", None)},
}


def has_aggregates(binder: Binder, sel: exp.Select) -> bool:
    nodes = [*sel.expressions, sel.args.get("having")]
    return any(n is not None and any(is_aggregate(binder, x) for x in n.walk())
               for n in nodes)


def user_aggregate(binder: Binder, node: Any) -> UserAggregate | None:
    """The user aggregate ``node`` calls, if it calls one."""
    return called_aggregate(node, binder.catalog.aggregates, binder.text)


def is_aggregate(binder: Binder, node: Any) -> bool:
    """Whether ``node`` calls a built-in or a user aggregate."""
    return (isinstance(node, exp.AggFunc) or user_aggregate(binder, node) is not None
            or is_tree_aggregate(binder, node))


def is_tree_aggregate(binder: Binder, node: Any) -> bool:
    """Whether ``node`` calls a built-in aggregate that returns a tree (``stats``),
    and no user aggregate of that name shadows it.
    """
    return (isinstance(node, exp.Anonymous) and node.name.lower() in TREE_AGGREGATES
            and node.name.lower() not in binder.catalog.aggregates)


def user_aggregate_arg(binder: Binder, node: exp.Func, uda: UserAggregate, plan: PlanNode,
                       scope: Scope) -> str:
    """The SQL of a user aggregate call's argument column: its one argument, or a
    struct ``(a0, a1, ...)`` of several, each converted to the declared type.
    """
    args = call_args(node)
    if len(args) != len(uda.arg_types):
        msg = (f"aggregate {uda.signature} takes {len(uda.arg_types)} argument"
               f"{'s' if len(uda.arg_types) != 1 else ''}, got {len(args)}")
        raise binder.error(msg, node)
    sqls = []
    for i, (arg, name, want) in enumerate(zip(args, uda.arg_names, uda.arg_types,
                                              strict=True)):
        for inner in arg.walk():
            if is_aggregate(binder, inner):
                msg = "aggregate functions cannot be nested"
                raise binder.error(msg, inner)
        sql = binder.render(arg, scope)
        try:
            got = binder.type_of(sql, plan.schema)
        except TypingError as e:
            raise binder.typing_error(e, arg) from None
        cast = implicit_cast_sql(sql, got, want)
        if cast is None:
            msg = (f"aggregate {uda.name}: argument {i + 1} ({name}) must be "
                   f"{want.simpleString().upper()}, found {got.simpleString().upper()}; "
                   "cast it explicitly")
            raise binder.error(msg, arg)
        sqls.append(cast)
    if len(sqls) == 1:
        return sqls[0]
    fields = ", ".join(f"'a{i}', {sql}" for i, sql in enumerate(sqls))
    return f"named_struct({fields})"


def group_expression(binder: Binder, g: exp.Expression, sel: exp.Select,
                     scope: Scope) -> exp.Expression:
    """A GROUP BY item as the expression it names: an ordinal (``GROUP BY 1``) is that
    SELECT item, a name that is no input column is the SELECT item with that alias
    (``GROUP BY minute``), as Spark SQL reads them.
    """
    items = [e.this if isinstance(e, exp.Alias) else e for e in sel.expressions]
    if isinstance(g, exp.Literal) and g.is_int:
        i = int(g.this)
        if not 1 <= i <= len(items):
            msg = f"GROUP BY {i}: the SELECT list has {len(items)} items"
            raise binder.error(msg, g)
        target = items[i - 1]
    elif isinstance(g, exp.Column) and not g.table:
        aliases = {e.alias.lower(): e.this for e in sel.expressions
                   if isinstance(e, exp.Alias)}
        if g.name.lower() not in aliases:
            return g
        try:
            binder.render(g, scope)
            return g  # an input column of that name wins, as in Spark
        except AnalysisError:
            target = aliases[g.name.lower()]
    else:
        return g
    if any(is_aggregate(binder, n) for n in target.walk()):
        msg = f"GROUP BY {g.sql(dialect='spark')} names an aggregate; group by its inputs"
        raise binder.error(msg, g)
    return target.copy()


def bind_aggregate(binder: Binder, sel: exp.Select, plan: PlanNode, scope: Scope) -> PlanNode:
    group_exprs = [group_expression(binder, g, sel, scope)
                   for g in (sel.args["group"].expressions if sel.args.get("group") else [])]
    cols = AggregateColumns()
    for g in group_exprs:
        cols.key(binder.render(g, scope))

    def agg_ref(node: exp.Expression) -> exp.Expression:
        if is_tree_aggregate(binder, node):
            return tree_ref(node)
        uda = user_aggregate(binder, node)
        if uda is not None:
            assert isinstance(node, exp.Func)
            column = cols.argument(user_aggregate_arg(binder, node, uda, plan, scope))
            call = cols.call(uda.name.lower(), column, uda=uda,
                             same_as=f"uda:{uda.name}|{column}")
            return exp.column(call.name, quoted=True)
        derived = derived_aggregate(node)
        if derived is not None:
            return derived_ref(node, derived)
        func = next((f for t, f in _AGGREGATES.items() if type(node) is t), None)
        if func is None:
            msg = (
                f"aggregate function {node.sql(dialect='spark')!r} is not supported; "
                "use count, sum, avg, min, max or a user aggregate (CREATE AGGREGATE)"
            )
            raise binder.error(msg, node)
        target = node.this
        distinct = isinstance(target, exp.Distinct)
        if distinct:
            if len(target.expressions) != 1:
                msg = "count(DISTINCT ...) takes exactly one expression"
                raise binder.error(msg, node)
            target = target.expressions[0]
            if func != "count":
                distinct = False  # min/max(DISTINCT x) = min/max(x); sum/avg refused below
                if adds(func):
                    msg = f"{func}(DISTINCT ...) is not supported; only count(DISTINCT ...)"
                    raise binder.error(msg, node)
        for inner in target.walk() if target is not None else []:
            if is_aggregate(binder, inner):
                msg = "aggregate functions cannot be nested"
                raise binder.error(msg, inner)
        arg: str | None = None
        if target is not None and not isinstance(target, exp.Star):
            sql = binder.render(target, scope)
            if adds(func):
                dtype = binder.type_of(sql, plan.schema)
                problem = aggregate_argument_problem(func, target, dtype)
                if problem is not None:
                    raise binder.error(problem, target)
            arg = cols.argument(sql)
        elif func != "count":
            msg = f"{func}(*) is not valid; name a column"
            raise binder.error(msg, node)
        return exp.column(cols.call(func, arg, distinct).name, quoted=True)

    def derived_ref(node: exp.Expression, derived: DerivedAggregate) -> exp.Expression:
        """A call of an aggregate made of counts and sums (``model/aggregate_functions.py``):
        its partials, each a call like any other (shared, computed once), and the
        expression of its value over them.
        """
        target = node.this
        if isinstance(target, exp.Distinct) or target is None or node.expressions:
            msg = f"{derived.name}(x) takes one argument, without DISTINCT"
            raise binder.error(msg, node)
        for inner in target.walk():
            if is_aggregate(binder, inner):
                msg = "aggregate functions cannot be nested"
                raise binder.error(msg, inner)
        sql = binder.render(target, scope)
        dtype = binder.type_of(sql, plan.schema)
        if not isinstance(dtype, NumericType):
            msg = (f"{derived.name}({target.sql(dialect='spark')}) takes a number, "
                   f"found {dtype.simpleString().upper()}")
            raise binder.error(msg, target)
        x = sql if re.fullmatch(r"`[^`]+`", sql) else f"({sql})"
        parts = []
        for func, template in derived.partials:
            parts.append(quote(cols.call(func, cols.argument(template.format(x=x))).name))
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
            raise binder.error(msg, node)
        for inner in args[0].walk():
            if is_aggregate(binder, inner):
                msg = "aggregate functions cannot be nested"
                raise binder.error(msg, inner)
        sql = binder.render(args[0], scope)
        got = binder.type_of(sql, plan.schema)
        if not isinstance(got, NumericType):
            msg = (f"{node.name}(x) takes a number, found {got.simpleString().upper()}")
            raise binder.error(msg, args[0])
        as_double = implicit_cast_sql(sql, got, DoubleType()) or sql
        fields = []
        for part, (func, uda) in TREE_AGGREGATES[node.name.lower()].items():
            arg = cols.argument(as_double if uda is not None else sql)
            fields.append(f"'{part}', {quote(cols.call(func, arg, uda=uda).name)}")
        struct = sqlglot.parse_one(f"named_struct({', '.join(fields)})", read="spark")
        assert isinstance(struct, exp.Expression)
        return struct

    group_sql = {canonical_text(g): cols.keys[binder.render(g, scope)] for g in group_exprs}

    def rewrite(node: exp.Expression) -> exp.Expression:
        if is_aggregate(binder, node):
            return agg_ref(node)
        canon = canonical_text(node) if not isinstance(node, exp.Literal) else None
        if canon in group_sql:
            return exp.column(group_sql[canon], quoted=True)
        return node

    def finish(node: exp.Expression) -> str:
        out = node.copy().transform(rewrite)
        for col in out.find_all(exp.Column):
            if not KEY_OR_RESULT.fullmatch(col.name) or col.table:
                msg = (
                    f"column {col.sql(dialect='spark')!r} must appear in GROUP BY or be used "
                    "inside an aggregate function"
                )
                raise binder.error(msg, _original(node, col))
        return binder.allowed_sql(out, node)

    outputs: list[tuple[str, str]] = []
    origins: list[exp.Expression] = []
    for e in sel.expressions:
        if isinstance(e, exp.Star):
            msg = "SELECT * cannot be used with GROUP BY or aggregates; list the columns"
            raise binder.error(msg, e)
        outputs.append((output_name(e), finish(e.unalias())))
        origins.append(e)
    having = finish(sel.args["having"].this) if sel.args.get("having") is not None else None
    if not cols.calls and not group_exprs:
        msg = "GROUP BY needs at least one aggregate or key"
        raise binder.error(msg, sel)
    pre_plan = binder.project(plan, cols.below, sel) if cols.below else plan
    agg_schema = aggregate_schema(binder, pre_plan.schema, list(cols.keys.values()),
                                  list(cols.calls.values()))
    node: PlanNode = Aggregate(pre_plan, tuple(cols.keys.values()),
                               tuple(cols.calls.values()), agg_schema)
    if having is not None:
        binder.check_predicate(agg_schema, having, sel.args["having"].this, "HAVING")
        node = Filter(node, Expr.parse(having, BooleanType(),
                                       shown=sel.args["having"].this.sql(dialect="spark")))
    return binder.project(node, outputs, sel, origins)


def aggregate_schema(binder: Binder, schema: StructType, keys: list[str], calls: list[AggCall]
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
        return binder.typer.aggregates(schema, keys, cols)
    except TypingError as e:
        msg = f"aggregate: {e.reason}"
        raise AnalysisError(msg, binder.text, None) from None


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
