"""Typed ingest at the door: bad rows are refused alone, the rest goes on; a cycle takes many
pushes, each judged late or on time as if it were a cycle of its own; a full queue refuses."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    BooleanType,
    DateType,
    DoubleType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sparkcq import Engine
from sparkcq.errors import AnalysisError, BackpressureError, SourceError
from sparkcq.io.ingest import conform, conform_exact
from sparkcq.io.sources import IngestLimits

SCHEMA = StructType([StructField("k", StringType()), StructField("n", IntegerType()),
                     StructField("x", DoubleType()), StructField("b", BooleanType()),
                     StructField("at", TimestampType()), StructField("d", DateType())])


@pytest.mark.parametrize(("value", "column", "want"), [
    (True, "n", 1), (3.0, "n", 3), (" 42 ", "n", 42), (2**31 - 1, "n", 2**31 - 1),
    (7, "x", 7.0), ("2.5", "x", 2.5), (False, "x", 0.0),
    (12, "k", "12"), (True, "k", "true"),
    ("TRUE", "b", True), (0, "b", False),
    ("2026-01-31T12:00:00", "at", dt.datetime(2026, 1, 31, 12, tzinfo=dt.UTC)),
    ("2026-01-31T13:00:00+01:00", "at", dt.datetime(2026, 1, 31, 12, tzinfo=dt.UTC)),
    ("2026-01-31", "d", dt.date(2026, 1, 31)), (None, "n", None),
], ids=repr)
def test_values_convert_as_the_implicit_casts_allow(value, column, want):
    fit = conform([{column: value}], SCHEMA, "s")
    assert fit.errors == ()
    assert fit.table.column(column).to_pylist() == [want]


@pytest.mark.parametrize(("value", "column", "reason"), [
    ("abc", "n", "'abc' is not a whole number (column type INT)"),
    (3.5, "n", "3.5 is not a whole number"),
    (2**31, "n", "out of range for a 32-bit integer"),
    ([1], "x", "[1] is not a number"),
    ("yes", "b", "'yes' is not a boolean"),
    (2, "b", "2 is not a boolean"),
    (1700000000, "at", "is not a timestamp; give ISO-8601 text such as '2026-01-31T12:00:00Z', "
                       "or declare the stream's epoch_unit"),

    ("31/01/2026", "d", "is not a date"),
], ids=repr)
def test_values_that_do_not_fit_are_refused_with_column_and_reason(value, column, reason):
    fit = conform([{"k": "ok"}, {"k": "bad", column: value}, ("last", 1, 1.0, True, None, None)],
                  SCHEMA, "s")
    assert fit.table.column("k").to_pylist() == ["ok", "last"]
    [error] = fit.errors
    assert (error.index, error.column) == (1, column)
    assert reason in error.reason
    assert '"bad"' in error.raw


_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**40, 2**40), st.integers(-5, 5),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([2.0, -0.0, 1e20, 0.5]),
    st.text(max_size=4), st.sampled_from(["42", " 7 ", "true", "2026-01-31", "1.5",
                                          "2026-01-31T12:00:00Z", "2026-01-31 12:00:00",
                                          "2026-01-31T13:00:00+01:00", "2026-13-01", "nan"]),
    st.datetimes(min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(2100, 1, 1),
                 timezones=st.sampled_from([None, dt.UTC])),
    st.dates(min_value=dt.date(1970, 1, 2), max_value=dt.date(2100, 1, 1)))


_ROWS = st.fixed_dictionaries({}, optional={  # mostly values of the column's type, some not
    "k": st.one_of(st.text(max_size=3), _VALUES),
    "n": st.one_of(st.integers(-2**33, 2**33), st.booleans(), _VALUES),
    "x": st.one_of(st.floats(), st.integers(-10, 10), _VALUES),
    "b": st.one_of(st.booleans(), _VALUES),
    "at": st.one_of(st.sampled_from(["2026-01-31T12:00:00Z", "2026-01-31 12:00:00",
                                     "2026-01-31T13:00:00+01:00", "2026-01-31"]),
                    st.datetimes(min_value=dt.datetime(1970, 1, 2),
                                 max_value=dt.datetime(2100, 1, 1),
                                 timezones=st.sampled_from([None, dt.UTC])), _VALUES),
    "d": st.one_of(st.dates(min_value=dt.date(1970, 1, 2), max_value=dt.date(2100, 1, 1)),
                   st.sampled_from(["2026-01-31", "2026-1-31"]), _VALUES)})


@settings(max_examples=400)
@given(st.lists(_ROWS, min_size=1, max_size=4))
def test_rows_taken_at_once_are_the_rows_checked_one_by_one(rows):
    """The Arrow fast path (``conform_exact``) either gives exactly what the value-by-value
    check gives, or declines; it never accepts a row the check would refuse or convert.
    """
    exact = conform_exact(rows, SCHEMA, conform([], SCHEMA, "s").table.schema)
    if exact is None:
        return
    slow = conform(rows, SCHEMA, "s", exact_first=False)
    assert slow.errors == () and exact.table.equals(slow.table), (rows, slow.errors)


def test_rows_that_are_not_objects_or_name_unknown_columns_are_refused():
    fit = conform([{"k": "a", "K2": 1}, 5, {"K": "b"}], SCHEMA, "s")
    assert fit.table.column("k").to_pylist() == ["b"]  # column names ignore case
    assert [(e.index, e.column) for e in fit.errors] == [(0, "K2"), (1, None)]
    assert "unknown column; 's' has k, n, x, b, at, d" in fit.errors[0].reason


def sums(engine: Engine, query: str) -> list[list]:
    out = engine.results(query)
    return out.sort_values(["_ts", "k"])[["k", "total", "_ts", "_te"]].values.tolist()


def test_bad_row_is_refused_alone_and_the_push_goes_on(engine):
    engine.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    engine.execute("CREATE QUERY q AS SELECT k, sum(v) AS total FROM s [RANGE 5] GROUP BY k")
    receipt = engine.push("s", [{"k": "a", "v": 1, "t": 1}, {"k": "a", "v": 2, "t": "abc"},
                                {"k": "b", "v": "3", "t": 2}], watermark=3)
    assert receipt.accepted == 2
    assert [(e.index, e.column) for e in receipt.rejected] == [(1, "t")]
    engine.end_input("s")
    engine.run_until_idle()
    assert sums(engine, "q") == [["a", 1, 1, 6], ["b", 3, 2, 7]]
    dead = engine.dead_letters("s")
    assert dead["_reason"].tolist() == [
        "row 1, column 't': 'abc' is not a whole number (column type BIGINT)"]
    assert dead["_raw"].tolist() == ['{"k": "a", "v": 2, "t": "abc"}']
    assert engine.metrics()["dead_letters"] == {"s": 1}


@pytest.mark.parametrize(("value", "reason"), [
    ({"a": 1}, "an object is not text; send its JSON as a string, or declare the column "
               "STRUCT<...>, ARRAY<...> or MAP<...> (column type STRING)"),
    (["a"], "a list is not text")], ids=["object", "list"])
def test_a_string_column_takes_scalars_only(value, reason):
    fit = conform([{"k": value, "n": 1}], SCHEMA, "s")
    [error] = fit.errors
    assert error.column == "k" and reason in error.reason


@pytest.mark.parametrize(("unit", "value"), [("milliseconds", 1_769_860_800_000),
                                             ("seconds", 1_769_860_800),
                                             ("microseconds", 1_769_860_800_000_000)])
def test_a_number_for_a_timestamp_counts_the_streams_epoch_unit(engine, unit, value):
    engine.execute("CREATE STREAM s (k STRING, t TIMESTAMP) "
                   f"WITH (event_time='t', epoch_unit='{unit}')")
    engine.execute("CREATE QUERY q AS SELECT k, t FROM s")
    receipt = engine.push("s", [{"k": "a", "t": value}, {"k": "b", "t": 0.25}])
    assert receipt.accepted == 1 + (unit != "microseconds")
    if unit == "microseconds":
        assert "0.25 is not a whole number of microseconds" in receipt.rejected[0].reason
    engine.end_input("s")
    engine.run_until_idle()
    out = engine.results("q")
    assert out[out["k"] == "a"]["t"].tolist() == [pd.Timestamp("2026-01-31T12:00:00Z")]


def test_an_unknown_epoch_unit_is_refused_at_its_place(engine):
    text = "CREATE STREAM s (t TIMESTAMP) WITH (event_time='t', epoch_unit='ms')"
    with pytest.raises(AnalysisError) as err:
        engine.execute(text)
    assert "epoch_unit 'ms': expected one of 'seconds', 'milliseconds', 'microseconds'" in str(
        err.value)
    assert text[err.value.loc.start:err.value.loc.end] == "ms"


def test_late_rows_are_told_at_once_and_not_counted_accepted(engine):
    engine.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    engine.push("s", [{"k": "a", "v": 1, "t": 10}], watermark=10)
    receipt = engine.push("s", [{"k": "b", "v": 2, "t": 3}, {"k": "c", "v": 3, "t": 11},
                                {"k": "d", "v": 4, "t": 9}])
    assert (receipt.accepted, receipt.late_rows) == (1, 2)
    assert [(e.index, e.column, e.reason) for e in receipt.late] == [
        (0, "t", "late: event time 3 is before the stream's watermark 10"),
        (2, "t", "late: event time 9 is before the stream's watermark 10")]
    engine.run_until_idle()
    assert sorted(engine.dead_letters("s")["k"]) == ["b", "d"]


PUSHES = [  # (rows as (k, v, t), watermark) with lateness 2
    ([("a", 1, 4), ("b", 2, 1)], None),
    ([("a", 3, 2), ("a", 4, 9)], 5),   # t=2 is on time (watermark in force: 4 - 2 = 2)
    ([("b", 5, 6), ("a", 6, 8)], None),  # t=6 late (in force: 9 - 2 = 7), t=8 on time
    ([("b", 7, 12)], None),
    ([("a", 8, 10), ("b", 9, 11)], 12),  # on time (in force: 12 - 2 = 10)
    ([("a", 10, 11)], None),  # late (in force: the pushed 12)
]


def run_pushes(engine: Engine, cycle_after_each: bool) -> tuple[list, list]:
    engine.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) "
                   "WITH (event_time='t', lateness='2')")
    engine.execute("CREATE QUERY q AS SELECT k, sum(v) AS total FROM s [RANGE 5] GROUP BY k")
    for rows, watermark in PUSHES:
        engine.push("s", [{"k": k, "v": v, "t": t} for k, v, t in rows], watermark=watermark)
        if cycle_after_each:
            engine.run_cycle()
    engine.end_input("s")
    engine.run_until_idle()
    dead = engine.dead_letters("s").sort_values("t")
    return sums(engine, "q"), dead[["k", "v", "t", "_reason"]].values.tolist()


def test_a_cycle_takes_every_queued_push_and_judges_each_as_pushed(spark):
    together = run_pushes(Engine(spark=spark), cycle_after_each=False)
    apart = run_pushes(Engine(spark=spark), cycle_after_each=True)
    assert together == apart
    results, dead = together
    assert dead == [["b", 5, 6, "late: event time 6 is before the watermark 7"],
                    ["a", 10, 11, "late: event time 11 is before the watermark 12"]]
    a = [r for r in results if r[0] == "a"]
    # a's elements: 1@[4,9) 3@[2,7) 4@[9,14) 6@[8,13) 8@[10,15)
    assert a == [["a", 3, 2, 4], ["a", 4, 4, 7], ["a", 1, 7, 8], ["a", 7, 8, 9],
                 ["a", 10, 9, 10], ["a", 18, 10, 13], ["a", 12, 13, 14], ["a", 8, 14, 15]]


def test_full_queue_refuses_a_push_whole_until_a_cycle_takes_the_queue(spark):
    engine = Engine(spark=spark, ingest_limits=IngestLimits(max_queued_rows=3,
                                                           max_rows_per_cycle=2))
    engine.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    engine.execute("CREATE QUERY q AS SELECT k, sum(v) AS total FROM s [RANGE 5] GROUP BY k")
    engine.push("s", [{"k": "a", "v": 1, "t": 1}, {"k": "a", "v": 2, "t": 2}])
    with pytest.raises(BackpressureError, match="2 rows queued .at most 3.; send the push"):
        engine.push("s", [{"k": "a", "v": 3, "t": 3}, {"k": "a", "v": 4, "t": 4}])
    engine.push("s", [{"k": "a", "v": 3, "t": 3}])
    assert engine.run_cycle().rows_in == 2  # a cycle takes pushes up to max_rows_per_cycle
    engine.push("s", [{"k": "a", "v": 4, "t": 4}], watermark=10)
    assert engine.run_cycle().rows_in == 2
    engine.end_input("s")
    engine.run_until_idle()
    assert [r[:2] for r in sums(engine, "q")] == [["a", 1], ["a", 3], ["a", 6], ["a", 10],
                                                 ["a", 9], ["a", 7], ["a", 4]]
    with pytest.raises(SourceError, match="has ended"):
        engine.push("s", [{"k": "a", "v": 5, "t": 20}])


def test_watermark_that_is_not_a_time_is_refused(engine):
    engine.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    with pytest.raises(SourceError, match="watermark 'abc' for stream 's' is not a time"):
        engine.push("s", [], watermark="abc")
    engine.execute("CREATE STREAM ts (k STRING, at TIMESTAMP) WITH (event_time='at')")
    engine.push("ts", [{"k": "a", "at": "2026-01-31T12:00:00Z"}], watermark="2026-01-31T13:00")
    engine.run_cycle()
    assert engine.scans["ts"].watermark == int(
        dt.datetime(2026, 1, 31, 13, tzinfo=dt.UTC).timestamp() * 1_000_000)


def test_dead_letters_keep_the_newest_and_refused_rows_count_in_the_queue(spark):
    engine = Engine(spark=spark, ingest_limits=IngestLimits(max_queued_rows=3,
                                                           max_dead_letters=3))
    engine.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    engine.execute("CREATE QUERY q AS SELECT k, v FROM s WHERE v > 0")
    engine.push("s", [{"k": "a", "v": "x", "t": 1}, {"k": "b", "v": "y", "t": 1}])
    with pytest.raises(BackpressureError):  # two refused rows wait for the cycle too
        engine.push("s", [{"k": "c", "v": 1, "t": 5}, {"k": "d", "v": 2, "t": 6}])
    engine.run_cycle()
    engine.push("s", [{"k": "c", "v": 1, "t": 5}], watermark=10)
    engine.run_cycle()
    engine.push("s", [{"k": "e", "v": 3, "t": 2}, {"k": "f", "v": 4, "t": 3}])  # late
    engine.run_cycle()
    dead = engine.dead_letters("s")
    assert sorted(dead["k"]) == ["e", "f"]  # the oldest batch went beyond 3 kept
    assert "_dead_batch" not in dead.columns
    assert engine.metrics()["dead_letters"] == {"s": 4}
