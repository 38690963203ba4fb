"""Aggregates and joins over relations that change only at multiples of a slide run as an
AlignedAggregate / AlignedJoin: each snapshot at a multiple is evaluated once, from the
inputs' segments, and holds until the next multiple; the rows are those of the snapshots,
whatever the cycles, the order of arrival within the lateness and which input runs ahead.

NEXMark q5's shape, bids (auction, t), [RANGE 10 SLIDE 5] (the snapshot at m holds the bids
of (m - 10, m]), lateness 3:

    m = 5:  t 1, 3, 4          counts a1 2, a2 1         most: a1 (2)
    m = 10: t 1, 3, 4, 6, 7    a1 2, a2 3                a2 (3)
    m = 15: t 6, 7, 12, 13, 14 a2 2, a3 2, a1 1          a2 (2), a3 (2)
    m = 20: t 12, 13, 14, 16   a3 3, a1 1                a3 (3)
    m = 25: t 16               a3 1                      a3 (1)
"""

from __future__ import annotations

import pytest

BIDS = [(1, 1), (1, 3), (2, 4), (2, 6), (2, 7), (3, 12), (1, 13), (3, 14), (3, 16)]
ORDERS = {"in time order": BIDS,
          # each at most 3 behind the latest before it: none is late, however pushed
          "out of order within the lateness": [BIDS[i] for i in (1, 0, 3, 2, 4, 6, 5, 7, 8)]}
CYCLES = {"one push": [9], "a push each": [1] * 9, "pushes of 4": [4, 4, 1]}
# (auction, num, from, to), coalesced
WANT = [(1, 2, 5, 10), (2, 2, 15, 20), (2, 3, 10, 15), (3, 1, 25, 30), (3, 2, 15, 20),
        (3, 3, 20, 25)]


def intervals(engine, name: str, *cols: str) -> list[tuple]:
    out = engine.results(name)
    return sorted(zip(*(out[c] for c in cols), out["_ts"], out["_te"], strict=True),
                  key=repr)


@pytest.mark.parametrize("order", list(ORDERS), ids=list(ORDERS))
@pytest.mark.parametrize("sizes", list(CYCLES.values()), ids=list(CYCLES))
def test_the_most_bid_auctions_of_each_slide(engine, order, sizes):
    engine.execute("""
      CREATE STREAM bid (auction BIGINT, t BIGINT) WITH (event_time='t', lateness='3');
      CREATE STREAM counts AS SELECT auction, count(*) AS num FROM bid [RANGE 10 SLIDE 5]
        GROUP BY auction;
      CREATE STREAM top AS SELECT max(num) AS top FROM counts;
      CREATE QUERY q5 AS SELECT c.auction, c.num FROM counts c JOIN top t ON c.num = t.top;
    """)
    plan = engine.explain("q5")
    assert "AlignedJoin ON c.num = t.top at each 5" in plan
    assert "AlignedAggregate max(" in plan
    at = 0
    for n in sizes:
        engine.push("bid", [{"auction": a, "t": t} for a, t in ORDERS[order][at:at + n]])
        engine.run_until_idle()
        at += n
    engine.end_input("bid")
    engine.run_until_idle()
    assert intervals(engine, "q5", "auction", "num") == sorted(WANT, key=repr)


@pytest.mark.parametrize("ahead", ["a", "b"])
def test_a_left_join_of_two_streams_aggregates_whichever_runs_ahead(engine, ahead):
    """Counts per key of each 10-unit chunk of two streams, LEFT joined on the key; one
    stream's watermark runs a chunk ahead of the other's for a while.

        a: x 1, x 2, y 5 | x 12, z 15     counts [10, 20): x 2, y 1   [20, 30): x 1, z 1
        b: x 3           | z 11, 18, 19   counts [10, 20): x 1        [20, 30): z 3
    """
    engine.execute("""
      CREATE STREAM a (k STRING, t BIGINT) WITH (event_time='t');
      CREATE STREAM b (k STRING, t BIGINT) WITH (event_time='t');
      CREATE STREAM ca AS SELECT k, count(*) AS n FROM a [CUT ON t BY 10] GROUP BY k;
      CREATE STREAM cb AS SELECT k, count(*) AS n FROM b [CUT ON t BY 10] GROUP BY k;
      CREATE QUERY j AS SELECT x.k, x.n, y.n AS m FROM ca x LEFT JOIN cb y ON x.k = y.k;
    """)
    assert "AlignedJoin LEFT ON x.k = y.k at each 10" in engine.explain("j")
    streams = {"a": [("x", 1), ("x", 2), ("y", 5), ("x", 12), ("z", 15)],
               "b": [("x", 3), ("z", 11), ("z", 18), ("z", 19)]}
    first = streams.pop(ahead)
    engine.push(ahead, [{"k": k, "t": t} for k, t in first])  # a cycle before the other
    engine.run_until_idle()
    ((other, rows),) = streams.items()
    engine.push(other, [{"k": k, "t": t} for k, t in rows])
    engine.run_until_idle()
    for name in ("a", "b"):
        engine.end_input(name)
    engine.run_until_idle()
    got = [tuple(None if v != v else v for v in row)  # NaN: no partner
           for row in intervals(engine, "j", "k", "n", "m")]
    assert sorted(got, key=repr) == sorted([("x", 2, 1, 10, 20), ("y", 1, None, 10, 20),
                                            ("x", 1, None, 20, 30), ("z", 1, 3, 20, 30)],
                                           key=repr)


@pytest.mark.parametrize("pushed", [5, 7], ids=["added between slides", "added on a slide"])
def test_a_query_added_later_starts_from_the_aggregates_contents(engine, pushed):
    """The top count per slide, asked while the counts run: from the watermark at which it
    was added on, the same rows as the hand-computed ones above, the first cut there.
    """
    engine.execute("""
      CREATE STREAM bid (auction BIGINT, t BIGINT) WITH (event_time='t', lateness='3');
      CREATE STREAM counts AS SELECT auction, count(*) AS num FROM bid [RANGE 10 SLIDE 5]
        GROUP BY auction;
      CREATE QUERY everyone AS SELECT auction, num FROM counts;
    """)
    engine.push("bid", [{"auction": a, "t": t} for a, t in BIDS[:pushed]])
    engine.run_until_idle()
    start = engine.metrics()["watermarks"]["bid"]
    engine.execute("CREATE QUERY top AS SELECT max(num) AS top FROM counts")
    assert "AlignedAggregate max(num) AS top at each 5" in engine.explain("top")
    engine.push("bid", [{"auction": a, "t": t} for a, t in BIDS[pushed:]])
    engine.run_until_idle()
    engine.end_input("bid")
    engine.run_until_idle()
    tops = [(2, 5, 10), (3, 10, 15), (2, 15, 20), (3, 20, 25), (1, 25, 30)]
    assert intervals(engine, "top", "top") == sorted(
        [(v, max(a, start), b) for v, a, b in tops if b > start], key=repr)
