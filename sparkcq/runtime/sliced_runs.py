"""Coalesced interval records of grouped window aggregates, found in their family's rows.

A query over a sliced family (``sliced_family.py``) that keeps every group key among its
columns, as ``SELECT k, avg(v) FROM s [RANGE 60 SECONDS SLIDE 10 SECONDS] GROUP BY k``
does, has at most one row per group at any instant. Its coalesced elements are then runs:
consecutive segments of one group whose rows are equal. They are found in the family's
segments, one row per (group, segment) holding every member's values, by comparing each
segment with the one before and the one after it in its group (a window over a few
thousand rows), and each query's records come out of one generator over those rows: one
record per run. The shared formatter (``operators/shared_output.py``) would otherwise take a
+1 and a -1 per segment and query and coalesce them in three shuffles by (query, row):
fifty such queries over 1,000 groups shuffled 1.7M records per 100,000 events, and 9.6 s
of the cycle's 13 s of task time went to it.

A group's segments of the cycle, for a query with rows ``a`` ``a`` ``b`` ``-`` (``-``: its
HAVING fails there) over [0, 10), [10, 20), [20, 30), [30, 40) and a watermark of 35:
one record ``a`` over [0, 20), one ``b`` over [20, 30). A run still open at the cycle's
end (its last segment ends after the watermark, or has no end yet) is recorded open (no
end), and its start is kept: one row per group holds where each query's open run began
(the family's open runs, which the shared formatter keeps with everyone's open elements).
A run that began in an earlier cycle shows here as the group's first segment starting
before the cycle's slice; the group's kept row takes part in the group's windows, so that
segment finds the run's start beside it, and the cycle in which the run ends closes it (a
``C`` record naming that start). Matching closings with open elements by (query, row)
instead took a shuffle of three records per query and group every cycle (150,000 of
``shared-50``'s 294,000 per 100,000 events) and rewrote every open element.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sqlglot
import sqlglot.expressions as exp
from pyspark.sql import DataFrame

from sparkcq.model.columns import FROM, OP, QID, TE, TO, TS, WINDOW_TAG, family_key
from sparkcq.model.time import TIME_MIN
from sparkcq.plan.nodes import SlicedAggregate
from sparkcq.runtime.frames import Slice, bound_sql, project, q, union_by_name
from sparkcq.runtime.fused_outputs import QueryTail, compose_steps, generated_structs
from sparkcq.runtime.operators.shared_output import HeldRuns, SlicedRuns, row_column, row_sql
from sparkcq.runtime.sliced_family import SlicedFamily

BEFORE = "_before"  # the segment began before the cycle's slice
CLOSES = "_closes"  # the segment ends inside the cycle's slice
START = "_start"  # where the segment begins for a query in its first cycle
# a query's mark ``_m<i>`` on a segment: NULL (nothing), where the run the segment begins or
# continues from an earlier cycle ends inside the slice, or OPEN (it reaches past the slice)
OPEN = f"CAST({TIME_MIN} AS BIGINT)"  # as SQL: the literal alone reads as a decimal


def group_fields(tail: QueryTail, family: SlicedFamily) -> dict[str, str] | None:
    """The output field of ``tail``'s query showing each of its family's group keys
    (``_k<i>`` -> field), each of the key's type; None if it does not show them all (then
    its row does not name its group).
    """
    member = tail.member.node
    assert isinstance(member, SlicedAggregate)
    pairs = family.members[member]
    keys = {family_key(i) for i in range(len(family.key_sqls))}
    types = {f.name: f.dataType for f in member.schema.fields}
    mapping = compose_steps(tail.steps, {out: q(src) for out, src in pairs}, [])
    shown = {(_column_of(mapping[f.name]), f.dataType): f.name for f in tail.schema.fields}
    fields = {src: shown.get((src, types[out])) for out, src in pairs if src in keys}
    return None if None in fields.values() else fields  # type: ignore[return-value]


def keeps_group(tail: QueryTail, family: SlicedFamily) -> bool:
    """Whether ``tail``'s query shows each of its family's group keys as a column of the
    key's type: then its row names its group, and one group holds one row at a time.
    """
    return group_fields(tail, family) is not None


@lru_cache(maxsize=4096)
def _column_of(sql: str) -> str | None:
    """The column ``sql`` is, parentheses aside, or None if it is an expression."""
    tree = sqlglot.parse_one(sql, read="spark").unnest()
    return tree.name if isinstance(tree, exp.Column) and not tree.table else None


def sliced_runs(family: SlicedFamily, run: Slice, tails: list[QueryTail],
                held: HeldRuns) -> SlicedRuns:
    """The runs of ``tails`` (queries that ``keeps_group``) in this cycle's segments of
    ``family`` (``run.segments``), from the open runs ``held`` since the last cycle. A
    cycle with no segments changes no run.
    """
    segments, lo, hi = run.segments, run.lo, run.hi
    assert segments is not None
    keys = tuple(q(family_key(i)) for i in range(len(family.key_sqls)))
    tagged = WINDOW_TAG in segments.columns
    group = (*keys, q(WINDOW_TAG)) if tagged else keys
    low, high = bound_sql(lo), bound_sql(hi)
    values = []
    fresh: list[bool] = []
    tags: list[int | None] = []
    for i, tail in enumerate(tails):
        member = tail.member.node
        assert isinstance(member, SlicedAggregate)
        conds: list[str] = []
        mapping = compose_steps(tail.steps, {out: q(src) for out, src in
                                             family.members[member]}, conds)
        fresh.append(member in family.fresh and lo != TIME_MIN)
        tags.append(family.window_tag(member))
        if tags[-1] is not None:
            conds.append(f"{q(WINDOW_TAG)} = {tags[-1]}")
        # a segment that ended before the slice is no query's; one ending where it
        # begins is not a query's in its first cycle (it starts there)
        conds.append(f"({q(TO)} IS NULL OR {q(TO)} >= {bound_sql(lo + fresh[-1])})")
        values.append(f"CASE WHEN {' AND '.join(conds)} THEN {row_sql(tail.schema, mapping)} "
                      f"END AS _r{i}")
    # each query's freshness as a value, not as text: its first cycle and the ones after
    # it run one analysed plan and one generated code
    firsts = [f"{bound_sql(int(first))} = 1 AS _f{i}" for i, first in enumerate(fresh)]
    rows = project(segments, *group, q(FROM), q(TO), f"{q(FROM)} < {low} AS {BEFORE}",
                   f"coalesce({q(TO)} < {high}, false) AS {CLOSES}",
                   f"greatest({q(FROM)}, {low}) AS {START}", *values, *firsts)
    qids = tuple(t.qid for t in tails if t.qid is not None)
    assert len(qids) == len(tails)
    views = {"rows": rows, "held": _held_rows(family, tails, held, qids, segments)}
    shape = RunsShape(tuple(group), len(keys), qids, tuple(tags) if tagged else None)
    # read by both generators and the new open runs: computed once
    marked = family.rt.cache_for_cycle(family.views.sql(_runs_sql(shape), **views))
    records: dict[str, list[str]] = {}
    closes: dict[str, list[str]] = {}
    for i, tail in enumerate(tails):
        head = f"'{QID}', {qids[i]}, '{row_column(tail.schema)}', _r{i}"
        end = f"IF(_m{i} = {OPEN}, CAST(NULL AS BIGINT), _m{i})"
        # a query that ran before (not ``_f<i>``): a mark on the segment that began before
        # the slice closes the run it continues, which began where its open element says
        records.setdefault(row_column(tail.schema), []).append(
            f"CASE WHEN (_f{i} OR NOT {BEFORE}) AND _m{i} IS NOT NULL THEN named_struct("
            f"{head}, '{TS}', {START}, '{TE}', {end}, '{OP}', 'I') END")
        closes.setdefault(row_column(tail.schema), []).append(
            f"CASE WHEN NOT _f{i} AND _m{i} IS NOT NULL THEN named_struct({head}, "
            f"'{TS}', _was{i}, '{TE}', _m{i}, '{OP}', 'C') END")
    # a query's closing records before its new ones
    found = union_by_name([generated_structs(marked.where(q(BEFORE)), closes),
                           generated_structs(marked, records)], allow_missing=True)
    opened = family.views.sql(_open_runs_sql(shape), marked=marked)
    return SlicedRuns(family.runs_name, frozenset(qids), found, opened)


def _held_rows(family: SlicedFamily, tails: list[QueryTail], held: HeldRuns,
               qids: tuple[int, ...], segments: DataFrame) -> DataFrame:
    """The open runs ``held`` for ``tails``: per group (its keys ``_k<i>``), the start
    ``_o<query id>`` of each query's open run (NULL: none); a query's open elements handed
    over by the shared formatter (it ran on another path before) in the same form.
    """
    keys = [family_key(i) for i in range(len(family.key_sqls))]
    starts = [f"_o{qid}" for qid in qids]
    parts = []
    state = held.state
    if state is None and held.handed is None:
        # no run held yet (before the queries' first window ends): none, in the form of
        # held runs, so the first cycle with runs to continue runs the first one's plans
        # (a filter the optimiser cannot fold, so the plan's shape is the one to come)
        nulls = ", ".join(f"CAST(NULL AS BIGINT) AS {q(o)}" for o in starts)
        state = family.views.sql(f"SELECT {''.join(f'{q(k)}, ' for k in keys)}{nulls} FROM "
                                 f"{{seg}} WHERE {bound_sql(0)} = 1", seg=segments)
    if state is not None:
        kept = set(state.columns)
        parts.append(project(state, *map(q, keys), *[
            q(o) if o in kept else f"CAST(NULL AS BIGINT) AS {q(o)}" for o in starts]))
    if held.handed is not None:
        fields = {}
        for tail, qid in zip(tails, qids, strict=True):
            found = group_fields(tail, family)
            assert found is not None
            fields[qid] = (row_column(tail.schema), found)
        columns = [f"CASE {q(QID)} " + " ".join(
            f"WHEN {qid} THEN {q(row)}.{q(found[key])}" for qid, (row, found) in fields.items())
            + f" END AS {q(key)}" for key in keys]
        columns += [f"IF({q(QID)} = {qid}, {q(TS)}, CAST(NULL AS BIGINT)) AS {q(o)}"
                    for qid, o in zip(qids, starts, strict=True)]
        parts.append(project(held.handed.where(f"{q(QID)} IN ({', '.join(map(str, qids))})"),
                             *columns))
        # one row per group: a group's elements of several queries, and its kept row
        merged = ", ".join(f"max({q(o)}) AS {q(o)}" for o in starts)
        by = f" GROUP BY {', '.join(map(q, keys))}" if keys else ""
        return family.views.sql(f"SELECT {''.join(f'{q(k)}, ' for k in keys)}{merged} "
                                f"FROM {{held}}{by}", held=union_by_name(parts))
    return parts[0]


@dataclass(frozen=True)
class RunsShape:
    """What the text finding a family's runs depends on (the same text every cycle for
    the same queries): the window's partition (``group``: the keys, then the window's tag
    if the family has several), how many of it are keys, each query's id and the tag of
    each query's window (None: the family has one window). Each query's freshness is a
    column of the rows (``_f<i>``) and open runs are always read (none, before a window
    first ends), so neither changes the text.
    """

    group: tuple[str, ...]
    keys: int
    qids: tuple[int, ...]
    tags: tuple[int | None, ...] | None


@lru_cache(maxsize=256)
def _runs_sql(shape: RunsShape) -> str:
    """Each query's run mark ``_m<i>`` (see ``OPEN``) over view ``{rows}``, on the segments
    where a run begins in the cycle and, for a query that ran before (not ``_f<i>``), on a
    segment that began before the slice where the run it continues ends; beside it
    ``_was<i>``, where the open run it continues began (from view ``{held}``: one row per
    group, its keys and ``_o<query id>``), and ``_open<i>``, where the run the segment
    leaves open began.

    The held rows take part in each group's windows, first by ``FROM`` (NULL), so a group
    with no segment this cycle keeps them; they begin and end no run.
    """
    group, count = shape.group, len(shape.qids)
    keys = group[:shape.keys]
    by = f"PARTITION BY {', '.join(group)} " if group else ""
    ran = [f"_r{i}" for i in range(count)]
    firsts = [f"_f{i}" for i in range(count)]
    starts = [f"_o{qid}" for qid in shape.qids]
    nulls = ", ".join(f"CAST(NULL AS BIGINT) AS {o}" for o in starts)
    win = f"{q(WINDOW_TAG)}, " if shape.tags is not None else ""
    windows = {t for t in shape.tags or () if t is not None}
    lateral = ("" if shape.tags is None else
               f" LATERAL VIEW explode(array({', '.join(str(t) for t in sorted(windows))}))"
               f" _t AS {q(WINDOW_TAG)}")
    rows = (f"SELECT *, false AS _held, {nulls} FROM {{rows}} "
            f"UNION ALL SELECT {''.join(f'{k}, ' for k in keys)}{win}CAST(NULL AS BIGINT), "
            f"CAST(NULL AS BIGINT), false, false, CAST(NULL AS BIGINT), "
            f"{', '.join(f'NULL AS {r}' for r in ran)}, "
            f"{', '.join(f'false AS {f}' for f in firsts)}, true, {', '.join(starts)} "
            f"FROM {{held}}{lateral}")
    compared = []
    for i in range(count):
        compared += [f"lag(_r{i}) OVER w AS _p{i}", f"lead(_r{i}) OVER w AS _n{i}",
                     f"max({starts[i]}) OVER ({by}ORDER BY {q(FROM)} ROWS BETWEEN "
                     f"UNBOUNDED PRECEDING AND CURRENT ROW) AS _was{i}"]
    near = (f"SELECT *, lag({q(TO)}) OVER w AS _pto, lead({q(FROM)}) OVER w AS _nfrom, "
            f"{', '.join(compared)} FROM ({rows}) AS _rows WINDOW w AS ({by}ORDER BY "
            f"{q(FROM)})")
    marks = []
    for i in range(count):
        # a run that began before the cycle continues from the open runs, unless the
        # query is new: then its first segment begins a run at the slice's start
        marks.append(f"_r{i} IS NOT NULL AND NOT ((NOT _f{i} AND {BEFORE}) OR "
                     f"(_pto <=> {q(FROM)} AND _p{i} <=> _r{i})) AS _s{i}")
        ends = (f"_r{i} IS NOT NULL AND {CLOSES} AND NOT (_nfrom <=> {q(TO)} "
                f"AND _n{i} <=> _r{i})")
        marks.append(f"min(CASE WHEN {ends} THEN {q(TO)} END) OVER d AS _end{i}")
    ran_before = [f"NOT _f{i} AND {BEFORE} AND _r{i} IS NOT NULL" for i in range(count)]
    marked = [f"CASE WHEN _s{i} THEN coalesce(_end{i}, {OPEN}) "
              f"WHEN {ran_before[i]} THEN _end{i} END AS _m{i}" for i in range(count)]
    was = [f"_was{i}" for i in range(count)]
    listed = "".join(f"{g}, " for g in group)
    inner = (f"SELECT {listed}_held, {q(FROM)}, {START}, {BEFORE}, "
             f"_nfrom, {', '.join(ran)}, {', '.join(firsts)}, {', '.join(starts)}, "
             f"{', '.join([*marked, *was])} "
             f"FROM (SELECT *, {', '.join(marks)} FROM ({near}) AS _near WINDOW d AS ({by}"
             f"ORDER BY {q(FROM)} DESC ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)) "
             f"AS _marks")
    # where the run a segment leaves open began: a run begun in the cycle, or the held
    # one the segment that began before the slice continues past its end; a held start
    # stays only where its group (its window's, if tagged) has no segment this cycle
    stays = [" AND _nfrom IS NULL" + ("" if shape.tags is None or shape.tags[i] is None
                                      else f" AND {q(WINDOW_TAG)} = {shape.tags[i]}")
             for i in range(count)]
    opens = [f"CASE WHEN _held{stays[i]} THEN {starts[i]} WHEN _held THEN NULL "
             f"WHEN _m{i} = {OPEN} THEN {START} "
             f"WHEN {ran_before[i]} AND _m{i} IS NULL THEN _was{i} "
             f"END AS _open{i}" for i in range(count)]
    return (f"SELECT {listed}_held, {q(FROM)}, {START}, {BEFORE}, "
            f"{', '.join(ran)}, {', '.join(firsts)}, {', '.join(f'_m{i}' for i in range(count))}"
            f", {', '.join(was)}, {', '.join(opens)} FROM ({inner}) AS _marked")


@lru_cache(maxsize=256)
def _open_runs_sql(shape: RunsShape) -> str:
    """The open runs a cycle leaves (view ``{marked}`` of ``_runs_sql``), as the held rows
    it read: per group, ``_o<query id>``, where the query's open run began.
    """
    keys = shape.group[:shape.keys]
    columns = ", ".join(f"max(_open{i}) AS _o{qid}" for i, qid in enumerate(shape.qids))
    starts = ", ".join(f"_o{qid}" for qid in shape.qids)
    group = f" GROUP BY {', '.join(keys)}" if keys else ""
    return (f"SELECT * FROM (SELECT {''.join(f'{k}, ' for k in keys)}{columns} "
            f"FROM {{marked}}{group}) AS _open WHERE coalesce({starts}) IS NOT NULL")
