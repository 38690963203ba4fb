"""Chunked queries (``docs/semantics.md``, "Chunks by time, count and key"): every cut
criterion and every chunk join, computed by hand, whatever the cycles; the two published
queries as written.

The property suite compares count and key cuts with the reference interpreter on generated
scenarios; these pin small worked examples. Events (k, v, t), t in seconds:

    a,1,1  a,2,2  b,4,4  b,7,7  a,9,9  a,10,10  c,3,12
"""

from __future__ import annotations

import pandas as pd
import pytest

from sparkcq import Engine
from sparkcq.errors import AnalysisError, QuerySyntaxError

EVENTS = [("a", 1, 1), ("a", 2, 2), ("b", 4, 4), ("b", 7, 7), ("a", 9, 9), ("a", 10, 10),
          ("c", 3, 12)]
OTHER = [("a", 100, 5), ("a", 300, 11), ("b", 200, 15)]  # stream r (k, w, t)

CYCLES = {"one cycle": [16], "a few cycles": [3, 8, 11, 13, 16],
          "a cycle per event": [2, 3, 5, 8, 10, 11, 12, 13, 16]}
SOME_CYCLES = {k: CYCLES[k] for k in ("one cycle", "a few cycles")}
SPLIT = {"a few cycles": CYCLES["a few cycles"]}  # a join's tests: input over five cycles
STREAMS = """
CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t', time_unit='seconds');
CREATE STREAM r (k STRING, w BIGINT, t BIGINT) WITH (event_time='t', time_unit='seconds');
"""


def run(engine: Engine, query: str, cycles: list[int], *, columns: list[str]) -> list[tuple]:
    """Run ``query`` over EVENTS (stream s) and OTHER (stream r), delivered in cycles ending
    before each of ``cycles`` (watermark = that bound); its records as sorted tuples of
    ``columns``, ``_ts`` and ``_te`` (None: still open).
    """
    engine.execute(STREAMS)
    engine.execute(f"CREATE QUERY q AS {query}")
    start = 0
    for bound in cycles:
        for stream, events, col in (("s", EVENTS, "v"), ("r", OTHER, "w")):
            rows = [{"k": k, col: x, "t": t} for k, x, t in events if start <= t < bound]
            engine.push(stream, rows, watermark=bound)
        engine.run_until_idle()
        start = bound
    engine.end_input("s")
    engine.end_input("r")
    engine.run_until_idle()
    out = engine.results("q")
    return sorted(tuple(_plain(x) for x in rec)
                  for rec in out[[*columns, "_ts", "_te"]].itertuples(index=False, name=None))


def _plain(x: object) -> object:
    return None if x is pd.NA or (isinstance(x, float) and pd.isna(x)) else x


def with_table(engine: Engine) -> Engine:
    engine.execute("CREATE TABLE names (k STRING, name STRING)")
    engine.load_table("names", [{"k": "a", "name": "alpha"}, {"k": "b", "name": "beta"}])
    return engine


# chunks {1, 2} {4, 7} {9, 10} {12}: each valid from the next chunk's first row (4, 9, 12)
# for one chunk, or (WINDOW 2 CHUNKS) until the first row two chunks later; the input ends
# at watermark 16, so the last chunk {12} is complete, its cut point at 16 (where the
# stream ended: a next chunk could not have started earlier)
COUNT_CUTS = [
    ("SELECT sum(v) AS total FROM s [CUT EVERY 2 ROWS]",
     [(3, 4, 9), (11, 9, 12), (19, 12, 16), (3, 16, None)]),
    ("SELECT sum(v) AS total FROM s [CUT BY 2 ROWS WINDOW 2 CHUNKS]",
     [(3, 4, 9), (14, 9, 12), (30, 12, 16), (22, 16, None)]),
]


@pytest.mark.parametrize("cycles", list(CYCLES.values()), ids=list(CYCLES))
@pytest.mark.parametrize(("query", "expected"), COUNT_CUTS, ids=["one chunk", "two chunks"])
def test_count_cut(engine, query, expected, cycles):
    assert run(engine, query, cycles, columns=["total"]) == sorted(expected)


# runs of k: a {1, 2}, b {4, 7}, a {9, 10}, c {12}: cut points 4, 9, 12, and 16 at the
# end of the input (its last watermark), which completes the last chunk c
KEY_CUTS = [
    ("SELECT k, count(*) AS n, sum(v) AS total FROM s [CUT ON k] GROUP BY k",
     [("a", 2, 3, 4, 9), ("b", 2, 11, 9, 12), ("a", 2, 19, 12, 16), ("c", 1, 3, 16, None)]),
    # the first a chunk stays until the first row two chunks later (12), where the second
    # a chunk starts; b until the end's cut point (16), the rest from then on
    ("SELECT k, count(*) AS n, sum(v) AS total FROM s [CUT ON k WINDOW 2 CHUNKS] GROUP BY k",
     [("a", 2, 3, 4, 12), ("b", 2, 11, 9, 16), ("a", 2, 19, 12, None),
      ("c", 1, 3, 16, None)]),
]


@pytest.mark.parametrize("cycles", list(CYCLES.values()), ids=list(CYCLES))
@pytest.mark.parametrize(("query", "expected"), KEY_CUTS, ids=["one chunk", "two chunks"])
def test_key_cut(engine, query, expected, cycles):
    assert run(engine, query, cycles, columns=["k", "n", "total"]) == sorted(expected)


@pytest.mark.parametrize("cycles", list(SOME_CYCLES.values()), ids=list(SOME_CYCLES))
def test_time_cut_on_a_numeric_time_in_seconds(engine, cycles):
    # time_unit='seconds': 10 SECONDS is 10 units; chunks [0, 10) and [10, 20)
    got = run(engine, "SELECT count(*) AS n, max(floor(t / 10)) AS chunk "
              "FROM STREAM(s, 'CUT ON t BY 10 SECONDS')", cycles, columns=["n", "chunk"])
    assert got == [(2, 1, 20, 30), (5, 0, 10, 20)]


# -- chunk joins -----------------------------------------------------------------------------
@pytest.mark.parametrize("cycles", list(SPLIT.values()), ids=list(SPLIT))
def test_chunk_joined_with_a_table(engine, cycles):
    # chunk [0, 10) per name: alpha 1+2+9, beta 4+7; chunk [10, 20): alpha 10 (c: no name)
    got = run(with_table(engine),
              "SELECT h.name, sum(S.v) AS total FROM s [CUT ON t BY 10] S, names h "
              "WHERE h.k = S.k GROUP BY h.name", cycles, columns=["name", "total"])
    assert got == [("alpha", 10, 20, 30), ("alpha", 12, 10, 20), ("beta", 11, 10, 20)]


@pytest.mark.parametrize("cycles", list(SPLIT.values()), ids=list(SPLIT))
def test_chunk_joined_with_a_chunk_of_another_stream(engine, cycles):
    # chunk [0, 10): s's a rows 1, 2, 9 with r's a at 5; chunk [10, 20): a 10 with a 11
    got = run(engine, "SELECT S.k, count(*) AS pairs FROM s [CUT ON t BY 10] S "
              "JOIN r [CUT ON t BY 10] R ON S.k = R.k GROUP BY S.k", cycles,
              columns=["k", "pairs"])
    assert got == [("a", 1, 20, 30), ("a", 3, 10, 20)]


@pytest.mark.parametrize("cycles", list(SPLIT.values()), ids=list(SPLIT))
def test_sliding_chunk_windows_of_two_and_one_chunks(engine, cycles):
    # s's chunks are valid for two chunks ([10, 30) and [20, 40)), r's for one: on [20, 30)
    # both s chunks meet r's second (a 11, b 15)
    got = run(engine, "SELECT S.k, count(*) AS pairs FROM s [CUT ON t BY 10 WINDOW 2 CHUNKS] S "
              "JOIN r [CUT ON t BY 10] R ON S.k = R.k GROUP BY S.k", cycles,
              columns=["k", "pairs"])
    assert got == [("a", 3, 10, 20), ("a", 4, 20, 30), ("b", 2, 20, 30)]


@pytest.mark.parametrize("cycles", list(SPLIT.values()), ids=list(SPLIT))
def test_newest_chunk_joined_with_the_last_two_chunks_of_its_stream(engine, cycles):
    # earlier rows of the same k: on [10, 20) a 2>1, 9>1, 9>2 and b 7>4; on [20, 30) the
    # newest chunk's a 10 with a 1, 2, 9 of the chunk before (a stays 3: one element)
    got = run(engine, "SELECT N.k, count(*) AS earlier FROM s [CUT ON t BY 10] N "
              "JOIN s [CUT ON t BY 10 WINDOW 2 CHUNKS] L ON N.k = L.k AND N.t > L.t "
              "GROUP BY N.k", cycles, columns=["k", "earlier"])
    assert got == [("a", 3, 10, 30), ("b", 1, 10, 20)]


@pytest.mark.parametrize("cycles", list(SPLIT.values()), ids=list(SPLIT))
def test_count_cut_joined_with_a_table(engine, cycles):
    got = run(with_table(engine),
              "SELECT h.name, sum(S.v) AS total FROM s [CUT EVERY 3 ROWS] S JOIN names h "
              "ON h.k = S.k GROUP BY h.name", cycles, columns=["name", "total"])
    # chunks {1, 2, 4} valid [7, 12), {7, 9, 10} from 12 until the next cut point: 16, where
    # the end of the input (at watermark 16) completes the last chunk {12} (k c: no name,
    # nothing joined)
    assert got == [("alpha", 3, 7, 12), ("alpha", 19, 12, 16), ("beta", 4, 7, 12),
                   ("beta", 7, 12, 16)]


# -- derived tables ---------------------------------------------------------------------------
@pytest.mark.parametrize("cycles", list(SPLIT.values()), ids=list(SPLIT))
def test_subquery_in_from(engine, cycles):
    got = run(engine, "SELECT x.k, x.total FROM (SELECT k, sum(v) AS total FROM s "
              "[CUT ON t BY 10] GROUP BY k) AS x WHERE x.total > 10", cycles,
              columns=["k", "total"])
    assert got == [("a", 12, 10, 20), ("b", 11, 10, 20)]


def test_comma_join_conditions_in_where_become_join_keys(engine):
    engine.execute(STREAMS)
    plan = engine.execute("EXPLAIN SELECT S.k FROM s [RANGE 5] S, r [RANGE 5] R "
                          "WHERE S.k = R.k AND S.v > 1")
    assert "IntervalJoin ON S.k = R.k" in plan
    assert "Filter S.v > 1" in plan


# -- the published queries, verbatim ----------------------------------------------------------
HOST_TO_HOST = """SELECT floor(S.t/60) AS minute, h1.host_id AS from_host, h2.host_id AS to_host, SUM(S.bytes)
FROM STREAM(packet_stream, 'CUT ON t BY 60 SECS') S, Hosts h1, Hosts h2
WHERE h1.ip = S.from_ip AND h2.ip = S.to_ip
GROUP BY minute, from_host, to_host"""  # noqa: E501

TWO_ROUTERS = """SELECT floor(S1.t/60) AS minute, AVG(S2.tr - S1.tr)
FROM STREAM(RT1, 'CUT ON t BY 60 SECS', 'BLOCK') S1, STREAM(RT2, 'CUT ON t BY 60 SECS', 'BLOCK') S2
WHERE S1.pid = S2.pid GROUP BY minute"""  # noqa: E501

PACKETS = [(1, 5, "10.0.0.1", "10.0.0.2", 100), (2, 30, "10.0.0.1", "10.0.0.2", 50),
           (3, 59, "10.0.0.2", "10.0.0.1", 8), (4, 70, "10.0.0.2", "10.0.0.1", 7),
           (5, 80, "10.0.0.9", "10.0.0.1", 1000)]  # 10.0.0.9 is no known host


def published_engine(engine: Engine) -> Engine:
    engine.execute("""
    CREATE STREAM packet_stream (pid BIGINT, t BIGINT, from_ip STRING, to_ip STRING, bytes BIGINT)
      WITH (event_time='t', time_unit='seconds');
    CREATE STREAM RT1 (pid BIGINT, t BIGINT, tr DOUBLE) WITH (event_time='t', time_unit='seconds');
    CREATE STREAM RT2 (pid BIGINT, t BIGINT, tr DOUBLE) WITH (event_time='t', time_unit='seconds');
    CREATE TABLE Hosts (ip STRING, host_id STRING);
    """)
    engine.load_table("Hosts", [{"ip": "10.0.0.1", "host_id": "web"},
                                {"ip": "10.0.0.2", "host_id": "db"}])
    return engine


@pytest.mark.parametrize("cycles", [[1000], [31, 60, 75, 1000]], ids=["one cycle", "four"])
def test_published_queries_run_verbatim(engine, cycles):
    eng = published_engine(engine)
    eng.execute(f"CREATE QUERY traffic AS {HOST_TO_HOST}")
    eng.execute(f"CREATE QUERY transit AS {TWO_ROUTERS}")
    start = 0
    for bound in cycles:
        now = [p for p in PACKETS if start <= p[1] < bound]
        eng.push("packet_stream", [dict(zip(("pid", "t", "from_ip", "to_ip", "bytes"), p,
                                            strict=True)) for p in now], watermark=bound)
        # router 1 sees a packet 0.5 s after it was sent, router 2 pid seconds later
        eng.push("RT1", [{"pid": p[0], "t": p[1], "tr": p[1] + 0.5} for p in now],
                 watermark=bound)
        eng.push("RT2", [{"pid": p[0], "t": p[1], "tr": p[1] + 0.5 + p[0]} for p in now
                         if p[0] != 2], watermark=bound)  # router 2 missed packet 2
        eng.run_until_idle()
        start = bound
    for s in ("packet_stream", "RT1", "RT2"):
        eng.end_input(s)
    eng.run_until_idle()
    traffic = eng.results("traffic")
    assert sorted(traffic.itertuples(index=False, name=None)) == [
        (0, "db", "web", 8, 60, 120), (0, "web", "db", 150, 60, 120),
        (1, "db", "web", 7, 120, 180)]
    transit = eng.results("transit")
    # minute 0: packets 1 and 3 reached both routers (delays 1 and 3); minute 1: packet 4
    # (packet 5 too: routers do not know hosts): delays 4 and 5
    assert sorted(transit.itertuples(index=False, name=None)) == [(0, 2.0, 60, 120),
                                                                  (1, 4.5, 120, 180)]


# -- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("statement", "fragments"), [
    ("CREATE QUERY q AS SELECT * FROM STREAM(s, 'CUT ON t BY 60 SECS', 'BLOK')",
     ["unknown capture mode 'BLOK'", "'BLOCK'"]),
    ("CREATE QUERY q AS SELECT count(*) FROM s [CUT ON t BY 500 MILLISECONDS]",
     ["not a whole number of the stream's time unit", "1 SECOND"]),
    ("CREATE QUERY q AS SELECT count(*) FROM s [CUT ON kk]",
     ["unknown CUT ON column 'kk'", "columns: k, v, t"]),
    ("CREATE QUERY q AS SELECT count(*) FROM (SELECT k FROM s) [RANGE 10] AS x",
     ["a window clause applies to a stream named in FROM"]),
    ("CREATE STREAM u (t TIMESTAMP) WITH (event_time='t', time_unit='seconds')",
     ["time_unit applies to a numeric event time"]),
    ("CREATE QUERY q AS SELECT count(*) FROM s [RANGE 10] a JOIN m [RANGE 10] b ON a.k = b.k",
     ["different units", "time_unit"]),
])
def test_chunk_errors_name_what_is_wrong(engine, statement, fragments):
    engine.execute(STREAMS)
    engine.execute("CREATE STREAM m (k STRING, t BIGINT) WITH (event_time='t')")
    with pytest.raises((AnalysisError, QuerySyntaxError)) as e:
        engine.execute(statement)
    for fragment in fragments:
        assert fragment in str(e.value)


@pytest.mark.parametrize("cycles", list(SOME_CYCLES.values()), ids=list(SOME_CYCLES))
def test_the_end_of_input_completes_the_last_count_chunk(engine, cycles):
    """Seven rows cut every three: the seventh is a chunk of its own, complete at the end
    of the input (found: its sum was never produced), valid from where the stream ended:
    its watermark, 100, which no row reached (found: cut at 8, one unit after the row,
    below output already final).
    """
    engine.execute("CREATE STREAM n (v BIGINT, t BIGINT) WITH (event_time='t')")
    engine.execute("CREATE QUERY q AS SELECT sum(v) AS total FROM n [CUT EVERY 3 ROWS]")
    start = 0
    for bound in [*cycles, 100]:
        engine.push("n", [{"v": t, "t": t} for t in range(1, 8) if start <= t < bound],
                    watermark=bound)
        engine.run_until_idle()
        start = bound
    def records() -> list[tuple]:
        return sorted(tuple(_plain(x) for x in rec) for rec in engine.results("q").itertuples(
            index=False, name=None))

    # chunks {1, 2, 3} {4, 5, 6} {7}: cut points 4 and 7; {7} waits for its successor
    assert records() == [(6, 4, 7), (15, 7, None)]
    engine.end_input("n")
    engine.run_until_idle()
    # ... until the input ends: its cut point is 100, where the stream ended (no later row
    # could have come before its watermark)
    assert records() == [(6, 4, 7), (7, 100, None), (15, 7, 100)]
