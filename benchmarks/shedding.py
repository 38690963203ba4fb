"""Load shedding of a windowed stream join (docs/shedding.md), measured.

    .venv/bin/python benchmarks/shedding.py [--quick] [--window-ms 10000] [--keys 2]
        [--budget 8] [--rates 125,250,500,1000,2000,4000]

Input: ``sparkcq.testing.correlated_streams``, numeric event time in milliseconds; each
a-tuple's partner in b (same key and value) lies 2-3 s behind it, b also carries one
unmatched tuple per a-tuple; 2 keys. The query joins both streams over 10 s windows on
the key and a band on the value, so every same-key pair in the windows is compared (the
work grows with the windows' contents) and only partners match. With few keys the join's
work, not what the engine spends on every row, is what outruns it: the case shedding is
for (with 10 keys, at three times the sustainable rate the engine's cost per row alone
nearly filled the cycles)::

    SELECT a.k, a.v FROM a [RANGE 10000] JOIN b [RANGE 10000]
    ON a.k = b.k AND abs(a.v - b.v) < 1

Three parts, one Spark session:

1. **Sustainable rate.** After a warm-up run (not reported: the JVM compiles the join's
   code in its first cycles), the unshed join fed in real time (event time follows the
   wall clock; each cycle takes what arrived during the last) at rising rates; the highest
   rate whose cycles stay within the budget (p99 of the cycles after a third of the run,
   and after a window's length: once a window is held) is the sustainable one. A run
   lasts twice the window at least.
2. **Three times that rate**, each mode for the same wall time: ``off`` (cycle times grow
   without bound: the run stops after a cycle of ``GAVE_UP`` budgets), ``random`` and
   ``adaptive`` (z adapts to the budget). Cycle time over time is plotted; p99 is taken
   after the first quarter, in which z finds its level. Every emitted pair is checked
   against the true partners.
3. **Output at a fixed share** (``throttle='0.3'``), the same input in cycles of one second
   of event time: the unshed join, ``random`` and ``adaptive``. Every emitted pair is
   checked against the partners computed here in Python (no false pair), and the output
   is compared: adaptive against random, and against the unshed join.
4. **The shapes of time correlation** (``SHAPES``), each at the fixed share: partners 2-3 s
   behind their a-tuples (a probes b's window), ahead of them (b probes a's), on both
   sides, and behind for the first half and ahead for the second (the correlation shifts).
   ``--shapes-only`` runs this part alone.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from sparkcq import Engine
from sparkcq.session import make_session
from sparkcq.testing import Lag, correlated_streams

RESULTS = Path(__file__).parent / "results"
LAG = Lag(0, 2_000, 3_000)


def shapes(length_ms: int) -> dict[str, list[Lag]]:
    """Where an a-tuple's partner lies (``Lag``: how far behind it), by shape."""
    return {
        "behind (a probes)": [LAG],
        "ahead (b probes)": [Lag(0, -3_000, -2_000)],
        "both sides": [Lag(0, -1_500, 1_500)],
        "shifting (behind, then ahead)": [LAG, Lag(length_ms // 2, -3_000, -2_000)],
    }
#: an unshed run at three times its sustainable rate stops after a cycle this many budgets
#: long: it has shown that its cycles grow without bound
GAVE_UP = 4
STREAMS = """
    CREATE STREAM a (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
    CREATE STREAM b (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
"""


@dataclass(frozen=True)
class Setup:
    """The join measured: its windows, keys and latency budget.

    The default is the join of 2026-11 (``--window-ms 10000 --keys 2 --budget 8``): with
    two keys every a-tuple is compared with half of b's window, so the join's work grows
    with the windows' contents. The budget was above the engine's own cost of a cycle on
    a 2-core machine then (about 3.5 s for a join of a few hundred tuples; issue 31).
    """

    window_ms: int = 10_000
    keys: int = 2
    budget_s: float = 8.0

    def join_sql(self) -> str:
        """The query's SELECT."""
        w = self.window_ms
        return (f"SELECT a.k AS k, a.v AS v FROM a [RANGE {w}] JOIN b [RANGE {w}] "
                "ON a.k = b.k AND abs(a.v - b.v) < 1")

    def shedding_clause(self, mode: str, throttle: float | None = None) -> str:
        """The query's WITH clause for ``mode`` (``off``: none)."""
        if mode == "off":
            return ""
        fixed = f", throttle='{throttle}'" if throttle is not None else ""
        return (f"WITH (shedding='{mode}', latency_budget='{self.budget_s:g} SECONDS', "
                f"basic_windows='10'{fixed})")

    def describe(self) -> str:
        """The join in words, for the report."""
        return (f"Join of two {self.window_ms / 1000:g} s windows on {self.keys} keys, "
                "lag-correlated input (partners 2-3 s back, one unmatched b-tuple per "
                f"a-tuple), budget {self.budget_s:g} s, 10 sub-windows; 2 cores")


def new_engine(spark, setup: Setup, mode: str,  # noqa: ANN001
               throttle: float | None = None) -> Engine:
    eng = Engine(spark=spark)
    eng.execute(STREAMS)
    eng.execute(f"CREATE QUERY j {setup.shedding_clause(mode, throttle)} AS "
                f"{setup.join_sql()}")
    return eng


@dataclass
class RealTimeRun:
    """One mode at one offered rate, fed in real time."""

    mode: str
    rate: int  # a-tuples per second (b has about twice as many)
    cycles: list[tuple[float, float, int]] = field(default_factory=list)  # (at, s, rows)
    zs: list[float] = field(default_factory=list)
    output: int = 0  # pairs emitted
    false_pairs: int = 0
    processed_share: float = 1.0  # of the partners the probers could have met
    gave_up: bool = False

    def p99(self, skip_s: float) -> float:
        """p99 of the cycle times of cycles that began ``skip_s`` or more after the start."""
        kept = [s for at, s, _rows in self.cycles if at >= skip_s]
        if len(kept) < 2:
            return max(kept, default=float("nan"))
        return statistics.quantiles(kept, n=100, method="inclusive")[98]


def run_real_time(spark, setup: Setup, mode: str, rate: int,  # noqa: ANN001
                  seconds: float) -> RealTimeRun:
    """The join fed at ``rate`` a-tuples per second of wall time for ``seconds``: each
    cycle takes the events whose time (ms since the start) has passed.
    """
    length_ms = int(seconds * 1000) + setup.window_ms
    # columnar before the clock starts: a cycle's arrivals are a slice of these, so the
    # loop times the engine, not the conversion of Python dicts (3.5 us a row, as much
    # as the join's cycle spends on it at 127,000 rows/s); and the dicts are dropped: held
    # through the run, millions of them made Python's full collections in the engine's
    # cycles take 5 s
    tables = [pa.Table.from_pylist(rows) for rows in
              correlated_streams(11, length_ms, rate / 1000, [LAG], keys=setup.keys)]
    gc.collect()
    inputs = [(name, table, table.column("t").to_pylist())
              for name, table in zip("ab", tables, strict=True)]
    eng = new_engine(spark, setup, mode)
    out = RealTimeRun(mode, rate)
    pushed = [0, 0]
    began = time.monotonic()
    while (now := time.monotonic() - began) < seconds and not out.gave_up:
        mark = int(now * 1000)
        for i, (name, table, times) in enumerate(inputs):
            upto = bisect.bisect_left(times, mark, lo=pushed[i])
            eng.push(name, table.slice(pushed[i], upto - pushed[i]), watermark=mark)
            pushed[i] = upto
        report = eng.run_cycle()
        out.cycles.append((now, report.seconds, report.rows_in))
        if report.seconds > setup.budget_s:  # what a cycle over the budget spent its time on
            phases = ", ".join(f"{p.value} {s:.2f} s" for p, s in report.phases.items())
            print(f"  {mode} at {rate:,}/s, {now:.0f} s in: cycle {report.cycle} "
                  f"{report.seconds:.2f} s, {report.rows_in:,} rows ({phases})", flush=True)
        shed = eng.metrics()["shedding"]
        out.zs.append(next(iter(shed.values()))["z"] if shed else 1.0)
        out.gave_up = mode == "off" and report.seconds > GAVE_UP * setup.budget_s
    frame = eng.results("j")
    out.output = len(set(frame["v"]))
    out.false_pairs = count_false_pairs(frame, *tables, setup.window_ms)
    out.processed_share = processed_share(eng)
    eng.stop()
    return out


def count_false_pairs(frame, a: pa.Table, b: pa.Table, window_ms: int) -> int:  # noqa: ANN001
    """The emitted pairs that are not an a-tuple and its partner within the window (behind
    it or ahead of it), computed here from the generated rows (columns ``v`` and ``t``).
    """
    true = {v: t for v, t in zip(b.column("v").to_pylist(), b.column("t").to_pylist(),
                                 strict=True) if v >= 0}
    a_time = dict(zip(a.column("v").to_pylist(), a.column("t").to_pylist(), strict=True))
    return sum(1 for v in map(int, frame["v"])
               if v not in true or not abs(a_time[v] - true[v]) < window_ms)


def processed_share(eng: Engine) -> float:
    """The share of the partners its probers could have met that the join met (1 when it
    does not shed).
    """
    shed = eng.metrics()["shedding"]
    if not shed:
        return 1.0
    inputs = next(iter(shed.values()))["inputs"]
    done, skipped = (sum(s[k] for s in inputs) for k in ("processed", "shed"))
    return done / (done + skipped) if done + skipped else 1.0


def sustainable_rate(spark, setup: Setup, seconds: float, rates: list[int],  # noqa: ANN001
                     skip_s: float, halvings: int = 2) -> tuple[int, list[RealTimeRun]]:
    """The highest rate the unshed join keeps within the budget, and the runs: the
    highest of ``rates`` (rising) that it keeps (past the last, rising by a factor of
    sqrt(2) until one is not kept), then ``halvings`` times the middle (geometric, in 25s)
    between it and the lowest it does not keep.
    """
    runs: list[RealTimeRun] = []

    def keeps(rate: int) -> bool:
        run = run_real_time(spark, setup, "off", rate, seconds)
        runs.append(run)
        p99 = run.p99(skip_s)
        print(f"off at {rate:,} a-tuples/s: p99 cycle {p99:.2f} s after {skip_s:.0f} s, "
              f"{len(run.cycles)} cycles", flush=True)
        return p99 <= setup.budget_s

    best, worst = 0, None
    for rate in rates:
        if not keeps(rate):
            worst = rate
            break
        best = rate
    # every rate kept: rise until one is not (a sustainable rate taken too low would
    # flatter the runs at three times it)
    while worst is None and best:
        rate = round(best * 2 ** 0.5 / 25) * 25
        if keeps(rate):
            best = rate
        else:
            worst = rate
    for _ in range(halvings if best and worst else 0):
        assert worst is not None
        middle = round((best * worst) ** 0.5 / 25) * 25
        if middle in (best, worst):
            break
        if keeps(middle):
            best = middle
        else:
            worst = middle
    return best, runs


@dataclass
class FixedShare:
    """A mode at a fixed z over the same input in cycles of one second of event time."""

    mode: str
    pairs: int
    false_pairs: int
    processed_share: float


def run_fixed(spark, setup: Setup, mode: str, z: float, a_rows: list[dict],  # noqa: ANN001
              b_rows: list[dict], length_ms: int) -> FixedShare:
    """``mode`` at ``throttle=z`` (``off``: unshed) over the given input; its pairs checked
    against the true partners (equal value within the window).
    """
    eng = new_engine(spark, setup, mode, None if mode == "off" else z)
    for lo in range(0, length_ms, 1000):
        hi = lo + 1000
        eng.push("a", [r for r in a_rows if lo <= r["t"] < hi], watermark=hi,
                 end=hi >= length_ms)
        eng.push("b", [r for r in b_rows if lo <= r["t"] < hi], watermark=hi,
                 end=hi >= length_ms)
        eng.run_cycle()
    eng.run_until_idle()
    frame = eng.results("j")
    share = processed_share(eng)
    out = FixedShare(mode, len(set(frame["v"])),
                     count_false_pairs(frame, pa.Table.from_pylist(a_rows),
                                       pa.Table.from_pylist(b_rows), setup.window_ms), share)
    eng.stop()
    return out


def shape_lines(spark, setup: Setup, length_ms: int) -> list[str]:  # noqa: ANN001
    """Part 4: each shape at z = 0.3, unshed, random and adaptive, as table rows."""
    rows = []
    for name, lags in shapes(length_ms).items():
        a_rows, b_rows = correlated_streams(5, length_ms, 0.5, lags, keys=setup.keys)
        off, rnd, ada = (run_fixed(spark, setup, mode, 0.3, a_rows, b_rows, length_ms)
                         for mode in ("off", "random", "adaptive"))
        line = (f"| {name} | {off.pairs:,} | {rnd.pairs:,} ({rnd.false_pairs}) | "
                f"{ada.pairs:,} ({ada.false_pairs}) | {ada.pairs / max(1, off.pairs):.2f} | "
                f"{ada.pairs / max(1, rnd.pairs):.2f}x |")
        print(line, flush=True)
        rows.append(line)
    return ["## Shapes of time correlation at z = 0.3", "",
            "| partners lie | unshed pairs | random (false) | adaptive (false) | adaptive / "
            "unshed | adaptive / random |", "|---|---|---|---|---|---|", *rows, ""]


def plot(runs: list[RealTimeRun], budget_s: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for run in runs:
        at = [c[0] for c in run.cycles]
        top.plot(at, [c[1] for c in run.cycles], marker=".", label=run.mode)
        bottom.plot(at, run.zs, marker=".", label=run.mode)
    top.axhline(budget_s, color="grey", linestyle="--", label="budget")
    top.set_ylabel("cycle time (s)")
    top.set_title(f"join at {runs[0].rate:,} a-tuples/s (3x the sustainable rate)")
    top.legend()
    bottom.set_ylabel("z")
    bottom.set_xlabel("seconds since the start")
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--out", default=time.strftime("%Y-%m-%d") + "-shedding")
    parser.add_argument("--window-ms", type=int, default=Setup.window_ms)
    parser.add_argument("--keys", type=int, default=Setup.keys)
    parser.add_argument("--budget", type=float, default=Setup.budget_s, help="seconds")
    parser.add_argument("--rates", default="125,250,500,1000,2000,4000",
                        help="a-tuples/s tried for the sustainable rate, rising")
    parser.add_argument("--shapes-only", action="store_true",
                        help="only part 4: the shapes of time correlation at z = 0.3")
    args = parser.parse_args()
    setup = Setup(args.window_ms, args.keys, args.budget)
    length_ms = 40_000 if args.quick else 80_000
    if args.shapes_only:
        spark = make_session(None)
        RESULTS.mkdir(exist_ok=True)
        lines = [f"# Load shedding by shape ({args.out})", "",
                 f"{setup.describe()} (here the partners lie as each row says). "
                 f"Command: `.venv/bin/python benchmarks/shedding.py "
                 f"{' '.join(sys.argv[1:])}`.", "", *shape_lines(spark, setup, length_ms)]
        (RESULTS / f"{args.out}.md").write_text("\n".join(lines))
        print(f"wrote {RESULTS / args.out}.md")
        return
    window_s = setup.window_ms / 1000
    # a run holds a full window for its last half at least
    seconds = max(30.0 if args.quick else 60.0, 2 * window_s)
    skip_probe = max(seconds / 3, window_s)  # p99 of the probes: once a window is held
    spark = make_session(None)
    # warm-up: the JVM compiles the join
    run_real_time(spark, setup, "off", 250, min(seconds / 2, 30.0))
    rate, probes = sustainable_rate(spark, setup, seconds,
                                    [int(r) for r in args.rates.split(",")], skip_probe)
    rate = max(rate, 125)
    print(f"sustainable rate: {rate:,} a-tuples/s ({2 * rate:,} b-tuples/s)", flush=True)
    runs = [run_real_time(spark, setup, mode, 3 * rate, seconds)
            for mode in ("off", "random", "adaptive")]
    skip = seconds / 4
    for run in runs:
        times = [s for _at, s, _rows in run.cycles]
        print(f"{run.mode:>8} at {run.rate:,}/s: {len(times)} cycles, first {times[0]:.2f} s, "
              f"last {times[-1]:.2f} s, p99 after {skip:.0f} s {run.p99(skip):.2f} s, "
              f"z at the end {run.zs[-1]:.2f}, {run.output:,} pairs ({run.false_pairs} "
              f"false), processed share {run.processed_share:.3f}"
              + (" (stopped: grows without bound)" if run.gave_up else ""), flush=True)
    a_rows, b_rows = correlated_streams(5, length_ms, 0.5, [LAG], keys=setup.keys)
    fixed = [run_fixed(spark, setup, mode, 0.3, a_rows, b_rows, length_ms)
             for mode in ("off", "random", "adaptive")]
    for f in fixed:
        print(f"{f.mode:>8} at z = 0.3: {f.pairs:,} pairs ({f.false_pairs} false), "
              f"processed share {f.processed_share:.3f}", flush=True)
    off, rnd, ada = fixed
    RESULTS.mkdir(exist_ok=True)
    plot(runs, setup.budget_s, RESULTS / f"{args.out}.png")
    lines = [
        f"# Load shedding ({args.out})", "",
        f"{setup.describe()}. Command: `.venv/bin/python benchmarks/shedding.py "
        f"{' '.join(sys.argv[1:])}`.",
        "", "## Sustainable rate (unshed, real time)", "",
        f"| a-tuples/s | cycles | p99 cycle (after {skip_probe:.0f} s) |", "|---|---|---|",
        *[f"| {p.rate:,} | {len(p.cycles)} | {p.p99(skip_probe):.2f} s |" for p in probes],
        "", f"Sustainable: {rate:,} a-tuples/s. Runs below at {3 * rate:,}.", "",
        "| mode | cycles | first / last cycle | p99 after the first quarter | z at the end "
        "| pairs (false) | processed share |", "|---|---|---|---|---|---|---|",
        *[f"| {r.mode} | {len(r.cycles)} | {r.cycles[0][1]:.2f} / {r.cycles[-1][1]:.2f} s"
          f"{' (stopped)' if r.gave_up else ''} | {r.p99(skip):.2f} s | {r.zs[-1]:.2f} | "
          f"{r.output:,} ({r.false_pairs}) | {r.processed_share:.3f} |" for r in runs],
        "", f"![cycle time and z over time]({args.out}.png)", "",
        "## Output at a fixed share z = 0.3", "",
        "| mode | pairs | false pairs | processed share | of the unshed output |",
        "|---|---|---|---|---|",
        *[f"| {f.mode} | {f.pairs:,} | {f.false_pairs} | {f.processed_share:.3f} | "
          f"{f.pairs / max(1, off.pairs):.2f} |" for f in fixed],
        "", f"adaptive / random: {ada.pairs / max(1, rnd.pairs):.2f}x", "",
        *shape_lines(spark, setup, length_ms)]
    (RESULTS / f"{args.out}.md").write_text("\n".join(lines))
    print(f"wrote {RESULTS / args.out}.md and .png")


if __name__ == "__main__":
    main()
