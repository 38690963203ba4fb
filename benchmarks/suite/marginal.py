"""One timing rule for every engine: the marginal rate between two input sizes.

Each engine's start-up is a different thing (sparkcq's and Spark's first cycle or batch
plans and compiles; Flink's run includes submitting and deploying its job), so timing each
"after start-up" by its own definition flatters whichever engine hides more in it. Run
each engine over ``small`` and ``large`` events and time the whole run, start-up included:
``(large - small) / (t_large - t_small)`` is the rate of the work that grows with the input,
and start-up cancels for every engine alike. What is left of the small run's time beyond
its events at that rate is the engine's start-up, reported apart.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Marginal:
    """One engine's marginal rate over two sizes, and its start-up by the same rule."""

    events_per_s: float
    startup_s: float


def marginal_rate(small: tuple[int, float], large: tuple[int, float]) -> Marginal | None:
    """The rate between runs of ``(events, whole seconds)``; None when the larger input did
    not take longer (noise swamps the difference: the sizes are too close).
    """
    (n1, t1), (n2, t2) = small, large
    if n2 <= n1 or t2 <= t1:
        return None
    rate = (n2 - n1) / (t2 - t1)
    return Marginal(rate, t1 - n1 / rate)


@dataclass
class SizedRuns:
    """The whole-run times of one workload, by engine and input size (events)."""

    workload: str
    title: str
    seconds: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)

    def add(self, engine: str, events: int, whole_s: float) -> None:
        """Record one run."""
        self.seconds.setdefault(engine, {}).setdefault(events, []).append(whole_s)

    def marginal(self, engine: str) -> Marginal | None:
        """The engine's marginal rate over its two sizes (medians of the repetitions)."""
        sizes = sorted(self.seconds.get(engine, {}).items())
        if len(sizes) != 2:
            return None
        (n1, t1), (n2, t2) = [(n, statistics.median(ts)) for n, ts in sizes]
        return marginal_rate((n1, t1), (n2, t2))

    def spread(self, engine: str) -> tuple[float, float | None] | None:
        """The lowest and highest rates any pairing of a small and a large run gives (the
        highest None when some large run took no longer than some small one): how much the
        repetitions' noise moves the rate. None with one repetition of each size.
        """
        sizes = sorted(self.seconds.get(engine, {}).items())
        if len(sizes) != 2 or len(sizes[0][1]) * len(sizes[1][1]) < 2:
            return None
        (n1, small), (n2, large) = sizes
        low = (n2 - n1) / (max(large) - min(small))
        fastest = min(large) - max(small)
        return low, (n2 - n1) / fastest if fastest > 0 else None


def marginal_table(runs: list[SizedRuns], engines: list[str]) -> list[str]:
    """The report's section: per workload and engine the whole-run times at both sizes, the
    marginal rate, the start-up by the same rule, and sparkcq's ratio to each peer.
    """
    lines = [
        "## One rule for every engine: the marginal rate",
        "",
        "Each engine runs each workload over two input sizes and is timed whole, start-up "
        "included; events/s = (large - small) / (t_large - t_small), so start-up cancels "
        "alike for every engine, and start-up = t_small - small / rate "
        "(`benchmarks/suite/marginal.py`). Medians of the repetitions; in brackets the lowest "
        "and highest rate any pairing of one small and one large run gives (the noise; "
        "'or more' when a large run took no longer than a small one); every output checked.",
        "",
        "| workload | engine | small: events, s | large: events, s | events/s | start-up "
        "| sparkcq / engine | output check |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        ours = run.marginal("sparkcq")
        for engine in engines:
            sizes = sorted(run.seconds.get(engine, {}).items())
            if len(sizes) != 2:
                continue
            cells = [f"{n:,}, {statistics.median(ts):.1f}" for n, ts in sizes]
            m = run.marginal(engine)
            rate = f"{m.events_per_s:,.0f}" if m else "n/a (no difference)"
            if (spread := run.spread(engine)) is not None:
                rate += (f" ({spread[0]:,.0f} to {spread[1]:,.0f})" if spread[1] is not None
                         else f" ({spread[0]:,.0f} or more)")
            startup = f"{m.startup_s:.1f} s" if m else "-"
            ratio = (f"{ours.events_per_s / m.events_per_s:.2f}" if m and ours
                     and engine != "sparkcq" else "-")
            lines.append(f"| {run.workload} | {engine} | {cells[0]} | {cells[1]} | {rate} | "
                         f"{startup} | {ratio} | {run.checks.get(engine, '-')} |")
    return lines
