"""The supervisor: a failing query stops alone, with the reason in its log."""

from __future__ import annotations

import pandas as pd
import pytest

from sparkcq.errors import CatalogError


def risky(v: float) -> float:
    if v > 5:
        raise ValueError(f"v too big: {v}")
    return v * 10


def rows(*triples):
    return [{"k": k, "v": v, "t": t} for k, v, t in triples]


@pytest.fixture
def eng(engine):
    engine.create_function("risky", risky, "DOUBLE")
    engine.execute("""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY good AS SELECT k, sum(v) AS total FROM s [RANGE 10] GROUP BY k;
        CREATE QUERY bad AS SELECT k, sum(risky(v)) AS total FROM s [RANGE 10] GROUP BY k;
        CREATE QUERY plain AS SELECT k, risky(v) AS r FROM s WHERE v < 3;
    """)
    return engine


def test_failing_query_stops_alone_and_others_keep_producing(eng):
    eng.push("s", rows(("a", 1.0, 1), ("a", 2.0, 2)), watermark=3)
    eng.run_until_idle()
    assert eng.results("bad")["total"].tolist() == [10.0, 30.0]
    eng.push("s", rows(("a", 7.0, 4)), watermark=5)  # risky raises on 7.0
    eng.run_until_idle()
    eng.push("s", rows(("a", 1.0, 20)), watermark=30)
    eng.run_until_idle()

    status = eng.show("QUERIES").set_index("name")["status"].to_dict()
    assert status == {"good": "running", "bad": "failed", "plain": "running"}
    *_, failure, frames = eng.query_log("bad")
    assert "failed: ValueError: v too big: 7.0" in failure
    assert "test_supervisor.py" in failure and "in risky" in failure
    assert frames.startswith("cycle 1: traceback (user code):")
    assert 'raise ValueError(f"v too big: {v}")' in frames
    # the query sharing the window with the failed one still has all its results
    good = eng.results("good").sort_values("_ts").reset_index(drop=True)
    expect = pd.DataFrame({"k": ["a"] * 6, "total": [1.0, 3.0, 10.0, 9.0, 7.0, 1.0],
                           "_ts": [1, 2, 4, 11, 12, 20], "_te": [2, 4, 11, 12, 14, None]})
    pd.testing.assert_frame_equal(good, expect, check_dtype=False)
    assert eng.results("plain")["r"].tolist() == [10.0, 20.0, 10.0]
    # the failed query's results up to its failure are kept; DROP removes it
    assert eng.results("bad")["total"].tolist() == [10.0, 30.0]
    eng.drop("QUERY", "bad")
    with pytest.raises(CatalogError, match="unknown query 'bad'"):
        eng.query_log("bad")


def test_spark_runtime_error_names_the_problem(engine):
    engine.execute("""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY ok AS SELECT k, v FROM s;
        CREATE QUERY cast AS SELECT CAST(k AS INT) AS n FROM s;
    """)
    engine.push("s", rows(("1", 1.0, 1), ("x", 2.0, 2)), watermark=3)
    engine.run_until_idle()
    assert engine.catalog.query("cast").status == "failed"
    assert "CAST_INVALID_INPUT" in engine.query_log("cast")[-1]
    assert engine.results("ok")["k"].tolist() == ["1", "x"]
    assert engine.show("FUNCTIONS").empty


def test_failing_query_in_a_sliced_family_stops_alone(engine):
    """Window aggregates from panes share one operator per window and keys: the failed
    query's argument must not be evaluated for the others afterwards (found by hand: the
    retry of the cycle failed again and the cycle was given up).
    """
    engine.create_function("risky", risky, "DOUBLE")
    engine.execute("""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY good AS SELECT k, sum(v) AS total FROM s [RANGE 10 SLIDE 2] GROUP BY k;
        CREATE QUERY bad AS SELECT k, sum(risky(v)) AS total FROM s [RANGE 10 SLIDE 2]
          GROUP BY k;
    """)
    assert len(engine.plan.families.sliced_families()) == 1
    engine.push("s", rows(("a", 1.0, 1), ("a", 2.0, 2)), watermark=3)
    engine.run_until_idle()
    engine.push("s", rows(("a", 7.0, 4)), watermark=5)  # risky raises on 7.0
    engine.run_until_idle()
    engine.push("s", rows(("a", 1.0, 20)), watermark=30)
    engine.run_until_idle()
    status = engine.show("QUERIES").set_index("name")["status"].to_dict()
    assert status == {"good": "running", "bad": "failed"}
    # window ends m = 2, 4, ... hold the events of (m - 10, m]
    good = engine.results("good").sort_values("_ts").reset_index(drop=True)
    expect = pd.DataFrame({"k": ["a"] * 4, "total": [3.0, 10.0, 7.0, 1.0],
                           "_ts": [2, 4, 12, 20], "_te": [4, 12, 14, None]})
    pd.testing.assert_frame_equal(good, expect, check_dtype=False)
