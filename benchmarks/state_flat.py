"""State and cycle time stay flat over a long run: a window join and a hop over many keys
fed in real time for a while, sampling every cycle.

    .venv/bin/python benchmarks/state_flat.py --minutes 20 [--join-rate 1000]
        [--join-keys 10000] [--hop-rate 5000] [--hop-keys 100000] [--out NAME]

Three generator streams follow the wall clock (``pace='realtime'``: each cycle takes what
was generated since the last): ``a`` and ``b`` at ``join-rate`` events a second each over
``join-keys`` keys, joined over 60-second windows on the key (ISTREAM of the pairs), and
``readings`` at ``hop-rate`` over ``hop-keys`` keys, averaged per key over a minute every
10 seconds. Cycles run back to back. Each cycle samples the state rows of every operator
(the engine's metric), the bytes Spark's block managers hold in storage memory (the cached
state and a cycle's caches) and the cycle's seconds; the memory sink is cleared every
cycle, so the driver holds no result. The report gives these per minute (medians) and
compares the last third of the run with the minutes after the first window: state that
costs what changed stays flat once a window of it is held.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import date
from pathlib import Path

from pyspark.sql import SparkSession

from sparkcq import Engine

RESULTS = Path(__file__).parent / "results"
SETUP = """
CREATE STREAM a (sensor STRING, value DOUBLE, t TIMESTAMP)
  WITH (event_time='t', source='generator', rate='{join_rate}', keys='{join_keys}');
CREATE STREAM b (sensor STRING, value DOUBLE, t TIMESTAMP)
  WITH (event_time='t', source='generator', rate='{join_rate}', keys='{join_keys}');
CREATE STREAM readings (sensor STRING, value DOUBLE, t TIMESTAMP)
  WITH (event_time='t', source='generator', rate='{hop_rate}', keys='{hop_keys}');
CREATE QUERY pairs AS ISTREAM SELECT a.sensor, a.value AS va, b.value AS vb
  FROM a [RANGE 60 SECONDS] JOIN b [RANGE 60 SECONDS] ON a.sensor = b.sensor;
CREATE QUERY hop AS SELECT sensor, avg(value) AS a, count(*) AS n
  FROM readings [RANGE 60 SECONDS SLIDE 10 SECONDS] GROUP BY sensor;
"""
WINDOW_S = 60


def storage_bytes(spark: SparkSession) -> int:
    """The bytes Spark's block managers hold in storage memory (cached blocks)."""
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()  # type: ignore[union-attr]
    it = status.valuesIterator()
    used = 0
    while it.hasNext():
        pair = it.next()
        used += int(pair._1()) - int(pair._2())
    return used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--join-rate", type=int, default=1000, help="events a second, a and b")
    parser.add_argument("--join-keys", type=int, default=10_000)
    parser.add_argument("--hop-rate", type=int, default=5000, help="events a second")
    parser.add_argument("--hop-keys", type=int, default=100_000)
    parser.add_argument("--out", default=None, help="write a report under benchmarks/results")
    args = parser.parse_args()
    eng = Engine()
    eng.execute(SETUP.format(**vars(args)))
    memory = eng.sinks["memory"]
    began = time.monotonic()
    samples: list[tuple[float, int, float, int, int]] = []
    while time.monotonic() - began < args.minutes * 60:
        report = eng.run_cycle()
        memory.clear()  # type: ignore[attr-defined]  # keep the driver's buffer out of it
        rows = int(eng.metrics()["total_state_rows"])
        seen = sum(s.rows_in for s in eng.scans.values())
        at = time.monotonic() - began
        samples.append((at, seen, report.seconds, rows, storage_bytes(eng.spark)))
        print(f"t={at:7.1f}s cycle={report.cycle:5d} seen={seen:11,d} "
              f"cycle_s={report.seconds:5.2f} state_rows={rows:10,d} "
              f"storage_bytes={samples[-1][4]:13,d}", flush=True)
    eng.stop()
    lines = summary(samples, args)
    print("\n".join(lines))
    if args.out:
        path = RESULTS / f"{args.out}.md"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"wrote {path}")


def summary(samples: list[tuple[float, int, float, int, int]],
            args: argparse.Namespace) -> list[str]:
    """Per-minute medians, and the last third of the run against the minutes after the
    first window.
    """
    lines = [f"# State over a long run ({date.today().isoformat()})", "",
             f"`python benchmarks/state_flat.py --minutes {args.minutes:g} --join-rate "
             f"{args.join_rate} --join-keys {args.join_keys} --hop-rate {args.hop_rate} "
             f"--hop-keys {args.hop_keys}` (see its docstring), two cores. Per minute: "
             "the events taken, and medians over its cycles of the cycle's seconds, the "
             "state rows and the bytes in Spark's storage memory.", "",
             "| minute | events taken | cycles | cycle p50 | state rows | storage MB |",
             "|---|---|---|---|---|---|"]
    seen_before = 0
    for minute in range(int(samples[-1][0] // 60) + 1):
        inside = [s for s in samples if minute * 60 <= s[0] < (minute + 1) * 60]
        if not inside:
            continue
        lines.append(f"| {minute + 1} | {inside[-1][1] - seen_before:,} | {len(inside)} "
                     f"| {statistics.median(s[2] for s in inside):.2f} s "
                     f"| {statistics.median(s[3] for s in inside):,.0f} "
                     f"| {statistics.median(s[4] for s in inside) / 1e6:,.1f} |")
        seen_before = inside[-1][1]
    settled = [s for s in samples if s[0] >= 2 * WINDOW_S]
    if len(settled) >= 6:
        third = len(settled) // 3
        early, late = settled[:third], settled[-third:]
        lines.append("")
        lines.append("| after the first window | cycle p50 | state rows | storage MB |")
        lines.append("|---|---|---|---|")
        for name, part in (("first third", early), ("last third", late)):
            lines.append(f"| {name} | {statistics.median(s[2] for s in part):.2f} s "
                         f"| {statistics.median(s[3] for s in part):,.0f} "
                         f"| {statistics.median(s[4] for s in part) / 1e6:,.1f} |")
        ratio = [statistics.median(s[i] for s in late) / statistics.median(s[i] for s in early)
                 for i in (2, 3, 4)]
        lines.append(f"| last / first | {ratio[0]:.2f} | {ratio[1]:.2f} | {ratio[2]:.2f} |")
    return lines


if __name__ == "__main__":
    main()
