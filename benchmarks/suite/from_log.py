"""The marginal-rate section rebuilt from a suite run's log, for a run that did not finish.

The suite writes its report when every workload has run; its log has one line per timed
run as it goes (``tumble 3,000,000 events rep 2/3 spark: ... whole 16.4 s; output ok: ...``).
When a run is cut short, the whole-run times of the workloads it finished are in the log, and
this rebuilds their marginal table (``marginal.py``) from them:

    .venv/bin/python -m benchmarks.suite.from_log run.log [WORKLOAD ...] > report.md

The warm-up run before the first workload (``rep 1/1`` where the timed runs have more
repetitions) is left out, as the suite leaves it out. What the log does not hold (Spark's
work per 100,000 events) is not rebuilt.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

from benchmarks.suite.marginal import SizedRuns, marginal_table

RUN = re.compile(r"^(?P<workload>\S+) (?P<events>[\d,]+) events rep (?P<rep>\d+)/(?P<reps>\d+) "
                 r"(?P<engine>\w+): .*whole (?P<whole>[\d.]+) s; output (?P<check>.*)$")


def sized_runs(lines: list[str]) -> tuple[list[SizedRuns], list[str]]:
    """Each workload's whole-run times by engine and size, in the log's order; the engines."""
    matches = [m for m in map(RUN.match, lines) if m]
    timed_reps = Counter(m["reps"] for m in matches).most_common(1)[0][0] if matches else "1"
    runs: dict[str, SizedRuns] = {}
    engines: list[str] = []
    for m in matches:
        if m["reps"] != timed_reps:
            continue  # the warm-up
        run = runs.setdefault(m["workload"], SizedRuns(m["workload"], m["workload"]))
        run.add(m["engine"], int(m["events"].replace(",", "")), float(m["whole"]))
        if not m["check"].startswith("ok"):
            run.checks[m["engine"]] = m["check"]
        run.checks.setdefault(m["engine"], "ok")
        if m["engine"] not in engines:
            engines.append(m["engine"])
    return list(runs.values()), engines


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite.from_log")
    parser.add_argument("log")
    parser.add_argument("workloads", nargs="*", help="only these (default: all in the log)")
    args = parser.parse_args()
    with open(args.log, encoding="utf-8") as f:
        runs, engines = sized_runs(f.read().splitlines())
    runs = [r for r in runs if not args.workloads or r.workload in args.workloads]
    print("\n".join(marginal_table(runs, engines)))


if __name__ == "__main__":
    main()
