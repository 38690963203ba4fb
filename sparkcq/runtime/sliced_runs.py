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
end) and kept in the shared formatter's open elements, as that formatter keeps its own;
the cycle in which it ends closes it (a ``C`` record naming its start, which only those
open elements know: the formatter fills it in). A run that began in an earlier cycle
shows here as the group's first segment starting before the cycle's slice.
"""

from __future__ import annotations

from functools import lru_cache

import sqlglot
import sqlglot.expressions as exp

from sparkcq.model.columns import FROM, OP, QID, TE, TO, TS, WINDOW_TAG
from sparkcq.model.time import TIME_MIN
from sparkcq.plan.nodes import SlicedAggregate
from sparkcq.runtime.frames import bound_sql, project, q
from sparkcq.runtime.fused_outputs import QueryTail, compose_steps, generated_structs
from sparkcq.runtime.operators.shared_output import SlicedRuns, row_column, row_sql
from sparkcq.runtime.sliced_family import SlicedFamily, SlicedRun

BEFORE = "_before"  # the segment began before the cycle's slice
CLOSES = "_closes"  # the segment ends inside the cycle's slice
START = "_start"  # where the segment begins for a query in its first cycle
# a query's mark ``_m<i>`` on a segment: NULL (nothing), where the run the segment begins or
# continues from an earlier cycle ends inside the slice, or OPEN (it reaches past the slice)
OPEN = f"CAST({TIME_MIN} AS BIGINT)"  # as SQL: the literal alone reads as a decimal


def keeps_group(tail: QueryTail, family: SlicedFamily) -> bool:
    """Whether ``tail``'s query shows each of its family's group keys as a column of the
    key's type: then its row names its group, and one group holds one row at a time.
    """
    member = tail.member.node
    assert isinstance(member, SlicedAggregate)
    pairs = family.members[member]
    keys = {f"_k{i}" for i in range(len(family.key_sqls))}
    types = {f.name: f.dataType for f in member.schema.fields}
    mapping = compose_steps(tail.steps, {out: q(src) for out, src in pairs}, [])
    shown = {(_column_of(mapping[f.name]), f.dataType) for f in tail.schema.fields}
    return all((src, types[out]) in shown for out, src in pairs if src in keys)


@lru_cache(maxsize=4096)
def _column_of(sql: str) -> str | None:
    """The column ``sql`` is, parentheses aside, or None if it is an expression."""
    tree = sqlglot.parse_one(sql, read="spark").unnest()
    return tree.name if isinstance(tree, exp.Column) and not tree.table else None


def sliced_runs(family: SlicedFamily, run: SlicedRun | None,
                tails: list[QueryTail]) -> SlicedRuns | None:
    """The runs of ``tails`` (queries that ``keeps_group``) in this cycle's segments of
    ``family`` (its ``run``), or None when the family has no segments this cycle.
    """
    if run is None or run.segments.segments is None or not tails:
        return None
    segments, lo, hi = run.segments.segments, run.segments.lo, run.segments.hi
    group = [q(f"_k{i}") for i in range(len(family.key_sqls))]
    if WINDOW_TAG in segments.columns:
        group.append(q(WINDOW_TAG))
    low, high = bound_sql(lo), bound_sql(hi)
    values = []
    fresh: list[bool] = []
    for i, tail in enumerate(tails):
        member = tail.member.node
        assert isinstance(member, SlicedAggregate)
        conds: list[str] = []
        mapping = compose_steps(tail.steps, {out: q(src) for out, src in
                                             family.members[member]}, conds)
        fresh.append(member in family.fresh and lo != TIME_MIN)
        tag = family.window_tag(member)
        if tag is not None:
            conds.append(f"{q(WINDOW_TAG)} = {tag}")
        # a segment that ended before the slice is no query's; one ending where it
        # begins is not a query's in its first cycle (it starts there)
        conds.append(f"({q(TO)} IS NULL OR {q(TO)} {'>' if fresh[-1] else '>='} {low})")
        values.append(f"CASE WHEN {' AND '.join(conds)} THEN {row_sql(tail.schema, mapping)} "
                      f"END AS _r{i}")
    rows = project(segments, *group, q(FROM), q(TO), f"{q(FROM)} < {low} AS {BEFORE}",
                   f"coalesce({q(TO)} < {high}, false) AS {CLOSES}",
                   f"greatest({q(FROM)}, {low}) AS {START}", *values)
    # read by both generators: computed once
    marked = family.rt.cache_for_cycle(family.views.sql(_runs_sql(tuple(group), tuple(fresh)),
                                                        rows=rows))
    records: dict[str, list[str]] = {}
    changes: dict[str, list[str]] = {}
    for i, tail in enumerate(tails):
        assert tail.qid is not None
        head = f"'{QID}', {tail.qid}, '{row_column(tail.schema)}', _r{i}"
        start = START if fresh[i] else q(FROM)
        end = f"IF(_m{i} = {OPEN}, CAST(NULL AS BIGINT), _m{i})"
        # a query that ran before: a mark on the segment that began before the slice
        # closes the run it continues
        begins, closes = ("", "") if fresh[i] else (f"NOT {BEFORE} AND ", f" OR {BEFORE}")
        records.setdefault(row_column(tail.schema), []).append(
            f"CASE WHEN {begins}_m{i} IS NOT NULL THEN named_struct({head}, '{TS}', {start}, "
            f"'{TE}', {end}, '{OP}', 'I') END")
        changes.setdefault(row_column(tail.schema), []).append(
            f"CASE WHEN _m{i} = {OPEN}{closes} THEN named_struct({head}, '{TS}', "
            f"IF({BEFORE}, CAST(NULL AS BIGINT), {start}), '{TE}', {end}) END")
    return SlicedRuns(frozenset(t.qid for t in tails if t.qid is not None),
                      generated_structs(marked, records),
                      generated_structs(marked, changes))


def _runs_sql(group: tuple[str, ...], fresh: tuple[bool, ...]) -> str:
    """Each query's run mark ``_m<i>`` (see ``OPEN``) over view ``{rows}``, on the segments
    where a run begins in the cycle and, for a query that ran before, on a segment that
    began before the slice where the run it continues ends; the same text every cycle for
    the same queries.
    """
    by = f"PARTITION BY {', '.join(group)} " if group else ""
    compared = []
    for i in range(len(fresh)):
        compared += [f"lag(_r{i}) OVER w AS _p{i}", f"lead(_r{i}) OVER w AS _n{i}"]
    near = (f"SELECT *, lag({q(TO)}) OVER w AS _pto, lead({q(FROM)}) OVER w AS _nfrom, "
            f"{', '.join(compared)} FROM {{rows}} WINDOW w AS ({by}ORDER BY {q(FROM)})")
    marks = []
    for i, first in enumerate(fresh):
        # a run that began before the cycle continues from the open elements, unless the
        # query is new: then its first segment begins a run at the slice's start
        kept = "" if first else f"{BEFORE} OR "
        marks.append(f"_r{i} IS NOT NULL AND NOT ({kept}(_pto <=> {q(FROM)} "
                     f"AND _p{i} <=> _r{i})) AS _s{i}")
        ends = (f"_r{i} IS NOT NULL AND {CLOSES} AND NOT (_nfrom <=> {q(TO)} "
                f"AND _n{i} <=> _r{i})")
        marks.append(f"min(CASE WHEN {ends} THEN {q(TO)} END) OVER d AS _end{i}")
    ran = [f"_r{i}" for i in range(len(fresh))]
    marked = [f"CASE WHEN _s{i} THEN coalesce(_end{i}, {OPEN}) "
              + ("" if first else f"WHEN {BEFORE} AND _r{i} IS NOT NULL THEN _end{i} ")
              + f"END AS _m{i}" for i, first in enumerate(fresh)]
    return (f"SELECT {q(FROM)}, {START}, {BEFORE}, {', '.join(ran)}, {', '.join(marked)} "
            f"FROM (SELECT *, {', '.join(marks)} FROM ({near}) AS _near WINDOW d AS ({by}"
            f"ORDER BY {q(FROM)} DESC ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)) "
            f"AS _marks")
