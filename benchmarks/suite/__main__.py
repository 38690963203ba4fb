"""The benchmark suite: every workload on sparkcq, Spark Structured Streaming and Flink SQL.

    .venv/bin/python -m benchmarks.suite                 # make bench: 5M events, 3 repetitions
    .venv/bin/python -m benchmarks.suite --quick         # make bench-quick: 1M events, once
    .venv/bin/python -m benchmarks.suite tumble --events 200000 --reps 1

Each workload reads its share of the events (``StreamSpec.scale``: the 1 s slide, the
100,000 keys and the sharing workloads a fifth, the join two streams of half each).

Writes ``benchmarks/results/<date>.md`` and a PNG plot next to it. Flink runs with the
Python of its own virtual environment (``FLINK_PYTHON``, default ``.venv-flink/bin/python``,
made by ``make .venv-flink/.installed``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os

from benchmarks.suite.compare import check_output
from benchmarks.suite.data import Input, read_events, write_events
from benchmarks.suite.engines import run_flink, run_spark, run_sparkcq
from benchmarks.suite.report import WorkloadResult, write_report
from benchmarks.suite.sweep import plot_sweep, sweep, sweep_table
from benchmarks.suite.workloads import WORKLOADS, Workload, hosts_frame
from sparkcq.session import make_session

SWEEP_RATES = [2_000, 5_000, 10_000, 20_000, 50_000, 100_000]
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def prepare_inputs(wl: Workload, events: int, data_dir: str) -> dict[str, Input]:
    """The workload's streams as CSV files (written once, reused), about 100,000 events per
    file (= per cycle), at least 4 files.
    """
    inputs = {}
    for spec in wl.streams:
        n = int(events * spec.scale)
        files = max(4, n // 100_000)
        path = os.path.join(data_dir, f"events-{n}-{files}-k{spec.keys}-s{spec.seed}")
        inputs[spec.name] = write_events(path, n, keys=spec.keys, files=files, seed=spec.seed)
    return inputs


def write_hosts(data_dir: str) -> str:
    """The traffic report's table as a CSV file; its directory."""
    path = os.path.join(data_dir, "hosts")
    os.makedirs(path, exist_ok=True)
    hosts_frame().to_csv(os.path.join(path, "hosts.csv"), index=False, header=False)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite")
    parser.add_argument("workloads", nargs="*", default=[*WORKLOADS, "sweep"],
                        help=f"of {', '.join(WORKLOADS)}, sweep (default: all)")
    parser.add_argument("--quick", action="store_true", help="1M events, one repetition")
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--engines", default="sparkcq,spark,flink")
    args = parser.parse_args()
    events = args.events or (1_000_000 if args.quick else 5_000_000)
    reps = args.reps or (1 if args.quick else 3)
    flink_python = os.environ.get("FLINK_PYTHON", os.path.join(HERE, "..", ".venv-flink",
                                                               "bin", "python"))
    data_dir = os.path.join(HERE, ".data")
    hosts = write_hosts(data_dir)
    spark = make_session(None, app_name="sparkcq-bench",
                         conf={"spark.sql.session.timeZone": "UTC"})
    results = []
    engines = args.engines.split(",")
    for name in args.workloads:
        if name == "sweep":
            continue
        wl = WORKLOADS[name]
        inputs = prepare_inputs(wl, events, data_dir)
        raw = {stream: read_events(inp) for stream, inp in inputs.items()}
        result = WorkloadResult(wl, sum(i.events for i in inputs.values()),
                                sum(i.files for i in inputs.values()) // len(inputs))
        for rep in range(reps):
            for engine in engines:
                if engine == "spark" and wl.spark is None:
                    continue
                try:
                    if engine == "sparkcq":
                        run = run_sparkcq(spark, wl, inputs, hosts)
                    elif engine == "spark":
                        run = run_spark(spark, wl, inputs, hosts)
                    else:
                        run = run_flink(flink_python, wl, inputs, hosts)
                except Exception as e:  # noqa: BLE001 - one engine's failure is reported
                    result.checks[engine] = f"failed: {str(e).strip().splitlines()[-1][:300]}"
                    print(f"{name} {engine} failed: {e}", flush=True)
                    continue
                assert run.output is not None
                if rep == 0:
                    result.checks[engine] = check_output(engine, run.output,
                                                         wl.expected(raw, engine), wl, raw)
                run.output = None
                result.runs.setdefault(engine, []).append(run)
                print(f"{name} rep {rep + 1}/{reps} {engine}: {run.events_per_s:,.0f} "
                      f"events/s, start-up {run.startup_s:.1f} s; output "
                      f"{result.checks[engine]}", flush=True)
        results.append(result)
    day = dt.date.today().isoformat()
    out = os.path.join(HERE, "results", day)
    extra = []
    if "sweep" in args.workloads:
        measure = 30.0 if args.quick else 45.0
        points = sweep(spark, SWEEP_RATES, measure / 2, measure)
        extra = [*sweep_table(points), "", f"![latency]({day}-latency.png)"]
        plot_sweep(out + "-latency.png", points)
    spark.stop()
    write_report(out, results, reps, extra)
    print(f"wrote {out}.md and {out}.png")


if __name__ == "__main__":
    main()
