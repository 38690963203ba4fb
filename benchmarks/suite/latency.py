"""Cycle latency of small cycles: sparkcq's cycle against Spark Structured Streaming's
micro-batch over the same batches (files of 1,000 events, one per cycle / trigger).

    .venv/bin/python -m benchmarks.suite.latency                 # both workloads, 3 reps
    .venv/bin/python -m benchmarks.suite.latency tumble --cycles 40 --reps 1

Workloads:

- ``tumble``: one tumbling 10 s SUM, COUNT per key (the suite's ``tumble``), on sparkcq
  and on Spark SS;
- ``mixed-50``: 50 queries on one stream, 25 grouped aggregates over 5 tumbling window
  sizes and 25 filters, on sparkcq only (Spark SS would run 50 streaming queries, each with
  micro-batches of its own: no one cycle to compare); its target is relative to sparkcq's
  own one-query cycle.
- ``window-join``: two streams of 1,000 events a second each (10,000 keys) joined on the
  key over ``[RANGE 60 SECONDS]`` on both sides (Spark SS: a stream-stream join within
  60 s either way), one second of each stream per cycle, 100 cycles; only the cycles after
  the first 60 are timed, once each side holds a minute of state.

Fair rule: both engines run in the same JVM, warm (one untimed round of each first, as a
JVM's first minutes run 2-3x slower), alternately; each run's first ``SKIP`` cycles are
left out. A sparkcq cycle is timed around ``Engine.run_cycle`` (input taken, evaluated,
committed, delivered), a Spark SS batch by its own ``triggerExecution``. Every run's
output is checked against pandas. Per cycle beside each figure: driver time alone (wall
minus the time a Spark job ran), jobs, stages, tasks and shuffled records.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import SparkSession

from benchmarks.suite.compare import check_output
from benchmarks.suite.data import Input, read_events, write_events
from benchmarks.suite.engines import run_structured_streaming, sparkcq_engine
from benchmarks.suite.spark_work import SparkWork, job_group, spark_work
from benchmarks.suite.workloads import TUMBLE, Workload, window_join
from sparkcq.session import make_session

EVENTS_PER_CYCLE = 1_000
SKIP = 3  # cycles of each run left out of the quantiles (a new plan's first cycles)
JOIN_WINDOW = 60  # seconds, each side's window in ``window-join``
JOIN_CYCLES = 100  # cycles of ``window-join``, of which the first ``JOIN_WINDOW`` untimed
JOIN_KEYS = 10_000
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WINDOW_SIZES = (5, 10, 20, 30, 60)  # seconds, for mixed-50's aggregates
MIXED_AGGS = ("sum", "count", "avg", "min", "max")


def _mixed_queries() -> tuple[str, ...]:
    """25 grouped aggregates (5 functions x 5 window sizes), then 25 filters."""
    aggs = [f"RSTREAM SELECT k, CAST({fn}(v) AS DOUBLE) AS x FROM events "
            f"[CUT ON ts BY {size} SECONDS] GROUP BY k"
            for size in WINDOW_SIZES for fn in MIXED_AGGS]
    filters = [f"SELECT k, v FROM events WHERE v > {50 + 2 * i}" for i in range(25)]
    return (*aggs, *filters)


def _mixed_expected(events: pd.DataFrame) -> list[pd.DataFrame]:
    """Each mixed-50 query's rows, computed by pandas: ``(w, k, x)`` for the aggregates
    (``w`` the window's end), ``(ts, k, v)`` for the filters.
    """
    out = []
    for size in WINDOW_SIZES:
        w = events["ts"].dt.floor(f"{size}s") + pd.Timedelta(seconds=size)
        grouped = events.assign(w=w).groupby(["w", "k"])["v"]
        for fn in MIXED_AGGS:
            x = grouped.agg({"avg": "mean", "count": "size"}.get(fn, fn)).astype("float64")
            out.append(x.rename("x").reset_index())
    for i in range(25):
        out.append(events.loc[events["v"] > 50 + 2 * i, ["ts", "k", "v"]])
    return out


@dataclass(frozen=True)
class Timed:
    """One engine's timed run: cycle latencies and what Spark did in them."""

    engine: str
    cycles: list[float]
    work: SparkWork
    check: str

    def quantile(self, q: float) -> float:  # noqa: D102
        return statistics.quantiles(self.cycles, n=100, method="inclusive")[int(q * 100) - 1]

    def per_cycle(self) -> dict[str, float]:
        """Driver time alone and Spark's work, per timed cycle."""
        n = len(self.cycles)
        return {"driver_s": max(0.0, sum(self.cycles) - self.work.busy_s) / n,
                "jobs": self.work.jobs / n, "stages": self.work.stages / n,
                "tasks": self.work.tasks / n, "shuffled": self.work.shuffled / n}


def run_sparkcq_cycles(spark: SparkSession, wl: Workload, inputs: dict[str, Input],
                       check: Callable[[dict[str, pd.DataFrame]], str],
                       skip: int = SKIP) -> Timed:
    """``wl``'s queries over ``inputs`` (streams by name), one 1,000-event file of each per
    cycle, each cycle after the first ``skip`` timed.
    """
    eng = sparkcq_engine(spark, wl, inputs, "")
    times: list[float] = []
    group = f"sparkcq-latency-{wl.name}-{time.monotonic_ns()}"
    began = None
    with job_group(spark, group):
        while eng.has_pending_input():
            t0 = time.time()
            eng.run_cycle()
            times.append(time.time() - t0)
            if len(times) == skip:
                began = time.time()
    assert began is not None, f"fewer cycles than {skip}"
    work = spark_work(spark, [group], since=began, until=time.time())
    results = {f"q{i}": eng.results(f"q{i}") for i in range(wl.queries)}
    eng.stop()
    # the last cycle only ends the bounded input (no file): left out as well
    return Timed("sparkcq", times[skip:-1], work, check(results))


def run_spark_batches(spark: SparkSession, wl: Workload, inputs: dict[str, Input],
                      check: Callable[[pd.DataFrame], str], skip: int = SKIP) -> Timed:
    """``wl`` as one Structured Streaming query over ``inputs`` (streams by name), one
    1,000-event file of each per micro-batch, each batch after the first ``skip`` timed.
    """
    assert wl.spark is not None
    frames = {name: spark.readStream.schema("k INT, v DOUBLE, ts TIMESTAMP")
              .option("header", "false").option("maxFilesPerTrigger", 1).csv(inp.chunks_path)
              for name, inp in inputs.items()}
    run = run_structured_streaming(spark, wl.name, wl.spark(frames), list(wl.columns),
                                   sum(inp.events for inp in inputs.values()))
    assert run.work is not None and run.output is not None
    # the first batch is start-up (left out by the runner); leave out ``skip`` in all
    return Timed("spark", run.cycles[skip - 1:], run.work, check(run.output))


def tumble_checks(events: pd.DataFrame) -> tuple[Callable[[dict[str, pd.DataFrame]], str],
                                                 Callable[[pd.DataFrame], str]]:
    """Checks of each engine's tumble output against pandas."""
    expected = TUMBLE.expected({"events": events}, "")

    def of_sparkcq(results: dict[str, pd.DataFrame]) -> str:
        got = results["q0"].rename(columns={"_ts": "w"})[list(TUMBLE.columns)]
        return check_output("sparkcq", got, expected, TUMBLE, {"events": events})

    def of_spark(got: pd.DataFrame) -> str:
        return check_output("spark", got, expected, TUMBLE, {"events": events})

    return of_sparkcq, of_spark


def join_checks(wl: Workload, events: dict[str, pd.DataFrame]) -> tuple[
        Callable[[dict[str, pd.DataFrame]], str], Callable[[pd.DataFrame], str]]:
    """Checks of each engine's join output against pandas: the same pairs."""
    expected = wl.expected(events, "")

    def of_sparkcq(results: dict[str, pd.DataFrame]) -> str:
        return check_output("sparkcq", results["q0"][list(wl.columns)], expected, wl, events)

    def of_spark(got: pd.DataFrame) -> str:
        return check_output("spark", got, expected, wl, events)

    return of_sparkcq, of_spark


def mixed_check(events: pd.DataFrame) -> Callable[[dict[str, pd.DataFrame]], str]:
    """A check of sparkcq's mixed-50 output against pandas, query by query."""
    expected = _mixed_expected(events)

    def check(results: dict[str, pd.DataFrame]) -> str:
        rows = 0
        for i, want in enumerate(expected):
            got = results[f"q{i}"]
            if "x" in want.columns:  # an aggregate: RSTREAM rows at the window's end
                got = got.rename(columns={"_ts": "w"})
                cols, times = ["w", "k", "x"], ["w"]
            else:
                got = got.rename(columns={"_ts": "ts"})
                cols, times = ["ts", "k", "v"], ["ts"]
            wl = Workload(f"q{i}", "", (), None, (), "", tuple(cols), lambda e, g: e,
                          times=tuple(times))
            # a window that ends after the last event is never complete (bounded input
            # ends it: sparkcq emits it; pandas counts it too)
            verdict = check_output("sparkcq", got, want, wl, {"events": events})
            if not verdict.startswith("ok"):
                return f"q{i}: {verdict}"
            rows += len(got)
        return f"ok: {rows} rows in {len(expected)} queries"

    return check


MIXED = Workload(
    name="mixed-50",
    title="50 queries: 25 grouped aggregates over 5 tumbling window sizes, 25 filters",
    sparkcq=_mixed_queries(),
    spark=None, flink=(), flink_sink="", columns=(), expected=lambda e, g: e,
)


def summarise(name: str, runs: list[Timed]) -> dict[str, float | str]:
    """Medians over the timed runs of one engine."""
    med = statistics.median
    per = [r.per_cycle() for r in runs]
    return {"workload": name, "engine": runs[0].engine,
            "p50": med(r.quantile(0.5) for r in runs), "p99": med(r.quantile(0.99) for r in runs),
            **{k: med(p[k] for p in per) for k in per[0]},
            "check": "; ".join(dict.fromkeys(r.check for r in runs))}


def write_report(rows: list[dict[str, float | str]], out: str, cycles: int, reps: int) -> str:
    """The results table as Markdown under ``benchmarks/results/``."""
    lines = [f"# Small-cycle latency ({dt.date.today().isoformat()})", "",
             f"{EVENTS_PER_CYCLE:,} events per cycle, {cycles} cycles per run, the first "
             f"{SKIP} and the end-of-input cycle left out; medians over {reps} timed runs "
             "per engine, after one untimed round of each (`python -m "
             "benchmarks.suite.latency`). Per cycle: driver alone (wall minus Spark jobs "
             "running), jobs, stages, tasks, records shuffled."
             + (f" `window-join`: {JOIN_CYCLES} cycles per run, the first {JOIN_WINDOW} "
                "left out (each side then holds a minute of state)."
                if any(r["workload"] == "window-join" for r in rows) else ""), "",
             "| workload | engine | p50 | p99 | driver alone | jobs | stages | tasks "
             "| shuffled | output |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['engine']} | {r['p50']:.3f} s | {r['p99']:.3f} s "
                     f"| {r['driver_s']:.3f} s | {r['jobs']:.1f} | {r['stages']:.1f} "
                     f"| {r['tasks']:.1f} | {r['shuffled']:,.0f} | {r['check']} |")
    path = os.path.join(HERE, "results", f"{out}.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def join_runners(spark: SparkSession, data: str) -> list[Callable[[], Timed]]:
    """The ``window-join`` runs of both engines over two streams of ``JOIN_CYCLES`` files."""
    wl = window_join(JOIN_WINDOW, JOIN_KEYS, name="window-join")
    inputs = {spec.name: write_events(
        os.path.join(data, f"latency-join-{spec.name}-{JOIN_CYCLES}x{EVENTS_PER_CYCLE}"),
        JOIN_CYCLES * EVENTS_PER_CYCLE, keys=JOIN_KEYS, files=JOIN_CYCLES, seed=spec.seed)
        for spec in wl.streams}
    events = {name: read_events(inp) for name, inp in inputs.items()}
    of_sparkcq, of_spark = join_checks(wl, events)
    return [lambda: run_sparkcq_cycles(spark, wl, inputs, of_sparkcq, skip=JOIN_WINDOW),
            lambda: run_spark_batches(spark, wl, inputs, of_spark, skip=JOIN_WINDOW)]


def main(argv: list[str] | None = None) -> None:  # noqa: D103
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workloads", nargs="*", default=["tumble", "mixed-50"])
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=f"{dt.date.today().isoformat()}-latency")
    args = parser.parse_args(argv)
    spark = make_session(app_name="sparkcq-latency")
    data = os.path.join(HERE, ".data")
    inp = write_events(os.path.join(data, f"latency-{args.cycles}x{EVENTS_PER_CYCLE}"),
                       args.cycles * EVENTS_PER_CYCLE, files=args.cycles)
    events = read_events(inp)
    of_sparkcq, of_spark = tumble_checks(events)
    runners: dict[str, list[Callable[[], Timed]]] = {
        "tumble": [lambda: run_sparkcq_cycles(spark, TUMBLE, {"events": inp}, of_sparkcq),
                   lambda: run_spark_batches(spark, TUMBLE, {"events": inp}, of_spark)],
        "mixed-50": [lambda: run_sparkcq_cycles(spark, MIXED, {"events": inp},
                                                mixed_check(events))],
    }
    if "window-join" in args.workloads:
        runners["window-join"] = join_runners(spark, data)
    chosen = {name: runners[name] for name in args.workloads}
    for engines in chosen.values():  # warm-up round, untimed
        for run in engines:
            run()
    timed: dict[tuple[str, int], list[Timed]] = {}
    for _rep in range(args.reps):
        for name, engines in chosen.items():
            for i, run in enumerate(engines):
                result = run()
                timed.setdefault((name, i), []).append(result)
                print(f"{name} {result.engine}: p50 {result.quantile(0.5):.3f} s, "
                      f"p99 {result.quantile(0.99):.3f} s; {result.check}", flush=True)
    rows = [summarise(name, runs) for (name, _i), runs in timed.items()]
    print(f"written: {write_report(rows, args.out, args.cycles, args.reps)}")


if __name__ == "__main__":
    main()
