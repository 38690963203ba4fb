"""The binder's pass over a windowed aggregate in Flink's or Spark's form: one final row
per window, its bounds as columns.

    SELECT window_start, window_end, k, count(*) AS n
    FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), INTERVAL '10' SECONDS))
    GROUP BY window_start, window_end, k

is the native chunk window read at each window's end, its bounds computed from that
instant (``_t``, the end):

    Project window_start = _t - 10 s, window_end = _t, k, n
      RSTREAM every 10 s
        <the aggregate of SELECT k, count(*) AS n FROM s [CUT ON t BY 10 SECONDS] GROUP BY k>

A chunk window's rows are valid from the end of the chunk ``[start, end)`` they fell in,
which is these forms' window: the snapshot at ``end`` is the window's final aggregate, and
RSTREAM gives it once, as one row per group at ``end``. HOP of slide ``s`` and size ``w`` is
``[CUT BY s WINDOW w/s CHUNKS]``; CUMULATE of step ``s`` and size ``w`` keeps an event from
the end of its step until ``s`` after the end of its window of ``w``
(``CumulateSpec``). The aggregate is the one a native query builds, so the two share it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import sqlglot.expressions as exp
from pyspark.sql.types import DataType, LongType, StructField, StructType, TimestampType

from sparkcq.language.sql.statements import OutputForm, SourceWindow
from sparkcq.model.columns import T
from sparkcq.model.time import TimeKind, show_micros
from sparkcq.model.windows import AssignedKind, AssignedWindow, BoundsNaming
from sparkcq.plan.bind_aggregates import has_aggregates
from sparkcq.plan.counting import quote
from sparkcq.plan.expressions import Expr
from sparkcq.plan.nodes import (
    CumulateSpec,
    CutSpec,
    PlanNode,
    Project,
    SessionSpec,
    ToStream,
    Window,
)
from sparkcq.plan.scope import Scope, Source, output_name

if TYPE_CHECKING:
    from sparkcq.plan.binder import Binder

_FLINK_BOUNDS = ("window_start", "window_end", "window_time")
#: a session aggregate's hidden column: its first event's time, the window's start
_SESSION_START = "_session_start"
_SESSION_START_SQL = f"`{_SESSION_START}`"
#: a column counted only so that a query selecting nothing but the bounds has rows
_ROWS = "_window_rows"


@dataclass(frozen=True)
class _Bound:
    """A SELECT item that is a window bound: where it goes, its name and its SQL."""

    position: int
    name: str
    sql: str
    dtype: DataType
    shown: str  # for EXPLAIN: what it is, in words


def spark_window_call(binder: Binder, sel: exp.Select) -> SourceWindow | None:
    """The window of a Spark ``window(...)`` call in this SELECT's GROUP BY, if any."""
    calls = binder.select.window_calls
    group = sel.args["group"].expressions if sel.args.get("group") else []
    for g in group:
        if isinstance(g, exp.Column) and g.name.lower() in calls:
            found = calls[g.name.lower()]
            assert isinstance(found.spec, AssignedWindow)
            if found.spec.kind is not AssignedKind.SESSION:
                return found
            # Spark's sessions are per the other keys of GROUP BY
            others = [k for k in group if k is not g]
            for k in others:
                if not isinstance(k, exp.Column):
                    msg = ("GROUP BY session_window(...) groups by columns only (sessions "
                           "are per those columns); compute this key in a derived stream")
                    raise binder.keyword_error(msg, k, "", r"\s*\)" if isinstance(
                        k, exp.Func) else "")
            keys = tuple(k.name for k in others)
            return replace(found, spec=replace(found.spec, partition_by=keys))
    for e in sel.expressions:
        for c in e.find_all(exp.Column):
            if c.name.lower() in calls:
                msg = ("window(...) groups a windowed aggregate: write it in GROUP BY "
                       "(GROUP BY window(t, '10 seconds'), k) and select window.start, "
                       "window.end or window")
                raise binder.error(msg, c)
    return None


def assigned_source(scope: Scope) -> Source | None:
    """The FROM item read through Flink's or Spark's window, if any."""
    for src in scope.sources:
        if src.window is not None and isinstance(src.window.spec, AssignedWindow):
            return src
    return None


def bind_window_aggregate(binder: Binder, sel: exp.Select, scope: Scope,
                          src: Source) -> PlanNode:
    """One row per group and window, at the window's end, with its bounds (module)."""
    assert src.window is not None and isinstance(src.window.spec, AssignedWindow)
    window = src.window.spec
    if len(scope.sources) > 1:
        msg = ("a window table function or window() in a join is not supported; join "
               "windowed streams (FROM a [RANGE 10 SECONDS] JOIN b [RANGE 10 SECONDS] ON "
               "...) and aggregate the join")
        raise binder.error(msg, sel.args.get("joins")[0])  # type: ignore[index]
    assert isinstance(src.plan, Window | Project)
    size, step = _lengths(src.plan)
    timestamps = src.plan.time_kind is TimeKind.TIMESTAMP
    is_bound = _bound_test(binder, window)
    group = list(sel.args["group"].expressions) if sel.args.get("group") else []
    if not group and not has_aggregates(binder, sel):
        msg = (f"{_written(window)} without GROUP BY is not supported: sparkcq runs "
               f"windowed aggregates in this form; group by the window ({_grouping(window)}) "
               "or read the stream with a window clause (FROM s [CUT ON t BY 10 SECONDS])")
        raise binder.error(msg, sel)
    kept_group = [g for g in group if not is_bound(g)]
    missing = _missing_bounds(group, window, is_bound)
    if missing:
        msg = (f"GROUP BY over {_written(window)} must name {missing}: one result row per "
               f"window ({_grouping(window)})")
        if group:
            raise binder.keyword_error(msg, sel.args["group"], r"\bGROUP\s+BY\s+")
        raise binder.error(msg, sel)
    bounds: list[_Bound] = []
    kept: list[exp.Expression] = []
    for position, e in enumerate(sel.expressions):
        inner = e.unalias()
        if is_bound(inner):
            bounds.append(_bound(binder, inner, output_name(e) if isinstance(e, exp.Alias)
                                 else None, position, window, size, timestamps))
            continue
        for part in (sel.args.get("where"), sel.args.get("having"), sel.args.get("order"),
                     e):
            for c in part.find_all(exp.Column) if part is not None else []:
                if is_bound(c):
                    msg = (f"the window's bound {c.sql(dialect='spark')} may appear in the "
                           "SELECT list as a column of its own and in GROUP BY only")
                    raise binder.error(msg, c)
        kept.append(e)
    hidden: list[exp.Expression] = []
    if window.kind is AssignedKind.SESSION:
        hidden = session_columns(binder, sel, window, kept_group)
    if not kept and not hidden:
        kept = [exp.Alias(this=exp.Count(this=exp.Star()), alias=exp.to_identifier(_ROWS))]
    core_select = sel.copy()
    core_select.set("expressions", [*kept, *hidden])
    if kept_group:
        core_select.set("group", exp.Group(expressions=kept_group))
    else:
        core_select.set("group", None)
    core = binder.bind_in_scope(core_select, scope)
    if window.kind is AssignedKind.SESSION:  # each session's row as it leaves, for good
        snapshots = ToStream(core, OutputForm.DSTREAM, None,
                             last_of_group=tuple(output_name(h) for h in hidden[1:]))
    else:
        snapshots = ToStream(core, OutputForm.RSTREAM, step)
    return _with_bounds(binder, sel, snapshots, kept, bounds)


def _with_bounds(binder: Binder, sel: exp.Select, snapshots: ToStream,
                 kept: list[exp.Expression], bounds: list[_Bound]) -> Project:
    """The SELECT list in its order over the window's rows: the bounds computed from each
    row's instant, the other items as the aggregate named them.
    """
    columns = {f.name: f for f in snapshots.child.schema.fields}
    exprs: list[tuple[str, Expr]] = []
    fields: list[StructField] = []
    visible = [output_name(e) for e in kept if output_name(e) != _ROWS]
    for position in range(len(sel.expressions)):
        bound = next((b for b in bounds if b.position == position), None)
        if bound is not None:
            exprs.append((bound.name, Expr.parse(bound.sql, bound.dtype, shown=bound.shown)))
            fields.append(StructField(bound.name, bound.dtype))
            continue
        name = visible.pop(0)
        exprs.append((name, Expr.parse(quote(name), columns[name].dataType, shown=name)))
        fields.append(columns[name])
    names = [n for n, _ in exprs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        msg = f"duplicate output column {dupes[0]!r}; give each column a distinct alias"
        raise binder.error(msg, sel)
    return Project(snapshots, tuple(exprs), StructType(fields))


def session_columns(binder: Binder, sel: exp.Select, window: AssignedWindow,
                    group: list[exp.Expression]) -> list[exp.Expression]:
    """What a session aggregate computes beside the SELECT list: its first event's time
    (the window's start) and its group's keys, which say whose row left for good.

    A session's row is final when it leaves and its group gets no new row at that instant:
    the session ended. So its groups must be within sessions (GROUP BY names the PARTITION
    BY columns), and HAVING, which could take a group's row away while its session goes
    on, is refused; so is WHERE, which Flink applies after making sessions of every row
    (the first event's time would then not be the minimum of the rows kept) and Spark
    before.
    """
    named = {g.name.lower() for g in group if isinstance(g, exp.Column)}
    missing = [c for c in window.partition_by if c.lower() not in named]
    if missing:
        msg = (f"GROUP BY over a session window must name its PARTITION BY columns "
               f"({', '.join(missing)}): a row per group and session")
        raise binder.error(msg, sel.args.get("group") or sel)
    if sel.args.get("having") is not None:
        msg = ("HAVING over a session window is not supported; filter the sessions' rows "
               "in a query over this one (CREATE STREAM sessions AS SELECT ...)")
        raise binder.error(msg, sel.args["having"])
    if sel.args.get("where") is not None:
        # Flink makes sessions of every row and then filters; Spark filters first
        msg = ("WHERE with a session window is not supported: say which rows make the "
               "sessions by filtering them in a derived stream first (CREATE STREAM kept AS "
               "SELECT * FROM s WHERE ...), then group the sessions of that stream")
        raise binder.error(msg, sel.args["where"])
    start = exp.Alias(this=exp.Min(this=exp.column(window.time_column)),
                      alias=exp.to_identifier(_SESSION_START))
    keys = [exp.Alias(this=g.copy(), alias=exp.to_identifier(f"_session_key{i}"))
            for i, g in enumerate(group)]
    return [start, *keys]


def _lengths(plan: PlanNode) -> tuple[int, int]:
    """The window's size and step on the stream's time axis."""
    while not isinstance(plan, Window):
        assert isinstance(plan, Project)
        plan = plan.child
    spec = plan.spec
    if isinstance(spec, CutSpec):
        return spec.by * spec.chunks, spec.by
    if isinstance(spec, SessionSpec):
        return spec.gap, spec.gap
    assert isinstance(spec, CumulateSpec)
    return spec.size, spec.step


def _bound_test(binder: Binder, window: AssignedWindow) -> Callable[[exp.Expression], bool]:
    """Whether a column reference is one of the window's bounds."""
    calls = set(binder.select.window_calls)

    def is_bound(node: exp.Expression) -> bool:
        if not isinstance(node, exp.Column):
            return False
        parts = [p.name.lower() for p in node.parts]
        if window.naming is BoundsNaming.FLINK:
            return parts[-1] in _FLINK_BOUNDS and len(parts) <= 2
        return parts[0] in calls or parts[0] in ("window", "session_window")

    return is_bound


def _missing_bounds(group: list[exp.Expression], window: AssignedWindow,
                    is_bound: Callable[[exp.Expression], bool]) -> str:
    named = {g.name.lower() for g in group if is_bound(g)}
    if window.naming is BoundsNaming.SPARK:
        return "" if named else "window(...)"
    missing = [b for b in _FLINK_BOUNDS[:2] if b not in named]
    return " and ".join(missing)


def _bound(binder: Binder, column: exp.Column, alias: str | None, position: int,
           window: AssignedWindow, size: int, timestamps: bool) -> _Bound:
    """The SQL of a selected bound over the window's end ``_t``."""
    end = quote(T)
    start = f"({end} - {size})"
    start_shown = f"window end - {show_micros(size) if timestamps else size}"
    if window.kind is AssignedKind.CUMULATE:  # the start of the window of ``size`` it grows
        start = f"({end} - 1 - pmod({end} - 1, {size}))"
        start_shown = "start of the cumulating window"
    last = f"({end} - 1)"

    def instant(sql: str) -> str:
        if sql == _SESSION_START_SQL:  # the first event's time, as the stream has it
            return sql
        return f"timestamp_micros({sql})" if timestamps else sql

    if window.kind is AssignedKind.SESSION:
        start, start_shown = _SESSION_START_SQL, "session's first event"

    dtype: DataType = TimestampType() if timestamps else LongType()
    parts = [p.name.lower() for p in column.parts]
    if window.naming is BoundsNaming.FLINK:
        sql, shown = {"window_start": (start, start_shown), "window_end": (end, "window end"),
                      "window_time": (last, "window end - 1 unit")}[parts[-1]]
        return _Bound(position, alias or parts[-1], instant(sql), dtype, shown)
    if len(parts) == 1:
        struct = f"named_struct('start', {instant(start)}, 'end', {instant(end)})"
        return _Bound(position, alias or parts[0], struct,
                      StructType([StructField("start", dtype), StructField("end", dtype)]),
                      f"[{start_shown}, window end)")
    if len(parts) != 2 or parts[1] not in ("start", "end"):
        msg = (f"a window has the fields start and end: {parts[0]}.start, {parts[0]}.end")
        raise binder.error(msg, column)
    if parts[1] == "start":
        return _Bound(position, alias or "start", instant(start), dtype, start_shown)
    return _Bound(position, alias or "end", instant(end), dtype, "window end")


def _written(window: AssignedWindow) -> str:
    if window.naming is BoundsNaming.SPARK:
        return "window(...)"
    return f"TABLE({window.kind.value}(...))"


def _grouping(window: AssignedWindow) -> str:
    if window.naming is BoundsNaming.SPARK:
        return "GROUP BY window(t, '10 seconds'), k"
    return "GROUP BY window_start, window_end, k"
