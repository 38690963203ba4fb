"""User-defined aggregates: created at run time, computed incrementally with
plus and minus, instances in Spark state; checked against the reference interpreter, the
built-ins and hand-computed examples.
"""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import UDAS, AggQuery
from scenarios import Query, check_scenario, scenarios
from test_properties import agg_query, case_windows

from sparkcq import Engine
from sparkcq.aggregates.library import Median
from sparkcq.aggregates.runner import dump_instance, load_instance
from sparkcq.errors import AnalysisError, CatalogError
from sparkcq.testing import EndOfInput, ListSource, Watermark

BUILTIN_TWINS = {"usum(v)": "sum(v)", "uavg(v)": "avg(v)", "umin(v)": "min(v)",
                 "umax(v)": "max(v)", "umax(nullif(v, 4))": "max(nullif(v, 4))"}

MEDIAN = ("CREATE AGGREGATE median(x DOUBLE) RETURNS DOUBLE "
          "USING 'sparkcq.aggregates.library:Median'")
PERCENTILE = ("CREATE AGGREGATE pct(x DOUBLE, p DOUBLE) RETURNS DOUBLE "
              "USING 'sparkcq.aggregates.library:Percentile'")


@st.composite
def user_aggregate_queries(draw) -> dict[str, Query]:
    """User aggregates over windows, one mixed with a built-in in its SELECT, and a query of
    the user aggregates that redo built-ins beside the same query of those built-ins."""
    queries = {}
    for i in range(3):
        shape = draw(agg_query(draw(case_windows), list(UDAS)))
        queries[f"uda{i}"] = Query(shape, f"user aggregate {shape.win.kind}")
    mixed = draw(st.sampled_from(["count(*)", "sum(v)", "min(v)", "count(DISTINCT v)"]))
    first = queries["uda0"].shape
    queries["uda0"].shape = AggQuery(first.win, (*first.aggs, mixed), first.grouped,
                                     first.where, first.having, first.form)
    win, grouped = draw(case_windows), draw(st.booleans())
    queries["twin"] = Query(AggQuery(win, tuple(BUILTIN_TWINS), grouped), "user aggregate twin")
    queries["builtin"] = Query(AggQuery(win, tuple(BUILTIN_TWINS.values()), grouped),
                               "built-in twin")
    return queries


@pytest.mark.slow
@given(scenario=scenarios(("s",), cases=120), queries=user_aggregate_queries())
def test_user_aggregates_match_the_reference_and_the_builtins(spark, scenario, queries):
    outcome = check_scenario(spark, scenario, queries, udas=True)
    # the user aggregates that redo built-ins give the very same output as the built-ins
    mine, plain = outcome.results["twin"], outcome.results["builtin"]
    assert len(plain) > 0
    plain.columns = list(mine.columns)
    pd.testing.assert_frame_equal(_ordered(mine), _ordered(plain), check_dtype=False)


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns), na_position="first").reset_index(drop=True)


def rows(*triples):
    return [{"k": k, "v": v, "t": t} for k, v, t in triples]


def test_median_and_percentile_over_a_range_window_by_hand(engine):
    engine.execute(f"""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        {MEDIAN}; {PERCENTILE};
        CREATE QUERY q AS SELECT k, median(v) AS m, pct(v, 0.9) AS p90, count(*) AS n
            FROM s [RANGE 10] GROUP BY k;
    """)
    engine.push("s", rows(("a", 1.0, 1), ("a", 5.0, 3), ("b", 2.0, 3), ("a", None, 4)),
                watermark=5)
    engine.run_until_idle()
    engine.push("s", rows(("a", 3.0, 12)), watermark=30)
    engine.run_until_idle()
    got = engine.results("q").sort_values(["_ts", "k"])
    # a: 1 in [1, 11), 5 in [3, 13), NULL in [4, 14) (counted, not passed), 3 in [12, 22)
    expect = pd.DataFrame({
        "k": ["a", "a", "b", "a", "a", "a", "a", "a"],
        "m": [1.0, 3.0, 2.0, 3.0, 5.0, 4.0, 3.0, 3.0],
        "p90": [1.0, 4.6, 2.0, 4.6, 5.0, 4.8, 3.0, 3.0],
        "n": [1, 2, 1, 3, 2, 3, 2, 1],
        "_ts": [1, 3, 3, 4, 11, 12, 13, 14], "_te": [3, 4, 13, 11, 12, 13, 14, 22]})
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expect, check_dtype=False)


def test_instances_see_elements_enter_before_others_leave_in_time_order(engine):
    engine.create_aggregate("trace", __import__("udas").Lifecycle, ["BIGINT"], "STRING")
    engine.execute("""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE QUERY q AS SELECT k, trace(v) AS calls FROM s [RANGE 4] GROUP BY k;
    """)
    engine.attach_source("s", ListSource([*rows(("a", 1, 0), ("a", 2, 2)), Watermark(3),
                                          *rows(("a", 3, 4), ("a", 5, 9)), EndOfInput()]))
    engine.run_until_idle()
    got = engine.results("q")
    # at 4, 3 enters before 1 leaves: one instance throughout; at 8 the group empties and
    # the instance goes, so at 9 a new one starts with nothing of the old one's history
    assert got["calls"].tolist() == ["+1", "+1 +2", "+1 +2 +3 -1", "+1 +2 +3 -1 -2",
                                     "+5"]
    assert got["_ts"].tolist() == [0, 2, 4, 6, 9]
    assert got["_te"].tolist() == [2, 4, 6, 8, 13]


def test_aggregate_added_to_a_running_engine_and_instances_return_to_zero(engine):
    engine.execute("""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY totals AS SELECT k, sum(v) AS total FROM s [RANGE 10] GROUP BY k;
    """)
    engine.push("s", rows(("a", 1.0, 1), ("b", 4.0, 2)), watermark=3)
    engine.run_until_idle()
    engine.execute(f"""
        {MEDIAN};
        CREATE QUERY mid AS SELECT k, median(v) AS m FROM s [RANGE 10] GROUP BY k;
    """)
    assert engine.show("AGGREGATES").to_dict("records") == [{
        "name": "median", "signature": "median(x DOUBLE) -> DOUBLE",
        "code": engine.catalog.aggregates["median"].origin, "used_by": "mid"}]
    engine.push("s", rows(("a", 3.0, 4), ("c", 2.0, 5)), watermark=6)
    engine.run_until_idle()
    # the new query started complete over the shared window: a has 1 and 3, b has 4
    mid = engine.results("mid").sort_values(["_ts", "k"])
    assert mid[["k", "m", "_ts"]].values.tolist() == [["a", 1.0, 3], ["b", 4.0, 3],
                                                       ["a", 2.0, 4], ["c", 2.0, 5]]
    # one operator runs user aggregates, with an instance for each of the groups a, b, c
    assert list(engine.metrics()["live_instances"].values()) == [3]
    assert "instances=3" in engine.explain_global()
    with pytest.raises(CatalogError, match="aggregate 'median' is used by mid"):
        engine.execute("DROP AGGREGATE median")
    # the totals query kept producing throughout
    assert engine.results("totals")["total"].tolist() == [1.0, 4.0, 4.0, 2.0]
    engine.push("s", [], watermark=100)  # every element has left
    engine.run_until_idle()
    assert sum(engine.metrics()["live_instances"].values()) == 0
    mid = engine.results("mid").sort_values(["_ts", "k"])
    assert mid["_te"].tolist() == [4, 12, 11, 15, 14]
    engine.drop("QUERY", "mid")
    engine.execute("DROP AGGREGATE median")
    assert engine.show("AGGREGATES").empty


def test_loading_code_needs_an_allowed_module(spark):
    eng = Engine(spark=spark)
    with pytest.raises(AnalysisError, match=r"module 'udas' is not allowed to load code.*"
                       r"--allow-udf-module udas"):
        eng.execute("CREATE AGGREGATE usum(x BIGINT) RETURNS BIGINT USING 'udas:USum'")
    allowed = Engine(spark=spark, allow_udf_modules=["udas"])
    allowed.execute("CREATE AGGREGATE usum(x BIGINT) RETURNS BIGINT USING 'udas:USum'")
    assert allowed.show("AGGREGATES")["signature"].tolist() == ["usum(x BIGINT) -> BIGINT"]
    with pytest.raises(AnalysisError, match="module 'udas' has no 'Nope'"):
        allowed.execute("CREATE AGGREGATE nope(x BIGINT) RETURNS BIGINT USING 'udas:Nope'")
    with pytest.raises(AnalysisError, match="lacks plus, minus, value"):
        allowed.execute("CREATE AGGREGATE bad(x BIGINT) RETURNS BIGINT USING 'udas:Counter'")
    with pytest.raises(AnalysisError, match="already exists; DROP AGGREGATE usum first"):
        allowed.execute("CREATE AGGREGATE usum(x BIGINT) RETURNS BIGINT USING 'udas:USum'")
    with pytest.raises(CatalogError, match="'sum' is a built-in aggregate"):
        allowed.create_aggregate("sum", Median, ["DOUBLE"], "DOUBLE")
    with pytest.raises(CatalogError, match="user aggregates take and return BOOLEAN"):
        allowed.create_aggregate("m2", Median, ["DOUBLE"], "ARRAY<DOUBLE>")


@pytest.mark.parametrize(("query", "message", "fragment"), [
    ("SELECT k, pct(v) AS m FROM s GROUP BY k",
     r"aggregate pct\(x DOUBLE, p DOUBLE\) -> DOUBLE takes 2 arguments, got 1", "pct(v"),
    ("SELECT k, median(k) AS m FROM s GROUP BY k",
     "argument 1 \\(x\\) must be DOUBLE, found STRING; cast it explicitly", "k"),
    ("SELECT k, v FROM s WHERE median(v) > 1",
     "aggregate MEDIAN\\(v\\) is not allowed here", "median(v"),
    ("SELECT k, median(sum(v)) AS m FROM s GROUP BY k",
     "aggregate functions cannot be nested", "sum(v"),
], ids=["arity", "type", "where", "nested"])
def test_misused_user_aggregate_is_refused_with_its_place(engine, query, message, fragment):
    engine.execute(f"""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        {MEDIAN}; {PERCENTILE};
    """)
    with pytest.raises(AnalysisError, match=message) as err:
        engine.execute(f"CREATE QUERY q AS {query}")
    loc = err.value.loc
    assert loc is not None
    text = f"CREATE QUERY q AS {query}"
    assert text[loc.start:loc.end] == fragment  # where the highlight starts and ends


def test_failing_user_aggregate_stops_only_the_queries_using_it(engine):
    udas = __import__("udas")
    engine.create_aggregate("fragile", udas.Fragile, ["BIGINT"], "BIGINT")
    engine.create_aggregate("wordy", udas.Wordy, ["BIGINT"], "BIGINT")
    engine.execute("""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE QUERY good AS SELECT k, sum(v) AS total FROM s [RANGE 10] GROUP BY k;
        CREATE QUERY bad AS SELECT k, fragile(v) AS total FROM s [RANGE 10] GROUP BY k;
        CREATE QUERY liar AS SELECT k, wordy(v) AS total FROM s [RANGE 5] GROUP BY k;
    """)
    engine.push("s", rows(("a", 1, 1), ("a", 2, 2)), watermark=3)
    engine.run_until_idle()
    status = engine.show("QUERIES").set_index("name")["status"].to_dict()
    assert status == {"good": "running", "bad": "running", "liar": "failed"}
    assert ("value() returned 'total 1' (str), but the aggregate is declared RETURNS BIGINT"
            in "\n".join(engine.query_log("liar")))
    engine.push("s", rows(("a", 7, 4)), watermark=5)
    engine.run_until_idle()
    engine.push("s", rows(("a", 1, 20)), watermark=30)
    engine.run_until_idle()
    status = engine.show("QUERIES").set_index("name")["status"].to_dict()
    assert status == {"good": "running", "bad": "failed", "liar": "failed"}
    log = "\n".join(engine.query_log("bad"))
    assert "aggregate 'fragile'" in log and "plus(7) raised ValueError: cannot take 7" in log
    assert "udas.py" in log and "in plus" in log  # the user's frame of the traceback
    assert engine.results("bad")["total"].tolist() == [1, 3]
    assert engine.results("good")["total"].tolist() == [1, 3, 10, 9, 7, 1]


def test_instances_pickle_with_their_class_by_reference():
    class Local(Median):
        pass

    inst = Local()
    for x in (3.0, 1.0, 2.0):
        inst.plus(x)
    data = dump_instance(inst, Local)
    assert b"Local" not in data  # the class travels with the runner, not in every row
    back = load_instance(data, Local)
    assert type(back) is Local and back.value() == 2.0


def test_user_aggregates_over_a_join_equal_their_builtin_twins(engine):
    udas = __import__("udas")
    engine.create_aggregate("usum", udas.USum, ["BIGINT"], "BIGINT")
    engine.create_aggregate("umax", udas.UMax, ["BIGINT"], "BIGINT")
    engine.execute("""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE STREAM r (k STRING, w BIGINT, t BIGINT) WITH (event_time='t');
        CREATE QUERY mine AS SELECT a.k, usum(a.v * b.w) AS total, umax(b.w) AS top
            FROM s [RANGE 10] a JOIN r [ROWS 2] b ON a.k = b.k GROUP BY a.k;
        CREATE QUERY theirs AS SELECT a.k, sum(a.v * b.w) AS total, max(b.w) AS top
            FROM s [RANGE 10] a JOIN r [ROWS 2] b ON a.k = b.k GROUP BY a.k;
    """)
    engine.attach_source("s", ListSource([
        *rows(("a", 1, 1), ("b", 2, 2), ("a", 3, 5)), Watermark(6),
        *rows(("a", 4, 9), ("b", 1, 12)), EndOfInput()]))
    engine.attach_source("r", ListSource([
        {"k": "a", "w": 10, "t": 2}, {"k": "b", "w": 5, "t": 3}, Watermark(6),
        {"k": "a", "w": 2, "t": 7}, {"k": "a", "w": 1, "t": 8}, {"k": "b", "w": 7, "t": 13},
        EndOfInput()]))
    engine.run_until_idle()
    mine = engine.results("mine").sort_values(["_ts", "k"]).reset_index(drop=True)
    theirs = engine.results("theirs").sort_values(["_ts", "k"]).reset_index(drop=True)
    assert len(mine) >= 8
    pd.testing.assert_frame_equal(mine, theirs, check_dtype=False)
