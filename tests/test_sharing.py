"""The global plan: sharing, starting new queries from shared state, dropping without leaks."""

from __future__ import annotations

import pandas as pd

from tests.oracle import INF, coalesce, snapshots


def rows(triples):
    return [{"k": k, "v": v, "t": t} for k, v, t in triples]


EVENTS = [("a", 1.0, 1), ("b", 4.0, 2), ("a", 3.0, 5), ("a", 2.0, 9), ("b", 1.0, 12),
          ("a", 5.0, 14), ("b", 2.0, 18), ("a", 1.0, 21), ("a", 7.0, 25), ("b", 3.0, 27)]


def coalesce_from(frame, cols, t0):
    """A query's interval results as a query started at ``t0`` must give them: clipped to
    [t0, inf) and coalesced again.
    """
    elements = []
    for rec in frame.to_dict("records"):
        te = INF if pd.isna(rec["_te"]) else rec["_te"]
        if te > t0:
            elements.append((tuple(rec[c] for c in cols), max(rec["_ts"], t0), te))
    out = coalesce(snapshots(elements))
    return pd.DataFrame([(*row, ts, te) for row, ts, te in out], columns=[*cols, "_ts", "_te"])


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
    assert sum("Window" in line for line in plan.splitlines()) == 1
    for late, early, cols, keep in [("late_max", "early_max", ["k", "m", "n"], None),
                                    ("late_avg", "early_avg", ["k", "a"], None),
                                    ("late_big", "early_avg", ["k", "a"], lambda f: f["a"] > 2)]:
        want = engine.results(early)
        if keep is not None:
            want = want[keep(want)]
        want = coalesce_from(want, cols, t0)
        got = engine.results(late)
        assert len(got) > 0
        assert got["_ts"].min() == t0, late
        pd.testing.assert_frame_equal(sorted_frame(got), sorted_frame(want), check_dtype=False)
