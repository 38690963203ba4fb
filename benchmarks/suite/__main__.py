"""The benchmark suite: every workload on sparkcq, Spark Structured Streaming and Flink SQL.

    .venv/bin/python -m benchmarks.suite                 # make bench: 5M events, 3 repetitions
    .venv/bin/python -m benchmarks.suite --quick         # make bench-quick: 1M events, once
    .venv/bin/python -m benchmarks.suite tumble --events 200000 --reps 1

Writes ``benchmarks/results/<date>.md`` and a PNG plot next to it. Flink runs with the
Python of its own virtual environment (``FLINK_PYTHON``, default ``.venv-flink/bin/python``,
made by ``make .venv-flink/.installed``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics

from benchmarks.suite.compare import check_output
from benchmarks.suite.data import read_events, write_events
from benchmarks.suite.engines import Run, run_flink, run_spark, run_sparkcq
from benchmarks.suite.report import write_report
from benchmarks.suite.workloads import WORKLOADS
from sparkcq.session import make_session

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite")
    parser.add_argument("workloads", nargs="*", default=sorted(WORKLOADS))
    parser.add_argument("--quick", action="store_true", help="1M events, one repetition")
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--files", type=int, default=None, help="input files (= cycles)")
    parser.add_argument("--engines", default="sparkcq,spark,flink")
    args = parser.parse_args()
    events = args.events or (1_000_000 if args.quick else 5_000_000)
    reps = args.reps or (1 if args.quick else 3)
    files = args.files or max(4, events // 100_000)
    flink_python = os.environ.get("FLINK_PYTHON", os.path.join(HERE, "..", ".venv-flink",
                                                               "bin", "python"))
    inp = write_events(os.path.join(HERE, ".data", f"events-{events}-{files}"), events,
                       files=files)
    raw = read_events(inp)
    spark = make_session(None, app_name="sparkcq-bench",
                         conf={"spark.sql.session.timeZone": "UTC"})
    runs: dict[tuple[str, str], list[Run]] = {}
    checks: dict[tuple[str, str], str] = {}
    engines = args.engines.split(",")
    for name in args.workloads:
        wl = WORKLOADS[name]
        expected = wl.expected(raw)
        for rep in range(reps):
            for engine in engines:
                if engine == "sparkcq":
                    run = run_sparkcq(spark, wl, inp)
                elif engine == "spark":
                    run = run_spark(spark, wl, inp)
                else:
                    run = run_flink(flink_python, wl, inp)
                assert run.output is not None
                checks[(name, engine)] = check_output(engine, run.output, expected, wl)
                run.output = run.output if rep == 0 else None
                runs.setdefault((name, engine), []).append(run)
                print(f"{name} rep {rep + 1}/{reps} {engine}: {run.events_per_s:,.0f} events/s, "
                      f"start-up {run.startup_s:.1f} s; output {checks[(name, engine)]}",
                      flush=True)
    spark.stop()
    day = dt.date.today().isoformat()
    out = os.path.join(HERE, "results", day)
    write_report(out, runs, checks, events, reps, files)
    print(f"wrote {out}.md and {out}.png")
    for (name, engine), rs in sorted(runs.items()):
        print(name, engine, f"{statistics.median(r.events_per_s for r in rs):,.0f} events/s")


if __name__ == "__main__":
    main()
