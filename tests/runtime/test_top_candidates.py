"""A Top-N over a per-event RANGE window ranks only the elements that can still be among
its first n (TopCandidates): an element leaves once n later elements above it arrived.
The rows are those of every snapshot's Top-N, whatever the cycles.

Values (v, t) into [RANGE 10], top 2 by v:

    t:   1    2    3    4    12   13
    v:   5    9    7    8    6    1
    at 3: 5 9 7 -> 9 7    at 4: 5 9 7 8 -> 9 8    at 11: 9 7 8 (5 ended) -> 9 8
    at 12: 7 8 6 -> 8 7   at 13: 8 6 1 (7 ended) -> 8 6   at 14: 6 1 -> 6 1   at 22: 1
"""

from __future__ import annotations

import pytest

ROWS = [(5, 1), (9, 2), (7, 3), (8, 4), (6, 12), (1, 13)]
CYCLES = {"one push": [6], "a push each": [1] * 6, "pushes of 2": [2, 2, 2]}
# (v, from, to), coalesced: each row over the instants it is among the first two
WANT = [(1, 14, 23), (5, 1, 3), (6, 13, 22), (7, 3, 4), (7, 12, 13), (8, 4, 14), (9, 2, 12)]


@pytest.mark.parametrize("sizes", list(CYCLES.values()), ids=list(CYCLES))
def test_the_top_two_of_the_last_ten(engine, sizes):
    engine.execute("CREATE STREAM s (v BIGINT, t BIGINT) WITH (event_time='t');"
                   "CREATE QUERY top AS SELECT v FROM s [RANGE 10] ORDER BY v DESC LIMIT 2")
    assert "TopCandidates 2 ORDER BY `v` DESC" in engine.explain("top")
    at = 0
    for n in sizes:
        engine.push("s", [{"v": v, "t": t} for v, t in ROWS[at:at + n]])
        engine.run_until_idle()
        at += n
    engine.end_input("s")
    engine.run_until_idle()
    out = engine.results("top")
    got = sorted(zip(out["v"], out["_ts"], out["_te"], strict=True))
    assert got == WANT
