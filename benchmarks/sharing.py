"""Cycle time with 1, 10 and 50 queries sharing a filter + [RANGE] subtree.

    .venv/bin/python benchmarks/sharing.py --queries 1 10 50 --batch 50000 --cycles 8

Each query reads ``readings [RANGE 60 SECONDS SLIDE 10 SECONDS]`` filtered on
``value > 0.1`` and differs in its final aggregate (function, argument expression, HAVING
threshold). The generator feeds ``batch`` events a cycle (pace='fast'); the first two cycles
warm up and are not counted. The engine runs with its defaults (rows per cycle counted).
Reports the median cycle time per query count and the ratio to the 1-query run, and checks
that EXPLAIN GLOBAL holds the shared window once.
"""

from __future__ import annotations

import argparse
import statistics
import time

from sparkcq import Engine

FUNCS = ["avg", "sum", "max", "min", "count"]


def query(i: int) -> str:
    """The i-th query: same filter and window, its own aggregate."""
    func = FUNCS[i % len(FUNCS)]
    arg = f"value * {1 + i // len(FUNCS)}"
    return (f"CREATE QUERY q{i} AS SELECT sensor, {func}({arg}) AS r "
            f"FROM readings [RANGE 60 SECONDS SLIDE 10 SECONDS] WHERE value > 0.1 GROUP BY sensor "
            f"HAVING count(*) > {i % 3}")


def measure(n: int, batch: int, cycles: int) -> tuple[float, list[float], str]:
    eng = Engine()
    eng.execute(f"""CREATE STREAM readings (sensor STRING, value DOUBLE, t TIMESTAMP)
        WITH (event_time='t', source='generator', rate='1000', keys='100', pace='fast',
              batch='{batch}', limit='{batch * cycles}')""")
    for i in range(n):
        eng.execute(query(i))
    times = []
    while eng.has_pending_input():
        began = time.perf_counter()
        eng.run_cycle()
        times.append(time.perf_counter() - began)
        eng.sinks["memory"].clear()
    explain = eng.explain_global()
    eng.stop()
    return statistics.median(times[2:]), times, explain


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--batch", type=int, default=50_000, help="events per cycle")
    parser.add_argument("--cycles", type=int, default=8)
    args = parser.parse_args()
    base = None
    for n in args.queries:
        median, times, explain = measure(n, args.batch, args.cycles)
        windows = [line for line in explain.splitlines() if "RANGE" in line]
        base = base or median
        print(f"{n:3d} queries: median cycle {median:.2f} s  ratio {median / base:.2f}  "
              f"windows in global plan: {len(windows)}  cycles: "
              + " ".join(f"{t:.2f}" for t in times), flush=True)


if __name__ == "__main__":
    main()
