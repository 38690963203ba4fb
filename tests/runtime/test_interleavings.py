"""Multi-input queries whose inputs advance in different cycles: hand-computed examples.

The property suite (``test_properties.py``) generates such interleavings at random; these
are the cases written out, each with its expected rows computed by hand.
"""

from __future__ import annotations

from sparkcq import Engine

JOIN = ("CREATE QUERY j AS SELECT x.v AS av, y.v AS bv "
        "FROM x [RANGE 4] JOIN y [RANGE 4] ON x.k = y.k")
# x: 1 on [1, 5), 2 on [3, 7), 3 on [6, 10); y: 10 on [2, 6), 20 on [5, 9)
X = [{"k": "a", "v": 1, "t": 1}, {"k": "a", "v": 2, "t": 3}, {"k": "a", "v": 3, "t": 6}]
Y = [{"k": "a", "v": 10, "t": 2}, {"k": "a", "v": 20, "t": 5}]
PAIRS = [(1, 10, 2, 5), (2, 10, 3, 6), (2, 20, 5, 7), (3, 20, 6, 9)]


def two_streams(engine: Engine) -> Engine:
    for s in ("x", "y"):
        engine.execute(f"CREATE STREAM {s} (k STRING, v BIGINT, t BIGINT) "
                       "WITH (event_time='t')")
    return engine


def records(engine: Engine, query: str) -> list[tuple]:
    frame = engine.results(query)
    return sorted(tuple(None if v != v else v for v in row)  # NaN (open end) as None
                  for row in frame.itertuples(index=False))


def test_join_whose_inputs_advance_in_different_cycles(engine):
    """The issue's repro: x advances alone in one cycle, y in the next; nothing is lost."""
    two_streams(engine).execute(JOIN)
    engine.push("x", X, watermark=6)
    engine.run_until_idle()  # x advances alone in this cycle
    engine.push("y", Y, watermark=5)
    engine.run_until_idle()
    engine.end_input("x")
    engine.end_input("y")
    engine.run_until_idle()
    assert engine.show("QUERIES")["status"].tolist() == ["running"]
    assert records(engine, "j") == PAIRS


def test_fast_input_waits_for_a_slow_one_and_nothing_is_dropped(engine):
    """x runs far ahead for many cycles while y is silent: x's changes wait (in the join's
    state), x's late events go to its dead letters, and once y arrives every pair is there.
    """
    two_streams(engine).execute(JOIN)
    for i, e in enumerate(X):
        engine.push("x", [e], watermark=e["t"] + 1)
        engine.run_until_idle()
        assert records(engine, "j") == [], f"no pair can be final before y moves (cycle {i})"
    engine.push("x", [{"k": "a", "v": 9, "t": 40}], watermark=50)  # far ahead
    engine.run_until_idle()
    engine.push("x", [{"k": "a", "v": 7, "t": 30}])  # behind x's watermark: late
    engine.run_until_idle()
    assert engine.metrics()["dead_letters"] == {"x": 1, "y": 0}
    assert engine.dead_letters("x")[["v", "t"]].values.tolist() == [[7, 30]]
    waiting = engine.metrics()["state_rows"]
    assert any("Join" in op and rows > 0 for op, rows in waiting.items()), waiting
    engine.push("y", Y, watermark=20)
    engine.run_until_idle()
    assert records(engine, "j") == PAIRS
    engine.end_input("y")
    engine.end_input("x")
    engine.run_until_idle()
    assert records(engine, "j") == PAIRS  # (9 @40 meets no y row)


def test_one_stream_ends_long_before_the_other(engine):
    """y is complete after one cycle (watermark +inf); x trickles in one event per cycle."""
    two_streams(engine).execute(JOIN)
    engine.push("y", Y, end=True)
    engine.run_until_idle()
    for e in X:
        engine.push("x", [e], watermark=e["t"] + 1)
        engine.run_until_idle()
    engine.end_input("x")
    engine.run_until_idle()
    assert records(engine, "j") == PAIRS


def test_union_of_streams_under_an_aggregate_fed_a_cycle_apart(spark):
    """A derived stream (x UNION ALL y) under a windowed aggregate; y sends a heartbeat
    without rows, then x, then y: the same intervals as all input in one cycle."""
    # x: 1 @1, 2 @3, 3 @6; y: 10 @2, 20 @5; each live 4 units; hand-computed sum and count
    expected = [("a", 1, 1, 1, 2), ("a", 3, 1, 9, 10), ("a", 11, 2, 2, 3), ("a", 13, 3, 3, 5),
                ("a", 23, 2, 7, 9), ("a", 25, 3, 6, 7), ("a", 32, 3, 5, 6)]
    for split in (False, True):
        eng = two_streams(Engine(spark=spark))
        eng.execute("CREATE STREAM xy AS SELECT k, v, t FROM x UNION ALL SELECT k, v, t FROM y")
        eng.execute("CREATE QUERY u AS SELECT k, sum(v) AS s, count(*) AS n "
                    "FROM xy [RANGE 4] GROUP BY k")
        if split:
            eng.push("y", [], watermark=2)  # a heartbeat, no rows
            eng.run_until_idle()
            eng.push("x", X, watermark=7)
            eng.run_until_idle()
            eng.push("y", Y, watermark=7)
            eng.run_until_idle()
        else:
            eng.push("x", X)
            eng.push("y", Y)
        eng.end_input("x")
        eng.end_input("y")
        eng.run_until_idle()
        assert records(eng, "u") == expected, f"split={split}"
        eng.stop()


def test_a_keyed_stream_joined_while_either_input_runs_ahead(spark):
    """A keyed stream (rows replaced, one deleted) joined with an append stream: whichever
    input comes a cycle before the other, the pairs are those of all input in one cycle."""
    # prices of key a: 10 on [1, 4), 11 on [4, 6) (deleted at 6), 12 from 8
    prices = [{"k": "a", "v": 10, "t": 1}, {"k": "a", "v": 11, "t": 4},
              {"k": "a", "v": 12, "t": 8}]
    trades = [{"k": "a", "q": q, "t": t} for q, t in ((1, 2), (2, 5), (3, 7), (4, 9))]
    for first in ("prices", "trades"):
        eng = Engine(spark=spark)
        eng.execute("CREATE STREAM prices (k STRING, v BIGINT, t BIGINT) "
                    "WITH (event_time='t', key='k')")
        eng.execute("CREATE STREAM trades (k STRING, q BIGINT, t BIGINT) WITH (event_time='t')")
        eng.execute("CREATE QUERY j AS SELECT tr.q AS q, p.v AS v FROM trades [NOW] AS tr "
                    "JOIN prices AS p ON tr.k = p.k")
        pushes = {"prices": {"rows": prices, "deletes": [{"k": "a", "t": 6}]},
                  "trades": {"rows": trades}}
        for name in (first, *[n for n in pushes if n != first]):
            eng.push(name, watermark=10, **pushes[name])
            eng.run_until_idle()  # one input advances alone in this cycle
        eng.end_input("prices")
        eng.end_input("trades")
        eng.run_until_idle()
        # the trade at 7 meets no price: a's row was deleted at 6
        assert records(eng, "j") == [(1, 10, 2, 3), (2, 11, 5, 6), (4, 12, 9, 10)], first
        eng.stop()
