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


def write_report(path: str, results: list[WorkloadResult], reps: int,
                 extra: list[str] | None = None) -> None:
    """``path``.md and ``path``.png (events/s per workload and engine, log scale)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lines = [f"# Benchmarks ({os.path.basename(path)})", "",
             "Events `(k INT, v DOUBLE, ts TIMESTAMP)`, 1000 keys unless said, out of order by "
             "up to 0.5 s, watermark 1 s, as CSV files of ~100,000 events (one per cycle or "
             f"micro-batch; Flink: one file per source reader, parallelism 2); median of {reps} "
             "run(s); 2 cores. events/s exclude start-up (reported apart). Every engine's "
             "output is checked row for row against an independent pandas computation.", "",
             *table(results), "", f"![events per second]({os.path.basename(path)}.png)", ""]
    lines += extra or []
    with open(path + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    plot(path + ".png", results)


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
