"""Hand-computed examples: every window kind and output form on one small input.

Input (stream s, numeric time): a:1@1, a:3@4, b:2@5, a:5@12, b:7@13
        (stream r):             a:10@3, b:20@14
        (table h):              a -> north, b -> south
All queries run together in one engine (one cycle loop); each test checks one query.
Expected results are worked out by hand in the comments.
"""

from __future__ import annotations

import pandas as pd
import pytest

from sparkcq import Engine

INF = None

QUERIES = {
    "q_range": "SELECT k, sum(v) AS s FROM s [RANGE 10] GROUP BY k",
    "q_slide": "SELECT k, count(*) AS c FROM s [RANGE 10 SLIDE 5] GROUP BY k",
    "q_now": "SELECT k, v FROM s [NOW]",
    "q_unbounded": "SELECT k, count(*) AS c FROM s [UNBOUNDED] GROUP BY k",
    "q_rows": "SELECT max(v) AS m FROM s [ROWS 2]",
    "q_part": "SELECT k, sum(v) AS s FROM s [PARTITION BY k ROWS 1] GROUP BY k",
    "q_cut": "SELECT k, count(*) AS c FROM s [CUT ON t BY 10] GROUP BY k",
    "q_istream": "ISTREAM SELECT k, sum(v) AS s FROM s [RANGE 10] GROUP BY k",
    "q_dstream": "DSTREAM SELECT k, sum(v) AS s FROM s [RANGE 10] GROUP BY k",
    "q_rstream": "RSTREAM SELECT k, count(*) AS c FROM s [RANGE 10 SLIDE 5] GROUP BY k",
    "q_rstream_changes": "RSTREAM SELECT k, count(*) AS c FROM s [RANGE 10] GROUP BY k",
    "q_changelog": "CHANGELOG SELECT k, count(*) AS c FROM s [RANGE 10 SLIDE 5] GROUP BY k",
    "q_filter": "SELECT k, v FROM s WHERE v > 2",
    "q_join": "SELECT s.k AS k, s.v AS v, r.w AS w FROM s [RANGE 10] JOIN r [RANGE 5] "
              "ON s.k = r.k",
    "q_table": "SELECT s.k AS k, h.region AS region, s.v AS v FROM s [RANGE 3] JOIN h "
               "ON s.k = h.k",
    "q_union": "SELECT k, v FROM s [RANGE 2] UNION ALL SELECT k, w AS v FROM r [RANGE 2]",
    "q_global": "SELECT count(*) AS c, avg(v) AS a FROM s [RANGE 5]",
    "q_having": "SELECT k, count(*) AS c FROM s [RANGE 10] GROUP BY k HAVING count(*) > 1",
    "q_minmax": "SELECT k, min(v) AS mn, count(DISTINCT v) AS d FROM s [RANGE 10] GROUP BY k",
}


@pytest.fixture(scope="module")
def results(spark):
    eng = Engine(spark=spark)
    eng.execute("""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE STREAM r (k STRING, w BIGINT, t BIGINT) WITH (event_time='t');
        CREATE TABLE h (k STRING, region STRING);
    """)
    eng.load_table("h", [{"k": "a", "region": "north"}, {"k": "b", "region": "south"}])
    for name, sql in QUERIES.items():
        eng.execute(f"CREATE QUERY {name} AS {sql}")
    eng.push("s", [dict(k="a", v=1, t=1), dict(k="a", v=3, t=4), dict(k="b", v=2, t=5)],
             watermark=6)
    eng.push("r", [dict(k="a", w=10, t=3)], watermark=6)
    eng.push("s", [dict(k="a", v=5, t=12), dict(k="b", v=7, t=13)], end=True)
    eng.push("r", [dict(k="b", w=20, t=14)], end=True)
    eng.run_until_idle()
    return {name: eng.results(name) for name in QUERIES}


def rows(frame, *cols, time=("_ts", "_te")):
    """Sorted tuples of the given columns plus the time columns; NaN/None -> None."""
    out = []
    for rec in frame[[*cols, *time]].itertuples(index=False):
        vals = []
        for x in rec:
            if x is None or pd.isna(x):
                vals.append(None)
            elif isinstance(x, float) and x.is_integer():
                vals.append(int(x))
            else:
                vals.append(x)
        out.append(tuple(vals))
    return sorted(out, key=lambda r: tuple((v is None, v) for v in r))


def test_range_window_sum(results):
    # a: 1[1,11) 3[4,14) 5[12,22);  b: 2[5,15) 7[13,23)
    assert rows(results["q_range"], "k", "s") == [
        ("a", 1, 1, 4), ("a", 3, 11, 12), ("a", 4, 4, 11), ("a", 5, 14, 22), ("a", 8, 12, 14),
        ("b", 2, 5, 13), ("b", 7, 15, 23), ("b", 9, 13, 15),
    ]


def test_sliding_window_aligns_to_the_slide_and_coalesces(results):
    # a1 -> [5,15), a3 -> [5,15), a5 -> [15,25); b2 -> [5,15), b7 -> [15,25)
    # b's count is 1 on [5,15) and on [15,25): one coalesced element [5,25)
    assert rows(results["q_slide"], "k", "c") == [
        ("a", 1, 15, 25), ("a", 2, 5, 15), ("b", 1, 5, 25),
    ]


def test_now_window(results):
    assert rows(results["q_now"], "k", "v") == [
        ("a", 1, 1, 2), ("a", 3, 4, 5), ("a", 5, 12, 13), ("b", 2, 5, 6), ("b", 7, 13, 14),
    ]


def test_unbounded_window_stays_open(results):
    assert rows(results["q_unbounded"], "k", "c") == [
        ("a", 1, 1, 4), ("a", 2, 4, 12), ("a", 3, 12, INF), ("b", 1, 5, 13), ("b", 2, 13, INF),
    ]


def test_rows_window(results):
    # last two rows: [1,4) {1}; [4,5) {1,3}; [5,12) {3,2}; [12,13) {2,5}; [13,inf) {5,7}
    assert rows(results["q_rows"], "m") == [(1, 1, 4), (3, 4, 12), (5, 12, 13), (7, 13, INF)]


def test_partitioned_rows_window(results):
    assert rows(results["q_part"], "k", "s") == [
        ("a", 1, 1, 4), ("a", 3, 4, 12), ("a", 5, 12, INF), ("b", 2, 5, 13), ("b", 7, 13, INF),
    ]


def test_cut_window_rows_valid_from_the_cut_point(results):
    # chunk [0,10): a1 a3 b2, valid [10,20); chunk [10,20): a5 b7, valid [20,30)
    assert rows(results["q_cut"], "k", "c") == [("a", 1, 20, 30), ("a", 2, 10, 20),
                                                ("b", 1, 10, 30)]


def test_istream(results):
    assert rows(results["q_istream"], "k", "s", time=("_ts",)) == [
        ("a", 1, 1), ("a", 3, 11), ("a", 4, 4), ("a", 5, 14), ("a", 8, 12),
        ("b", 2, 5), ("b", 7, 15), ("b", 9, 13),
    ]


def test_dstream(results):
    assert rows(results["q_dstream"], "k", "s", time=("_ts",)) == [
        ("a", 1, 4), ("a", 3, 12), ("a", 4, 11), ("a", 5, 22), ("a", 8, 14),
        ("b", 2, 13), ("b", 7, 23), ("b", 9, 15),
    ]


def test_rstream_snapshots_at_every_slide(results):
    # a: [5,15) 2, [15,25) 1; b: [5,25) 1 -> snapshots at 5, 10, 15, 20
    assert rows(results["q_rstream"], "k", "c", time=("_ts",)) == [
        ("a", 1, 15), ("a", 1, 20), ("a", 2, 5), ("a", 2, 10),
        ("b", 1, 5), ("b", 1, 10), ("b", 1, 15), ("b", 1, 20),
    ]


def test_rstream_without_slide_snapshots_at_every_change(results):
    # the relation changes at 1, 4, 5, 11, 12, 13, 14, 15, 22, 23 (empty from 23 on)
    assert rows(results["q_rstream_changes"], "k", "c", time=("_ts",)) == [
        ("a", 1, 1), ("a", 1, 11), ("a", 1, 14), ("a", 1, 15),
        ("a", 2, 4), ("a", 2, 5), ("a", 2, 12), ("a", 2, 13),
        ("b", 1, 5), ("b", 1, 11), ("b", 1, 12), ("b", 1, 15), ("b", 1, 22),
        ("b", 2, 13), ("b", 2, 14),
    ]


def test_changelog(results):
    assert rows(results["q_changelog"], "k", "c", "_op", time=("_ts",)) == [
        ("a", 1, "+", 15), ("a", 1, "-", 25), ("a", 2, "+", 5), ("a", 2, "-", 15),
        ("b", 1, "+", 5), ("b", 1, "-", 25),
    ]


def test_filter_on_a_raw_stream_gives_instants(results):
    assert rows(results["q_filter"], "k", "v") == [("a", 3, 4, 4), ("a", 5, 12, 12),
                                                   ("b", 7, 13, 13)]


def test_join_of_two_windows_lives_on_the_overlap(results):
    # r: a10 [3,8), b20 [14,19)
    assert rows(results["q_join"], "k", "v", "w") == [
        ("a", 1, 10, 3, 8), ("a", 3, 10, 4, 8), ("b", 2, 20, 14, 15), ("b", 7, 20, 14, 19),
    ]


def test_join_with_a_table(results):
    assert rows(results["q_table"], "k", "region", "v") == [
        ("a", "north", 1, 1, 4), ("a", "north", 3, 4, 7), ("a", "north", 5, 12, 15),
        ("b", "south", 2, 5, 8), ("b", "south", 7, 13, 16),
    ]


def test_union_all(results):
    assert rows(results["q_union"], "k", "v") == [
        ("a", 1, 1, 3), ("a", 3, 4, 6), ("a", 5, 12, 14), ("a", 10, 3, 5),
        ("b", 2, 5, 7), ("b", 7, 13, 15), ("b", 20, 14, 16),
    ]


def test_global_aggregate_has_no_row_while_empty(results):
    # 1[1,6) 3[4,9) 2[5,10) 5[12,17) 7[13,18); empty on [10,12)
    assert rows(results["q_global"], "c", "a") == [
        (1, 1, 1, 4), (1, 2, 9, 10), (1, 5, 12, 13), (1, 7, 17, 18),
        (2, 2, 4, 5), (2, 2.5, 6, 9), (2, 6, 13, 17), (3, 2, 5, 6),
    ]


def test_having(results):
    assert rows(results["q_having"], "k", "c") == [("a", 2, 4, 11), ("a", 2, 12, 14),
                                                   ("b", 2, 13, 15)]


def test_min_and_count_distinct_stay_right_when_elements_leave(results):
    assert rows(results["q_minmax"], "k", "mn", "d") == [
        ("a", 1, 1, 1, 4), ("a", 1, 2, 4, 11), ("a", 3, 1, 11, 12), ("a", 3, 2, 12, 14),
        ("a", 5, 1, 14, 22), ("b", 2, 1, 5, 13), ("b", 2, 2, 13, 15), ("b", 7, 1, 15, 23),
    ]


def test_group_keys_equal_for_group_by_are_one_group(engine):
    """-0.0 and 0.0, NaN and NaN, NULL and NULL are one group each, as in Spark's GROUP BY
    (the operator partitions its data by a hash of the keys, which must agree).
    """
    engine.execute("""
        CREATE STREAM g (x STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE QUERY by_x AS SELECT CAST(x AS DOUBLE) AS x, sum(v) AS s, max(v) AS m
            FROM g [UNBOUNDED] GROUP BY CAST(x AS DOUBLE);
    """)
    engine.push("g", [dict(x="0.0", v=1, t=1), dict(x="-0.0", v=2, t=2),
                      dict(x="NaN", v=4, t=3), dict(x="NaN", v=8, t=4),
                      dict(x=None, v=16, t=5), dict(x=None, v=32, t=6)], end=True)
    engine.run_until_idle()
    got = engine.results("by_x")
    last = got[got["_te"].isna()]  # pandas shows the NULL key as NaN too
    assert sorted(zip(last["x"].fillna(-1.0), last["s"], last["m"], strict=True)) == [
        (-1.0, 12, 8), (-1.0, 48, 32), (0.0, 3, 2)]


def test_count_alone_over_a_range_window(engine):
    """count(*) with no key and no argument: its window's projection keeps no column of its
    own (once a query of it alone failed in its first cycle, emitting nothing)."""
    engine.execute("CREATE STREAM e (k STRING, t BIGINT) WITH (event_time='t');"
                   "CREATE QUERY n AS SELECT count(*) AS n FROM e [RANGE 10]")
    engine.push("e", [{"k": "a", "t": 1}, {"k": "b", "t": 4}], end=True)
    engine.run_until_idle()
    got = sorted(tuple(r) for r in engine.results("n")[["n", "_ts", "_te"]].values.tolist())
    assert got == [(1, 1, 4), (1, 11, 14), (2, 4, 11)]
