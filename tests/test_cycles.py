"""Determinism: the same input gives the same coalesced output whatever the cycle sizes."""

from __future__ import annotations

import random

import pandas as pd
import pytest

from sparkcq import Engine
from sparkcq.testing import CollectingSink, EndOfInput, ListSource, Watermark

QUERIES = {
    "agg": "SELECT k, count(*) AS c, sum(v) AS s, min(v) AS mn FROM s [RANGE 7] GROUP BY k",
    "slide": "SELECT k, avg(v) AS a FROM s [RANGE 10 SLIDE 3] GROUP BY k",
    "rows": "SELECT k, max(v) AS m FROM s [PARTITION BY k ROWS 2] GROUP BY k",
    "join": "SELECT a.k AS k, a.v AS av, b.v AS bv FROM s [RANGE 4] AS a "
            "JOIN s [NOW] AS b ON a.k = b.k AND a.v < b.v",
    "istream": "ISTREAM SELECT k, count(DISTINCT v) AS d FROM s [RANGE 6] GROUP BY k",
}


def events(seed: int, n: int = 40):
    rnd = random.Random(seed)
    out = [{"k": rnd.choice("xyz"), "v": rnd.randint(0, 9), "t": rnd.randint(0, 50)}
           for _ in range(n)]
    return sorted(out, key=lambda e: e["t"])


def run(spark, items, lateness="0"):
    eng = Engine(spark=spark)
    eng.execute(f"CREATE STREAM s (k STRING, v BIGINT, t BIGINT) "
                f"WITH (event_time='t', lateness='{lateness}')")
    eng.attach_source("s", ListSource(items))
    for name, sql in QUERIES.items():
        eng.execute(f"CREATE QUERY {name} AS {sql}")
    cycles = eng.run_until_idle()
    return {n: canonical(eng.results(n)) for n in QUERIES}, cycles


def canonical(frame: pd.DataFrame) -> list[tuple]:
    rows = [tuple(None if pd.isna(x) else x for x in r) for r in frame.itertuples(index=False)]
    return sorted(rows, key=lambda r: tuple((x is None, str(type(x)), x) for x in r))


@pytest.mark.slow
def test_same_output_for_any_cycle_sizes(spark):
    data = events(7)
    one_cycle, _ = run(spark, [*data, EndOfInput()])
    # the same events cut into cycles of 5, with watermarks from event order
    chunks = []
    for i in range(0, len(data), 5):
        part = data[i:i + 5]
        chunks += [*part, Watermark(part[-1]["t"])]
    many_cycles, n = run(spark, [*chunks, EndOfInput()])
    assert n > 5
    for name in QUERIES:
        assert many_cycles[name] == one_cycle[name], name
    assert all(one_cycle[name] for name in QUERIES)


def test_collecting_sink_sees_each_cycles_commit(spark):
    eng = Engine(spark=spark)
    eng.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    eng.attach_source("s", ListSource([
        {"k": "a", "v": 1, "t": 1}, Watermark(2),
        {"k": "a", "v": 2, "t": 3}, Watermark(4), EndOfInput()]))
    sink = CollectingSink()
    eng.register_sink("out", sink)
    eng.execute("CREATE QUERY q INTO out AS SELECT k, sum(v) AS s FROM s [RANGE 2] GROUP BY k")
    eng.run_until_idle()
    by_cycle = [(c, [tuple(None if pd.isna(x) else x for x in r)
                     for r in f[["s", "_ts", "_te", "_op"]].itertuples(index=False)])
                for c, f in sink.cycles["q"]]
    # cycle 0: the element (1) opens at 1; cycle 1: it closes at 3, (2) opens at 3;
    # cycle 2 (end of input): (2) closes at 5
    assert [rows for _, rows in by_cycle] == [
        [(1, 1, None, "I")],
        [(1, 1, 3, "C"), (2, 3, None, "I")],
        [(2, 3, 5, "C")],
    ]
