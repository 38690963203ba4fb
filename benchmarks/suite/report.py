"""The suite's report: a Markdown table of medians over repetitions and a PNG bar chart."""

from __future__ import annotations

import os
import statistics

from benchmarks.suite.engines import Run
from benchmarks.suite.workloads import WORKLOADS


def _median(runs: list[Run], attr: str) -> float:
    return statistics.median(getattr(r, attr) for r in runs)


def write_report(path: str, runs: dict[tuple[str, str], list[Run]],
                 checks: dict[tuple[str, str], str], events: int, reps: int,
                 files: int) -> None:
    """``path``.md and ``path``.png."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    names = list(dict.fromkeys(n for n, _ in runs))
    lines = [f"# Benchmarks ({os.path.basename(path)})", "",
             f"{events:,} events `(k INT, v DOUBLE, ts TIMESTAMP)`, 1000 keys, out of order "
             f"by up to 0.5 s, watermark 1 s, in {files} CSV files (one per cycle); median of "
             f"{reps} run(s); 2 cores. events/s exclude start-up (reported apart).", "",
             "| workload | sparkcq events/s | Flink events/s | Spark events/s | sparkcq/Flink "
             "| sparkcq/Spark | sparkcq p50 / p99 cycle | Spark p50 / p99 batch | start-up "
             "sparkcq / Flink / Spark | output rows (check) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        rate = {e: _median(runs[(name, e)], "events_per_s") for n, e in runs if n == name}
        start = {e: _median(runs[(name, e)], "startup_s") for n, e in runs if n == name}

        def lat(engine: str) -> str:
            rs = runs.get((name, engine))  # noqa: B023
            if not rs or rs[0].latency(0.5) is None:
                return "-"
            return f"{rs[0].latency(0.5):.2f} / {rs[0].latency(0.99):.2f} s"

        def ratio(other: str) -> str:
            if "sparkcq" not in rate or not rate.get(other):  # noqa: B023
                return "-"
            return f"{rate['sparkcq'] / rate[other]:.2f}"  # noqa: B023

        fmt = {e: f"{r:,.0f}" for e, r in rate.items()}
        starts = " / ".join(f"{start[e]:.1f}" if e in start else "-"
                            for e in ("sparkcq", "flink", "spark"))
        check = "; ".join(f"{e}: {checks[(name, e)]}" for e in ("sparkcq", "flink", "spark")
                          if (name, e) in checks)
        lines.append(f"| {WORKLOADS[name].title} | {fmt.get('sparkcq', '-')} | "
                     f"{fmt.get('flink', '-')} | {fmt.get('spark', '-')} | {ratio('flink')} | "
                     f"{ratio('spark')} | {lat('sparkcq')} | {lat('spark')} | {starts} s | "
                     f"{check} |")
    with open(path + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n\n![events per second](" + os.path.basename(path)
                + ".png)\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    engines = ["sparkcq", "flink", "spark"]
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(names)), 4))
    width = 0.8 / len(engines)
    for i, engine in enumerate(engines):
        values = [_median(runs[(n, engine)], "events_per_s") if (n, engine) in runs else 0
                  for n in names]
        ax.bar([x + i * width for x in range(len(names))], values, width, label=engine)
    ax.set_xticks([x + width for x in range(len(names))], [WORKLOADS[n].title for n in names],
                  fontsize=8)
    ax.set_ylabel("events/s (median)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path + ".png", dpi=120)
    plt.close(fig)
