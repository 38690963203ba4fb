"""State written per cycle against the cycle's change, for states of growing size.

    .venv/bin/python benchmarks/state_written.py [--states 10000,100000,1000000]

A window join ``a [RANGE w] JOIN b [RANGE w] ON a.k = b.k`` over numeric time, one event
per time unit on each side, holds ``w`` live elements per side: ``w`` is chosen so that
the two sides hold the state size asked for. The first cycle brings a window's worth of
events at once (the state fills in one cycle); then each cycle brings ``--change`` events
per side. The two sides' keys never meet, so no pair is formed and what a cycle costs is
its state alone. Per state size the report gives, over the ``--cycles`` steady cycles:
the rows of change, the state rows the cycles wrote (``CycleReport.state_rows_written``:
the rows of every state frame or run its commit materialised; the mean, as merges of
runs write more in some cycles, and the most), the bytes each cycle's checkpoint wrote
(a checkpoint directory, a checkpoint after every cycle: the files of its state folder)
and the cycles' seconds. State that costs what changed writes about the change, whatever
the state's size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from datetime import date
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession

from sparkcq import Engine
from sparkcq.session import make_session

RESULTS = Path(__file__).parent / "results"
QUERY = """
CREATE STREAM a (k BIGINT, t BIGINT) WITH (event_time='t');
CREATE STREAM b (k BIGINT, t BIGINT) WITH (event_time='t');
CREATE QUERY pairs AS ISTREAM SELECT a.k, a.t AS ta, b.t AS tb
  FROM a [RANGE {w}] JOIN b [RANGE {w}] ON a.k = b.k;
"""


def events(first: int, n: int, side: int) -> pa.Table:
    """``n`` events of one side from time ``first``, one per unit; the sides' keys never
    meet (even on a, odd on b).
    """
    t = pa.array(range(first, first + n), pa.int64())
    k = pa.array([2 * i + side for i in range(first, first + n)], pa.int64())
    return pa.table({"k": k, "t": t})


def measure(spark: SparkSession, state: int, change: int, cycles: int) -> dict[str, float]:
    """One state size: the steady cycles' change, state rows written and seconds."""
    w = state // 2
    folder = tempfile.mkdtemp(prefix="sparkcq-state-written-")
    eng = Engine(spark=spark, checkpoint_dir=folder)
    eng.execute(QUERY.format(w=w))
    t = 0
    saved = []  # the bytes of each cycle's checkpoint
    for n in [w, *[change] * (cycles + 2)]:
        for side, name in enumerate("ab"):
            eng.push(name, events(t, n, side), watermark=t + n)
        eng.run_cycle()
        eng.wait_for_checkpoint()
        saved.append(folder_bytes(os.path.join(folder, "state", str(eng.cycle))))
        t += n
    steady = eng.reports[3:]  # the fill, then two cycles for its windows to settle
    eng.stop()
    shutil.rmtree(folder, ignore_errors=True)
    steady_saved = saved[3:]
    return {"state": state, "change": 2 * change,
            "bytes": statistics.mean(steady_saved), "most_bytes": max(steady_saved),
            "fill_bytes": saved[0],
            "written": statistics.mean(r.state_rows_written for r in steady),
            "most": max(r.state_rows_written for r in steady),
            "seconds": statistics.median(r.seconds for r in steady),
            "slowest": max(r.seconds for r in steady)}


def folder_bytes(path: str) -> int:
    """The bytes of the files under ``path``."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _s, files in os.walk(path)
               for f in files)


def main(argv: list[str] | None = None) -> int:
    """Measure each state size and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--states", default="10000,100000,1000000")
    parser.add_argument("--change", type=int, default=1000, help="events per side a cycle")
    parser.add_argument("--cycles", type=int, default=16,
                        help="steady cycles measured (runs merge every fourth cycle)")
    parser.add_argument("--out", default=f"{date.today().isoformat()}-state-written")
    args = parser.parse_args(argv)
    spark = make_session(app_name="sparkcq-state-written")
    rows = []
    for state in (int(s) for s in args.states.split(",")):
        row = measure(spark, state, args.change, args.cycles)
        print(row, flush=True)
        rows.append(row)
    lines = [f"# State written per cycle ({date.today().isoformat()})", "",
             "`python benchmarks/state_written.py` (see its docstring): a window join over "
             f"numeric time holding the state asked for, {args.change:,} events per side a "
             f"cycle; {args.cycles} steady cycles. Written: the rows of the state frames "
             "each cycle's commit materialised (mean over the cycles, merges included, and "
             "the most in one cycle). Checkpoint bytes: the files of the state folder "
             "each cycle's checkpoint wrote (a checkpoint after every cycle; mean and most; "
             "the first, which holds the whole state, apart).", "",
             "| state rows | change rows a cycle | state rows written a cycle (mean) "
             "| written / change | most in a cycle | checkpoint bytes a cycle (mean) "
             "| most | first checkpoint (whole state) | cycle p50 | slowest cycle |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['state']:,} | {r['change']:,} | {r['written']:,.0f} "
                     f"| {r['written'] / r['change']:,.1f} | {r['most']:,} "
                     f"| {r['bytes']:,.0f} | {r['most_bytes']:,} | {r['fill_bytes']:,} "
                     f"| {r['seconds']:.2f} s | {r['slowest']:.2f} s |")
    path = RESULTS / f"{args.out}.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
