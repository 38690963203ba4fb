"""Errors name what is wrong and where; bad data goes to the dead letters; nothing stops."""

from __future__ import annotations

import pytest

from sparkcq.errors import AnalysisError, CatalogError


@pytest.fixture
def eng(engine):
    engine.execute("""
        CREATE STREAM sensors (sector STRING, speed DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE TABLE roads (sector STRING, name STRING);
    """)
    return engine


@pytest.mark.parametrize(
    ("sql", "fragments", "col"),
    [
        ("SELECT spedd FROM sensors", ["unknown column 'spedd'", "columns: sector, speed, t"], 8),
        ("SELECT speed FROM sensor", ["unknown stream or table 'sensor'", "sensors"], 19),
        ("SELECT * FROM roads [RANGE 10]", ["'roads' is a table", "only to streams"], 21),
        ("SELECT sector, speed FROM sensors [RANGE 10] GROUP BY sector",
         ["column 'speed' must appear in GROUP BY"], 16),
        ("SELECT sector FROM sensors WHERE speed", ["WHERE condition must be BOOLEAN"], 34),
        ("SELECT median(speed) AS m FROM sensors [RANGE 10]",
         ["aggregate function", "not supported"], 8),
        ("SELECT sector FROM sensors [RANGE 10 SECONDS]",
         ["has a unit but the stream's event time is a number"], 28),
        ("SELECT x.speed FROM sensors AS s", ["unknown stream or alias 'x'"], 8),
        ("SELECT sector FROM sensors WHERE sum(speed) > 1", ["not allowed here"], 34),
        ("SELECT sector, speed + 'abc' AS z FROM sensors", [], None),
        # CUT ON names a column: an unknown one, or one chunks are not cut on, is refused
        # (it was silently ignored: chunks were cut on t)
        ("SELECT sector, count(*) AS n FROM sensors [CUT ON nosuchcol BY 60] GROUP BY sector",
         ["unknown column 'nosuchcol' in CUT ON", "columns: sector, speed, t"], 43),
        ("SELECT sector, count(*) AS n FROM sensors [CUT ON speed BY 60] GROUP BY sector",
         ["CUT ON 'speed'", "event time 't'", "not supported yet"], 43),
        ("SELECT sector, count(*) AS n FROM sensors [RANGE 5] GROUP BY 3",
         ["GROUP BY 3: the SELECT list has 2 items"], 62),
        ("SELECT sector, count(*) AS n FROM sensors [RANGE 5] GROUP BY sector, n",
         ["GROUP BY n names an aggregate"], 70),
    ],
)
def test_analysis_errors_point_at_the_culprit(eng, sql, fragments, col):
    full = f"CREATE QUERY q AS {sql}"
    if not fragments:  # Spark accepts it (implicit cast), so must we
        eng.execute(full)
        return
    with pytest.raises(AnalysisError) as err:
        eng.execute(full)
    for fragment in fragments:
        assert fragment in str(err.value)
    assert err.value.loc.line == 1
    assert err.value.loc.col == col + len("CREATE QUERY q AS ")


def test_type_mismatch_names_the_types(eng):
    with pytest.raises(AnalysisError) as err:
        eng.execute("CREATE QUERY q AS SELECT sector FROM sensors WHERE speed > array(1)")
    assert "DOUBLE" in str(err.value).upper() and "ARRAY" in str(err.value).upper()


def test_catalog_errors(eng):
    with pytest.raises(CatalogError, match="already exists"):
        eng.execute("CREATE STREAM sensors (a BIGINT) WITH (event_time='a')")
    with pytest.raises(CatalogError, match="unknown query 'nope'"):
        eng.explain("nope")
    eng.execute("CREATE QUERY q AS SELECT sector FROM sensors")
    with pytest.raises(CatalogError, match="used by q"):
        eng.execute("DROP STREAM sensors")


def test_pushed_row_with_an_unknown_column_is_refused_with_the_schema(eng):
    receipt = eng.push("sensors", [{"sector": "a", "speed": 1.0, "tt": 3},
                                   {"sector": "b", "speed": 2.0, "t": 4}])
    assert receipt.accepted == 1
    [error] = receipt.rejected
    assert error.describe() == "row 0, column 'tt': unknown column; 'sensors' has sector, speed, t"


def test_late_and_null_time_events_go_to_dead_letters_and_queries_go_on(eng):
    eng.execute("CREATE QUERY q AS SELECT sector, speed FROM sensors")
    eng.push("sensors", [{"sector": "a", "speed": 1.0, "t": 10}], watermark=10)
    eng.run_until_idle()
    eng.push("sensors", [{"sector": "b", "speed": 2.0, "t": 3},
                         {"sector": "c", "speed": 3.0, "t": None},
                         {"sector": "d", "speed": 4.0, "t": 12}], end=True)
    eng.run_until_idle()
    dead = eng.dead_letters("sensors").sort_values("sector")
    assert list(dead["sector"]) == ["b", "c"]
    assert "late: event time 3 is before the watermark 10" in dead["_reason"].iloc[0]
    assert "null event time" in dead["_reason"].iloc[1]
    assert eng.metrics()["dead_letters"]["sensors"] == 2
    assert sorted(eng.results("q")["sector"]) == ["a", "d"]


def test_explain_shows_plans_and_timestamp_windows_in_units(engine):
    engine.execute("""
        CREATE STREAM r (sensor STRING, value DOUBLE, t TIMESTAMP) WITH (event_time='t');
        CREATE QUERY a AS SELECT sensor, avg(value) AS m FROM r [RANGE 1 MINUTE SLIDE 10 SECONDS]
          GROUP BY sensor;
        CREATE QUERY b AS SELECT sensor, value FROM r WHERE value > 3;
    """)
    plan = engine.explain("a")
    assert "Window [RANGE 1 MINUTE SLIDE 10 SECONDS]" in plan
    assert "StreamScan r  [stream]  (shared with b)" in plan
    assert "refs=2" in engine.explain_global()
    # the aggregate runs from panes; its label names the window it replaces
    (sliced,) = [k for k in engine.metrics()["state_rows"] if k.startswith("#1 SlicedAggregate")]
    assert sliced.endswith("<- Window [RANGE 1 MINUTE SLIDE 10 SECONDS]")


def test_group_by_a_select_alias_or_an_ordinal(engine):
    """GROUP BY reads a SELECT alias or an ordinal as Spark SQL does (the published
    per-minute query groups by ``minute``, an alias); an input column of the same name wins.
    """
    engine.execute("""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY by_alias AS RSTREAM SELECT floor(t / 10) AS minute, sum(v) AS s
            FROM s [CUT ON t BY 10] GROUP BY minute;
        CREATE QUERY by_ordinal AS RSTREAM SELECT upper(k) AS kk, count(*) AS n
            FROM s [CUT ON t BY 10] GROUP BY 1;
        CREATE QUERY column_wins AS RSTREAM SELECT k AS v, count(*) AS n
            FROM s [CUT ON t BY 10] GROUP BY k;
    """)
    engine.push("s", [{"k": "a", "v": 1.0, "t": 1}, {"k": "b", "v": 2.0, "t": 3},
                      {"k": "a", "v": 4.0, "t": 12}], end=True)
    engine.run_until_idle()

    def rows(query):
        return sorted(engine.results(query).drop(columns=["_te"]).itertuples(index=False,
                                                                             name=None))

    assert rows("by_alias") == [(0, 3.0, 10), (1, 4.0, 20)]
    assert rows("by_ordinal") == [("A", 1, 10), ("A", 1, 20), ("B", 1, 10)]
    assert rows("column_wins") == [("a", 1, 10), ("a", 1, 20), ("b", 1, 10)]
