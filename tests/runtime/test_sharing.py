"""The global plan: sharing, starting new queries from shared state, dropping without leaks."""

from __future__ import annotations

import pandas as pd
import pytest
from oracle import INF, Relation, Win, aggregate, join, output, window
from scenarios import engine_records, per_case

from sparkcq import Engine
from sparkcq.plan.nodes import Filter
from sparkcq.runtime.frames import rdd_id


def rows(triples):
    return [{"k": k, "v": v, "t": t} for k, v, t in triples]


EVENTS = [("a", 1.0, 1), ("b", 4.0, 2), ("a", 3.0, 5), ("a", 2.0, 9), ("b", 1.0, 12),
          ("a", 5.0, 14), ("b", 2.0, 18), ("a", 1.0, 21), ("a", 7.0, 25), ("b", 3.0, 27)]


def events_of(triples):
    return [{"k": k, "v": v, "t": t} for k, v, t in triples]


def avg(rows):
    return sum(r["v"] for r in rows) / len(rows)


def reference(rel, start=None):
    """Interval records of ``rel``, as a query started at ``start`` (if any) sees it."""
    return per_case(output(rel if start is None else rel.clip(start), ""))


def engine_output(engine, query):
    return per_case(engine_records(engine.results(query), "intervals"))


def run_in_batches(eng, events, until):
    for i in range(0, len(events), 2):
        batch = events[i:i + 2]
        eng.push("s", rows(batch), watermark=batch[-1][2] + 1)
        eng.run_until_idle()
        until(i)


def sorted_frame(df):
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def test_late_query_over_shared_window_and_aggregate_starts_complete(engine):
    engine.execute("""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY early_avg AS SELECT k, avg(v) AS a FROM s [RANGE 10] GROUP BY k;
        CREATE QUERY early_max AS SELECT k, max(v) AS m, count(*) AS n FROM s [RANGE 10]
            GROUP BY k;
    """)
    added_at = {}

    def add_late(i):
        if i == 4:  # after the events up to t=14: the window has delivered [.., 15)
            added_at["t"] = engine.metrics()["watermarks"]["s"]
            assert added_at["t"] == 15
            # shares the window with early_avg and early_max; a new aggregate above it
            engine.execute("CREATE QUERY late_max AS SELECT k, max(v) AS m, count(*) AS n "
                           "FROM s [RANGE 10] GROUP BY k")
            # shares the whole plan of early_avg
            engine.execute("CREATE QUERY late_avg AS SELECT k, avg(v) AS a FROM s [RANGE 10] "
                           "GROUP BY k")
            # shares the aggregate, adds a filter above it
            engine.execute("CREATE QUERY late_big AS SELECT k, avg(v) AS a FROM s [RANGE 10] "
                           "GROUP BY k HAVING avg(v) > 2")
            assert "Aggregate" in engine.explain("late_big").split("shared with")[0]

    run_in_batches(engine, EVENTS, add_late)
    engine.end_input("s")
    engine.run_until_idle()
    t0 = added_at["t"]
    plan = engine.explain_global()
    # one Window operator (max reads it; avg runs from the window's log, see
    # runtime/operators/range_aggregate.py)
    assert sum(line.split(" ", 1)[1].startswith("Window") for line in plan.splitlines()) == 1
    rel = window(events_of(EVENTS), Win("range", 10), ("k", "v", "t"))
    maxes = aggregate(rel, ("k",), [("m", lambda rs: max(r["v"] for r in rs)), ("n", len)])
    avgs = aggregate(rel, ("k",), [("a", avg)])
    big = aggregate(rel, ("k",), [("a", avg)], having=lambda rs: avg(rs) > 2)
    for query, want in [("early_max", reference(maxes)), ("early_avg", reference(avgs)),
                        ("late_max", reference(maxes, t0)), ("late_avg", reference(avgs, t0)),
                        ("late_big", reference(big, t0))]:
        got = engine_output(engine, query)
        assert got == want, query
    assert min(ts for recs in engine_output(engine, "late_big").values()
               for _, ts, _ in recs) == t0


def persisted(spark):
    """Ids of the RDDs Spark keeps persisted (state frames are local checkpoints)."""
    return {int(i) for i in spark.sparkContext._jsc.getPersistentRDDs().keySet().toArray()}


def live_frames(engine):
    """Ids of the RDDs behind the engine's current state frames and the batches its scans
    hold."""
    ops = [*engine.plan.state_holders(), *(r.formatter for r in engine.queries.running.values()),
           engine.queries.intervals]
    ops += [s for s in engine.scans.values() if s.node not in engine.plan.ops]
    frames = [df for op in ops for f in op.cycle_states() for df in f.frames()]
    frames += [df for s in engine.scans.values() for df in s.held_frames]
    return {rdd_id(df) for df in frames}


@pytest.mark.parametrize("spec", [("RANGE 10 SLIDE 5", Win("slide", 10, 5)),
                                  ("CUT BY 5 WINDOW 2 CHUNKS", Win("cut", 5, 2))],
                         ids=["hopping", "chunks"])
def test_late_query_over_a_window_computed_from_panes_starts_complete(engine, spec):
    """A window that only a sliced aggregate reads runs as no operator (its panes are the
    aggregate's state): a later query over the same window that needs its elements (a user
    aggregate) starts them from the events the stream keeps for the sliced one.
    """
    clause, win = spec
    engine.execute(f"""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY early AS SELECT k, sum(v) AS total FROM s [{clause}] GROUP BY k;
        CREATE AGGREGATE median(x DOUBLE) RETURNS DOUBLE
            USING 'sparkcq.aggregates.library:Median';
    """)
    assert "SlicedAggregate" in engine.explain("early")
    added_at = {}

    def add_late(i):
        if i == 4:
            added_at["t"] = engine.metrics()["watermarks"]["s"]
            engine.execute(f"CREATE QUERY late AS SELECT k, median(v) AS m FROM s [{clause}] "
                           "GROUP BY k")
            assert "Window" in engine.explain("late")

    run_in_batches(engine, EVENTS, add_late)
    engine.end_input("s")
    engine.run_until_idle()

    def median(rs):
        vs = sorted(r["v"] for r in rs)
        return (vs[(len(vs) - 1) // 2] + vs[len(vs) // 2]) / 2

    rel = window(events_of(EVENTS), win, ("k", "v", "t"))
    want = aggregate(rel, ("k",), [("m", median)])
    assert engine_output(engine, "late") == reference(want, added_at["t"])
    assert engine_output(engine, "late")


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_late_aggregate_over_a_window_no_one_computes_sees_only_later_events(spark, fuse):
    """The stream keeps recent events for a running sliced aggregate (over a chunk window
    here); a later aggregate over another window, which no one computes, is a new relation
    and must not start from them. Unfused, it started from the events of its window's
    reach before its start (found by the property suite).

    Events 19 and 20 arrive ahead of the watermark; the query is added at watermark 23 and
    then sees 24 and 29 alone.
    """
    eng = Engine(spark=spark, fuse=fuse)
    eng.execute("""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY early AS SELECT k, count(*) AS n FROM s [CUT ON t BY 6 WINDOW 3 CHUNKS]
            GROUP BY k;
    """)
    eng.push("s", rows([("x", 0.0, 19), ("x", 0.0, 20)]), watermark=0)
    eng.run_until_idle()
    eng.push("s", [], watermark=23)
    eng.run_until_idle()
    eng.execute("CREATE QUERY late AS RSTREAM SELECT k, count(*) AS n FROM s [RANGE 7] "
                "GROUP BY k HAVING count(*) > 0")
    eng.push("s", rows([("x", 0.0, 24), ("x", 0.0, 29)]), end=True)
    eng.run_until_idle()
    late = eng.results("late")
    # the snapshot at each instant it changes: 24 enters, 29 enters, 24 leaves
    assert late[["k", "n", "_ts"]].values.tolist() == [["x", 1, 24], ["x", 2, 29],
                                                       ["x", 1, 31]]
    # the chunk [18, 24) holds 19 and 20 for the running query
    assert ["x", 2] in eng.results("early")[["k", "n"]].values.tolist()
    eng.stop()


def test_late_aggregate_over_unbounded_window_starts_from_its_start(engine):
    """An UNBOUNDED window keeps no elements, so a late aggregate that is not the running one
    (here it also counts rows for its HAVING) starts a family of its own from the changes
    after its start, and says so; it failed with "cannot tell its current contents".
    """
    engine.execute("""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY early AS SELECT k, max(v) AS m FROM s [UNBOUNDED] GROUP BY k;
    """)
    engine.push("s", rows([("x", 1.0, 0), ("x", 2.0, 0)]), watermark=21)
    engine.run_until_idle()
    engine.execute("CREATE QUERY late AS SELECT k, max(v) AS m FROM s [UNBOUNDED] GROUP BY k "
                   "HAVING count(*) > 1")
    engine.push("s", rows([("x", 3.0, 22), ("x", 0.0, 24)]), watermark=30, end=True)
    engine.run_until_idle()
    log = engine.query_log("late")
    assert not any("failed" in line for line in log), log
    assert any("starts with the changes after its start" in line for line in log), log
    late = engine.results("late")
    assert late[["k", "m", "_ts"]].values.tolist() == [["x", 3.0, 24]]  # 3 and 0 from 22 on
    assert late["_te"].isna().all()
    assert engine.results("early")["m"].tolist() == [2.0, 3.0]


def test_drop_frees_exactly_what_no_other_query_uses(engine, spark):
    before = persisted(spark)  # other engines' frames on the shared session
    engine.execute("""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY keep AS SELECT k, min(v) AS a FROM s [RANGE 10] GROUP BY k;
    """)
    engine.push("s", rows(EVENTS[:4]), watermark=10)
    engine.run_until_idle()
    keep_nodes = set(engine.plan.ops)
    assert persisted(spark) - before == live_frames(engine) != set()
    engine.execute("""
        CREATE QUERY mx AS SELECT k, max(v) AS m FROM s [RANGE 10] GROUP BY k;
        CREATE QUERY pairs AS SELECT x.k, x.v, y.v AS w FROM s [RANGE 5] AS x
            JOIN s [RANGE 5] AS y ON x.k = y.k;
    """)
    engine.push("s", rows(EVENTS[4:8]), watermark=22)
    engine.run_until_idle()
    text = engine.explain_global()
    window = next(line for line in text.splitlines() if "Window [RANGE 10]" in line)
    assert "refs=2" in window and "queries=[keep, mx]" in window
    assert "rows/cycle=" in window and "state_rows=" in window
    dot = engine.explain_global("dot")
    assert dot.startswith("digraph sparkcq {") and "->" in dot
    assert 'label="pairs", shape=ellipse' in dot
    assert engine.execute("EXPLAIN GLOBAL DOT") == dot
    assert "shared with mx" in engine.explain("keep")
    with_all = persisted(spark) - before
    assert with_all == live_frames(engine) != set()

    engine.drop("QUERY", "mx")
    engine.drop("QUERY", "pairs")
    assert set(engine.plan.ops) == keep_nodes
    assert all(engine.plan.refs[n] == 1 for n in keep_nodes)
    assert persisted(spark) - before == live_frames(engine) < with_all
    assert engine.metrics()["total_state_rows"] == sum(
        op.state_rows for op in engine.plan.state_holders()) + sum(
        r.formatter.state_rows for r in engine.queries.running.values()
    ) + engine.queries.intervals.state_rows
    # and the remaining query goes on, its results unaffected by the others
    engine.push("s", rows(EVENTS[8:]), watermark=30)
    engine.run_until_idle()
    assert persisted(spark) - before == live_frames(engine)
    assert "mx" not in engine.explain_global() and "pairs" not in engine.explain_global()


def test_late_query_over_shared_join_starts_complete(engine):
    join_sql = ("SELECT x.k, x.v, y.v AS w FROM s [RANGE 10] AS x JOIN s [RANGE 8] AS y "
                "ON x.k = y.k AND x.v < y.v")
    engine.register_table("names", [{"k": "a", "name": "alpha"}, {"k": "b", "name": "beta"}])
    engine.execute(f"""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY early AS {join_sql};
        CREATE QUERY early_named AS SELECT x.k, n.name, x.v FROM s [RANGE 6] AS x
            JOIN names AS n ON x.k = n.k;
    """)
    added = {}

    def add_late(i):
        if i == 4:
            added["t"] = engine.metrics()["watermarks"]["s"]
            engine.execute(f"CREATE QUERY late AS {join_sql}")
            engine.execute("CREATE QUERY late_named AS SELECT x.k, n.name, x.v FROM "
                           "s [RANGE 6] AS x JOIN names AS n ON x.k = n.k")
            assert not any("starts with the changes" in line
                           for q in ("late", "late_named") for line in engine.query_log(q))

    run_in_batches(engine, EVENTS, add_late)
    engine.end_input("s")
    engine.run_until_idle()
    events = events_of(EVENTS)
    pairs = join(window(events, Win("range", 10), ("k", "v", "t")),
                 window(events, Win("range", 8), ("k", "v", "t")), key=lambda r: r["k"],
                 theta=lambda x, y: x["v"] < y["v"], columns=("k", "v", "w"),
                 make=lambda x, y: (x["k"], x["v"], y["v"]))
    names = Relation(("k", "name"), ((("a", "alpha"), -INF, INF), (("b", "beta"), -INF, INF)))
    named = join(window(events, Win("range", 6), ("k", "v", "t")), names,
                 key=lambda r: r["k"], theta=None, columns=("k", "name", "v"),
                 make=lambda x, n: (x["k"], n["name"], x["v"]))
    t0 = added["t"]
    for query, want in [("early", reference(pairs)), ("late", reference(pairs, t0)),
                        ("early_named", reference(named)), ("late_named", reference(named, t0))]:
        got = engine_output(engine, query)
        assert got and got == want, query


def test_late_having_over_shared_aggregate_starts_with_groups_that_do_not_change(engine):
    """A new HAVING above a running aggregate starts from the aggregate's contents even for
    groups with no change in its first cycle (its output is not computed from the changes
    of the family's result in that cycle).
    """
    engine.execute("""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY early AS SELECT k, avg(v) AS a FROM s [UNBOUNDED] GROUP BY k;
    """)
    engine.push("s", rows([("a", 1.0, 1), ("b", 5.0, 2)]), watermark=3)
    engine.run_until_idle()
    engine.execute("CREATE QUERY late AS SELECT k, avg(v) AS a FROM s [UNBOUNDED] GROUP BY k "
                   "HAVING avg(v) > 0")
    engine.push("s", rows([("a", 3.0, 4)]), watermark=6)  # only group a changes
    engine.end_input("s")
    engine.run_until_idle()
    got = sorted_frame(engine.results("late"))
    assert got.to_dict("records") == [
        {"k": "a", "a": 1.0, "_ts": 3, "_te": 4},
        {"k": "a", "a": 2.0, "_ts": 4, "_te": None},
        {"k": "b", "a": 5.0, "_ts": 3, "_te": None},
    ]


def test_late_query_while_the_stream_is_idle_at_an_element_end(engine):
    """Submitted when the shared relation stands exactly where an element ends (the NOW
    window's row of t=29 leaves at 30 = the watermark) and the stream then idles a cycle:
    the new queries start from the contents only once the input passes 30, where they meet
    that row's end. (They emitted it at 30 as open, and never closed it.)
    """
    window = "FROM s [NOW] GROUP BY k"
    engine.execute(f"""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE QUERY base AS SELECT k, max(v) AS m {window};
    """)
    engine.push("s", [{"k": "y", "v": 9, "t": 29}, {"k": "z", "v": 1, "t": 29}], watermark=30)
    engine.run_cycle()
    engine.push("s", [{"k": "z", "v": 2, "t": 30}])
    engine.run_cycle()  # holds t=30: the watermark stays at 30
    engine.execute(f"""
        CREATE QUERY same AS SELECT k, max(v) AS m {window};
        CREATE QUERY member AS SELECT k, count(*) AS n {window};
        CREATE QUERY above AS SELECT k, max(v) AS m {window} HAVING max(v) > 0;
    """)
    engine.run_cycle()  # nothing new: the new queries wait
    engine.push("s", [], watermark=35)
    engine.run_cycle()
    engine.end_input("s")
    engine.run_until_idle()
    assert records(engine, "base") == [("y", 9, 29, 30), ("z", 1, 29, 30), ("z", 2, 30, 31)]
    # from 30 on: y is gone, z holds 2 on [30, 31)
    assert records(engine, "same") == [("z", 2, 30, 31)]
    assert records(engine, "member") == [("z", 1, 30, 31)]
    assert records(engine, "above") == [("z", 2, 30, 31)]


def records(engine, query):
    return sorted(tuple(None if pd.isna(v) else v for v in row)
                  for row in engine.results(query).itertuples(index=False))


def test_query_whose_operator_fails_to_build_leaves_no_trace_in_the_plan(engine, monkeypatch):
    engine.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    engine.execute("CREATE QUERY a AS SELECT k, v FROM s [RANGE 5]")
    before = (dict(engine.plan.refs), {n: set(u) for n, u in engine.plan.users.items()})
    build = engine.queries.operator_for

    def failing(node):
        if isinstance(node, Filter):
            msg = "cannot build"
            raise RuntimeError(msg)
        return build(node)

    monkeypatch.setattr(engine.queries, "operator_for", failing)
    with pytest.raises(RuntimeError, match="cannot build"):
        engine.execute("CREATE QUERY b AS SELECT k FROM s [RANGE 5] WHERE v > 1")
    assert (dict(engine.plan.refs), {n: set(u) for n, u in engine.plan.users.items()}) == before
    assert "b" not in engine.catalog.queries


def test_query_joining_a_family_before_any_watermark_runs(engine):
    """A query added to a sliding window's aggregate family after a cycle without input
    (the family's position still "no watermark yet") starts from the stream's history;
    its start once overflowed Spark's LONG (both queries failed with CAST_OVERFLOW).
    """
    engine.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    engine.execute("CREATE QUERY n AS SELECT k, count(*) AS n FROM s [RANGE 10 SLIDE 5] "
                   "GROUP BY k")
    engine.run_cycle()
    engine.execute("CREATE QUERY total AS SELECT k, sum(v) AS total FROM s [RANGE 10 SLIDE 5] "
                   "GROUP BY k")
    engine.push("s", [{"k": "a", "v": 1, "t": 1}, {"k": "a", "v": 2, "t": 3}])
    engine.run_cycle()
    engine.push("s", [{"k": "a", "v": 4, "t": 7}], end=True)
    engine.run_until_idle()
    assert [q.status.value for q in engine.catalog.queries.values()] == ["running", "running"]
    # valid [1, 11), [3, 13), [7, 17), evaluated at multiples of 5: 2 rows (sum 3) on
    # [5, 10), 3 (sum 7) on [10, 15), 1 (sum 4) on [15, 20); records() sorts by value
    assert records(engine, "n") == [("a", 1, 15, 20), ("a", 2, 5, 10), ("a", 3, 10, 15)]
    assert records(engine, "total") == [("a", 3, 5, 10), ("a", 4, 15, 20), ("a", 7, 10, 15)]
