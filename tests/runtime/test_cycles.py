"""What a sink sees cycle by cycle.

That results do not depend on how input is cut into cycles is the property suite's job
(``test_properties.py``), against the reference interpreter.
"""

from __future__ import annotations

import pandas as pd

from sparkcq import Engine
from sparkcq.testing import CollectingSink, EndOfInput, ListSource, Watermark


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
