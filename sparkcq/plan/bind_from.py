"""The binder's pass over FROM: streams, tables and derived tables in scope, the window
clause of each, and joins with their kind and condition.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import sqlglot.expressions as exp
from pyspark.sql.types import BooleanType

from sparkcq.errors import AnalysisError
from sparkcq.language.sql.statements import SourceWindow
from sparkcq.model.time import TimeKind
from sparkcq.model.windows import (
    AssignedKind,
    AssignedWindow,
    CountCutWindow,
    CutWindow,
    KeyCutWindow,
    LookupTime,
    NowWindow,
    RangeWindow,
    RowsWindow,
    SessionWindow,
    UnboundedWindow,
)
from sparkcq.plan.bind_aggregates import is_aggregate
from sparkcq.plan.bind_table_functions import bind_table_function
from sparkcq.plan.counting import quote
from sparkcq.plan.expressions import Expr
from sparkcq.plan.nodes import (
    CountCutSpec,
    CumulateSpec,
    CutSpec,
    EdgeKind,
    Join,
    JoinHow,
    KeyCutSpec,
    KeyedSpec,
    PlanNode,
    RangeSpec,
    ResolvedWindow,
    RowsSpec,
    SessionSpec,
    StreamScan,
    UnboundedSpec,
    Window,
    walk,
)
from sparkcq.plan.scope import Scope, Source, conjuncts_of, source_column

if TYPE_CHECKING:
    from sparkcq.plan.binder import Binder


def bind_from_item(binder: Binder, item: exp.Expression, needs_relation: bool,
                   position: int | None, window_call: SourceWindow | None = None) -> Source:
    """A FROM item in scope with its window: its own window clause, or the window of a
    Spark ``window(...)`` call in GROUP BY (``window_call``).
    """
    if isinstance(item, exp.Subquery):
        return bind_derived_table(binder, item, needs_relation, position)
    if not isinstance(item, exp.Table) or not isinstance(item.this, exp.Identifier):
        msg = "only streams, tables and subqueries may appear in FROM"
        raise binder.error(msg, item)
    name = item.name
    info = binder.catalog.relation(name)
    if info is None:
        known = binder.catalog.known_relations()
        msg = f"unknown stream or table {name!r}; known: {known}"
        raise binder.error(msg, item.this)
    if not info.schema.fields:  # a feed stream before its HEADER
        msg = (f"stream {name!r} is not connected: its columns are unknown until its "
               "feed sends a HEADER")
        raise binder.error(msg, item.this)
    if (removed := binder.catalog.removed(name)) is not None:
        msg = (f"stream {name!r} was removed by its feed ({removed}); only the queries "
               "that kept it (on_remove='keep') read what it sent")
        raise binder.error(msg, item.this)
    alias = item.alias or name
    key = item.this.meta.get("end", -1)
    window = binder.select.windows.get(key) or window_call
    if window_call is not None and key in binder.select.windows:
        msg = (f"{name!r} has a window clause and GROUP BY window(...) gives it another; "
               "write one of them")
        raise AnalysisError(msg, binder.text, window_call.loc)
    plan = info.plan
    period: int | None = None
    if isinstance(plan, StreamScan) and plan.key:
        if window is not None:
            binder.used_windows.add(key)
            msg = (f"{name!r} is a keyed stream (key {', '.join(plan.key)}): each row is "
                   "valid until the next row or delete of its key, so a window clause "
                   "does not apply to it; read it without one")
            raise AnalysisError(msg, binder.text, window.loc)
        plan = Window(plan, KeyedSpec(plan.key))
    elif window is not None and isinstance(window.spec, LookupTime):
        binder.used_windows.add(key)
        if plan.kind is not EdgeKind.TABLE:
            msg = (f"FOR SYSTEM_TIME AS OF looks rows up in a table joined with a stream "
                   f"(JOIN users FOR SYSTEM_TIME AS OF s.t); {name!r} is a stream")
            raise AnalysisError(msg, binder.text, window.loc)
    elif window is not None:
        binder.used_windows.add(key)
        if plan.kind is EdgeKind.TABLE:
            msg = f"{name!r} is a table; a window applies only to streams"
            raise AnalysisError(msg, binder.text, window.loc)
        spec = resolve_window(binder, window, plan)
        plan = Window(plan, spec)
        period = spec.slide if isinstance(spec, RangeSpec) else None
        period = spec.by if isinstance(spec, CutSpec) else period
        period = spec.step if isinstance(spec, CumulateSpec) else period
    call = binder.select.table_functions.get(key)
    if call is not None:  # the window, if any, cut what the function reads
        plan = bind_table_function(binder, call, plan, name)
        window, period = None, None
        alias = item.alias or call.function
    if needs_relation and plan.kind is EdgeKind.STREAM:
        plan = Window(plan, UnboundedSpec())
    return source(binder, alias, plan, item, position, window, period)


def source(binder: Binder, alias: str, plan: PlanNode, item: exp.Expression, position: int | None,
           window: SourceWindow | None, period: int | None) -> Source:
    """A FROM item in scope; with several items its columns are named by the item's
    position, not its alias (``_1__col``), so a query that names its inputs otherwise
    builds the same plan.
    """
    columns = {f.name: f.name for f in plan.schema.fields}
    if position is not None:
        exprs = [(source_column(position, c), quote(c)) for c in columns]
        plan = binder.project(plan, exprs, item)
        columns = {c: source_column(position, c) for c in columns}
    return Source(alias, plan, columns, window, period)


def bind_derived_table(binder: Binder, item: exp.Subquery, needs_relation: bool,
                       position: int | None) -> Source:
    """``(SELECT ...) AS x`` in FROM: bound like a derived stream, read under its alias;
    a raw stream it yields is ``[UNBOUNDED]`` where a relation is needed, as a named
    stream would be.
    """
    plan, period = binder.bind(item.this)
    if needs_relation and plan.kind is EdgeKind.STREAM:
        plan = Window(plan, UnboundedSpec())
    return source(binder, item.alias or "subquery", plan, item, position, None, period)


def resolve_window(binder: Binder, window: SourceWindow, plan: PlanNode) -> ResolvedWindow:
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
            part = window_columns(binder, spec.partition_by, plan, window, "partition")
            return RowsSpec(spec.rows, part)
        if isinstance(spec, CutWindow):
            if spec.on is not None:
                ensure_cut_on_event_time(binder, spec.on, plan, window)
            return CutSpec(spec.by.to_units(kind, unit), spec.chunks)
        if isinstance(spec, CountCutWindow):
            return CountCutSpec(spec.rows, spec.chunks)
        if isinstance(spec, KeyCutWindow):
            keys = window_columns(binder, spec.keys, plan, window, "CUT ON")
            return KeyCutSpec(keys, spec.chunks)
        if isinstance(spec, SessionWindow):
            part = window_columns(binder, spec.partition_by, plan, window, "partition")
            return SessionSpec(spec.gap.to_units(kind, unit), part)
        if isinstance(spec, AssignedWindow):
            return resolve_assigned_window(binder, spec, plan, window)
    except ValueError as e:
        raise AnalysisError(str(e), binder.text, window.loc) from None
    msg = f"unsupported window {spec}"
    raise AnalysisError(msg, binder.text, window.loc)


def resolve_assigned_window(binder: Binder, spec: AssignedWindow, plan: PlanNode,
                            window: SourceWindow) -> CutSpec | CumulateSpec | SessionSpec:
    """Flink's TUMBLE and HOP and Spark's ``window()`` as chunk windows, whose chunks are
    their windows ``[start, end)``; CUMULATE as ``CumulateSpec``; sessions as the native
    session window (``bind_windows.py``).
    """
    cols = {f.name.lower(): f.name for f in plan.schema.fields}
    time_col = plan.time_col if isinstance(plan, StreamScan) else None
    if spec.time_column.lower() not in cols:
        msg = (f"unknown time column {spec.time_column!r}; columns: "
               f"{', '.join(cols.values())}")
        raise AnalysisError(msg, binder.text, window.loc)
    if time_col is not None and spec.time_column.lower() != time_col.lower():
        msg = (f"windows are over the stream's event time {time_col!r}, not "
               f"{cols[spec.time_column.lower()]!r}; write {time_col}")
        raise AnalysisError(msg, binder.text, window.loc)
    kind, unit = plan.time_kind, plan.time_unit
    size, step = spec.size.to_units(kind, unit), spec.step.to_units(kind, unit)
    if size % step:
        what = ("slide" if spec.kind is not AssignedKind.CUMULATE else "step")
        msg = (f"the window's size ({spec.size.amount} {spec.size.unit or 'units'}) must be "
               f"a whole number of its {what} ({spec.step.amount} "
               f"{spec.step.unit or 'units'}): windows are computed from panes of one "
               f"{what}; choose a {what} that divides the size")
        raise AnalysisError(msg, binder.text, window.loc)
    if spec.kind is AssignedKind.CUMULATE:
        return CumulateSpec(step, size)
    if spec.kind is AssignedKind.SESSION:
        return SessionSpec(size, window_columns(binder, spec.partition_by, plan, window,
                                                "partition"))
    return CutSpec(step, size // step)


def window_columns(binder: Binder, names: tuple[str, ...], plan: PlanNode, window: SourceWindow,
                   what: str) -> tuple[str, ...]:
    """The stream's columns a window clause names, as the stream spells them."""
    cols = {f.name.lower(): f.name for f in plan.schema.fields}
    for c in names:
        if c.lower() not in cols:
            msg = f"unknown {what} column {c!r}; columns: {', '.join(cols.values())}"
            raise AnalysisError(msg, binder.text, window.loc)
    return tuple(cols[c.lower()] for c in names)


def ensure_cut_on_event_time(binder: Binder, on: str, plan: PlanNode, window: SourceWindow) -> None:
    """``CUT ON col``: ``col`` must be a column of the stream, and (for now) its event
    time, which is what chunks are cut on; anything else is refused, never ignored.
    """
    cols = {f.name.lower(): f.name for f in plan.schema.fields}
    if on.lower() not in cols:
        msg = (f"unknown column {on!r} in CUT ON; columns: "
               f"{', '.join(cols.values())}")
        raise AnalysisError(msg, binder.text, window.loc)
    if isinstance(plan, StreamScan) and on.lower() != plan.time_col.lower():
        msg = (f"CUT ON {cols[on.lower()]!r}: chunks are cut on the stream's event time "
               f"{plan.time_col!r}; cutting on another column is not supported yet")
        raise AnalysisError(msg, binder.text, window.loc)


def is_lookup(binder: Binder, item: exp.Expression) -> bool:
    """Whether FROM item ``item`` is a table read ``FOR SYSTEM_TIME AS OF``."""
    if not isinstance(item, exp.Table) or not isinstance(item.this, exp.Identifier):
        return False
    window = binder.select.windows.get(item.this.meta.get("end", -1))
    return window is not None and isinstance(window.spec, LookupTime)


def check_lookup_time(binder: Binder, src: Source, scope: Scope) -> None:
    """A lookup join's ``FOR SYSTEM_TIME AS OF s.t`` names the event time of the stream it
    joins: each event meets the table's rows as of its own event time.
    """
    assert src.window is not None and isinstance(src.window.spec, LookupTime)
    path = src.window.spec.path
    streams = [s for s in scope.sources if s.plan.kind is EdgeKind.STREAM]
    if not streams:
        msg = "FOR SYSTEM_TIME AS OF joins a table with a stream; this query reads no stream"
        raise AnalysisError(msg, binder.text, src.window.loc)
    stream = streams[0]
    scan = next((n for n in walk(stream.plan) if isinstance(n, StreamScan)), None)
    time_col = scan.time_col if scan is not None else "its event time"
    column = exp.column(path[-1], table=path[0] if len(path) > 1 else None)
    try:
        found, _ = scope.resolve_path(column, binder)
    except AnalysisError:
        found = None
    if scan is None or found != stream.columns.get(scan.time_col):
        msg = (f"FOR SYSTEM_TIME AS OF {'.'.join(path)}: sparkcq joins each event with the "
               f"table's rows as of its event time, so write FOR SYSTEM_TIME AS OF "
               f"{stream.alias}.{time_col} (processing time is not kept)")
        raise AnalysisError(msg, binder.text, src.window.loc)


def joins_source(binder: Binder, cond: exp.Expression, visible: Scope, src: Source) -> bool:
    """Whether a WHERE conjunct belongs in the join that adds ``src``: it relates ``src``
    to a source joined before it and reads no later one (then ``a.k = b.k`` is a join
    key, not a filter over a cross product).
    """
    cols = list(cond.find_all(exp.Column))
    if not cols or any(is_aggregate(binder, n) for n in cond.walk()):
        return False
    try:
        names = {visible.resolve_path(c, binder)[0] for c in cols}
    except AnalysisError:
        return False  # names a later source (or none): the WHERE reports it
    own = set(src.columns.values())
    return bool(names & own) and bool(names - own)


def join_error(binder: Binder, message: str, join: exp.Join) -> AnalysisError:
    """An error at a join, its keywords (``LEFT ANTI JOIN``) underlined with it."""
    return binder.keyword_error(
        message, join,
        r"(?:\b(?:NATURAL|LEFT|RIGHT|FULL|INNER|CROSS|OUTER|SEMI|ANTI)\s+)*\bJOIN\s+")


def join_how(binder: Binder, join: exp.Join) -> JoinHow:
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
    raise join_error(binder, msg, join)


def bind_join(
    binder: Binder, join: exp.Join, left: PlanNode, src: Source, scope: Scope,
    moved: list[exp.Expression] | None = None,
) -> PlanNode:
    how = join_how(binder, join)
    for i, side in enumerate((left, src.plan)):
        other = (left, src.plan)[1 - i]
        if how.padded(i) and side.kind is EdgeKind.TABLE and other.kind is not EdgeKind.TABLE:
            msg = (f"{how.name} JOIN keeps the rows of a table that no {other.kind.value} "
                   "row matches, which is not supported; keep the stream's side instead "
                   "(FROM stream LEFT JOIN table)")
            raise join_error(binder, msg, join)
    if (not how.keeps_right_columns and left.kind is EdgeKind.TABLE
            and src.plan.kind is not EdgeKind.TABLE):
        msg = (f"LEFT {how.name} JOIN of a table with a {src.plan.kind.value} is not "
               "supported; join the stream's side first")
        raise join_error(binder, msg, join)
    if join.args.get("method"):
        msg = (f"{join.args['method'].upper()} JOIN is not supported; name the columns: "
               "JOIN ... ON a.k = b.k")
        raise join_error(binder, msg, join)
    if join.args.get("using"):
        msg = "JOIN ... USING is not supported; write JOIN ... ON a.k = b.k"
        raise binder.error(msg, join)
    timed = [p for p in (left, src.plan) if p.kind is not EdgeKind.TABLE]
    if len(timed) == 2 and timed[0].time_unit != timed[1].time_unit:
        msg = ("the joined streams count event time in different units (time_unit); "
               "declare the same time_unit on both")
        raise binder.error(msg, join)
    on = join.args.get("on")
    if moved:
        conds = [*(conjuncts_of(on) if on is not None else []), *moved]
        on = exp.and_(*conds) if len(conds) > 1 else conds[0]
    visible = Scope(scope.sources[: scope.sources.index(src) + 1])
    condition = binder.render(on, visible) if on is not None else None
    equi: list[tuple[str, str]] = []
    if on is not None:
        left_cols = {c for s in visible.sources[:-1] for c in s.columns.values()}
        for conj in on.flatten() if isinstance(on, exp.And) else [on]:
            if isinstance(conj, exp.EQ) and all(
                isinstance(x, exp.Column) for x in (conj.left, conj.right)
            ):
                (a, fa), (b, fb) = (visible.resolve_path(conj.left, binder),
                                    visible.resolve_path(conj.right, binder))
                if fa or fb:
                    continue  # a struct field: a condition, not a join key
                if a in left_cols and b in src.columns.values():
                    equi.append((a, b))
                elif b in left_cols and a in src.columns.values():
                    equi.append((b, a))
    plan = Join(left, src.plan, None, tuple(sorted(equi)), how)  # in any order written
    if condition is None or on is None:
        return plan
    binder.check_predicate(replace(plan, how=JoinHow.INNER).schema, condition, on,
                         "ON" if join.args.get("on") is not None else "WHERE")
    return replace(plan, condition=Expr.parse(condition, BooleanType(),
                                              shown=on.sql(dialect="spark")))
