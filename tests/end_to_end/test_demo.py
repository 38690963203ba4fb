"""``make demo``'s queries, as the demo runs them: every one of them has records within its
first minute of event time (here generated as fast as Spark goes, not at the clock's pace).
"""

from __future__ import annotations

import io

from rich.console import Console

from sparkcq.cli import start_demo
from sparkcq.io.sinks import ConsoleSink


def test_every_demo_query_shows_records_within_a_minute_of_event_time(trusted_engine):
    eng = trusted_engine
    printed = io.StringIO()
    eng.register_sink("console", ConsoleSink(console=Console(file=printed, width=200)))
    start_demo(eng, rate=200, batch=2000)  # 10 seconds of event time a cycle
    queries = list(eng.catalog.queries)
    assert len(queries) == 5
    for _ in range(7):  # 70 seconds: the last streams' lateness and one chunk of 10 s
        eng.run_cycle()
    shown = printed.getvalue()
    silent = [q for q in queries if f"{q} · cycle" not in shown]
    assert silent == []
