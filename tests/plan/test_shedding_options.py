"""A query's shedding options (``docs/shedding.md``), read without Spark: each bad value is refused
with the place of the value in the statement; the server's default applies to queries that
do not say.
"""

from __future__ import annotations

import pytest

from sparkcq.errors import AnalysisError
from sparkcq.language.sql.parser import parse_script_located
from sparkcq.language.sql.statements import CreateQuery
from sparkcq.plan.options import QueryOptions, Shedding, ShedMode

JOIN = "AS SELECT a.k FROM a [RANGE 60] JOIN b [RANGE 60] ON a.k = b.k"


def options(with_: str, default: ShedMode = ShedMode.OFF) -> QueryOptions:
    text = f"CREATE QUERY j WITH ({with_}) {JOIN}" if with_ else f"CREATE QUERY j {JOIN}"
    [(stmt, _loc)] = parse_script_located(text)
    assert isinstance(stmt, CreateQuery)
    return QueryOptions.parse(stmt.options, text, stmt.loc, default)


def refusal(with_: str) -> tuple[str, int]:
    with pytest.raises(AnalysisError) as e:
        options(with_)
    assert e.value.loc is not None
    return str(e.value), e.value.loc.col


def test_no_option_no_shedding():
    assert options("").shedding is None
    assert options("shedding='off'").shedding is None


def test_the_options_as_written():
    got = options("shedding='ADAPTIVE', latency_budget='500 MILLISECONDS', "
                  "basic_windows='6', throttle='0.3'").shedding
    assert got == Shedding(ShedMode.ADAPTIVE, 0.5, 6, 0.3)
    assert options("shedding='random'").shedding == Shedding(ShedMode.RANDOM, 2.0, 10, None)


def test_the_servers_default_applies_unless_the_query_says():
    assert options("", ShedMode.ADAPTIVE).shedding == Shedding(ShedMode.ADAPTIVE)
    assert options("latency_budget='1 SECONDS'", ShedMode.RANDOM).shedding == \
        Shedding(ShedMode.RANDOM, 1.0)
    assert options("shedding='off'", ShedMode.ADAPTIVE).shedding is None


@pytest.mark.parametrize(("with_", "fragments", "at"), [
    ("shedding='sometimes'", ["shedding 'sometimes'", "'adaptive'", "'random'", "'off'"],
     "sometimes"),
    ("shedding='random', throttle='0'", ["throttle '0'", "(0, 1]"], "0'"),
    ("shedding='random', throttle='1.5'", ["throttle '1.5'", "(0, 1]"], "1.5"),
    ("shedding='random', throttle='lots'", ["throttle 'lots'"], "lots"),
    ("shedding='adaptive', basic_windows='0'", ["basic_windows '0'", "1 to 100"], "0'"),
    ("shedding='adaptive', basic_windows='101'", ["basic_windows '101'", "1 to 100"], "101"),
    ("shedding='adaptive', basic_windows='2.5'", ["basic_windows '2.5'"], "2.5"),
    ("shedding='adaptive', latency_budget='soon'", ["latency_budget", "'soon'"], "soon"),
    ("shedding='adaptive', latency_budget='0 SECONDS'", ["not a positive duration"],
     "0 SECONDS"),
    ("throttle='0.3'", ["throttle tunes load shedding", "shedding='adaptive'"],
     "throttle="),
    ("shedding='off', basic_windows='4'", ["basic_windows tunes load shedding"],
     "basic_windows="),
])
def test_bad_options_are_refused_at_their_value(with_, fragments, at):
    message, col = refusal(with_)
    for fragment in fragments:
        assert fragment in message
    text = f"CREATE QUERY j WITH ({with_}) {JOIN}"
    assert col == text.index(at, text.index("WITH")) + 1
