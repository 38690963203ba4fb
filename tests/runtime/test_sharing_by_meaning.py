"""Queries that say the same thing in other words share every operator: other aliases, the
sides of an equality swapped, conjuncts in another order, a derived stream for an inline
subquery. Their results are the same, and computed once.
"""

from __future__ import annotations

import re

import pytest

JOIN = ("SELECT a.k, a.v, b.v AS w FROM s [RANGE 10] AS a JOIN s2 [RANGE 10] AS b "
        "ON a.k = b.k AND a.v < b.v")
TWINS = {
    "other aliases": (
        JOIN,
        "SELECT x.k, x.v, y.v AS w FROM s [RANGE 10] AS x JOIN s2 [RANGE 10] AS y "
        "ON x.k = y.k AND x.v < y.v"),
    "an equality's sides swapped, comparison turned": (
        JOIN,
        "SELECT a.k, a.v, b.v AS w FROM s [RANGE 10] AS a JOIN s2 [RANGE 10] AS b "
        "ON b.v > a.v AND b.k = a.k"),
    "join keys in another order": (
        "SELECT a.k, a.v FROM s [RANGE 10] AS a JOIN s [RANGE 10] AS b "
        "ON a.k = b.k AND a.v = b.v",
        "SELECT a.k, a.v FROM s [RANGE 10] AS a JOIN s [RANGE 10] AS b "
        "ON b.v = a.v AND a.k = b.k"),
    "a join condition in WHERE": (
        JOIN,
        "SELECT a.k, a.v, b.v AS w FROM s [RANGE 10] AS a, s2 [RANGE 10] AS b "
        "WHERE a.v < b.v AND b.k = a.k"),
    "conjuncts reordered": (
        "SELECT k, v FROM s WHERE v > 1 AND (k = 'a' OR k = 'c')",
        "SELECT k, v FROM s WHERE (k = 'c' OR k = 'a') AND 1 < v"),
    "an aggregate over a reordered filter": (
        "SELECT k, sum(v) AS total, count(*) AS n FROM s [RANGE 10] WHERE v > 1 AND v < 9 "
        "GROUP BY k HAVING count(*) > 1",
        "SELECT k, sum(v) AS total, count(*) AS n FROM s [RANGE 10] AS e WHERE 9 > e.v "
        "AND e.v > 1 GROUP BY k HAVING 1 < count(*)"),
    "a derived stream for an inline subquery": (
        "SELECT k, count(*) AS n FROM big GROUP BY k",
        "SELECT k, count(*) AS n FROM (SELECT k, v, t FROM s WHERE v > 1) AS big GROUP BY k"),
}

EVENTS = [("a", 1.0, 1), ("b", 4.0, 2), ("a", 3.0, 5), ("c", 2.0, 6), ("a", 7.0, 9),
          ("b", 1.0, 12), ("a", 5.0, 14), ("c", 8.0, 15), ("a", 2.0, 18)]


def nodes(plan: str) -> list[str]:
    return [line for line in plan.splitlines() if re.match(r"#\d+ ", line)]


@pytest.mark.parametrize("case", list(TWINS))
def test_twins_share_every_operator_and_give_the_same_results(engine, case: str) -> None:
    first, twin = TWINS[case]
    engine.execute("""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE STREAM s2 (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE STREAM big AS SELECT k, v, t FROM s WHERE v > 1;
    """)
    engine.execute(f"CREATE QUERY one AS {first}")
    alone = nodes(engine.explain_global())
    engine.execute(f"CREATE QUERY two AS {twin}")
    both = nodes(engine.explain_global())
    assert len(both) == len(alone), "\n".join(both)
    for line in both:
        assert "refs=2" in line and "queries=[one, two]" in line, line
    for stream in ("s", "s2"):
        engine.push(stream, [{"k": k, "v": v + (stream == "s2"), "t": t}
                             for k, v, t in EVENTS], watermark=20)
        engine.end_input(stream)
    engine.run_until_idle()
    one, two = engine.results("one"), engine.results("two")
    assert len(one) > 0
    columns = list(one.columns)
    assert list(two.columns) == columns
    assert (one.sort_values(columns).reset_index(drop=True)
            .equals(two.sort_values(columns).reset_index(drop=True)))
