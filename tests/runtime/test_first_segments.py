"""A window aggregate's first emitting cycle keeps its segments that are still open.

Found by the property suite (2026-11-29): events (y, 8)@3 and (y, 5)@7 arrive in one
cycle whose watermark is 9, after a cycle that advanced the stream to 0 with no event, so
the aggregate's first segments come in a slice starting at 0. Over ``[RANGE 9]`` the
group holds 8 over [3, 12) and 5 over [7, 16): avg 8 over [3, 7), 6.5 (count 2) over
[7, 12), 5 over [12, 16). At watermark 9 the segment from 7 is still open (its end, 12,
is not yet certain); the first cycle's start filter compared that NULL end with the
slice's start and dropped the segment, so [7, 12) was never emitted (its end was, later).
"""

from __future__ import annotations

import pytest

from sparkcq import Engine
from sparkcq.runtime.partitioning import SmallCycles
from sparkcq.testing import EndOfInput, ListSource, Watermark

QUERY = "SELECT k, avg(v) AS a, count(*) AS n FROM s [RANGE 9] GROUP BY k"


@pytest.mark.parametrize("fuse", [False, True], ids=["own", "family"])
@pytest.mark.parametrize("form", ["", "CHANGELOG"])
def test_an_open_segment_in_the_first_emitting_cycle(spark, fuse: bool, form: str):
    eng = Engine(spark=spark, fuse=fuse, small_cycles=SmallCycles.parse("single"))
    eng.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) "
                "WITH (event_time='t', lateness='0')")
    items = [Watermark(0), {"k": "y", "v": 8, "t": 3}, {"k": "y", "v": 5, "t": 7},
             Watermark(9), EndOfInput()]
    eng.attach_source("s", ListSource(items))
    eng.execute(f"CREATE QUERY q AS {form} {QUERY}")
    eng.run_until_idle()
    got = eng.results("q")
    if form == "CHANGELOG":
        rows = sorted(zip(got["a"], got["n"], got["_ts"], got["_op"], strict=True),
                      key=lambda r: (r[2], r[3]))
        assert rows == [(8.0, 1, 3, "+"), (6.5, 2, 7, "+"), (8.0, 1, 7, "-"),
                        (5.0, 1, 12, "+"), (6.5, 2, 12, "-"), (5.0, 1, 16, "-")]
    else:
        rows = sorted(zip(got["a"], got["n"], got["_ts"], got["_te"], strict=True),
                      key=lambda r: r[2])
        assert rows == [(8.0, 1, 3, 7), (6.5, 2, 7, 12), (5.0, 1, 12, 16)]


EARLY = ("SELECT ex, sum(v) AS s FROM s [CUT ON t BY 6 WINDOW 2 CHUNKS] GROUP BY ex",
         "SELECT ex, k, count(*) AS n FROM s [CUT ON t BY 6 WINDOW 2 CHUNKS] WHERE v > 2 "
         "GROUP BY ex, k")


@pytest.mark.parametrize("fuse", [False, True], ids=["own", "family"])
def test_a_late_aggregate_over_a_running_window_starts_from_its_reach(spark, fuse: bool):
    """Found by the property suite (2026-11-29): a query added while two others run over
    ``[CUT ON t BY 6 WINDOW 2 CHUNKS]`` starts from the window's contents, as over a shared
    window operator: the event at 10 (pane 12, valid [12, 24)) counts for it, though it
    arrived before the query. At watermark 13 it is added; x's events 8@10, 6@15 and 1@15
    make count 1 over [13, 18) and 3 over [18, 24) (min(9 - v) = 1), so HAVING count(*) > 2
    holds over [18, 24) only. In a family the new aggregate started from the events ahead
    of the watermark alone (the running queries' family members did not count as the
    window running), and gave min 3 and count 2 there: nothing.
    """
    eng = Engine(spark=spark, fuse=fuse, small_cycles=SmallCycles.parse("single"))
    eng.execute("CREATE STREAM s (ex BIGINT, k STRING, v BIGINT, t BIGINT) "
                "WITH (event_time='t', lateness='0')")
    rows = [{"ex": 1, "k": "x", "v": 8, "t": 10}, {"ex": 2, "k": "x", "v": 1, "t": 13},
            Watermark(8),
            {"ex": 1, "k": "x", "v": 6, "t": 15}, {"ex": 1, "k": "y", "v": 0, "t": 15},
            {"ex": 1, "k": "x", "v": 1, "t": 15}, {"ex": 1, "k": "y", "v": 8, "t": 20},
            EndOfInput()]
    eng.attach_source("s", ListSource(rows))
    for i, text in enumerate(EARLY):
        eng.execute(f"CREATE QUERY early{i} AS {text}")
    eng.run_cycle()
    assert eng.metrics()["watermarks"]["s"] == 13
    eng.execute("CREATE QUERY late AS CHANGELOG SELECT ex, k, min(9 - v) AS a FROM s "
                "[CUT ON t BY 6 WINDOW 2 CHUNKS] GROUP BY ex, k HAVING count(*) > 2")
    eng.run_until_idle()
    got = eng.results("late")
    assert sorted(zip(got["ex"], got["k"], got["a"], got["_ts"], got["_op"], strict=True)) \
        == [(1, "x", 1, 18, "+"), (1, "x", 1, 24, "-")]
