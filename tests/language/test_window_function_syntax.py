"""Flink's window table functions and Spark's ``window()`` call, as the parser reads them:
the window each one means, the text left for sqlglot, and the error for each form that is
not supported, naming what to write."""

from __future__ import annotations

import pytest

from sparkcq.errors import QuerySyntaxError
from sparkcq.language.sql.parser import parse_statement
from sparkcq.language.sql.statements import CreateQuery
from sparkcq.model.time import Duration
from sparkcq.model.windows import AssignedKind, AssignedWindow, BoundsNaming

SECONDS = "SECONDS"


def select_of(sql: str):
    stmt = parse_statement(sql)
    assert isinstance(stmt, CreateQuery)
    return stmt.select


@pytest.mark.parametrize(
    ("table_function", "window"),
    [
        ("TABLE(TUMBLE(TABLE bids, DESCRIPTOR(t), INTERVAL '10' SECONDS))",
         AssignedWindow(AssignedKind.TUMBLE, "t", Duration(10, SECONDS), Duration(10, SECONDS),
                        BoundsNaming.FLINK)),
        ("TABLE(HOP(TABLE bids, DESCRIPTOR(t), INTERVAL '5' SECOND, INTERVAL '1' MINUTE))",
         AssignedWindow(AssignedKind.HOP, "t", Duration(1, "MINUTE"), Duration(5, "SECOND"),
                        BoundsNaming.FLINK)),
        ("TABLE(HOP(DATA => TABLE bids, TIMECOL => DESCRIPTOR(t), SIZE => INTERVAL '10 "
         "SECONDS', SLIDE => INTERVAL '5' SECONDS))",
         AssignedWindow(AssignedKind.HOP, "t", Duration(10, SECONDS), Duration(5, SECONDS),
                        BoundsNaming.FLINK)),
        ("table(cumulate(table bids, descriptor(t), 2, 10))",
         AssignedWindow(AssignedKind.CUMULATE, "t", Duration(10), Duration(2),
                        BoundsNaming.FLINK)),
    ],
    ids=["tumble", "hop by position", "hop by name", "cumulate in numbers, lower case"],
)
def test_a_window_table_function_leaves_the_stream_and_its_window(table_function, window):
    sql = (f"CREATE QUERY q AS SELECT window_start, count(*) FROM {table_function} AS b "
           "GROUP BY window_start, window_end")
    select = select_of(sql)
    ((end, found),) = select.windows.items()
    assert found.spec == window
    # the stream's name where the function began, blanks after it: offsets stay the user's
    start = sql.index(table_function) - select.offset
    assert select.text[start:end + 1] == "bids"
    assert select.text[end + 1:start + len(table_function)].strip() == ""
    assert len(select.text) == len(sql) - select.offset
    assert select.expression.args["from_"].this.alias == "b"


@pytest.mark.parametrize(
    ("table_function", "partition"),
    [("TABLE(SESSION(TABLE s, DESCRIPTOR(t), INTERVAL '5' MINUTES))", ()),
     ("TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(t), INTERVAL '5' MINUTES))", ("k",)),
     ("TABLE(SESSION(DATA => TABLE s PARTITION BY (k, j), TIMECOL => DESCRIPTOR(t), "
      "GAP => INTERVAL '5' MINUTES))", ("k", "j"))],
    ids=["global", "partitioned", "by name, two columns"])
def test_a_session_table_function_keeps_its_partition(table_function, partition):
    select = select_of(f"CREATE QUERY q AS SELECT count(*) FROM {table_function} "
                       "GROUP BY window_start, window_end")
    ((_, found),) = select.windows.items()
    gap = Duration(5, "MINUTES")
    assert found.spec == AssignedWindow(AssignedKind.SESSION, "t", gap, gap,
                                        BoundsNaming.FLINK, partition)


@pytest.mark.parametrize(
    ("call", "window"),
    [
        ("window(ts, '10 seconds')",
         AssignedWindow(AssignedKind.TUMBLE, "ts", Duration(10, SECONDS), Duration(10, SECONDS),
                        BoundsNaming.SPARK)),
        ('WINDOW(ts, "1 minute", "20 seconds")',
         AssignedWindow(AssignedKind.HOP, "ts", Duration(1, "MINUTE"), Duration(20, SECONDS),
                        BoundsNaming.SPARK)),
        ("session_window(ts, '30 seconds')",
         AssignedWindow(AssignedKind.SESSION, "ts", Duration(30, SECONDS),
                        Duration(30, SECONDS), BoundsNaming.SPARK)),
    ],
    ids=["tumbling", "sliding, double quotes", "session"],
)
def test_spark_window_call_becomes_a_column_of_its_length(call, window):
    sql = f"CREATE QUERY q AS SELECT window.start, k, count(*) FROM s GROUP BY {call}, k"
    select = select_of(sql)
    ((column, found),) = select.window_calls.items()
    assert found.spec == window
    at = sql.index(call) - select.offset
    assert select.text[at:at + len(call)].lower() == column
    assert select.text.endswith(", k")


@pytest.mark.parametrize(
    ("sql", "message", "underlined"),
    [
        ("SELECT count(*) FROM s GROUP BY TUMBLE(t, INTERVAL '10' SECOND)",
         "write the window table function: FROM TABLE(TUMBLE(", "TUMBLE"),
        ("SELECT TUMBLE_START(t, INTERVAL '10' SECOND) FROM s",
         "Flink's group window function TUMBLE_START(...) is not supported", "TUMBLE_START"),
        ("SELECT count(*) FROM s GROUP BY SESSION(t, INTERVAL '10' SECOND)",
         "FROM TABLE(TUMBLE(TABLE s", "SESSION"),
        ("SELECT count(*) FROM s GROUP BY session_window(t, '5 minutes', '1 minute')",
         "session_window(time column, gap) takes two arguments", "'1 minute'"),
        ("SELECT count(*) FROM TABLE(SESSION(TABLE s ORDER BY k, DESCRIPTOR(t), 5))",
         "(then PARTITION BY columns)", "ORDER BY"),
        ("SELECT count(*) FROM TABLE(SLIDE(TABLE s, DESCRIPTOR(t), 5))",
         "unknown window table function 'SLIDE'; write TABLE(TUMBLE(", "SLIDE"),
        ("SELECT count(*) FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t)))",
         "TUMBLE needs its SIZE argument", ")"),
        ("SELECT count(*) FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 10, INTERVAL '1' HOUR))",
         "an offset is not supported", "INTERVAL"),
        ("SELECT count(*) FROM TABLE(HOP(TABLE s, DESCRIPTOR(t), SIZE => 10, STRIDE => 5))",
         "HOP has no argument STRIDE; its arguments: DATA, TIMECOL, SLIDE, SIZE", "STRIDE"),
        ("SELECT count(*) FROM TABLE(TUMBLE(s, DESCRIPTOR(t), 10))",
         "expected TABLE and the stream's name", "s"),
        ("SELECT count(*) FROM TABLE(TUMBLE(TABLE s, t, 10))",
         "expected DESCRIPTOR(time column)", "t"),
        ("SELECT count(*) FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), INTERVAL '10' FORTNIGHTS))",
         "unknown time unit 'FORTNIGHTS'", "FORTNIGHTS"),
        ("SELECT count(*) FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), INTERVAL '1.5' SECONDS))",
         "positive whole number of time units, found '1.5'", "'1.5'"),
        ("SELECT count(*) FROM s GROUP BY window(t, '10 seconds', '5 seconds', '1 second')",
         "a start time is not supported", "'1 second'"),
        ("SELECT count(*) FROM s GROUP BY window(t, 'ten seconds')",
         "positive whole number of time units, found 'ten'", "'ten seconds'"),
    ],
    ids=["flink group window", "its start function", "flink session group window",
         "spark session gap", "flink session partition", "unknown table function",
         "missing size", "offset", "unknown argument name", "no TABLE", "no DESCRIPTOR",
         "unit", "fraction", "spark start time", "spark duration"],
)
def test_forms_not_supported_say_what_to_write_where(sql, message, underlined):
    text = f"CREATE QUERY q AS {sql}"
    with pytest.raises(QuerySyntaxError) as err:
        parse_statement(text)
    assert message in str(err.value)
    loc = err.value.loc
    assert text[loc.start:loc.end] == underlined
