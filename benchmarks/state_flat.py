"""State stays proportional to live elements: a [RANGE 60 SECONDS] grouped aggregate over the
generator, run for a while, sampling the engine's state-row metric every cycle.

    .venv/bin/python benchmarks/state_flat.py --minutes 10 --rate 2000

Prints one line per cycle (event time covered, state rows per operator) and a summary: the
state rows once the first window is full must stay flat, not grow with the events seen.
"""

from __future__ import annotations

import argparse
import time

from sparkcq import Engine


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=2000, help="events per second")
    parser.add_argument("--keys", type=int, default=50)
    args = parser.parse_args()
    eng = Engine()
    eng.execute(f"""
        CREATE STREAM readings (sensor STRING, value DOUBLE, t TIMESTAMP)
          WITH (event_time='t', source='generator', rate='{args.rate}', keys='{args.keys}');
        CREATE QUERY avg60 AS
          SELECT sensor, avg(value) AS a, count(*) AS n FROM readings [RANGE 60 SECONDS]
          GROUP BY sensor;
    """)
    eng.sinks["memory"].clear()
    began = time.monotonic()
    samples = []
    while time.monotonic() - began < args.minutes * 60:
        report = eng.run_cycle()
        eng.sinks["memory"].clear()  # keep the driver's result buffer out of it
        m = eng.metrics()
        seen = sum(s.rows_in for s in eng.scans.values())
        samples.append((time.monotonic() - began, seen, m["total_state_rows"]))
        print(f"t={samples[-1][0]:7.1f}s cycle={report.cycle:4d} "
              f"events_seen={seen:9,d} cycle_s={report.seconds:5.2f} "
              f"state_rows={m['total_state_rows']:8,d} per_op={m['state_rows']}", flush=True)
    full = [s for s in samples if s[0] > 90]
    if full:
        rows = [s[2] for s in full]
        print(f"after the first 90 s: events seen {full[0][1]:,} -> {full[-1][1]:,}; "
              f"state rows min {min(rows):,} max {max(rows):,} "
              f"(a 60 s window at {args.rate}/s holds ~{60 * args.rate:,} live elements)")
    eng.stop()


if __name__ == "__main__":
    main()
