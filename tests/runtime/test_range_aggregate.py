"""count, sum and avg over a per-event ``[RANGE w]`` window, from a log and running sums
(``runtime/operators/range_aggregate.py``): hand-computed examples, whatever the cycles.

The property suite compares the operator with the reference interpreter on generated
scenarios; these pin the worked example of the module's docstring, the instants where only
the count changes, and the plan (no Window operator, one shuffle a cycle).
"""

from __future__ import annotations

import pandas as pd
import pytest

from sparkcq import Engine
from sparkcq.testing import push_in_cycles

EVENTS = [("a", 2.0, 1), ("a", 4.0, 4), ("b", 1.0, 5), ("a", 2.0, 12), ("a", 6.0, 13)]

# avg(v) [RANGE 10] per k, by hand: a is 2 on [1, 4), 3 on [4, 11), 4 on [11, 12) (the
# event at 1 left), 3 on [12, 13), 4 on [13, 14) ((4+2+6)/3), and 4 on [14, 22) (the event
# at 4 left: (2+6)/2 — the same value, one element), 6 on [22, 23); b is 1 on [5, 15)
INTERVALS = [("a", 2.0, 1, 4), ("a", 3.0, 4, 11), ("a", 4.0, 11, 12), ("a", 3.0, 12, 13),
             ("a", 4.0, 13, 22), ("a", 6.0, 22, 23), ("b", 1.0, 5, 15)]


def run(engine: Engine, query: str, cuts: list[int]) -> pd.DataFrame:
    """The query's results over the events pushed in cycles ending before each of ``cuts``."""
    engine.execute("CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    engine.execute(f"CREATE QUERY q AS {query}")
    push_in_cycles(engine, "s", [{"k": k, "v": v, "t": t} for k, v, t in EVENTS], cuts)
    return engine.results("q")


CUTS = {"one cycle": [100], "a cycle per event": [2, 5, 6, 13, 14],
        "cycles between arrivals and departures": [3, 11, 12, 15, 23]}


@pytest.mark.parametrize("cuts", list(CUTS.values()), ids=list(CUTS))
def test_intervals_of_a_per_event_range_average(engine, cuts):
    out = run(engine, "SELECT k, avg(v) AS a FROM s [RANGE 10] GROUP BY k", cuts)
    got = sorted(out[["k", "a", "_ts", "_te"]].itertuples(index=False, name=None))
    assert got == sorted(INTERVALS)
    plan = engine.explain_global()
    assert "SlicedAggregate avg(v) AS a BY k" in plan
    assert not any(line.split(" ", 1)[1].startswith("Window") for line in plan.splitlines())


@pytest.mark.parametrize("cuts", list(CUTS.values()), ids=list(CUTS))
def test_istream_gives_a_row_where_the_value_changed(engine, cuts):
    out = run(engine, "ISTREAM SELECT k, avg(v) AS a FROM s [RANGE 10] GROUP BY k", cuts)
    got = sorted(out[["k", "a", "_ts"]].itertuples(index=False, name=None))
    # no row at 14: the average stays 4 when the event at 4 leaves
    assert got == sorted((k, a, ts) for k, a, ts, _te in INTERVALS)


def test_count_and_sum_change_where_the_average_does_not(engine):
    out = run(engine, "DSTREAM SELECT k, avg(v) AS a, count(*) AS n, sum(v) AS s "
              "FROM s [RANGE 10] WHERE k = 'a' GROUP BY k", [3, 13, 30])
    got = sorted(out[["a", "n", "s", "_ts"]].itertuples(index=False, name=None))
    # a's rows leave where any of the three values changes: 14 too (n 3 -> 2, s 12 -> 8)
    assert got == [(2.0, 1, 2.0, 4), (3.0, 2, 6.0, 11), (3.0, 2, 6.0, 13),
                   (4.0, 1, 4.0, 12), (4.0, 2, 8.0, 22), (4.0, 3, 12.0, 14), (6.0, 1, 6.0, 23)]
