"""A query added to a running stream starts complete when the stream keeps recent events
(``WITH (retain = ...)``); without them its first windows hold only the events from its
start on, and its log says so.

Events of s at t = 1 .. 19 (one each, k = 'a'); the first 14 arrive (watermark 15) before
the query ``SELECT window_end, count(*) ... TUMBLE(..., 10)`` is added; window [10, 20)
began at 10, before the query.
"""

from __future__ import annotations

import pytest

QUERY = ("SELECT window_end, count(*) AS n FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), 10)) "
         "GROUP BY window_start, window_end")


def run(engine, retain: str | None, query: str = QUERY,
        reference: bool = True) -> tuple[list, list, list[str]]:
    """The late query's records (user columns, _ts, _te), those of the same query run from
    the start (``reference``: else none runs its window before) restricted to [15, inf),
    and the late query's log.
    """
    option = f", retain='{retain}'" if retain else ""
    engine.execute(f"CREATE STREAM s (k STRING, t BIGINT) WITH (event_time='t'{option})")
    engine.execute("CREATE QUERY early AS SELECT k FROM s WHERE k = 'x'")  # s runs
    if reference:
        engine.execute(f"CREATE QUERY always AS {query}")
    engine.push("s", [{"k": "a", "t": t} for t in range(1, 15)], watermark=15)
    engine.run_until_idle()
    engine.execute(f"CREATE QUERY late AS {query.replace('count(*) AS n', 'count(*) AS n2')}")
    engine.push("s", [{"k": "a", "t": t} for t in range(15, 20)])
    engine.end_input("s")
    engine.run_until_idle()

    def records(name: str) -> list[tuple]:
        out = engine.results(name)
        return sorted((*row[:-2], max(row[-2], 15), row[-1])
                      for row in map(tuple, out.values.tolist()) if row[-1] > 15)

    return (records("late"), records("always") if reference else [],
            engine.query_log("late"))


def test_without_retention_the_first_window_is_partial_and_the_log_says_so(engine):
    late, _, log = run(engine, None, reference=False)
    assert late == [(20, 5, 20, 20)]  # [10, 20) from 15 on only
    (note,) = [line for line in log if "starts at 15" in line]
    assert "the windows that began before hold only the events from then on" in note
    assert "retain" in note


@pytest.mark.parametrize("query", [
    QUERY, "RSTREAM SELECT count(*) AS n FROM s [CUT ON t BY 10]",
    "SELECT max(t) AS m FROM s [RANGE 10] WHERE k = 'a'"],
    ids=["flink tumble", "chunks", "range, not from panes"])
def test_a_stream_that_retains_starts_a_late_query_complete(engine, trusted_engine, query):
    late, _, log = run(engine, "20", query, reference=False)
    _, always, _ = run(trusted_engine, None, query)
    assert late == always and late  # as if it had run from the start
    assert not [line for line in log if "starts at" in line]
