"""Hand-computed examples of the SQL a Flink or Spark user expects beyond inner joins:
outer, semi and anti joins, DISTINCT, UNION, INTERSECT and EXCEPT, Top-N, session windows.

Input (numeric time), all in one engine:
    stream s: a:1@1, a:3@4, b:2@5, a:5@12, b:7@13   read [RANGE 10]
    stream r: a:10@3, b:20@14                        read [RANGE 5]
Elements of s: a1 [1,11), a3 [4,14), b2 [5,15), a5 [12,22), b7 [13,23);
of r: a10 [3,8), b20 [14,19). Expected results are worked out by hand in the comments.
"""

from __future__ import annotations

import pandas as pd
import pytest

from sparkcq import Engine
from sparkcq.errors import QueryTextError

S_EVENTS = [dict(k="a", v=1, t=1), dict(k="a", v=3, t=4), dict(k="b", v=2, t=5),
            dict(k="a", v=5, t=12), dict(k="b", v=7, t=13)]
R_EVENTS = [dict(k="a", w=10, t=3), dict(k="b", w=20, t=14)]
# stream e (lateness 5): the first cycle brings a:1@1, a:2@2, b:4@4, b:9@9 (watermark 4),
# the second a:10@10, b:7@7 (late but allowed), a:12@12
E_EVENTS = [dict(k="a", v=1, t=1), dict(k="a", v=2, t=2), dict(k="b", v=4, t=4),
            dict(k="b", v=9, t=9), dict(k="a", v=10, t=10), dict(k="b", v=7, t=7),
            dict(k="a", v=12, t=12)]
ON = "FROM s [RANGE 10] {how} JOIN r [RANGE 5] ON s.k = r.k"

QUERIES = {
    "left": "SELECT s.k AS k, s.v AS v, r.w AS w " + ON.format(how="LEFT"),
    "right": "SELECT r.k AS k, s.v AS v, r.w AS w " + ON.format(how="RIGHT"),
    "full": "SELECT s.v AS v, r.w AS w " + ON.format(how="FULL OUTER"),
    "semi": "SELECT k, v " + ON.format(how="LEFT SEMI"),
    "anti": "SELECT k, v " + ON.format(how="LEFT ANTI"),
    # WHERE above an outer join filters its padded rows too (it is no join condition)
    "left_where": "SELECT s.k AS k, s.v AS v " + ON.format(how="LEFT") + " WHERE r.w IS NULL",
    # a relation (an aggregate) left-joined with a windowed stream
    "totals_left": ("SELECT x.k AS k, x.n AS n, r.w AS w FROM (SELECT k, count(*) AS n "
                    "FROM s [RANGE 10] GROUP BY k) AS x LEFT JOIN r [RANGE 5] ON x.k = r.k"),
    # DISTINCT and set operations
    "distinct": "SELECT DISTINCT k FROM s [RANGE 10]",
    "first_seen": "ISTREAM SELECT DISTINCT k FROM s",
    "distinct_counts": "SELECT DISTINCT count(*) AS n FROM s [RANGE 10] GROUP BY k",
    "keys_union": "SELECT k FROM s [RANGE 10] UNION SELECT k FROM r [RANGE 5]",
    "keys_both": "SELECT k FROM s [RANGE 10] INTERSECT SELECT k FROM r [RANGE 5]",
    "keys_only_s": "SELECT k FROM s [RANGE 10] EXCEPT SELECT k FROM r [RANGE 5]",
    "copies_only_s": "SELECT k FROM s [RANGE 10] EXCEPT ALL SELECT k FROM r [RANGE 5]",
    "copies_both": "SELECT k FROM s [RANGE 10] INTERSECT ALL SELECT k FROM r [RANGE 5]",
    # Top-N
    "top2": "SELECT k, v FROM s [RANGE 10] ORDER BY v DESC LIMIT 2",
    "hottest": ("SELECT k, count(*) AS n FROM s [RANGE 10] GROUP BY k "
                "ORDER BY count(*) DESC LIMIT 1"),
    "smallest": ("SELECT * FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v) "
                 "AS rn FROM s [RANGE 10]) WHERE rn <= 1"),
    "all_hottest": ("SELECT k, n FROM (SELECT k, count(*) AS n, RANK() OVER (ORDER BY "
                    "count(*) DESC) AS r FROM s [RANGE 10] GROUP BY k) WHERE r = 1"),
    "ranked": "SELECT k, v, DENSE_RANK() OVER (ORDER BY k) AS d FROM s [RANGE 10]",
    # session windows over e
    "sessions": "SELECT k, v FROM e [PARTITION BY k SESSION 3]",
    "session_totals": ("SELECT k, count(*) AS n, sum(v) AS total "
                       "FROM e [PARTITION BY k SESSION 3] GROUP BY k"),
    "one_session": "SELECT k, v FROM e [SESSION 3]",
}


def rows(frame: pd.DataFrame, *cols: str) -> list[tuple]:
    """Sorted (cols..., _ts, _te) tuples; NULL as None, whole floats as ints."""
    out = []
    for rec in frame[[*cols, "_ts", "_te"]].itertuples(index=False):
        out.append(tuple(None if x is None or pd.isna(x)
                         else int(x) if isinstance(x, float) and x.is_integer() else x
                         for x in rec))
    return sorted(out, key=lambda r: tuple((v is None, v) for v in r))


@pytest.fixture(scope="module")
def engine(spark):
    eng = Engine(spark=spark)
    eng.execute("""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE STREAM r (k STRING, w BIGINT, t BIGINT) WITH (event_time='t');
        CREATE TABLE h (k STRING, region STRING);
        CREATE STREAM e (k STRING, v BIGINT, t BIGINT) WITH (event_time='t', lateness='5');
    """)
    eng.load_table("h", [{"k": "a", "region": "north"}])
    for name, sql in QUERIES.items():
        eng.execute(f"CREATE QUERY {name} AS {sql}")
    eng.push("s", S_EVENTS[:3], watermark=6)
    eng.push("r", R_EVENTS[:1], watermark=6)
    eng.push("e", E_EVENTS[:4])
    eng.run_cycle()
    eng.push("s", S_EVENTS[3:], end=True)
    eng.push("r", R_EVENTS[1:], end=True)
    eng.push("e", E_EVENTS[4:], end=True)
    eng.run_until_idle()
    yield eng
    eng.stop()


def results(engine: Engine, name: str, *cols: str) -> list[tuple]:
    return rows(engine.results(name), *cols)


def test_left_join_pads_a_row_where_it_has_no_partner(engine):
    # a1 meets a10 over [3,8): padded over [1,3) and again over [8,11); a3 likewise over
    # [8,14); b2 meets b20 over [14,15) only; a5 never meets a partner; b7 meets b20 over
    # [14,19) and is padded before and after
    assert results(engine, "left", "k", "v", "w") == [
        ("a", 1, 10, 3, 8), ("a", 1, None, 1, 3), ("a", 1, None, 8, 11),
        ("a", 3, 10, 4, 8), ("a", 3, None, 8, 14), ("a", 5, None, 12, 22),
        ("b", 2, 20, 14, 15), ("b", 2, None, 5, 14), ("b", 7, 20, 14, 19),
        ("b", 7, None, 13, 14), ("b", 7, None, 19, 23)]


def test_right_join_keeps_the_right_rows(engine):
    # every r row has a partner while it lives: a10 from 3 (a1), b20 from 14 (b2, b7)
    assert results(engine, "right", "k", "v", "w") == [
        ("a", 1, 10, 3, 8), ("a", 3, 10, 4, 8), ("b", 2, 20, 14, 15), ("b", 7, 20, 14, 19)]


def test_full_join_is_left_and_right_unmatched_rows_and_pairs(engine):
    assert results(engine, "full", "v", "w") == [
        (1, 10, 3, 8), (1, None, 1, 3), (1, None, 8, 11), (2, 20, 14, 15), (2, None, 5, 14),
        (3, 10, 4, 8), (3, None, 8, 14), (5, None, 12, 22), (7, 20, 14, 19),
        (7, None, 13, 14), (7, None, 19, 23)]


def test_semi_and_anti_joins_split_each_row_by_whether_it_has_a_partner(engine):
    assert results(engine, "semi", "k", "v") == [
        ("a", 1, 3, 8), ("a", 3, 4, 8), ("b", 2, 14, 15), ("b", 7, 14, 19)]
    assert results(engine, "anti", "k", "v") == [
        ("a", 1, 1, 3), ("a", 1, 8, 11), ("a", 3, 8, 14), ("a", 5, 12, 22),
        ("b", 2, 5, 14), ("b", 7, 13, 14), ("b", 7, 19, 23)]
    assert results(engine, "left_where", "k", "v") == results(engine, "anti", "k", "v")


def test_a_relation_left_joined_with_a_stream(engine):
    # count per k of s [RANGE 10]: a 1 [1,4), 2 [4,11), 1 [11,12), 2 [12,14), 1 [14,22);
    # b 1 [5,13), 2 [13,15), 1 [15,23). a's rows meet a10 over [3,8), b's b20 over [14,19)
    assert results(engine, "totals_left", "k", "n", "w") == [
        ("a", 1, 10, 3, 4), ("a", 1, None, 1, 3), ("a", 1, None, 11, 12),
        ("a", 1, None, 14, 22), ("a", 2, 10, 4, 8), ("a", 2, None, 8, 11),
        ("a", 2, None, 12, 14), ("b", 1, 20, 15, 19), ("b", 1, None, 5, 13),
        ("b", 1, None, 19, 23), ("b", 2, 20, 14, 15), ("b", 2, None, 13, 14)]


def test_distinct_keeps_one_copy_while_any_is_there(engine):
    # a: a1 [1,11), a3 [4,14), a5 [12,22) overlap or meet: one element [1,22)
    assert results(engine, "distinct", "k") == [("a", 1, 22), ("b", 5, 23)]
    # over the raw stream (UNBOUNDED): the first time each key is seen
    assert results(engine, "first_seen", "k") == [("a", 1, 1), ("b", 5, 5)]
    # count per k: a 1 [1,4), 2 [4,11), 1 [11,12), 2 [12,14), 1 [14,22);
    # b 1 [5,13), 2 [13,15), 1 [15,23): n = 1 while some group has one row
    assert results(engine, "distinct_counts", "n") == [
        (1, 1, 4), (1, 5, 13), (1, 14, 23), (2, 4, 11), (2, 12, 15)]


def test_union_intersect_and_except_of_relations(engine):
    # keys of s: a [1,22), b [5,23); of r: a [3,8), b [14,19)
    assert results(engine, "keys_union", "k") == [("a", 1, 22), ("b", 5, 23)]
    assert results(engine, "keys_both", "k") == [("a", 3, 8), ("b", 14, 19)]
    assert results(engine, "keys_only_s", "k") == [
        ("a", 1, 3), ("a", 8, 22), ("b", 5, 14), ("b", 19, 23)]


def test_except_all_and_intersect_all_count_copies(engine):
    # copies of a in s minus r: [1,3) 1, [3,4) 0, [4,8) 1, [8,11) 2, [11,12) 1, [12,14) 2,
    # [14,22) 1; of b: [5,13) 1, [13,14) 2, [14,15) 1, [15,19) 0, [19,23) 1; coalesced
    # into layers: a second copy is a second element
    assert results(engine, "copies_only_s", "k") == [
        ("a", 1, 3), ("a", 4, 22), ("a", 8, 11), ("a", 12, 14),
        ("b", 5, 15), ("b", 13, 14), ("b", 19, 23)]
    assert results(engine, "copies_both", "k") == [("a", 3, 8), ("b", 14, 19)]


def test_order_by_limit_keeps_the_first_rows_of_every_snapshot(engine):
    # by v descending: [1,4) a1; [4,5) a3 a1; [5,12) a3 b2; [12,13) a5 a3;
    # [13,22) b7 a5; [22,23) b7
    assert results(engine, "top2", "k", "v") == [
        ("a", 1, 1, 5), ("a", 3, 4, 13), ("a", 5, 12, 22), ("b", 2, 5, 12), ("b", 7, 13, 23)]


def test_top_n_of_an_aggregate_breaks_ties_by_the_columns(engine):
    # counts per k (see test_distinct_keeps_one_copy_while_any_is_there); where a and b
    # tie ([11,12), [13,14), [15,22)) LIMIT 1 keeps a, the smaller row
    assert results(engine, "hottest", "k", "n") == [
        ("a", 1, 1, 4), ("a", 1, 11, 12), ("a", 1, 15, 22), ("a", 2, 4, 11), ("a", 2, 12, 14),
        ("b", 1, 22, 23), ("b", 2, 14, 15)]
    # RANK() ... = 1 keeps every tied group: NEXMark q5's "hot items"
    assert results(engine, "all_hottest", "k", "n") == [
        ("a", 1, 1, 4), ("a", 1, 11, 12), ("a", 1, 15, 22), ("a", 2, 4, 11), ("a", 2, 12, 14),
        ("b", 1, 11, 12), ("b", 1, 15, 23), ("b", 2, 13, 15)]


def test_ranking_functions_number_rows_per_partition(engine):
    # the smallest v per k: a1 until a1 leaves at 11, then a3 until 14, then a5
    assert results(engine, "smallest", "k", "v", "rn") == [
        ("a", 1, 1, 1, 11), ("a", 3, 1, 11, 14), ("a", 5, 1, 14, 22), ("b", 2, 1, 5, 15),
        ("b", 7, 1, 15, 23)]
    # DENSE_RANK by k without a bound: b is 2 while some a lives (until 22), then 1
    assert results(engine, "ranked", "k", "v", "d") == [
        ("a", 1, 1, 1, 11), ("a", 3, 1, 4, 14), ("a", 5, 1, 12, 22), ("b", 2, 2, 5, 15),
        ("b", 7, 1, 22, 23), ("b", 7, 2, 13, 22)]


def test_session_windows_merge_when_a_late_event_bridges_two_sessions(engine):
    # gap 3. a: 1, 2 (session ends 2 + 3 = 5), then 10, 12 (ends 15). b: 4 and 9 were two
    # sessions until b7 came (7 - 4 <= 3, 9 - 7 <= 3): one session 4, 7, 9 ending at 12
    assert results(engine, "sessions", "k", "v") == [
        ("a", 1, 1, 5), ("a", 2, 2, 5), ("a", 10, 10, 15), ("a", 12, 12, 15),
        ("b", 4, 4, 12), ("b", 7, 7, 12), ("b", 9, 9, 12)]
    assert results(engine, "session_totals", "k", "n", "total") == [
        ("a", 1, 1, 1, 2), ("a", 1, 10, 10, 12), ("a", 2, 3, 2, 5), ("a", 2, 22, 12, 15),
        ("b", 1, 4, 4, 7), ("b", 2, 11, 7, 9), ("b", 3, 20, 9, 12)]
    # without PARTITION BY all events are one sequence: 1 2 4 7 9 10 12, no gap above 3
    assert results(engine, "one_session", "k", "v") == [
        ("a", 1, 1, 15), ("a", 2, 2, 15), ("a", 10, 10, 15), ("a", 12, 12, 15),
        ("b", 4, 4, 15), ("b", 7, 7, 15), ("b", 9, 9, 15)]
    assert engine.dead_letters("e").empty


@pytest.mark.parametrize(("sql", "message", "fragment"), [
    ("SELECT s.k FROM s [RANGE 5] RIGHT SEMI JOIN r [RANGE 5] ON s.k = r.k",
     "RIGHT SEMI JOIN is not supported; write LEFT SEMI or LEFT ANTI JOIN with the inputs "
     "swapped", "RIGHT SEMI JOIN r [RANGE 5] ON s.k = r.k"),
    ("SELECT h.k FROM s [RANGE 5] RIGHT JOIN h ON s.k = h.k",
     "RIGHT JOIN keeps the rows of a table that no relation row matches",
     "RIGHT JOIN h ON s.k = h.k"),
    ("SELECT k, r.w FROM s [RANGE 5] LEFT ANTI JOIN r [RANGE 5] ON s.k = r.k",
     "'r' is joined by a LEFT ANTI JOIN: it only decides which rows before it are kept",
     "r.w"),
    ("SELECT k, v FROM s [RANGE 5] ORDER BY v",
     "ORDER BY needs LIMIT n in a continuous query", "ORDER BY v"),
    ("SELECT k, v FROM s [RANGE 5] LIMIT 3", "LIMIT needs ORDER BY", "LIMIT 3"),
    ("SELECT k FROM s [RANGE 5] ORDER BY v LIMIT 3",
     "ORDER BY v: a continuous query orders by a column of its SELECT list", "v"),
    ("SELECT k, sum(v) OVER (PARTITION BY k) AS x FROM s",
     "an OVER window is ordered by the stream's event time: write ORDER BY t (ascending)",
     "sum(v) OVER (PARTITION BY k)"),
    ("SELECT k, sum(v) OVER (PARTITION BY k ORDER BY t RANGE BETWEEN 5 PRECEDING AND "
     "CURRENT ROW) AS x FROM s [RANGE 5]",
     "an OVER window reads the stream's events themselves; remove the window clause of "
     "'s'", "[RANGE 5]"),
    ("SELECT k, min(v) OVER (PARTITION BY k ORDER BY t RANGE BETWEEN 5 PRECEDING AND "
     "CURRENT ROW) AS x FROM s", "MIN(v) OVER (...) is not supported",
     "min(v) OVER (PARTITION BY k ORDER BY t RANGE BETWEEN 5 PRECEDING AND CURRENT ROW)"),
    ("SELECT k, sum(v) OVER (ORDER BY t ROWS BETWEEN 5 PRECEDING AND CURRENT ROW) AS x "
     "FROM s", "an OVER window needs its frame: RANGE BETWEEN INTERVAL '60' SECOND PRECEDING",
     "sum(v) OVER (ORDER BY t ROWS BETWEEN 5 PRECEDING AND CURRENT ROW)"),
    ("SELECT k, sum(v) OVER (ORDER BY t RANGE BETWEEN 5 PRECEDING AND CURRENT ROW) AS x, "
     "count(*) OVER (ORDER BY t RANGE BETWEEN 6 PRECEDING AND CURRENT ROW) AS n FROM s",
     "every OVER window of one SELECT must be the same",
     "count(*) OVER (ORDER BY t RANGE BETWEEN 6 PRECEDING AND CURRENT ROW)"),
    ("SELECT k, sum(v) OVER (PARTITION BY k ORDER BY t RANGE BETWEEN UNBOUNDED PRECEDING "
     "AND CURRENT ROW) AS x FROM s", "UNBOUNDED PRECEDING is not supported",
     "sum(v) OVER (PARTITION BY k ORDER BY t RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT "
     "ROW)"),
    ("SELECT k, sum(v) OVER (ORDER BY t RANGE BETWEEN INTERVAL '5' SECOND PRECEDING AND "
     "CURRENT ROW) AS x FROM s", "has a unit but the stream's event time is a number",
     "'5'"),
    ("SELECT k FROM e [PARTITION BY k SESSION 0]",
     "expected a positive whole number after SESSION, found '0'", "0"),
    ("SELECT k FROM e [PARTITION BY kk SESSION 3]", "unknown partition column 'kk'",
     "[PARTITION BY kk SESSION 3]"),
    ("SELECT k FROM s [RANGE 5] WHERE NOT EXISTS (SELECT 1 FROM r [RANGE 5] "
     "WHERE r.k = s.k)",
     "NOT EXISTS (SELECT ...) is not supported; write the subquery's stream as a LEFT ANTI "
     "JOIN", "NOT EXISTS (SELECT 1 FROM r [RANGE 5] WHERE r.k = s.k)"),
    ("SELECT k FROM s [RANGE 5] WHERE k IN (SELECT k FROM r [RANGE 5])",
     "IN (SELECT ...) is not supported; write the subquery's stream as a LEFT SEMI JOIN",
     "k IN (SELECT k FROM r [RANGE 5])"),
    ("SELECT s.k FROM s [RANGE 5] NATURAL JOIN r [RANGE 5]",
     "NATURAL JOIN is not supported; name the columns", "NATURAL JOIN r"),
    ("SELECT DISTINCT ON (k) k, v FROM s [RANGE 5]",
     "DISTINCT ON is not supported; write SELECT DISTINCT or GROUP BY", "DISTINCT ON (k)"),
])
def test_refused_joins_say_what_to_write(engine, sql, message, fragment):
    with pytest.raises(QueryTextError) as err:
        engine.execute(f"CREATE QUERY refused AS {sql}")
    assert message in str(err.value)
    loc, text = err.value.loc, err.value.text
    assert loc is not None and text is not None
    assert text[loc.start:loc.end] == fragment


def test_an_outer_join_does_not_shed(engine):
    """Shedding drops pairs; an outer join would keep their rows as unmatched."""
    text = ("CREATE QUERY shed WITH (shedding='adaptive', throttle='0.5') AS "
            "SELECT s.k AS k, r.w AS w " + ON.format(how="LEFT"))
    with pytest.raises(QueryTextError) as err:
        engine.execute(text)
    assert "an outer, semi or anti join would then keep rows as unmatched" in str(err.value)
    loc = err.value.loc
    assert loc is not None and text[loc.start:loc.end] == "shedding='adaptive'"
    assert "shed" not in set(engine.show("QUERIES")["name"])


def test_rstream_of_an_outer_join_stops_before_its_last_change(spark):
    """RSTREAM of a relation that holds forever after its last change gives its snapshots
    before that change only (else it would repeat without end), and cycles after the end
    of input give nothing (they overflowed at +inf). Found by the property suite.

    a: x:6@12, x:0@18 read [UNBOUNDED]: [12, inf), [18, inf)
    b: y:8@12, x:0@11 read [CUT ON t BY 5]: the chunk [10, 15) is valid over [15, 20)
    full join on k:  [12, 15) (x 6 -, -)   [15, 18) (x 6 x 0), (- - y 8)
                     [18, 20) (x 6 x 0), (x 0 x 0), (- - y 8)   [20, inf) (x 6 -), (x 0 -)
    last change at 20: the snapshot at the multiples of 5 before it, 15
    """
    eng = Engine(spark=spark)
    eng.execute("""
      CREATE STREAM a (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
      CREATE STREAM b (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
      CREATE QUERY fj AS RSTREAM SELECT a.k AS ak, a.v AS av, b.k AS bk, b.v AS bv
        FROM a [UNBOUNDED] FULL JOIN b [CUT ON t BY 5] ON a.k = b.k;
    """)
    eng.push("a", [dict(k="x", v=6, t=12), dict(k="x", v=0, t=18)])
    eng.push("b", [dict(k="y", v=8, t=12), dict(k="x", v=0, t=11)])
    eng.end_input("a")
    eng.end_input("b")
    eng.run_until_idle()
    for _ in range(2):  # past the end: lo = hi = +inf
        eng.run_cycle()
    assert dict(eng.show("QUERIES")[["name", "status"]].values)["fj"] == "running"
    assert rows(eng.results("fj"), "ak", "av", "bk", "bv") == [
        ("x", 6, "x", 0, 15, 15), (None, None, "y", 8, 15, 15)]
