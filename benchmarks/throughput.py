"""Rows per second the engine sustains: the demo's queries, and a sliding average.

    .venv/bin/python benchmarks/throughput.py slide --events 400000 --batch 100000
    .venv/bin/python benchmarks/throughput.py demo --events 200000 --batch 50000

Feeds the generator as fast as the engine takes it (pace='fast', ``batch`` events a cycle)
and reports events/s over the whole run and the median cycle latency.
"""

from __future__ import annotations

import argparse
import statistics
import time
from importlib import resources

from sparkcq import Engine


def run(eng: Engine, total: int) -> None:
    began = time.monotonic()
    cycles = []
    while eng.has_pending_input():
        report = eng.run_cycle()
        eng.sinks["memory"].clear()
        cycles.append(report.seconds)
    elapsed = time.monotonic() - began
    seen = sum(s.rows_in for s in eng.scans.values())
    print(f"{seen:,} events in {elapsed:.1f} s = {seen / elapsed:,.0f} events/s; "
          f"{len(cycles)} cycles, median cycle {statistics.median(cycles):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload", choices=["slide", "demo"])
    parser.add_argument("--events", type=int, default=400_000, help="events per stream")
    parser.add_argument("--batch", type=int, default=100_000, help="events per cycle")
    args = parser.parse_args()
    eng = Engine()
    gen = f"pace='fast', batch='{args.batch}', limit='{args.events}'"
    if args.workload == "slide":
        eng.execute(f"""
            CREATE STREAM readings (sensor STRING, value DOUBLE, t TIMESTAMP)
              WITH (event_time='t', source='generator', rate='1000', keys='100', {gen});
            CREATE QUERY q AS SELECT sensor, avg(value) AS a
              FROM readings [RANGE 60 SECONDS SLIDE 1 SECOND] GROUP BY sensor;
        """)
    else:
        eng.register_table("hosts", [{"ip": f"ip_{i}", "host": f"host-{i}"} for i in range(8)])
        script = resources.files("sparkcq").joinpath("demo.sql").read_text(encoding="utf-8")
        script = script.replace("{rate}", "2000").replace("INTO console ", "")
        script = script.replace("source='generator'", f"source='generator', {gen}")
        eng.execute(script)
    run(eng, args.events)
    eng.stop()


if __name__ == "__main__":
    main()
