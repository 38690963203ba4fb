"""Windowed aggregates in Flink's and Spark's forms bind to the native chunk windows: the
same aggregate node a native query builds (so the two share it), read at each window's
end; every misuse is refused at its place with what to write. No JVM: schemas only."""

from __future__ import annotations

import pytest

from sparkcq.errors import AnalysisError
from sparkcq.language.sql.parser import parse_statement
from sparkcq.language.sql.statements import CreateQuery, OutputForm
from sparkcq.plan.binder import bind_select
from sparkcq.plan.labels import user_labels
from sparkcq.plan.nodes import CumulateSpec, Project, ToStream, Window, render_tree, walk
from sparkcq.plan.notices import window_edge_notes
from sparkcq.plan.rules import optimize
from sparkcq.plan.typer import SchemaTyper


def planned(query: str, catalog, *, optimized: bool = True):
    text = f"CREATE QUERY q AS {query}"
    stmt = parse_statement(text)
    assert isinstance(stmt, CreateQuery)
    bound = bind_select(stmt.select, text, catalog, None, trusted=True, typer=SchemaTyper())
    return optimize(bound.plan, running=()) if optimized else bound.plan


@pytest.mark.parametrize(
    ("peer", "native"),
    [
        ("SELECT window_start, window_end, k, count(*) AS n FROM TABLE(TUMBLE(TABLE s, "
         "DESCRIPTOR(t), 10)) GROUP BY window_start, window_end, k",
         "RSTREAM SELECT k, count(*) AS n FROM s [CUT ON t BY 10] GROUP BY k"),
        ("SELECT k, sum(v) AS total, window_end FROM TABLE(HOP(TABLE s, DESCRIPTOR(t), 5, 20)) "
         "GROUP BY k, window_end, window_start",
         "RSTREAM SELECT k, sum(v) AS total FROM s [CUT BY 5 WINDOW 4 CHUNKS] GROUP BY k"),
    ],
    ids=["tumble", "hop"],
)
def test_flink_window_is_the_native_chunk_window_read_at_each_end(catalog, peer, native):
    plan = planned(peer, catalog)
    assert isinstance(plan, Project) and isinstance(plan.child, ToStream)
    assert plan.child == planned(native, catalog)  # one node when both run: shared
    assert plan.child.form is OutputForm.RSTREAM


def test_bounds_are_columns_where_the_query_puts_them(catalog):
    plan = planned("SELECT k, window_end AS e, count(*) AS n, window_time, window_start "
                   "FROM TABLE(HOP(TABLE s, DESCRIPTOR(t), 5, 20)) "
                   "GROUP BY window_start, window_end, k", catalog)
    assert [f.name for f in plan.schema.fields] == ["k", "e", "n", "window_time",
                                                    "window_start"]
    sql = {name: e.sql for name, e in plan.exprs}
    assert sql["e"] == "`_t`" and sql["window_start"] == "(`_t` - 20)"
    assert sql["window_time"] == "(`_t` - 1)"


def test_cumulate_keeps_an_event_until_a_step_after_its_window_ends(catalog):
    plan = planned("SELECT window_start, window_end, count(*) AS n FROM TABLE(CUMULATE("
                   "TABLE s, DESCRIPTOR(t), 2, 10)) GROUP BY window_start, window_end",
                   catalog)
    (window,) = [n for n in walk(plan) if isinstance(n, Window)]
    assert window.spec == CumulateSpec(2, 10)
    assert plan.child.period == 2
    # the window ending at 4 began at 0: the start of the window of 10 it grows in
    assert dict(plan.exprs)["window_start"].sql == "(`_t` - 1 - pmod(`_t` - 1, 10))"


def test_only_the_bounds_selected_still_gives_a_row_per_non_empty_window(catalog):
    plan = planned("SELECT window_start, window_end FROM TABLE(TUMBLE(TABLE s, "
                   "DESCRIPTOR(t), 10)) GROUP BY window_start, window_end", catalog)
    assert [f.name for f in plan.schema.fields] == ["window_start", "window_end"]
    assert plan.child == planned("RSTREAM SELECT count(*) AS _window_rows FROM s "
                                 "[CUT BY 10]", catalog)


@pytest.mark.parametrize(
    ("query", "message", "underlined"),
    [
        ("SELECT k, count(*) FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 10)) "
         "GROUP BY window_start, k",
         "GROUP BY over TABLE(TUMBLE(...)) must name window_end", "GROUP BY window_start, k"),
        ("SELECT k, count(*) FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 10)) GROUP BY k",
         "must name window_start and window_end", "GROUP BY k"),
        ("SELECT * FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 10))",
         "TABLE(TUMBLE(...)) without GROUP BY is not supported", None),
        ("SELECT k, count(*) FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 10)) "
         "WHERE window_start > 0 GROUP BY window_start, window_end, k",
         "may appear in the SELECT list as a column of its own and in GROUP BY only",
         "window_start"),
        ("SELECT window_end + 1 AS e, count(*) FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 10)) "
         "GROUP BY window_start, window_end", "as a column of its own", "window_end"),
        ("SELECT count(*) FROM TABLE(HOP(TABLE s, DESCRIPTOR(t), 3, 10)) "
         "GROUP BY window_start, window_end",
         "the window's size (10 units) must be a whole number of its slide (3 units)",
         "TABLE(HOP(TABLE s, DESCRIPTOR(t), 3, 10))"),
        ("SELECT count(*) FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(v), 10)) "
         "GROUP BY window_start, window_end",
         "windows are over the stream's event time 't', not 'v'", None),
        ("SELECT count(*) FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(x), 10)) "
         "GROUP BY window_start, window_end", "unknown time column 'x'", None),
        ("SELECT count(*) FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 10)) AS a "
         "JOIN s2 [RANGE 10] AS b ON a.k = b.k GROUP BY window_start, window_end",
         "in a join is not supported", None),
        ("SELECT count(*) FROM s [RANGE 10] GROUP BY window(t, '10 seconds')",
         "'s' has a window clause and GROUP BY window(...) gives it another",
         "window(t, '10 seconds')"),
        ("SELECT window.middle, count(*) FROM s GROUP BY window(t, 10)",
         "a window has the fields start and end", "window.middle"),
        ("SELECT count(*) FROM TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(t), 5)) "
         "GROUP BY window_start, window_end",
         "GROUP BY over a session window must name its PARTITION BY columns (k)", None),
        ("SELECT k, count(*) FROM TABLE(SESSION(TABLE s, DESCRIPTOR(t), 5)) "
         "GROUP BY window_start, window_end, k HAVING count(*) > 1",
         "HAVING over a session window is not supported", "count(*) > 1"),
        ("SELECT k, count(*) FROM TABLE(SESSION(TABLE s, DESCRIPTOR(t), 5)) WHERE v > 1 "
         "GROUP BY window_start, window_end, k",
         "WHERE with a session window is not supported", "v > 1"),
        ("SELECT count(*) FROM s GROUP BY session_window(t, 5), upper(k)",
         "GROUP BY session_window(...) groups by columns only", "upper(k)"),
    ],
    ids=["one bound", "no bound", "no aggregate", "bound in WHERE", "bound in an expression",
         "size not whole slides", "not the event time", "unknown time column", "join",
         "window clause and window()", "unknown field", "session not by its partition",
         "session HAVING", "session WHERE", "session key not a column"],
)
def test_misuse_is_refused_at_its_place(catalog, query, message, underlined):
    text = f"CREATE QUERY q AS {query}"
    stmt = parse_statement(text)
    assert isinstance(stmt, CreateQuery)
    with pytest.raises(AnalysisError) as err:
        bind_select(stmt.select, text, catalog, None, trusted=True, typer=SchemaTyper())
    assert message in str(err.value)
    if underlined is not None:
        assert text[err.value.loc.start:err.value.loc.end] == underlined


def test_explain_says_what_each_bound_is(catalog):
    plan = planned("SELECT window_start, window_end, k, count(*) AS n FROM TABLE(TUMBLE("
                   "TABLE s, DESCRIPTOR(t), 10)) GROUP BY window_start, window_end, k", catalog)
    assert render_tree(plan, labels=user_labels([plan])).splitlines()[:2] == [
        "Project window end - 10 AS window_start, window end AS window_end, `k`, `n`  [stream]",
        "  RSTREAM every 10  [stream]"]


def test_a_hopping_range_window_notes_its_edges_and_the_form_for_start_end(catalog):
    plan = planned("SELECT k, count(*) FROM s [RANGE 20 SLIDE 5] GROUP BY k", catalog,
                   optimized=False)
    (note,) = window_edge_notes(plan)
    assert "(t - 20, t]" in note and "an event at t counts in the window ending at t" in note
    assert "write [CUT ON t BY 5 WINDOW 4 CHUNKS]" in note
    assert window_edge_notes(planned("SELECT k, count(*) FROM s [CUT ON t BY 5] GROUP BY k",
                                     catalog, optimized=False)) == []
