"""The binder's pass over aggregates with an OVER window: SQL's per-event window.

``SELECT k, t, avg(v) OVER (PARTITION BY k ORDER BY t RANGE BETWEEN INTERVAL '60' SECOND
PRECEDING AND CURRENT ROW) AS a FROM s`` gives every event of ``s`` once, at its instant,
with the average of its partition's events in ``[t - 60 s, t]``, as Flink SQL's and the
SQL standard's OVER window do. It binds to an ``OverAggregate`` over the stream: the
projection below it computes the event's columns (carried out with it), the partition
keys and the arguments; the aggregate is the one over ``[RANGE 60 SECONDS + 1 unit]``,
whose snapshot at ``t`` holds exactly those events; a projection over it gives the SELECT
list, each OVER call read as the aggregate's result column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlglot.expressions as exp

from sparkcq.errors import AnalysisError
from sparkcq.model.time import DURATION_UNITS, Duration
from sparkcq.plan.aggregate_columns import AggregateColumns
from sparkcq.plan.bind_aggregates import aggregate_schema, is_aggregate
from sparkcq.plan.bind_from import bind_from_item
from sparkcq.plan.counting import quote
from sparkcq.plan.nodes import (
    Aggregate,
    EdgeKind,
    OverAggregate,
    PlanNode,
    RangeSpec,
    StreamScan,
    Window,
    walk,
)
from sparkcq.plan.scope import Scope, Source, output_name

if TYPE_CHECKING:
    from sparkcq.plan.binder import Binder

#: the aggregates an OVER window computes: those a running sum gives
_OVER_AGGREGATES = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg"}
_FRAME = ("RANGE BETWEEN INTERVAL '60' SECOND PRECEDING AND CURRENT ROW (on a numeric "
          "event time: RANGE BETWEEN 60 PRECEDING AND CURRENT ROW)")


def over_windows(binder: Binder, sel: exp.Select) -> list[exp.Window]:
    """The aggregate calls with an OVER window in ``sel``'s SELECT list."""
    return [w for e in sel.expressions for w in e.find_all(exp.Window)
            if is_aggregate(binder, w.this)]


def bind_over(binder: Binder, sel: exp.Select, overs: list[exp.Window]) -> PlanNode:
    """A SELECT whose list holds aggregates ``OVER (...)`` (see module)."""
    for clause in ("group", "having", "order", "limit", "distinct", "joins"):
        if sel.args.get(clause):
            word = {"group": "GROUP BY", "joins": "JOIN"}.get(clause, clause.upper())
            msg = (f"{word} beside an OVER window is not supported: an OVER window gives "
                   "each event once with its window's aggregates; aggregate or rank "
                   "them in a query over this one's stream")
            raise binder.error(msg, sel.args[clause] if clause != "joins"
                               else sel.args["joins"][0])
    from_ = sel.args.get("from_") or sel.args.get("from")
    if from_ is None:
        msg = "a continuous query needs a FROM clause naming a stream"
        raise binder.error(msg, sel)
    src = bind_from_item(binder, from_.this, False, None)
    if src.window is not None:
        msg = (f"an OVER window reads the stream's events themselves; remove the window "
               f"clause of {src.alias!r} (the OVER clause says which events each one sees)")
        raise AnalysisError(msg, binder.text, src.window.loc)
    if src.plan.kind is not EdgeKind.STREAM:
        msg = (f"an OVER window reads a stream of events; {src.alias!r} is a "
               f"{'table' if src.plan.kind is EdgeKind.TABLE else 'relation'}")
        raise binder.error(msg, from_.this)
    scope = Scope([src])
    plan = src.plan
    if sel.args.get("where") is not None:
        plan = binder.filter(plan, sel.args["where"].this, scope, "WHERE")
    first = overs[0]
    for other in overs[1:]:
        if _spec_text(other) != _spec_text(first):
            msg = ("every OVER window of one SELECT must be the same (PARTITION BY, ORDER BY "
                   "and frame), as in Flink SQL; compute the others in another query")
            raise _whole(binder, msg, other)
    preceding = _preceding(binder, first, src, scope)
    cols = AggregateColumns()
    for p in first.args.get("partition_by") or []:
        cols.key(binder.render(p, scope))
    results = {id(w): _call(binder, w, cols, scope, plan) for w in overs}
    carried = [f.name for f in plan.schema.fields]
    below = binder.project(Window(plan, RangeSpec(preceding + 1)),
                           [*((c, quote(c)) for c in carried), *cols.below], sel)
    calls = list(cols.calls.values())
    keys = list(cols.keys.values())
    aggregate = Aggregate(below, tuple(keys), tuple(calls),
                          aggregate_schema(binder, below.schema, keys, calls))
    over = OverAggregate(plan, aggregate, tuple(carried))
    names = {**src.columns, **{c.name: c.name for c in calls}}
    out_scope = Scope([Source(src.alias, over, names, None)])

    exprs: list[tuple[str, str]] = []
    origins: list[exp.Expression] = []
    for e in sel.expressions:
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column)
                                       and isinstance(e.this, exp.Star)):
            exprs.extend((user, quote(internal)) for user, internal in src.columns.items())
            origins.extend(e for _ in src.columns)
            continue
        rewritten = _with_results(e.unalias(), results)
        exprs.append((output_name(e), binder.render(rewritten, out_scope)))
        origins.append(e)
    return binder.project(over, exprs, sel, origins)


def _whole(binder: Binder, message: str, w: exp.Window) -> AnalysisError:
    """An error underlining an OVER call whole, to the parenthesis closing its window."""
    return binder.keyword_error(message, w, "", r"[^()]*\)")


def _with_results(item: exp.Expression, results: dict[int, str]) -> exp.Expression:
    """A copy of a SELECT item with each OVER call in ``results`` (by identity) read as
    its result column.
    """
    copy = item.copy()
    originals = list(item.find_all(exp.Window))
    for original, copied in zip(originals, list(copy.find_all(exp.Window)), strict=True):
        if id(original) in results:
            column = exp.column(results[id(original)], quoted=True)
            if copied is copy:
                return column
            copied.replace(column)
    return copy


def _spec_text(w: exp.Window) -> str:
    """An OVER window's PARTITION BY, ORDER BY and frame, as text to compare two."""
    parts = [w.args.get(a) for a in ("partition_by", "order", "spec")]
    return " | ".join(str([p.sql(dialect="spark") for p in part]) if isinstance(part, list)
                      else (part.sql(dialect="spark") if part is not None else "")
                      for part in parts)


def _call(binder: Binder, w: exp.Window, cols: AggregateColumns, scope: Scope,
          plan: PlanNode) -> str:
    """The result column of one OVER call."""
    node = w.this
    func = next((f for t, f in _OVER_AGGREGATES.items() if type(node) is t), None)
    if func is None:
        msg = (f"{node.sql(dialect='spark')} OVER (...) is not supported; an OVER window "
               "computes count, sum and avg (min and max: GROUP BY over a [RANGE ...] "
               "window)")
        raise _whole(binder, msg, w)
    target = node.this
    if isinstance(target, exp.Distinct):
        msg = f"{func}(DISTINCT ...) OVER (...) is not supported"
        raise binder.error(msg, node)
    for inner in target.walk() if target is not None else []:
        if is_aggregate(binder, inner) or isinstance(inner, exp.Window):
            msg = "aggregate functions cannot be nested"
            raise binder.error(msg, inner)
    if target is None or isinstance(target, exp.Star):
        if func != "count":
            msg = f"{func}(*) is not valid; name a column"
            raise binder.error(msg, node)
        return cols.call(func, None).name
    sql = binder.render(target, scope)
    binder.type_of(sql, plan.schema)
    return cols.call(func, cols.argument(sql)).name


def _preceding(binder: Binder, w: exp.Window, src: Source, scope: Scope) -> int:
    """How far before an event its OVER window reaches, on the stream's time axis; the
    window must be ordered by the stream's event time and end at the current row.
    """
    scan = next((n for n in walk(src.plan) if isinstance(n, StreamScan)), None)
    time_col = scan.time_col if scan is not None else "its event time"
    order = w.args.get("order")
    items = order.expressions if order is not None else []
    found = None
    if len(items) == 1 and isinstance(items[0].this, exp.Column) and not items[0].args.get(
            "desc"):
        found, _ = scope.resolve_path(items[0].this, binder)
    if scan is None or found != src.columns.get(scan.time_col):
        msg = (f"an OVER window is ordered by the stream's event time: write ORDER BY "
               f"{time_col} (ascending) in its OVER (...)")
        raise _whole(binder, msg, w)
    spec = w.args.get("spec")
    if (spec is None or str(spec.args.get("kind", "")).upper() != "RANGE"
            or str(spec.args.get("start_side", "")).upper() != "PRECEDING"
            or str(spec.args.get("end", "CURRENT ROW")).upper() != "CURRENT ROW"):
        msg = f"an OVER window needs its frame: {_FRAME}"
        raise _whole(binder, msg, w)
    start = spec.args.get("start")
    if not isinstance(start, exp.Expression):  # UNBOUNDED
        msg = (f"{start} PRECEDING is not supported: an OVER window reaches back a given "
               f"length, {_FRAME}; for a running total since the start, GROUP BY over "
               "[UNBOUNDED]")
        raise _whole(binder, msg, w)
    duration = _duration(start)
    if duration is None:
        msg = (f"cannot read the OVER window's length {start.sql(dialect='spark')!r}; "
               f"write {_FRAME}")
        raise binder.error(msg, start)
    try:
        length = duration.to_units(src.plan.time_kind, src.plan.time_unit)
    except ValueError as e:
        raise binder.error(str(e), start) from None
    if length <= 0:
        msg = "an OVER window's length must be positive"
        raise binder.error(msg, start)
    return length


def _duration(start: object) -> Duration | None:
    """``INTERVAL '60' SECOND`` or ``60`` as a duration; None when it is neither."""
    if isinstance(start, exp.Interval):
        amount, unit = start.this, start.args.get("unit")
        if isinstance(amount, exp.Literal) and unit is not None:
            text = unit.name.upper()
            if amount.this.strip().isdigit() and text in DURATION_UNITS:
                return Duration(int(amount.this), text)
        return None
    if isinstance(start, exp.Literal) and start.is_int:
        return Duration(int(start.this))
    return None
