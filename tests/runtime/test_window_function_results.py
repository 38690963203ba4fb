"""Windowed aggregates in Flink's and Spark's forms give the peer's rows: one final row per
group and window ``[start, end)``, an event on a window's edge in the window it starts,
whatever the cycles (Spark's form against Structured Streaming itself: test_coming_from.py).

Events (k, t), time a plain number; every event but two lies on an edge of 5:

    a,0  a,4  b,5  a,5  a,10  b,19  a,20
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from sparkcq import Engine

EVENTS = [("a", 0), ("a", 4), ("b", 5), ("a", 5), ("a", 10), ("b", 19), ("a", 20)]
CYCLES = {"one cycle": [30], "cycles on edges": [5, 10, 20, 30],
          "a cycle per event": [1, 5, 6, 11, 20, 21, 30]}


def run(engine: Engine, query: str, bounds: list[int]) -> list[tuple]:
    """``query``'s records over EVENTS delivered in cycles ending before each bound
    (watermark = the bound), then the end of input; sorted tuples without ``_ts``/``_te``.
    """
    engine.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    engine.execute(f"CREATE QUERY q AS {query}")
    start = 0
    for bound in bounds:
        engine.push("s", [{"k": k, "v": t, "t": t} for k, t in EVENTS if start <= t < bound],
                    watermark=bound)
        engine.run_until_idle()
        start = bound
    engine.end_input("s")
    engine.run_until_idle()
    out = engine.results("q")
    assert (out["_ts"] == out["_te"]).all()  # one row per window, at an instant
    return sorted(tuple(row) for row in out.drop(columns=["_ts", "_te"]).itertuples(
        index=False, name=None))


@pytest.mark.parametrize("bounds", list(CYCLES.values()), ids=list(CYCLES))
def test_tumble_puts_an_event_on_an_edge_in_the_window_it_starts(engine, bounds):
    query = ("SELECT window_start, window_end, k, count(*) AS n, sum(v) AS total "
             "FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 5)) GROUP BY window_start, window_end, k")
    assert run(engine, query, bounds) == [
        (0, 5, "a", 2, 4),  # 0 and 4; 5 starts the next window
        (5, 10, "a", 1, 5), (5, 10, "b", 1, 5),
        (10, 15, "a", 1, 10),
        (15, 20, "b", 1, 19),
        (20, 25, "a", 1, 20),
    ]


@pytest.mark.parametrize("bounds", list(CYCLES.values()), ids=list(CYCLES))
def test_hop_gives_every_window_an_event_lies_in(engine, bounds):
    query = ("SELECT window_start, window_end, count(*) AS n FROM TABLE(HOP(TABLE s, "
             "DESCRIPTOR(t), 5, 10)) GROUP BY window_start, window_end")
    assert run(engine, query, bounds) == [
        (-5, 5, 2), (0, 10, 4), (5, 15, 3), (10, 20, 2), (15, 25, 2), (20, 30, 1)]


@pytest.mark.parametrize("bounds", list(CYCLES.values()), ids=list(CYCLES))
def test_cumulate_grows_each_window_by_its_step(engine, bounds):
    query = ("SELECT window_start, window_end, window_time, count(*) AS n "
             "FROM TABLE(CUMULATE(TABLE s, DESCRIPTOR(t), 5, 10)) "
             "GROUP BY window_start, window_end")
    assert run(engine, query, bounds) == [
        (0, 5, 4, 2), (0, 10, 9, 4),  # window [0, 10) at 5 and at 10
        (10, 15, 14, 1), (10, 20, 19, 2),
        (20, 25, 24, 1), (20, 30, 29, 1),
    ]


def test_a_flink_window_and_the_native_chunk_window_share_one_aggregate(engine):
    engine.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    engine.execute("CREATE QUERY native AS RSTREAM SELECT k, count(*) AS n "
                   "FROM s [CUT ON t BY 5] GROUP BY k")
    engine.execute("CREATE QUERY flink AS SELECT window_end, k, count(*) AS n FROM "
                   "TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 5)) GROUP BY window_start, window_end, k")
    line = next(x for x in engine.explain("flink").splitlines() if "Aggregate" in x)
    assert "(shared with native)" in line
    engine.push("s", [{"k": k, "v": t, "t": t} for k, t in EVENTS], watermark=30)
    engine.run_until_idle()
    native = engine.results("native")
    flink = engine.results("flink")
    assert sorted(zip(native["_ts"], native["k"], native["n"], strict=True)) == sorted(
        zip(flink["window_end"], flink["k"], flink["n"], strict=True))


EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_window_bounds_keep_their_types(engine):
    engine.execute("CREATE STREAM c (page STRING, ts TIMESTAMP) WITH (event_time='ts')")
    engine.execute("CREATE QUERY w AS SELECT window_start, window_time, page, count(*) AS n "
                   "FROM TABLE(TUMBLE(TABLE c, DESCRIPTOR(ts), INTERVAL '10' SECONDS)) "
                   "GROUP BY window_start, window_end, page")
    engine.push("c", [{"page": "home", "ts": EPOCH + dt.timedelta(seconds=12)}],
                watermark=EPOCH + dt.timedelta(seconds=21))
    engine.run_until_idle()
    out = engine.results("w")
    (start, last) = out.iloc[0][["window_start", "window_time"]]
    assert pd.Timestamp(start) == pd.Timestamp(EPOCH + dt.timedelta(seconds=10))
    # the window's last instant: its end less one microsecond (Flink: one millisecond)
    assert pd.Timestamp(last) == pd.Timestamp(EPOCH + dt.timedelta(seconds=20, microseconds=-1))


def test_the_edges_example_of_the_semantics_page(engine):
    """docs/semantics.md, "Window edges": events at 5 and 10 in three windows of 10."""
    engine.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    engine.execute("CREATE QUERY cql AS RSTREAM SELECT count(*) AS n FROM s [RANGE 10 SLIDE 10]")
    engine.execute("CREATE QUERY cut AS RSTREAM SELECT count(*) AS n FROM s [CUT ON t BY 10]")
    engine.execute("CREATE QUERY tvf AS SELECT window_end, count(*) AS n FROM TABLE(TUMBLE("
                   "TABLE s, DESCRIPTOR(t), 10)) GROUP BY window_start, window_end")
    engine.push("s", [{"k": "a", "v": 1, "t": 5}, {"k": "a", "v": 1, "t": 10}])
    engine.end_input("s")
    engine.run_until_idle()

    def at(name: str) -> list[tuple]:
        out = engine.results(name)
        return sorted(zip(out["_ts"], out["n"], strict=True))

    assert at("cql") == [(10, 2)]
    assert at("cut") == [(10, 1), (20, 1)]
    tvf = engine.results("tvf")
    assert sorted(zip(tvf["window_end"], tvf["n"], strict=True)) == [(10, 1), (20, 1)]
    (note,) = [line for line in engine.query_log("cql") if line.startswith("note:")]
    assert "(t - 10, t]" in note and "[CUT ON t BY 10]" in note
    assert not [line for line in engine.query_log("cut") if line.startswith("note:")]


@pytest.mark.parametrize("bounds", [CYCLES["cycles on edges"]], ids=["cycles on edges"])
def test_any_aggregate_with_where_and_having(engine, bounds):
    query = ("SELECT window_end, k, count(DISTINCT v % 2) AS parities, max(v) AS top "
             "FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 10)) WHERE v <> 19 "
             "GROUP BY window_start, window_end, k HAVING count(*) > 1")
    assert run(engine, query, bounds) == [(10, "a", 2, 5)]  # a: 0 4 5; b: 5 alone


@pytest.mark.parametrize("bounds", list(CYCLES.values()), ids=list(CYCLES))
def test_session_gives_one_row_per_session_when_it_ends(engine, bounds):
    """Sessions of gap 5 per k: a {0, 4, 5, 10} (each at most 5 after the one before),
    {20}; b {5}, {19}. A session's row comes once its end (last event + 5) has passed.
    """
    query = ("SELECT window_start, window_end, k, count(*) AS n, max(v) AS top "
             "FROM TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(t), 5)) "
             "GROUP BY window_start, window_end, k")
    assert run(engine, query, bounds) == [
        (0, 15, "a", 4, 10), (5, 10, "b", 1, 5), (19, 24, "b", 1, 19), (20, 25, "a", 1, 20)]


def test_a_session_without_partition_joins_every_key(engine):
    query = ("SELECT window_start, window_end, count(*) AS n FROM TABLE(SESSION("
             "TABLE s, DESCRIPTOR(t), 5)) GROUP BY window_start, window_end")
    # 0 4 5 5 10 | 19 20
    assert run(engine, query, CYCLES["a cycle per event"]) == [(0, 15, 5), (19, 25, 2)]
