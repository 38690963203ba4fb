"""The example of docs/output.md, record by record: an element given open, then closed."""

from __future__ import annotations

import pandas as pd


def records(engine) -> list[tuple]:
    """The query's records as its sink received them (what the server and tail give)."""
    out, _, _ = engine.sinks.get("memory").since("q", 0)
    return [tuple(None if pd.isna(x) else x for x in row)
            for row in out[["k", "m", "_ts", "_te", "_op"]].itertuples(index=False, name=None)]


def test_an_open_element_is_closed_by_one_later_record(engine):
    engine.execute("""
      CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
      CREATE QUERY q AS SELECT k, max(v) AS m FROM s [RANGE 10] GROUP BY k;
    """)
    engine.push("s", [{"k": "a", "v": 5, "t": 1}, {"k": "a", "v": 7, "t": 4}], watermark=6)
    engine.run_until_idle()
    assert records(engine) == [("a", 5, 1, 4, "I"), ("a", 7, 4, None, "I")]
    engine.push("s", [], watermark=20)
    engine.run_until_idle()
    assert records(engine)[2:] == [("a", 7, 4, 14, "C")]
    # Engine.results applies the C to the element it closes: one row per element
    elements = engine.results("q")
    assert elements[["m", "_ts", "_te"]].values.tolist() == [[5, 1, 4], [7, 4, 14]]
