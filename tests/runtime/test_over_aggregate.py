"""count, sum and avg OVER (PARTITION BY ... ORDER BY t RANGE BETWEEN w PRECEDING AND
CURRENT ROW) (``runtime/operators/over_aggregate.py``): hand-computed examples, whatever
the cycles.

The property suite compares the operator with the oracle's reading of the definition on
generated scenarios; these pin the module's worked example, both ends of the window, events
of one instant that arrive in different cycles, a timestamp stream and the plan.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from sparkcq import Engine
from sparkcq.testing import push_in_cycles

# (k, v, t): a's events at 13 are two; the one at 4 is 10 before 14 (still in: both ends
# of [t - 10, t] are in), the one at 1 left at 12
EVENTS = [("a", 2.0, 1), ("a", 4.0, 4), ("b", 1.0, 5), ("a", 6.0, 11), ("a", 2.0, 12),
          ("a", 6.0, 13), ("a", 1.0, 13), ("a", 3.0, 14), ("b", 5.0, 16)]

OVER = "OVER (PARTITION BY k ORDER BY t RANGE BETWEEN 10 PRECEDING AND CURRENT ROW)"

# by hand, [t - 10, t] per k: a at 1 {2}; at 4 {2, 4}; at 11 {2, 4, 6} (1 = 11 - 10 is in);
# at 12 {4, 6, 2}; at 13 {4, 6, 2, 6, 1} (both events of 13 in each one's window); at 14
# {4, 6, 2, 6, 1, 3} (4 = 14 - 10 is in); b at 5 {1}; at 16 {5} (5 left at 16)
ROWS = [("a", 2.0, 1, 1, 2.0), ("a", 4.0, 4, 2, 6.0), ("a", 6.0, 11, 3, 12.0),
        ("a", 2.0, 12, 3, 12.0), ("a", 6.0, 13, 5, 19.0), ("a", 1.0, 13, 5, 19.0),
        ("a", 3.0, 14, 6, 22.0), ("b", 1.0, 5, 1, 1.0), ("b", 5.0, 16, 1, 5.0)]


def run(engine: Engine, query: str, cuts: list[int]) -> pd.DataFrame:
    """The query's results over the events pushed in cycles ending before each of ``cuts``."""
    engine.execute("CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    engine.execute(f"CREATE QUERY q AS {query}")
    push_in_cycles(engine, "s", [{"k": k, "v": v, "t": t} for k, v, t in EVENTS], cuts)
    return engine.results("q")


CUTS = {"one cycle": [100], "a cycle per instant": [2, 5, 6, 12, 13, 14, 15, 17],
        "cycles between arrivals and departures": [3, 11, 13, 16, 30]}


@pytest.mark.parametrize("cuts", list(CUTS.values()), ids=list(CUTS))
def test_each_event_once_with_its_windows_count_and_sum(engine, cuts):
    out = run(engine, f"SELECT k, v, t, count(*) {OVER} AS n, sum(v) {OVER} AS s FROM s",
              cuts)
    got = sorted(out[["k", "v", "t", "n", "s"]].itertuples(index=False, name=None))
    assert got == sorted(ROWS)
    # each row an event: an instant
    assert (out["_ts"] == out["t"]).all() and (out["_te"] == out["t"]).all()


def test_the_average_in_an_expression_beside_the_events_columns(engine):
    out = run(engine, f"SELECT t, v * 2 AS w, avg(v) {OVER} + 1 AS a FROM s WHERE k = 'a'",
              [6, 13, 30])
    got = sorted(out[["t", "w", "a"]].itertuples(index=False, name=None))
    assert got == sorted((t, v * 2, s / n + 1) for k, v, t, n, s in ROWS if k == "a")
    plan = engine.explain("q")
    assert ("OverAggregate avg(_a0) AS _x0 OVER (PARTITION BY _g0 RANGE 10 PRECEDING) (each "
            "event's window from a log of the events: one sort a cycle, from the log's last 10 "
            "in a cycle at least that long, else from a base kept between cycles)") in plan
    assert "Window" not in plan


def test_events_of_one_instant_arriving_in_two_cycles_see_each_other(engine):
    engine.execute("CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    engine.execute(f"CREATE QUERY q AS SELECT v, t, count(*) {OVER} AS n FROM s")
    engine.push("s", [{"k": "a", "v": 1.0, "t": 5}, {"k": "a", "v": 2.0, "t": 7}],
                watermark=3)
    engine.run_until_idle()
    engine.push("s", [{"k": "a", "v": 3.0, "t": 7}, {"k": "a", "v": 4.0, "t": 17}],
                watermark=20)
    engine.run_until_idle()
    out = engine.results("q")
    got = sorted(out[["v", "t", "n"]].itertuples(index=False, name=None))
    # 17 - 10 = 7: both events of 7 are still in the window at 17, the one of 5 is not
    assert got == [(1.0, 5, 1), (2.0, 7, 3), (3.0, 7, 3), (4.0, 17, 3)]


def test_an_interval_on_a_timestamp_stream(engine):
    engine.execute("CREATE STREAM p (host STRING, bytes BIGINT, ts TIMESTAMP) "
                   "WITH (event_time='ts')")
    engine.execute("CREATE QUERY q AS SELECT host, ts, sum(bytes) OVER (PARTITION BY host "
                   "ORDER BY ts RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW) "
                   "AS last_minute FROM p")
    at = dt.datetime(2026, 12, 7, 12, 0, 0)
    seconds = [0, 30, 60, 61, 150]
    engine.push("p", [{"host": "h", "bytes": 10 ** i, "ts": at + dt.timedelta(seconds=s)}
                      for i, s in enumerate(seconds)])
    engine.end_input("p")
    engine.run_until_idle()
    out = engine.results("q").sort_values("ts")
    # at 60 the event of 0 is exactly a minute before: in; at 61 it left; 150: alone
    assert list(out["last_minute"]) == [1, 11, 111, 1110, 10000]
    # each event's own time goes out with it
    assert list(out["ts"]) == [pd.Timestamp(at + dt.timedelta(seconds=s), tz="UTC")
                               for s in seconds]


def test_queries_with_one_over_window_share_it(engine):
    engine.execute("CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    engine.execute(f"CREATE QUERY q1 AS SELECT k, t, avg(v) {OVER} AS a FROM s")
    engine.execute(f"CREATE QUERY q2 AS SELECT t, avg(v) {OVER} * 10 AS a10 FROM s")
    engine.push("s", [{"k": k, "v": v, "t": t} for k, v, t in EVENTS])
    engine.end_input("s")
    engine.run_until_idle()
    plan = engine.explain_global()
    assert sum("OverAggregate" in line for line in plan.splitlines()) == 1
    first = sorted(engine.results("q1")[["t", "a"]].itertuples(index=False, name=None))
    tenfold = sorted(engine.results("q2")[["t", "a10"]].itertuples(index=False, name=None))
    assert [t for t, _a in first] == [t for t, _a in tenfold]
    assert [a * 10 for _t, a in first] == pytest.approx([a for _t, a in tenfold])
    assert sorted(first) == sorted((t, s / n) for _k, _v, t, n, s in ROWS)


def test_a_query_reads_an_over_windows_events_as_a_stream(engine):
    engine.execute("CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    engine.execute(f"CREATE STREAM busy AS SELECT k, t, count(*) {OVER} AS n FROM s")
    engine.execute("CREATE QUERY q AS SELECT k, t FROM busy WHERE n >= 5")
    engine.push("s", [{"k": k, "v": v, "t": t} for k, v, t in EVENTS])
    engine.end_input("s")
    engine.run_until_idle()
    got = sorted(engine.results("q")[["k", "t"]].itertuples(index=False, name=None))
    assert got == sorted((k, t) for k, _v, t, n, _s in ROWS if n >= 5)
