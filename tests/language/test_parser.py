"""The streaming SQL dialect: statements, window clauses and syntax errors with places."""

from __future__ import annotations

import pytest

from sparkcq.errors import QuerySyntaxError
from sparkcq.language.sql.parser import parse_script, parse_statement
from sparkcq.language.sql.statements import (
    CreateQuery,
    CreateStream,
    CreateStreamAs,
    CreateTable,
    Drop,
    Explain,
    OutputForm,
    Refresh,
    Show,
)
from sparkcq.model.time import Duration
from sparkcq.model.windows import CutWindow, NowWindow, RangeWindow, RowsWindow, UnboundedWindow


def window_of(sql: str):
    stmt = parse_statement(sql)
    assert isinstance(stmt, CreateQuery)
    (win,) = stmt.select.windows.values()
    return win.spec


@pytest.mark.parametrize(
    ("clause", "spec"),
    [
        ("[RANGE 10]", RangeWindow(Duration(10))),
        ("[RANGE 60 SECONDS]", RangeWindow(Duration(60, "SECONDS"))),
        ("[RANGE 1 MINUTE SLIDE 10 SECONDS]",
         RangeWindow(Duration(1, "MINUTE"), Duration(10, "SECONDS"))),
        ("[NOW]", NowWindow()),
        ("[UNBOUNDED]", UnboundedWindow()),
        ("[RANGE UNBOUNDED]", UnboundedWindow()),
        ("[ROWS 5]", RowsWindow(5)),
        ("[PARTITION BY k, j ROWS 2]", RowsWindow(2, ("k", "j"))),
        ("[CUT ON t BY 60 SECONDS]", CutWindow(Duration(60, "SECONDS"), "t")),
        ("[CUT ON t BY 10 WINDOW 3 CHUNKS]", CutWindow(Duration(10), "t", 3)),
    ],
    ids=lambda x: str(x),
)
def test_window_clauses(clause, spec):
    assert window_of(f"CREATE QUERY q AS SELECT * FROM s {clause} AS x") == spec


def test_stream_table_function_is_an_alias_of_the_window_clause():
    a = window_of("CREATE QUERY q AS SELECT * FROM STREAM(packets, 'CUT ON t BY 60 SECS')")
    assert a == CutWindow(Duration(60, "SECS"), "t")
    stmt = parse_statement("CREATE QUERY q AS SELECT * FROM STREAM(packets, 'CUT ON t BY 60 SECS')")
    # sqlglot sees a plain table in FROM, the capture function's window kept beside it
    assert stmt.select.expression.sql() == "SELECT * FROM packets"
    assert [w.spec for w in stmt.select.windows.values()] == [a]


def test_window_text_is_blanked_so_offsets_stay_put():
    sql = "CREATE QUERY q AS SELECT k FROM s [RANGE 10] WHERE v > 1"
    stmt = parse_statement(sql)
    body = stmt.select.text
    assert len(body) == len(sql) - stmt.select.offset
    assert "[" not in body and body.endswith("WHERE v > 1")


def test_script_with_every_statement_kind():
    stmts = parse_script(
        """
        CREATE STREAM s (k STRING, p STRUCT<x: DOUBLE, y: DOUBLE>, t TIMESTAMP)
          WITH (event_time='t', lateness='5 SECONDS');
        CREATE QUERY q INTO console AS ISTREAM SELECT k FROM s [NOW];
        CREATE STREAM d AS SELECT k FROM s WHERE k <> 'x';
        DROP QUERY q; EXPLAIN GLOBAL; EXPLAIN q; SHOW STREAMS;
        """
    )
    kinds = [type(s) for s in stmts]
    assert kinds == [CreateStream, CreateQuery, CreateStreamAs, Drop, Explain, Explain, Show]
    create = stmts[0]
    assert [c.name for c in create.columns] == ["k", "p", "t"]
    assert create.columns[1].type_sql == "STRUCT<x: DOUBLE, y: DOUBLE>"
    assert create.options == {"event_time": "t", "lateness": "5 SECONDS"}
    assert stmts[1].options["sink"] == "console"
    assert stmts[1].select.form is OutputForm.ISTREAM
    assert stmts[4].glob and stmts[5].name == "q"


@pytest.mark.parametrize(
    ("sql", "message", "line", "col"),
    [
        ("CREATE QUERY q AS SELECT k FROM s [RANGE x]", "positive whole number after RANGE", 1, 42),
        ("CREATE QUERY q AS\nSELECT k FROM s [ROWS 3", "not closed with ']'", 2, 17),
        ("CREATE STREAM s (k)", "expected a type for column 'k'", 1, 19),
        ("FROB s", "expected CREATE, DROP, REFRESH, INSERT, EXPLAIN, SHOW or SELECT", 1, 1),
        ("CREATE QUERY q AS SELECT k FROM s [SPAN 10]", "syntax error", 1, 41),
        ("CREATE QUERY q AS SELECT k FROM s\n  WHERE (v > ", "syntax error", 2, 12),
        ("SHOW FOO", "STREAMS or TABLES or QUERIES", 1, 6),
        ("REFRESH hosts", "expected TABLE, found 'hosts'", 1, 9),
        ("REFRESH TABLE hosts now", "unexpected text after the end", 1, 21),
    ],
)
def test_syntax_errors_name_line_and_column(sql, message, line, col):
    with pytest.raises(QuerySyntaxError) as err:
        parse_script(sql)
    assert message in str(err.value)
    assert (err.value.loc.line, err.value.loc.col) == (line, col)
    assert "^" in str(err.value)


def test_refresh_table_and_a_table_that_takes_its_columns_from_the_database():
    refresh = parse_statement("REFRESH TABLE hosts")
    assert isinstance(refresh, Refresh) and refresh.name == "hosts"
    table = parse_statement("CREATE TABLE hosts WITH (format='postgres', database='inv', "
                            "table='hosts')")
    assert isinstance(table, CreateTable) and table.columns == ()
    assert table.options == {"format": "postgres", "database": "inv", "table": "hosts"}
