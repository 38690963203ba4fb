"""An error about an option underlines that option's value where the parser read it, even
when the same text is written earlier in the statement (a search of the text found the
first).
"""

from __future__ import annotations

import pytest

from sparkcq.errors import AnalysisError

STREAM = "CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')"

# (statement, the option's value, what the message says); the value also occurs earlier
CASES = {
    "source": ("CREATE STREAM files2 (k STRING, t BIGINT) WITH (event_time='t', "
               "source='files2')", "files2", "unknown source 'files2'"),
    "event_time": ("CREATE STREAM tt (k STRING, t BIGINT) WITH (event_time='tt')", "tt",
                   "event_time column 'tt' is not a column"),
    "end_time": ("CREATE STREAM k (k STRING, t BIGINT) WITH (event_time='t', end_time='k')",
                 "k", "end_time column 'k' is string"),
    "lateness": ("CREATE STREAM soon (k STRING, t BIGINT) WITH (event_time='t', "
                 "lateness='soon')", "soon", "lateness:"),
    "time_unit": ("CREATE STREAM days (k STRING, t TIMESTAMP) WITH (event_time='t', "
                  "time_unit='days')", "days", "time_unit applies to a numeric event time"),
    "shedding": ("CREATE QUERY randomly WITH (shedding='randomly') AS SELECT a.k FROM "
                 "s [RANGE 2] AS a JOIN s [RANGE 2] AS b ON a.k = b.k", "randomly",
                 "shedding 'randomly'"),
    "throttle": ("CREATE QUERY q2 WITH (shedding='random', throttle='2') AS SELECT a.k FROM "
                 "s [RANGE 2] AS a JOIN s [RANGE 2] AS b ON a.k = b.k", "2", "throttle '2'"),
    "basic_windows": ("CREATE QUERY q0 WITH (shedding='random', basic_windows='0') AS SELECT "
                      "a.k FROM s [RANGE 2] AS a JOIN s [RANGE 2] AS b ON a.k = b.k", "0",
                      "basic_windows '0'"),
    "on_schema_change": ("CREATE QUERY go WITH (on_schema_change='go') AS SELECT k FROM s",
                         "go", "on_schema_change 'go'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_option_error_underlines_the_options_value(engine, case: str) -> None:
    sql, value, says = CASES[case]
    engine.execute(STREAM)
    with pytest.raises(AnalysisError) as err:
        engine.execute(sql)
    e = err.value
    assert says in e.message, e.message
    at = sql.index(f"{case}='{value}'") + len(case) + 2
    assert e.loc is not None and (e.loc.start, e.loc.end) == (at, at + len(value)), (
        f"underlined {sql[e.loc.start:e.loc.end]!r} at {e.loc.start}, not the value at {at}")
    assert sql.index(value) < at  # the value is written earlier too


def test_an_option_that_does_nothing_underlines_its_assignment(engine) -> None:
    engine.execute(STREAM)
    sql = ("CREATE QUERY throttle WITH (throttle='0.5') AS SELECT a.k FROM s [RANGE 2] AS a "
           "JOIN s [RANGE 2] AS b ON a.k = b.k")
    with pytest.raises(AnalysisError, match="throttle tunes load shedding") as err:
        engine.execute(sql)
    e = err.value
    assert e.loc is not None and sql[e.loc.start:e.loc.end] == "throttle='0.5'"
