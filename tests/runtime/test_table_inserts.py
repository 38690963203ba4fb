"""Tables filled by INSERT INTO ... VALUES (and ``Engine.insert_rows``): each insert is the
table's next version, which a running join switches to at its watermark, as a replacement
does (test_table_replacement.py); rows pass the typed door of pushes, all or none.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from sparkcq.errors import AnalysisError, QuerySyntaxError


def table(engine, name: str) -> list[tuple]:
    return sorted(engine.catalog.tables[name].dataframe.toPandas().itertuples(index=False,
                                                                              name=None))


def test_inserted_rows_join_from_the_next_cycle(engine):
    engine.execute("""
      CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
      CREATE TABLE h (k STRING, r STRING);
      INSERT INTO h VALUES ('a', 'north');
      CREATE QUERY q AS SELECT s.k AS k, h.r AS r FROM s [RANGE 10] JOIN h ON s.k = h.k;
    """)
    engine.push("s", [{"k": "a", "v": 1, "t": 1}, {"k": "b", "v": 2, "t": 2}], watermark=5)
    engine.run_until_idle()
    assert engine.execute("INSERT INTO h (r, k) VALUES ('south', 'b'), ('east', 'c')") == 2
    engine.push("s", [{"k": "c", "v": 3, "t": 6}], watermark=8)
    engine.end_input("s")
    engine.run_until_idle()
    out = engine.results("q")
    # b's row (t=2) meets h's new row from the switch at 5 on; c's (t=6) from its start
    assert sorted(zip(out["k"], out["r"], out["_ts"], out["_te"], strict=True)) == [
        ("a", "north", 1, 11), ("b", "south", 5, 12), ("c", "east", 6, 16)]
    assert table(engine, "h") == [("a", "north"), ("b", "south"), ("c", "east")]


def test_values_are_typed_like_pushed_rows_and_refused_all_or_none(engine):
    engine.execute("CREATE TABLE users (id BIGINT, name STRING, since TIMESTAMP, vip BOOLEAN)")
    engine.execute("INSERT INTO users VALUES (1, 'ann', TIMESTAMP '2026-01-01 00:00:00', true), "
                   "(-2, NULL, '2026-02-01T00:00:00Z', false)")
    assert table(engine, "users") == [
        (-2, None, pd.Timestamp("2026-02-01"), False), (1, "ann", pd.Timestamp("2026-01-01"),
                                                        True)]
    text = "INSERT INTO users VALUES (3, 'bo', NULL, false), ('x', 'cy', NULL, true)"
    with pytest.raises(AnalysisError) as err:
        engine.execute(text)
    assert ("no rows added to table 'users': row 2, column 'id': 'x' is not a whole number "
            "(column type BIGINT)") in str(err.value)
    assert text[err.value.loc.start:err.value.loc.end] == "users"
    assert len(table(engine, "users")) == 2


@pytest.mark.parametrize(("text", "message"), [
    ("INSERT INTO users VALUES (1, upper('x'))", "UPPER('x') is not a literal"),
    ("INSERT INTO users SELECT 1 AS id, k FROM s", "a query over streams writes its results into "
                                             "a sink: CREATE QUERY name INTO sink"),
    ("INSERT INTO users VALUES (1)", "row 1 has 1 values; table 'users' takes 2 (id, name)"),
    ("INSERT INTO users (id, nick) VALUES (1, 'x')", "table 'users' has no column 'nick'"),
    ("INSERT INTO nosuch VALUES (1)", "unknown table 'nosuch'"),
    ("INSERT INTO s VALUES (1)", "'s' is a stream; push rows to it"),
], ids=["function", "select over a stream", "too few", "unknown column", "unknown table",
        "stream"])
def test_what_insert_refuses(engine, text, message):
    engine.execute("CREATE TABLE users (id BIGINT, name STRING); "
                   "CREATE STREAM s (k STRING, t BIGINT) WITH (event_time='t')")
    with pytest.raises((AnalysisError, QuerySyntaxError)) as err:
        engine.execute(text)
    assert message in str(err.value)


def test_insert_rows_from_python(engine):
    engine.execute("CREATE TABLE h (k STRING, at TIMESTAMP)")
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert engine.insert_rows("h", [{"k": "a", "at": when}, ("b", "2026-01-02")]) == 2
    assert [k for k, _ in table(engine, "h")] == ["a", "b"]


def test_insert_select_adds_the_rows_of_a_query_over_tables(engine):
    engine.execute("""
      CREATE TABLE staff (id BIGINT, name STRING, team STRING);
      CREATE TABLE teams (team STRING, floor BIGINT);
      CREATE TABLE directory (name STRING, floor BIGINT);
      INSERT INTO staff VALUES (1, 'ann', 'x'), (2, 'bo', 'y'), (3, 'cy', 'x');
      INSERT INTO teams VALUES ('x', 3), ('y', 5);
      INSERT INTO directory VALUES ('boss', 9);
    """)
    added = engine.execute("INSERT INTO directory (floor, name) SELECT t.floor, s.name "
                           "FROM staff AS s JOIN teams AS t ON s.team = t.team "
                           "WHERE s.id <> 2")
    assert added == 2
    assert table(engine, "directory") == [("ann", 3), ("boss", 9), ("cy", 3)]
