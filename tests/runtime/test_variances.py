"""Variances and standard deviations: aggregates made of counts and sums (one registry entry
each, ``sparkcq/model/aggregate_functions.py``), exact on every snapshot, on every path.

Input (stream s, numeric time): a:1@1, a:2@2, a:4@3, then nothing until the end.
Worked out by hand over ``[RANGE 10]``:

    [1, 2)   {1}        var_samp NULL, stddev_samp NULL, var_pop 0,    stddev_pop 0
    [2, 3)   {1, 2}     0.5            sqrt(0.5)         0.25          0.5
    [3, 11)  {1, 2, 4}  7/3            sqrt(7/3)         14/9          sqrt(14/9)
    [11, 12) {2, 4}     2              sqrt(2)           1             1
    [12, 13) {4}        NULL           NULL              0             0
"""

from __future__ import annotations

import math

import pytest

from sparkcq.errors import AnalysisError

STREAM = "CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')"
CALLS = "var_samp(v) AS vs, stddev_samp(v) AS ss, var_pop(v) AS vp, stddev_pop(v) AS sp"
EXPECTED = [
    (None, None, 0.0, 0.0, 1, 2),
    (0.5, math.sqrt(0.5), 0.25, 0.5, 2, 3),
    (7 / 3, math.sqrt(7 / 3), 14 / 9, math.sqrt(14 / 9), 3, 11),
    (2.0, math.sqrt(2), 1.0, 1.0, 11, 12),
    (None, None, 0.0, 0.0, 12, 13),
]


def run(engine, query: str, events: list[tuple[str, int, int]]) -> list[tuple]:
    engine.execute(STREAM)
    engine.execute(f"CREATE QUERY q AS {query}")
    engine.push("s", [{"k": k, "v": v, "t": t} for k, v, t in events], watermark=4)
    engine.run_until_idle()
    engine.end_input("s")
    engine.run_until_idle()
    out = engine.results("q").sort_values("_ts")
    return [tuple(None if x is None or (isinstance(x, float) and math.isnan(x)) else x
                  for x in row) for row in out.drop(columns=["k"]).itertuples(index=False)]


def close(got: list[tuple], want: list[tuple]) -> bool:
    return len(got) == len(want) and all(
        all(a == b if not isinstance(b, float) else a is not None and abs(a - b) < 1e-12
            for a, b in zip(g, w, strict=True)) for g, w in zip(got, want, strict=True))


def test_on_every_snapshot_of_a_range_window(engine) -> None:
    got = run(engine, f"SELECT k, {CALLS} FROM s [RANGE 10] GROUP BY k",
              [("a", 1, 1), ("a", 2, 2), ("a", 4, 3)])
    assert close(got, EXPECTED), got


def test_from_panes_of_a_chunk(engine) -> None:
    """``[CUT ON t BY 10]``: the chunk [0, 10) holds 1, 2, 4, valid over [10, 20)."""
    got = run(engine, f"SELECT k, {CALLS} FROM s [CUT ON t BY 10] GROUP BY k",
              [("a", 1, 1), ("a", 2, 2), ("a", 4, 3)])
    assert close(got, [EXPECTED[2][:4] + (10, 20)]), got
    assert "SlicedAggregate" in engine.explain_global()


def test_a_large_mean_does_not_cancel_the_spread(engine) -> None:
    """Three values near 10^9: the sum of squares in DOUBLE would give a variance of 0."""
    base = 10 ** 9
    got = run(engine, "SELECT k, var_samp(v) AS vs FROM s [CUT ON t BY 10] GROUP BY k",
              [("a", base + 1, 1), ("a", base + 2, 2), ("a", base + 4, 3)])
    assert close(got, [(7 / 3, 10, 20)]), got


def test_the_two_languages_share_the_partials(engine) -> None:
    engine.execute(STREAM)
    engine.execute("CREATE QUERY sql AS SELECT k, var_samp(v) AS vs FROM s [RANGE 10] "
                   "GROUP BY k")
    engine.create_query("apas", "where window.range($s, 10) select o[k = $s.k, "
                        "vs = agg.var_samp($s.v)];\nselect [$o[T]]", language="apas")
    aggregates = [line for line in engine.explain_global().splitlines()
                  if "Aggregate" in line]
    assert aggregates and all("refs=2" in line for line in aggregates), aggregates


def test_a_string_is_refused_at_its_place(engine) -> None:
    engine.execute(STREAM)
    sql = "CREATE QUERY q AS SELECT var_samp(k) AS x FROM s [RANGE 10]"
    with pytest.raises(AnalysisError, match="var_samp\\(k\\) takes a number, found STRING") as e:
        engine.execute(sql)
    assert e.value.loc is not None and sql[e.value.loc.start:e.value.loc.end] == "k"
