"""The suite's report: a Markdown table of medians over repetitions and a PNG bar chart."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field

from benchmarks.suite.engines import Run

ENGINES = ("sparkcq", "flink", "spark")
LABELS = {"sparkcq": "sparkcq", "flink": "Flink", "spark": "Spark SS"}


@dataclass
class WorkloadResult:
    """Every engine's runs of one workload and the check of its output."""

    name: str
    title: str
    notes: str
    events: int
    files: int  # per stream: the cycles
    runs: dict[str, list[Run]] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)

    def rate(self, engine: str) -> float | None:
        """Median events/s over the repetitions."""
        runs = self.runs.get(engine)
        return statistics.median(r.events_per_s for r in runs) if runs else None

    def startup(self, engine: str) -> float | None:  # noqa: D102
        runs = self.runs.get(engine)
        return statistics.median(r.startup_s for r in runs) if runs else None

    def latency(self, engine: str) -> str:
        """p50 / p99 cycle latency over all repetitions' cycles."""
        cycles = sorted(c for r in self.runs.get(engine, []) for c in r.cycles)
        if not cycles:
            return "-"
        run = Run(engine, "", 0, 0, 0, 0, cycles)
        return f"{run.latency(0.5):.2f} / {run.latency(0.99):.2f} s"

    def work(self, engine: str) -> dict[str, float] | None:
        """Per 100,000 events timed: wall and driver-alone seconds and what Spark did
        (``spark_work.py``), each the median over the repetitions.
        """
        runs = [r for r in self.runs.get(engine, []) if r.work is not None and r.events_timed]
        if not runs:
            return None
        per_run = []
        for r in runs:
            assert r.work is not None
            figures = r.work.per(r.events_timed)
            wall = r.run_s * 100_000 / r.events_timed
            per_run.append({**figures, "wall_s": wall, "alone_s": wall - figures["busy_s"]})
        return {key: statistics.median(f[key] for f in per_run) for key in per_run[0]}

    def ratio(self, other: str) -> float | None:
        """The ratio of sparkcq's events/s to the other engine's."""
        mine, theirs = self.rate("sparkcq"), self.rate(other)
        return mine / theirs if mine and theirs else None


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(results: list[WorkloadResult]) -> list[str]:
    """The Markdown table, one row per workload."""
    lines = ["| workload | events | sparkcq events/s | Flink events/s | Spark events/s "
             "| sparkcq/Flink | sparkcq/Spark | sparkcq p50 / p99 cycle "
             "| Spark p50 / p99 batch | start-up sparkcq / Flink / Spark | output check |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        starts = " / ".join(_fmt(res.startup(e), ".1f") for e in ("sparkcq", "flink", "spark"))
        checks = "; ".join(f"{LABELS[e]} {res.checks[e]}" for e in ENGINES if e in res.checks)
        note = f" ({res.notes})" if res.notes else ""
        lines.append(
            f"| {res.title}{note} | {res.events:,} | "
            f"{_fmt(res.rate('sparkcq'), ',.0f')} | {_fmt(res.rate('flink'), ',.0f')} | "
            f"{_fmt(res.rate('spark'), ',.0f')} | {_fmt(res.ratio('flink'), '.2f')} | "
            f"{_fmt(res.ratio('spark'), '.2f')} | {res.latency('sparkcq')} | "
            f"{res.latency('spark')} | {starts} s | {checks} |")
    return lines


def time_table(results: list[WorkloadResult]) -> list[str]:
    """Markdown: where each Spark-based engine's time goes, per 100,000 events."""
    lines = ["## Where the time goes", "",
             "Per 100,000 events after start-up, medians over the repetitions, from Spark's "
             "own status store (`benchmarks/suite/spark_work.py`): the wall time; of it, the "
             "time no Spark job was running (the driver alone: building, analysing and "
             "planning the cycle's or micro-batch's plans); the Spark jobs, stages and tasks "
             "that ran, their summed task time (2 cores: at best half of it is wall time) "
             "and the records they wrote to shuffles.", "",
             "| workload | engine | wall | driver alone | jobs | stages | tasks | task time "
             "| records shuffled |", "|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        for engine in ("sparkcq", "spark"):
            w = res.work(engine)
            if w is None:
                continue
            lines.append(f"| {res.name} | {LABELS[engine]} | {w['wall_s']:.2f} s | "
                         f"{w['alone_s']:.2f} s | {w['jobs']:.1f} | {w['stages']:.0f} | "
                         f"{w['tasks']:.0f} | {w['task_s']:.2f} s | {w['shuffled']:,.0f} |")
    return lines


def write_report(path: str, results: list[WorkloadResult], reps: int,
                 extra: list[str] | None = None) -> None:
    """``path``.md and ``path``.png (events/s per workload and engine, log scale)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lines = [f"# Benchmarks ({os.path.basename(path)})", "",
             "Events `(k INT, v DOUBLE, ts TIMESTAMP)`, 1000 keys unless said, out of order by "
             "up to 0.5 s, watermark 1 s, as CSV files of ~100,000 events (one per cycle or "
             "micro-batch; Flink: one file per source reader, parallelism 2, NEXMark "
             f"parallelism 1, one file of all its streams in event-time order); median of {reps} "
             "run(s); 2 cores. events/s exclude start-up (reported apart). Every engine's "
             "output is checked row for row against an independent pandas computation.", "",
             *table(results), "", f"![events per second]({os.path.basename(path)}.png)", "",
             *time_table(results), ""]
    if timed_in_spark(results):  # the plot of Spark's work exists only then (plot_time)
        lines += [f"![time per 100,000 events]({os.path.basename(path)}-time.png)", ""]
    lines += extra or []
    with open(path + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    plot(path + ".png", results)
    plot_time(path + "-time.png", results)


def plot(path: str, results: list[WorkloadResult]) -> None:
    """Grouped bars: events/s of each engine per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(7.0, 1.1 * len(results)), 4.5))
    width = 0.8 / len(ENGINES)
    for i, engine in enumerate(ENGINES):
        values = [res.rate(engine) or 0 for res in results]
        ax.bar([x + i * width for x in range(len(results))], values, width,
               label=LABELS[engine])
    ax.set_xticks([x + width for x in range(len(results))],
                  [res.name for res in results], fontsize=8, rotation=30, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("events/s (median, log scale)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def timed_in_spark(results: list[WorkloadResult]) -> list[WorkloadResult]:
    """The workloads with Spark's own record of sparkcq's or Spark SS's work (none when only
    Flink ran).
    """
    return [r for r in results if r.work("sparkcq") or r.work("spark")]


def plot_time(path: str, results: list[WorkloadResult]) -> None:
    """One small panel per workload, each on its own scale: sparkcq's and Spark's wall time
    per 100,000 events, split into driver alone and Spark jobs running.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = timed_in_spark(results)
    if not shown:
        return
    cols = min(6, len(shown))
    rows = -(-len(shown) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.2 * cols, 2.4 * rows), squeeze=False)
    engines = (("sparkcq", "tab:blue"), ("spark", "tab:green"))
    for ax, res in zip(axes.flat, shown, strict=False):
        for x, (engine, shade) in enumerate(engines):
            w = res.work(engine)
            if w is None:
                continue
            ax.bar(x, w["alone_s"], 0.7, color=shade, alpha=0.4)
            ax.bar(x, w["busy_s"], 0.7, bottom=w["alone_s"], color=shade)
        ax.set_xticks(range(len(engines)), [LABELS[e] for e, _ in engines], fontsize=7)
        ax.set_title(res.name, fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    fig.suptitle("Wall time per 100,000 events (s): driver alone (light), Spark jobs running "
                 "(dark)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
