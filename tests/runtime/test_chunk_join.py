"""A join of a stream's chunks with an aggregate over the same chunks (NEXMark q7: each
chunk's bids with the chunk's highest price) runs as a ChunkJoin: each chunk's rows meet
its aggregate once, when the chunk ends; the same rows as the general join, whatever the
cycles and the order of arrival within the lateness.

Bids (auction, price, t), chunks of 10, lateness 3:
    [0, 10): (1, 7, 2), (2, 9, 8), (3, 9, 1)     max 9: auctions 2, 3
    [10, 20): (4, 5, 12), (5, 4, 19), (6, 5, 10)  max 5: auctions 4, 6
    [20, 30): (7, 1, 25)                          max 1: auction 7
"""

from __future__ import annotations

import pytest

from sparkcq import Engine
from sparkcq.runtime.partitioning import SmallCycles

BIDS = [(1, 7, 2), (2, 9, 8), (3, 9, 1), (4, 5, 12), (5, 4, 19), (6, 5, 10), (7, 1, 25)]
ORDERS = {"in time order": sorted(BIDS, key=lambda b: b[2]),
          # each at most 3 behind the latest before it: none is late, however pushed
          "out of order within the lateness": [BIDS[i] for i in (0, 2, 1, 5, 3, 4, 6)]}
CYCLES = {"one push": [7], "a push each": [1] * 7, "pushes of 3": [3, 3, 1]}
QUERY = ("RSTREAM SELECT b.auction, b.price FROM bid [CUT ON t BY 10] AS b "
         "JOIN top AS m ON b.price = m.top")
WANT = [(2, 9, 10), (3, 9, 10), (4, 5, 20), (6, 5, 20), (7, 1, 30)]


def setup(engine) -> None:
    engine.execute("CREATE STREAM bid (auction BIGINT, price BIGINT, t BIGINT) "
                   "WITH (event_time='t', lateness='3');"
                   "CREATE STREAM top AS SELECT max(price) AS top FROM bid [CUT ON t BY 10]")


def push(engine, bids, sizes) -> None:
    at = 0
    for n in sizes:
        engine.push("bid", [{"auction": a, "price": p, "t": t} for a, p, t in bids[at:at + n]])
        engine.run_until_idle()
        at += n
    engine.end_input("bid")
    engine.run_until_idle()


def rows(engine, name: str) -> list[tuple]:
    out = engine.results(name)
    return sorted(zip(out["auction"], out["price"], out["_ts"], strict=True))


@pytest.mark.parametrize("order", list(ORDERS), ids=list(ORDERS))
@pytest.mark.parametrize("sizes", list(CYCLES.values()), ids=list(CYCLES))
def test_each_chunk_meets_its_aggregate_once(engine, order, sizes):
    setup(engine)
    engine.execute(f"CREATE QUERY q7 AS {QUERY}")
    assert "ChunkJoin ON b.price = m.top" in engine.explain("q7")
    push(engine, ORDERS[order], sizes)
    assert rows(engine, "q7") == WANT


def test_the_general_join_gives_the_same_rows(engine):
    """A second query over the running stream takes the general join; so does the interval
    form: the same pairs, each over its chunk's validity [cut, cut + 10).
    """
    setup(engine)
    engine.execute(f"CREATE QUERY q7 AS {QUERY}")
    engine.execute("CREATE QUERY general AS SELECT b.auction, b.price FROM bid "
                   "[CUT ON t BY 10] AS b JOIN top AS m ON b.price = m.top")
    plan = engine.explain("general")
    assert "ChunkJoin" not in plan and "Join ON b.price = m.top" in plan
    push(engine, ORDERS["out of order within the lateness"], [3, 3, 1])
    out = engine.results("general")
    assert sorted(zip(out["auction"], out["price"], out["_ts"], out["_te"], strict=True)) == [
        (a, p, t, t + 10) for a, p, t in WANT]
    assert rows(engine, "q7") == WANT


@pytest.mark.parametrize("ahead", ["person", "auction"])
def test_chunks_of_two_streams_meet_whichever_runs_ahead(engine, ahead):
    """NEXMark q8's shape: each 10-unit chunk's new persons who opened an auction in the
    same chunk; one stream's watermark runs a chunk ahead of the other's for a while.
    """
    engine.execute("""
      CREATE STREAM person (id BIGINT, name STRING, t BIGINT) WITH (event_time='t');
      CREATE STREAM auction (seller BIGINT, t BIGINT) WITH (event_time='t');
      CREATE STREAM sellers AS SELECT seller FROM auction [CUT ON t BY 10] GROUP BY seller;
      CREATE QUERY q8 AS RSTREAM SELECT p.id, p.name FROM person [CUT ON t BY 10] AS p
        JOIN sellers AS s ON p.id = s.seller;
    """)
    assert "ChunkJoin ON p.id = s.seller" in engine.explain("q8")
    persons = [(1, "ann", 2), (2, "bo", 5), (3, "cy", 12), (4, "di", 25)]
    auctions = [(1, 3), (3, 9), (3, 14), (4, 21), (2, 15)]
    streams = {"person": [{"id": i, "name": n, "t": t} for i, n, t in persons],
               "auction": [{"seller": s, "t": t} for s, t in auctions]}
    first = streams.pop(ahead)
    engine.push(ahead, first)  # the stream ahead: all of it, a cycle before the other
    engine.run_until_idle()
    (other, rows), = streams.items()
    engine.push(other, rows)
    engine.run_until_idle()
    for name in ("person", "auction"):
        engine.end_input(name)
    engine.run_until_idle()
    out = engine.results("q8")
    # [0, 10): ann (auction at 3); [10, 20): cy (14); [20, 30): di (21); bo's is at 15
    assert sorted(zip(out["id"], out["name"], out["_ts"], strict=True)) == [
        (1, "ann", 10), (3, "cy", 20), (4, "di", 30)]


def test_a_large_cycle_joins_the_bids_where_they_were_read(spark):
    """The aggregate has no GROUP BY: one row per chunk, sent to every task, so a large
    cycle shuffles only the partial maxima, not the bids (q7 at 92,000 bids a cycle
    shuffled all of them before).
    """
    engine = Engine(spark=spark, small_cycles=SmallCycles(enter=10, leave=10))
    setup(engine)
    engine.execute(f"CREATE QUERY q7 AS {QUERY}")
    bids = [(i, (i * 37) % 101, i // 4) for i in range(400)]  # chunks of 40 bids
    engine.push("bid", [{"auction": a, "price": p, "t": t} for a, p, t in bids])
    engine.run_until_idle()
    engine.end_input("bid")
    engine.run_until_idle()
    top = {}
    for _a, p, t in bids:
        top[t // 10] = max(top.get(t // 10, p), p)
    assert rows(engine, "q7") == sorted((a, p, t // 10 * 10 + 10) for a, p, t in bids
                                        if p == top[t // 10])
    # the push's cycle joins the nine chunks its watermark (96) ended, 360 bids
    first = engine.cycle_costs()[0]
    assert first.partitions > 1 and 0 < first.work.shuffled < len(bids) // 4, first
