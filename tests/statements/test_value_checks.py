"""Type errors found when a query is created, not when its first row fails: a string
compared with a number it cannot be, a literal cast that cannot hold, a sum of strings.
"""

from __future__ import annotations

import pytest

from sparkcq.errors import AnalysisError

STREAMS = """
CREATE STREAM s (k STRING, v DOUBLE, n BIGINT, t BIGINT, at TIMESTAMP) WITH (event_time='t');
CREATE STREAM s2 (k STRING, v DOUBLE, n BIGINT, t BIGINT, at TIMESTAMP) WITH (event_time='t');
"""

REFUSED = {
    "number and a word": ("SELECT k FROM s WHERE v > 'abc'", "'abc'", "compares v, a DOUBLE"),
    "integer and a fraction": ("SELECT k FROM s WHERE n = '1.5'", "'1.5'", "a BIGINT"),
    "the literal first": ("SELECT k FROM s WHERE 'ten' <= n", "'ten'", "a BIGINT"),
    "a timestamp and a word": ("SELECT k FROM s WHERE at < 'yesterday'", "'yesterday'",
                               "a TIMESTAMP"),
    "in a join condition": ("SELECT a.k FROM s [RANGE 5] AS a JOIN s2 [RANGE 5] AS b "
                            "ON a.k = b.k AND b.n <> 'x'", "'x'", "a BIGINT"),
    "a cast of a literal": ("SELECT k, CAST('x1' AS INT) AS c FROM s", "'x1'",
                            "'x1' cannot be a INT"),
    "a sum of strings": ("SELECT n, sum(k) AS total FROM s [RANGE 10] GROUP BY n", "k",
                         "sum(k) adds numbers, and k is STRING"),
    "an average of timestamps": ("SELECT k, avg(at) AS a FROM s [RANGE 10] GROUP BY k", "at",
                                 "avg(at) adds numbers, and at is TIMESTAMP"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_at_create_with_its_place(engine, case: str) -> None:
    select, culprit, says = REFUSED[case]
    engine.execute(STREAMS)
    sql = f"CREATE QUERY q AS {select}"
    with pytest.raises(AnalysisError) as err:
        engine.execute(sql)
    e = err.value
    assert says in e.message, e.message
    assert e.loc is not None and sql[e.loc.start:e.loc.end] == culprit
    assert "q" not in engine.catalog.queries


ACCEPTED = [
    "SELECT k FROM s WHERE v > '3.5' AND n = ' 7 '",
    "SELECT k FROM s WHERE at >= '2026-12-06 10:00:00' AND k = 'abc'",
    "SELECT k, CAST('12' AS INT) + n AS c FROM s",
    "SELECT k, sum(n) AS total, max(k) AS m, count(k) AS c FROM s [RANGE 10] GROUP BY k",
]


@pytest.mark.parametrize("select", ACCEPTED)
def test_values_that_fit_are_accepted(engine, select: str) -> None:
    engine.execute(STREAMS)
    engine.execute(f"CREATE QUERY q AS {select}")
    assert "q" in engine.catalog.queries
