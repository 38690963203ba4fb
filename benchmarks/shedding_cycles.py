"""What a shedding join's cycle costs per input row, in cycles of a fixed size.

    .venv/bin/python -m benchmarks.shedding_cycles [--rate 50475] [--seconds 100]
        [--step-ms 2500] [--z 0.01] [--mode adaptive]

``benchmarks/shedding.py`` feeds the join in real time, where a slow cycle makes the next
one larger: its cycle times say whether the join keeps up, not what a row costs. Here the
same input (``correlated_streams``, 100,000 keys, 60 s windows, 10 sub-windows) comes in
cycles of ``--step-ms`` of event time each, as fast as they run, at a fixed ``--z``
(``--mode off``: unshed). Each cycle prints its seconds, rows and Spark work; at the end,
over the cycles after the first window: task time and wall time per input row. At three
times a sustainable rate a join keeps up only while its wall time per row is under
``1 / (3 * rows per second)``.

The input is made once per rate and length, in Python, and kept as Arrow files
(``benchmarks/.data``); the pushes are slices of it, so the clock counts no conversion.
"""

from __future__ import annotations

import argparse
import bisect
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather

from benchmarks.shedding import LAG, Setup, new_engine
from sparkcq.session import make_session
from sparkcq.testing import correlated_streams

CACHE = Path(__file__).parent / ".data"


def inputs(rate: int, seconds: int, keys: int) -> list[pa.Table]:
    """Streams ``a`` and ``b`` at ``rate`` a-tuples per second for ``seconds``, made once."""
    paths = [CACHE / f"shedding-{rate}-{seconds}-{keys}-{name}.arrow" for name in "ab"]
    if not all(p.exists() for p in paths):
        CACHE.mkdir(parents=True, exist_ok=True)
        streams = correlated_streams(11, seconds * 1000, rate / 1000, [LAG], keys=keys)
        for path, rows in zip(paths, streams, strict=True):
            feather.write_feather(pa.Table.from_pylist(rows), str(path))
    return [feather.read_table(str(p)) for p in paths]


def main() -> None:  # noqa: D103
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=50_475, help="a-tuples per second")
    parser.add_argument("--seconds", type=int, default=100, help="of event time")
    parser.add_argument("--step-ms", type=int, default=2_500, help="event time per cycle")
    parser.add_argument("--z", type=float, default=0.01)
    parser.add_argument("--mode", default="adaptive", choices=["off", "random", "adaptive"])
    args = parser.parse_args()
    setup = Setup(60_000, 100_000, 2.0)
    tables = inputs(args.rate, args.seconds, setup.keys)
    times = [t.column("t").to_pylist() for t in tables]
    eng = new_engine(make_session(None), setup, args.mode,
                     None if args.mode == "off" else args.z)
    pushed = [0, 0]
    rows = task = wall = 0.0
    for mark in range(args.step_ms, args.seconds * 1000, args.step_ms):
        for i, (name, table) in enumerate(zip("ab", tables, strict=True)):
            upto = bisect.bisect_left(times[i], mark, lo=pushed[i])
            eng.push(name, table.slice(pushed[i], upto - pushed[i]), watermark=mark)
            pushed[i] = upto
        eng.run_cycle()
        cost = eng.cycle_costs(1)[-1]
        work = cost.work
        print(f"{mark / 1000:6.1f} s: {cost.seconds:.2f} s, {cost.rows_in:,} rows, "
              f"{work.jobs} jobs, {work.stages} stages, {work.tasks} tasks, task time "
              f"{work.task_s:.2f} s, {work.shuffled:,} records shuffled", flush=True)
        if mark > setup.window_ms + args.step_ms:  # a window is held
            rows += cost.rows_in
            task += work.task_s
            wall += cost.seconds
    eng.stop()
    if not rows:
        print("no cycle after the first window: run for longer than the window")
        return
    print(f"after the first window: {task / rows * 1e6:.2f} us of task time and "
          f"{wall / rows * 1e6:.2f} us of wall time per input row")


if __name__ == "__main__":
    main()
