"""The benchmark suite: every workload on sparkcq, Spark Structured Streaming and Flink SQL.

    .venv/bin/python -m benchmarks.suite --sizes 1000000,3000000   # make bench: the marginal
                                                         # rate between 1M and 3M events,
                                                         # 3 repetitions of each
    .venv/bin/python -m benchmarks.suite                 # 1M events, 3 repetitions
    .venv/bin/python -m benchmarks.suite --quick         # make bench-quick: 1M events, once,
                                                         # 6 workloads and a short sweep
    .venv/bin/python -m benchmarks.suite --events 5000000   # the 5M-event data set
    .venv/bin/python -m benchmarks.suite tumble --events 200000 --reps 1
    .venv/bin/python -m benchmarks.suite backlog-tumble      # backlog mode (backlog.py)
    .venv/bin/python -m benchmarks.suite tumble --sizes 1e6,5e6   # one workload's marginal
                                                         # rate (marginal.py): one rule for all
    .venv/bin/python -m benchmarks.suite.from_log LOG    # the marginal table of a run cut
                                                         # short, from its log

Each workload reads its share of the events (``StreamSpec.scale``: the 1 s slide, the
100,000 keys, the sharing workloads and NEXMark a fifth, the join two streams of half
each). NEXMark q5, q7 and q8 run on Flink SQL too.

Writes ``benchmarks/results/<date>.md`` (``<date>-quick.md`` for ``--quick``,
``<date>-partial.md`` for named workloads, ``--out NAME`` to choose) and PNG plots next to
it. Flink runs with the
Python of its own virtual environment (``FLINK_PYTHON``, default ``.venv-flink/bin/python``,
made by ``make .venv-flink/.installed``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from collections.abc import Callable

from pyspark.sql import SparkSession

from benchmarks.nexmark.bench import check as nexmark_check
from benchmarks.nexmark.bench import expected as nexmark_expected
from benchmarks.nexmark.bench import run_query
from benchmarks.nexmark.generator import Config, write_input
from benchmarks.nexmark.queries import QUERIES
from benchmarks.suite.backlog import BACKLOG_ENGINES, backlog
from benchmarks.suite.compare import check_output
from benchmarks.suite.data import Input, read_events, write_events
from benchmarks.suite.engines import Run, collect_garbage, run_flink, run_spark, run_sparkcq
from benchmarks.suite.marginal import SizedRuns, marginal_table
from benchmarks.suite.report import WorkloadResult, write_report
from benchmarks.suite.sweep import plot_sweep, sweep, sweep_table
from benchmarks.suite.workloads import WORKLOADS, Workload, hosts_frame
from sparkcq.session import make_session

NEXMARK = [f"nexmark-{q}" for q in QUERIES]
NEXMARK_SCALE = 0.2  # of the suite's events
# event time at 1,000 events/s like the suite's own streams (the spec's default is 10,000):
# 200,000 events span 200 s, so q7 and q8 see 20 tumbling windows and q5 40 slides, not 2/4
NEXMARK_RATE = 1_000
SWEEP_RATES = [5_000, 20_000, 50_000, 100_000, 200_000, 400_000]
QUICK_SWEEP_RATES = [10_000, 50_000, 100_000]
BACKLOG = ["backlog-tumble"]
QUICK = ["tumble", "hop-1s", "over", "join", "shared-10", "nexmark-q5", "backlog-tumble",
         "sweep"]
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def prepare_inputs(wl: Workload, events: int, data_dir: str) -> dict[str, Input]:
    """The workload's streams as CSV files (written once, reused), about 100,000 events per
    file (= per cycle), at least 4 files.
    """
    inputs = {}
    for spec in wl.streams:
        n = int(events * spec.scale)
        files = max(4, n // 100_000)
        rate = "" if spec.rate == 1000 else f"-r{spec.rate}"
        path = os.path.join(data_dir, f"events-{n}-{files}-k{spec.keys}-s{spec.seed}{rate}")
        inputs[spec.name] = write_events(path, n, keys=spec.keys, files=files, seed=spec.seed,
                                         rate=spec.rate)
    return inputs


def write_hosts(data_dir: str) -> str:
    """The traffic report's table as a CSV file; its directory."""
    path = os.path.join(data_dir, "hosts")
    os.makedirs(path, exist_ok=True)
    hosts_frame().to_csv(os.path.join(path, "hosts.csv"), index=False, header=False)
    return path


def run_nexmark(spark: SparkSession, query: str, events: int, reps: int, engines: list[str],
                data_dir: str, flink_python: str, sized: SizedRuns) -> WorkloadResult:
    """A NEXMark query (``benchmarks/nexmark``) on sparkcq, Spark and (q5, q7, q8) Flink:
    NEXMark's generator writes the three streams (inside Spark), sparkcq and Spark read them
    one file per cycle, Flink from two lane files; each run's whole time goes to ``sized``.
    """
    files = max(4, events // 100_000)
    cfg = Config(events, NEXMARK_RATE, 0, 42)
    q = QUERIES[query]
    inp = write_input(spark, os.path.join(
        data_dir, f"nexmark-{cfg.events}-{files}-{cfg.rate}-{cfg.jitter_ms}-{cfg.seed}"),
        cfg, files, q.streams)
    want = nexmark_expected(query, inp)
    result = WorkloadResult(f"nexmark-{query}", f"NEXMark {query}: {q.title}",
                            f"{', '.join(q.streams)} rows of {events:,} NEXMark events",
                            0, files)
    for rep in range(reps):
        for engine in engines:
            if engine == "flink" and not q.flink:
                continue
            try:
                run = run_query(spark, query, engine, inp, flink_python)
            except Exception as e:  # noqa: BLE001 - one engine's failure is reported
                record_failure(result, engine, e)
                continue
            result.events = run.events
            record_run(result, sized, run, rep, reps, run.events,
                       lambda run=run: nexmark_check(run, want, query))
    return result


def run_workload(spark: SparkSession, wl: Workload, events: int, reps: int,
                 engines: list[str], data_dir: str, hosts: str, flink_python: str,
                 sized: SizedRuns) -> WorkloadResult:
    """``reps`` runs of ``wl`` over ``events`` on each engine, every output checked; each
    run's whole time (start-up included) also goes to ``sized``.
    """
    inputs = prepare_inputs(wl, events, data_dir)
    raw = {stream: read_events(inp) for stream, inp in inputs.items()}
    total = sum(i.events for i in inputs.values())
    result = WorkloadResult(wl.name, wl.title, wl.notes, total,
                            sum(i.files for i in inputs.values()) // len(inputs))
    for rep in range(reps):
        for engine in engines:
            if (engine == "spark" and wl.spark is None) or (engine == "flink" and not wl.flink):
                continue
            collect_garbage(spark)
            try:
                if engine == "sparkcq":
                    run = run_sparkcq(spark, wl, inputs, hosts)
                elif engine == "spark":
                    run = run_spark(spark, wl, inputs, hosts)
                else:
                    run = run_flink(flink_python, wl, inputs, hosts)
            except Exception as e:  # noqa: BLE001 - one engine's failure is reported
                record_failure(result, engine, e)
                continue
            output = run.output
            assert output is not None
            record_run(result, sized, run, rep, reps, total,
                       lambda engine=engine, output=output: check_output(
                           engine, output, wl.expected(raw, engine), wl, raw))
    return result


def record_failure(result: WorkloadResult, engine: str, error: Exception) -> None:
    """One engine's failed run: its last line as the engine's check, all of it printed."""
    result.checks[engine] = f"failed: {str(error).strip().splitlines()[-1][:300]}"
    print(f"{result.name} {engine} failed: {error}", flush=True)


def record_run(result: WorkloadResult, sized: SizedRuns, run: Run, rep: int, reps: int,
               events: int, check: Callable[[], str]) -> None:
    """One timed run into ``result`` and its whole time into ``sized``; the output is
    checked in the first repetition (``check``) and then let go. Prints the log line
    ``from_log.py`` reads back.
    """
    engine = run.engine
    if rep == 0:
        result.checks[engine] = check()
        if not result.checks[engine].startswith("ok"):
            sized.checks[engine] = result.checks[engine]
        sized.checks.setdefault(engine, "ok")
    run.output = None
    result.runs.setdefault(engine, []).append(run)
    sized.add(engine, events, run.startup_s + run.run_s)
    print(f"{result.name} {events:,} events rep {rep + 1}/{reps} {engine}: "
          f"{run.events_per_s:,.0f} events/s, start-up {run.startup_s:.1f} s, whole "
          f"{run.startup_s + run.run_s:.1f} s; output {result.checks[engine]}", flush=True)


def warm_up(spark: SparkSession, name: str, events: int, engines: list[str], data_dir: str,
            hosts: str, flink_python: str) -> None:
    """One untimed run of workload ``name`` over ``events`` on ``engines``."""
    unused = SizedRuns(name, name)
    if name.startswith("nexmark-"):
        run_nexmark(spark, name.removeprefix("nexmark-"), int(events * NEXMARK_SCALE), 1,
                    engines, data_dir, flink_python, unused)
    else:
        run_workload(spark, WORKLOADS[name], events, 1, engines, data_dir, hosts,
                     flink_python, unused)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite")
    parser.add_argument("workloads", nargs="*",
                        help=f"of {', '.join([*WORKLOADS, *NEXMARK, *BACKLOG])}, sweep "
                             "(default: all; "
                             f"--quick: {', '.join(QUICK)})")
    parser.add_argument("--quick", action="store_true",
                        help="1M events, one repetition, a subset of the workloads")
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--engines", default="sparkcq,spark,flink")
    parser.add_argument("--sizes", default=None,
                        help="SMALL,LARGE: time every engine whole over both input sizes and "
                             "report the marginal rate (marginal.py) beside the usual table "
                             "(which is for the larger size)")
    parser.add_argument("--out", default=None,
                        help="report name under benchmarks/results (default: the date, "
                             "<date>-quick for --quick, <date>-partial for named workloads)")
    args = parser.parse_args()
    day = dt.date.today().isoformat()
    report = args.out or (f"{day}-partial" if args.workloads else
                        f"{day}-quick" if args.quick else day)
    events = args.events or 1_000_000
    reps = args.reps or (1 if args.quick else 3)
    args.workloads = args.workloads or (QUICK if args.quick else [*WORKLOADS, *NEXMARK,
                                                                  *BACKLOG, "sweep"])
    flink_python = os.environ.get("FLINK_PYTHON", os.path.join(HERE, "..", ".venv-flink",
                                                               "bin", "python"))
    data_dir = os.path.join(HERE, ".data")
    hosts = write_hosts(data_dir)
    # the status store keeps enough jobs and stages for a whole run (spark_work.py)
    spark = make_session(None, app_name="sparkcq-bench",
                         conf={"spark.sql.session.timeZone": "UTC",
                               "spark.ui.retainedJobs": "5000",
                               "spark.ui.retainedStages": "5000"})
    results = []
    engines = args.engines.split(",")
    extra: list[str] = []
    sizes = sorted(int(float(s)) for s in args.sizes.split(",")) if args.sizes else []
    if sizes and len(sizes) != 2:
        parser.error("--sizes takes two input sizes, SMALL,LARGE")
    marginal: list[SizedRuns] = []
    warmed = False
    for name in args.workloads:
        if name == "sweep":
            continue
        if name.startswith("backlog-"):
            wl = WORKLOADS[name.removeprefix("backlog-")]
            sized = SizedRuns(name, f"backlog: {wl.title}")
            for size in sizes or [events]:
                extra += [*backlog(spark, wl, prepare_inputs(wl, size, data_dir), hosts, reps,
                                   sized), ""]
            if sizes:
                extra = [*marginal_table([sized], list(BACKLOG_ENGINES)), "", *extra]
            continue
        if not warmed:  # the JVM warmed up before the first timed run, once: a quick
            # run's first workload was otherwise timed on a cold JVM, sparkcq first
            warm_up(spark, name, sizes[0] if sizes else events,
                    [e for e in engines if e != "flink"], data_dir, hosts, flink_python)
            warmed = True
        sized = SizedRuns(name, name)
        for size in sizes or [events]:
            if name.startswith("nexmark-"):
                result = run_nexmark(spark, name.removeprefix("nexmark-"),
                                     int(size * NEXMARK_SCALE), reps, engines, data_dir,
                                     flink_python, sized)
            else:
                result = run_workload(spark, WORKLOADS[name], size, reps, engines, data_dir,
                                      hosts, flink_python, sized)
        results.append(result)
        if sizes:
            marginal.append(sized)
    out = os.path.join(HERE, "results", report)
    if marginal:
        extra = [*marginal_table(marginal, engines), "", *extra]
    if "sweep" in args.workloads:
        # written first: a sweep that fails (it runs one engine for hundreds of cycles)
        # leaves the timed workloads' report
        write_report(out, results, reps, [*extra, "The sweep did not finish."])
        if args.quick:
            points = sweep(spark, QUICK_SWEEP_RATES, 5.0, 15.0)
        else:
            points = sweep(spark, SWEEP_RATES, 15.0, 30.0)
        extra += [*sweep_table(points), "",
                  f"![latency]({os.path.basename(out)}-latency.png)"]
        plot_sweep(out + "-latency.png", points)
    spark.stop()
    write_report(out, results, reps, extra)
    print(f"wrote {out}.md and {out}.png")


if __name__ == "__main__":
    main()
