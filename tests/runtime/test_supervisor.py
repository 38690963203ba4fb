"""The supervisor: a failing query stops alone, with the reason in its log."""

from __future__ import annotations

import pandas as pd
import pytest

from sparkcq.errors import AnalysisError, CatalogError


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


def test_skip_sends_the_rows_an_operator_raised_on_to_the_dead_letters_and_goes_on(eng):
    """``on_error='skip'``: the failing rows leave the query's input (as dead letters with
    the error), in that cycle and later ones; the same query without the policy stops.
    By hand, risky(v) = 10 v raises on v > 5: k = a, v 1 at 1, 2 at 2, 7 at 4, 1 at 20
    (RANGE 10): the sum is 10 on [1, 2), 30 on [2, 11), 20 on [11, 12), 0 rows on [12, 20),
    10 from 20; the 7 at 4, and the 9 at 21 later, are dead letters.
    """
    eng.execute("""
        CREATE QUERY tough WITH (on_error='skip') AS
            SELECT k, sum(risky(v)) AS total FROM s [RANGE 10] GROUP BY k;
        CREATE QUERY each WITH (on_error='skip') AS SELECT k, risky(v) AS r FROM s;
    """)
    eng.push("s", rows(("a", 1.0, 1), ("a", 2.0, 2)), watermark=3)
    eng.run_until_idle()
    eng.push("s", rows(("a", 7.0, 4)), watermark=5)
    eng.run_until_idle()
    eng.push("s", rows(("a", 1.0, 20), ("a", 9.0, 21)), watermark=30)
    eng.run_until_idle()
    status = eng.show("QUERIES").set_index("name")["status"].to_dict()
    assert status == {"good": "running", "bad": "failed", "plain": "running",
                      "tough": "running", "each": "running"}
    tough = eng.results("tough").sort_values("_ts")
    assert [(total, int(ts), None if pd.isna(te) else int(te))
            for total, ts, te in tough[["total", "_ts", "_te"]].itertuples(index=False)] == [
        (10.0, 1, 2), (30.0, 2, 11), (20.0, 11, 12), (10.0, 20, None)]
    assert sorted(eng.results("each")["r"]) == [10.0, 10.0, 20.0]
    log = "\n".join(eng.query_log("tough"))
    assert "cycle 1: skipped 1 row(s) of s it raised on" in log
    assert "ValueError: v too big: 7.0" in log and "cycle 2: skipped 1 row(s)" in log
    dead = eng.dead_letters("s")
    assert sorted(zip(dead["v"], dead["_reason"].str.extract(r"query '(\w+)'")[0],
                      strict=True)) == [(7.0, "each"), (7.0, "tough"), (9.0, "each"),
                                        (9.0, "tough")]
    assert all("v too big" in r for r in dead["_reason"])
    assert "Quarantine for tough" in eng.explain("tough")


def test_skip_stops_a_query_when_no_single_row_explains_the_failure(engine):
    engine.execute("""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY total WITH (on_error='skip') AS
            SELECT k, CAST(sum(v) AS TINYINT) AS n FROM s [RANGE 10] GROUP BY k;
    """)
    engine.push("s", rows(("a", 100.0, 1), ("a", 100.0, 2)), watermark=3)
    engine.run_until_idle()
    assert engine.catalog.query("total").status == "failed"
    log = "\n".join(engine.query_log("total"))
    assert "on_error='skip' found no input row that alone raises" in log
    assert engine.dead_letters("s").empty


def test_a_bad_on_error_is_refused_at_its_value(engine):
    engine.execute("CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    with pytest.raises(AnalysisError, match="on_error 'ignore': use 'stop'") as e:
        engine.execute("CREATE QUERY q WITH (on_error='ignore') AS SELECT k FROM s")
    assert "'ignore'" in str(e.value).splitlines()[-1] or e.value.loc is not None
