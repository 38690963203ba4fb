"""The demo's cycle times, as a user running ``make demo`` sees them.

    .venv/bin/python -m benchmarks.demo_cycles --runs 3 --duration 90

Each run starts ``sparkcq demo --duration D`` as a process of its own (a new JVM, as a user
starts it) and reads the status line it prints per cycle (``cycle N: R rows in S s``). The
first ``skip`` cycles are left out (the session's start, its first plans and a catch-up
cycle); of the rest each run gives the p50, the p90, the slowest cycle and how many took
over a second. The report gives every run and the median of the runs' p50s; it goes to
``benchmarks/results/<out>.md``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
LINE = re.compile(r"cycle (\d+): ([\d,]+) rows in ([\d.]+) s")


@dataclass(frozen=True)
class DemoRun:
    """The cycles of one demo run after the skipped ones: (rows, seconds) each, and the
    numbers of those over a second.
    """

    cycles: tuple[tuple[int, float], ...]
    slow: tuple[int, ...] = ()

    @property
    def seconds(self) -> list[float]:
        """Each cycle's wall time."""
        return [s for _rows, s in self.cycles]

    @property
    def p50(self) -> float:
        """The median cycle time."""
        return statistics.median(self.seconds)

    def quantile(self, q: float) -> float:
        """The cycle time below which a share ``q`` of the cycles lie."""
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def parse_cycles(text: str, skip: int) -> DemoRun:
    """The cycles numbered ``skip`` and later in the demo's output ``text``."""
    found = [(int(n), int(rows.replace(",", "")), float(s))
             for n, rows, s in LINE.findall(text)]
    kept = [(n, rows, s) for n, rows, s in found if n >= skip]
    return DemoRun(tuple((rows, s) for _n, rows, s in kept),
                   tuple(n for n, _rows, s in kept if s > 1.0))


def run_demo(duration: float, skip: int) -> DemoRun:
    """One ``sparkcq demo`` process of ``duration`` seconds, its cycles after ``skip``."""
    cli = Path(sys.executable).with_name("sparkcq")
    done = subprocess.run([str(cli), "demo", "--duration", str(duration)],
                          capture_output=True, text=True, check=True)
    run = parse_cycles(done.stdout, skip)
    if not run.cycles:
        msg = (f"the demo printed no cycle after the {skip}th; its output ends: "
               f"{done.stdout[-500:]!r}")
        raise RuntimeError(msg)
    return run


def report(runs: list[DemoRun], duration: float, skip: int) -> str:
    """The markdown report of ``runs``."""
    lines = [f"# `make demo` cycles ({date.today().isoformat()})", "",
             f"`sparkcq demo --duration {duration:g}` (five queries over three generated "
             "streams of 2,000 events/s each, a cycle a second), each run a new process; "
             f"cycles numbered {skip} and later. Command: `.venv/bin/python -m "
             f"benchmarks.demo_cycles --runs {len(runs)} --duration {duration:g}`.", "",
             "| run | cycles | rows per cycle (p50) | p50 | p90 | slowest | over 1 s (which) |",
             "|---|---|---|---|---|---|---|"]
    for i, run in enumerate(runs, 1):
        rows = statistics.median(r for r, _s in run.cycles)
        lines.append(f"| {i} | {len(run.cycles)} | {rows:,.0f} | {run.p50:.3f} s "
                     f"| {run.quantile(0.9):.3f} s | {max(run.seconds):.3f} s "
                     f"| {len(run.slow)} {list(run.slow) if run.slow else ''} |")
    p50 = statistics.median(run.p50 for run in runs)
    lines += ["", f"Median of the runs' p50: **{p50:.3f} s**; the slowest cycle of all runs: "
              f"{max(max(run.seconds) for run in runs):.3f} s.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the demo ``--runs`` times and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=90.0)
    parser.add_argument("--skip", type=int, default=5, help="cycles left out at the start")
    parser.add_argument("--out", default=f"{date.today().isoformat()}-demo",
                        help="report name under benchmarks/results")
    args = parser.parse_args(argv)
    runs = []
    for i in range(args.runs):
        run = run_demo(args.duration, args.skip)
        print(f"run {i + 1}: {len(run.cycles)} cycles, p50 {run.p50:.3f} s, "
              f"slowest {max(run.seconds):.3f} s", flush=True)
        runs.append(run)
    text = report(runs, args.duration, args.skip)
    path = RESULTS / f"{args.out}.md"
    path.write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
