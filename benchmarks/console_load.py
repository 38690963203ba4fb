"""What open console pages cost a loaded server, and how fresh they are (issue 32).

    .venv/bin/python -m benchmarks.console_load                 # 6 x 120 s phases
    .venv/bin/python -m benchmarks.console_load --phase-seconds 30 --rounds 1   # to try it

Starts ``sparkcq serve`` (``--master local[2]``, a cycle every second) with one stream and
50 continuous queries (25 aggregates: 5 filters, each with its tumbling window and 5
aggregates; 25 filters passing rows through), and 4 clients pushing 250 rows/s each for
the whole run. After a warm-up,
phases alternate: without pages (A), then with 3 console pages open in Debian's Chromium
(B: the global plan, the health charts and the query list, each redrawn on every snapshot),
``--rounds`` times, so that a drift of the machine falls on both alike. Each phase begins
``--settle`` seconds after the pages were opened or closed: opening three pages (Chromium
starting their renderers) is not what an open page costs.

Per phase, from the server's own health samples (``/console/snapshot``, polled every 5 s
in every phase): cycles, cycle latency (the cycle's time, as ``CycleReport.seconds``) p50,
p90 and mean, and the period between cycle starts; the snapshot's build time in the engine
thread. Per page in B, from the page's own log (``window.sparkcqConsole.updates``): how many
snapshots it drew and the delay from the snapshot being taken (right after its cycle
committed) to the page having drawn it, p50/p99/max. The report goes to
``benchmarks/results/<date>-console-load.md`` (and ``.json``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.server_load import start
from sparkcq.server.client import Client
from sparkcq.server.procs import PROC, descendants

RESULTS = Path(__file__).parent / "results"
LATENESS_MS = 2_000
WINDOWS_MS = (5_000, 10_000, 20_000, 30_000, 60_000)
AGGREGATES = ("count(*)", "avg(v)", "sum(v)", "min(v)", "max(v)")
VIEWS = ("plan", "health", "queries")
CHROMIUM = "/usr/bin/chromium"


def queries(n: int) -> list[str]:
    """``n`` queries as a team writes them over one stream: half windowed aggregates (5
    filters, each with its tumbling window and 5 aggregates computed once for all of them),
    half filters passing rows through.
    """
    out = []
    for i in range(n):
        if i < n // 2:
            f, a = i % 5, (i // 5) % len(AGGREGATES)
            w = WINDOWS_MS[f]
            out.append(f"CREATE QUERY q{i:02d} AS SELECT k, {AGGREGATES[a]} AS x "
                       f"FROM s [RANGE {w} SLIDE {w}] WHERE v > {f / 10:.1f} GROUP BY k")
        else:
            out.append(f"CREATE QUERY q{i:02d} AS SELECT k, v, t FROM s "
                       f"WHERE v > {(i % 10) / 10:.1f} AND k < 'k{i % 7}'")
    return out


def pusher(url: str, stop: threading.Event, rate: int, began: float, seed: int,
           errors: list[str]) -> None:
    """Push ``rate`` rows per second in 4 batches a second until ``stop``."""
    rng = random.Random(seed)
    step = 0.25
    tick = time.monotonic()
    while not stop.is_set():
        now = int((time.monotonic() - began) * 1000)
        rows = [{"k": f"k{rng.randrange(200)}", "v": rng.random(),
                 "t": now - rng.randrange(LATENESS_MS // 2)} for _ in range(int(rate * step))]
        body = json.dumps({"rows": rows, "watermark": now - LATENESS_MS}).encode()
        request = urllib.request.Request(url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()
        except OSError as e:
            errors.append(str(e))
        tick += step
        stop.wait(max(0.0, tick - time.monotonic()))


def snapshot(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base}/console/snapshot", timeout=60) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def watch(base: str, seconds: float, samples: dict[int, dict[str, Any]],
          builds: list[tuple[float, float]], page: Any | None = None) -> None:
    """Poll the snapshot every 5 s for ``seconds``, keeping health samples and build times
    (waiting through Playwright when a page is open, so its driver keeps up).
    """
    deadline = time.time() + seconds
    while time.time() < deadline:
        snap = snapshot(base)
        for sample in snap["health"]:
            samples[sample["cycle"]] = sample
        builds.append((snap["taken_at"], snap["build_ms"]))
        pause = min(5.0, max(0.0, deadline - time.time()))
        if page is not None:
            page.wait_for_timeout(pause * 1000)
        else:
            time.sleep(pause)


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds the processes ``pids`` have used so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            text = (PROC / str(pid) / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


class CpuMeter:
    """CPU seconds of the server (its Python process, and Spark's JVM below it) and of
    the browser (every process below this one: Playwright's driver and Chromium).
    """

    def __init__(self, server_pid: int):
        self.server_pid = server_pid

    def read(self) -> dict[str, float]:
        server = descendants(self.server_pid)
        browser = [p for p in descendants(os.getpid()) if p != os.getpid()
                   and p not in server]
        return {"server_python": cpu_seconds([self.server_pid]),
                "server_jvm": cpu_seconds([p for p in server if p != self.server_pid]),
                "browser": cpu_seconds(browser), "this": cpu_seconds([os.getpid()])}


def cpu_used(before: dict[str, float], after: dict[str, float], seconds: float,
             ) -> dict[str, float]:
    """Each part's share of one core over ``seconds``."""
    return {k: (after[k] - before[k]) / seconds for k in after}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def phase_figures(name: str, began: float, ended: float, samples: dict[int, dict[str, Any]],
                  builds: list[tuple[float, float]]) -> dict[str, Any]:
    """Cycle figures of the samples taken within [began, ended)."""
    inside = [s for c, s in sorted(samples.items()) if began <= s["at"] < ended]
    seconds = [s["seconds"] for s in inside]
    periods = [b["at"] - a["at"] for a, b in zip(inside, inside[1:], strict=False)]
    built = [ms for at, ms in builds if began <= at < ended]
    return {"phase": name, "began": began, "ended": ended, "cycles": len(inside),
            "latency_p50": quantile(seconds, 0.5), "latency_p90": quantile(seconds, 0.9),
            "latency_mean": statistics.fmean(seconds) if seconds else float("nan"),
            "period_mean": statistics.fmean(periods) if periods else float("nan"),
            "rows_in": sum(s["rows_in"] for s in inside),
            "build_ms_p50": quantile(built, 0.5), "build_ms_max": max(built, default=0.0)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp(prefix="sparkcq-console-"))
    port = 19765 + os.getpid() % 1000
    proc = start(port, folder, ["--master", "local[2]", "--interval", "1",
                                "--feed-port", str(port + 1)])
    base = f"http://127.0.0.1:{port}"
    meter = CpuMeter(proc.pid)
    client = Client(base)
    client.submit(f"CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) "
                  f"WITH (event_time='t', lateness='{LATENESS_MS}')")
    for text in queries(args.queries):
        client.submit(text)
    stop = threading.Event()
    errors: list[str] = []
    began = time.monotonic()
    threads = [threading.Thread(target=pusher, args=(f"{base}/streams/s/rows", stop,
                                                     args.rate, began, i, errors))
               for i in range(args.pushers)]
    for t in threads:
        t.start()
    samples: dict[int, dict[str, Any]] = {}
    builds: list[tuple[float, float]] = []
    phases: list[dict[str, Any]] = []
    pages_report: list[dict[str, Any]] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                                 chromium_sandbox=False,
                                                 args=["--disable-dev-shm-usage"])
            print(f"warm-up {args.warmup:.0f} s", file=sys.stderr, flush=True)
            watch(base, args.warmup, samples, builds)
            for round_ in range(args.rounds):
                watch(base, args.settle, samples, builds)  # pages closed: not measured
                t0, used = time.time(), meter.read()
                watch(base, args.phase_seconds, samples, builds)
                phases.append(phase_figures(f"A{round_ + 1} (no page)", t0, time.time(),
                                            samples, builds))
                phases[-1]["cpu"] = cpu_used(used, meter.read(), time.time() - t0)
                print(phases[-1], file=sys.stderr, flush=True)
                contexts = [browser.new_context(viewport={"width": 1400, "height": 900})
                            for _ in VIEWS]
                pages = [c.new_page() for c in contexts]
                for page, view in zip(pages, VIEWS, strict=True):
                    page.goto(base + "/")
                    page.click(f"#tabs button[data-view={view}]")
                watch(base, args.settle, samples, builds, pages[0])  # pages open: not measured
                t0 = time.time()
                used = meter.read()
                first = [len(p.evaluate("window.sparkcqConsole.updates")) for p in pages]
                watch(base, args.phase_seconds, samples, builds, pages[0])
                t1 = time.time()
                phases.append(phase_figures(f"B{round_ + 1} (3 pages)", t0, t1, samples,
                                            builds))
                phases[-1]["cpu"] = cpu_used(used, meter.read(), t1 - t0)
                print(phases[-1], file=sys.stderr, flush=True)
                for page, view, skip in zip(pages, VIEWS, first, strict=True):
                    # those of the phase (the first was the picture found at connecting)
                    updates = page.evaluate("window.sparkcqConsole.updates")[max(1, skip):]
                    delays = [u["drawn_at"] - u["taken_at"] for u in updates]
                    received = [u["received_at"] - u["taken_at"] for u in updates]
                    pages_report.append({
                        "phase": phases[-1]["phase"], "view": view, "updates": len(updates),
                        "cycles_in_phase": phases[-1]["cycles"],
                        "received_p50": quantile(received, 0.5),
                        "drawn_p50": quantile(delays, 0.5), "drawn_p99": quantile(delays, 0.99),
                        "drawn_max": max(delays, default=float("nan"))})
                    print(pages_report[-1], file=sys.stderr, flush=True)
                if args.screenshot and round_ == 0:
                    pages[0].screenshot(path=str(args.screenshot), full_page=False)
                for c in contexts:
                    c.close()
            browser.close()
    finally:
        stop.set()
        for t in threads:
            t.join()
        last = snapshot(base)
        client.shutdown()
        proc.wait(timeout=120)
    failed = [f"{q['name']}: {q['reason']}" for q in last["queries"] if q["status"] != "running"]
    if failed:
        msg = f"{len(failed)} queries did not run the whole time; the first: {failed[0]}"
        raise SystemExit(msg)
    a = [p for p in phases if p["phase"].startswith("A")]
    b = [p for p in phases if p["phase"].startswith("B")]
    pooled = {key: (statistics.fmean(p[key] for p in b) / statistics.fmean(p[key] for p in a)
                    - 1.0) for key in ("latency_p50", "latency_mean", "period_mean")}
    return {"date": dt.date.today().isoformat(), "queries": args.queries,
            "pushers": args.pushers, "rate_per_pusher": args.rate,
            "phase_seconds": args.phase_seconds, "rounds": args.rounds,
            "settle": args.settle,
            "operators": len(last["plan"]["nodes"]), "push_errors": errors[:5],
            "rows_out": sum(s["rows_out"] for s in samples.values()),
            "phases": phases, "pages": pages_report, "change_with_pages": pooled}


def report(result: dict[str, Any]) -> str:
    lines = [f"# Console load ({result['date']})", "",
             f"`python -m benchmarks.console_load --phase-seconds {result['phase_seconds']:g} "
             f"--rounds {result['rounds']} --settle {result['settle']:g}`: "
             f"{result['queries']} queries "
             f"({result['operators']} operators in the global plan), {result['pushers']} "
             f"clients pushing {result['rate_per_pusher']} rows/s each, a cycle every second, "
             "2 cores shared by Spark, the server and Chromium.", "",
             "| phase | cycles | cycle p50 | cycle p90 | cycle mean | period | rows in | "
             "snapshot build p50 / max | CPU: server Python / JVM / browser |",
             "|---|---|---|---|---|---|---|---|---|"]
    for p in result["phases"]:
        lines.append(f"| {p['phase']} | {p['cycles']} | {p['latency_p50']:.3f} s | "
                     f"{p['latency_p90']:.3f} s | {p['latency_mean']:.3f} s | "
                     f"{p['period_mean']:.3f} s | {p['rows_in']:,} | "
                     f"{p['build_ms_p50']:.1f} / {p['build_ms_max']:.1f} ms | "
                     f"{p['cpu']['server_python']:.2f} / {p['cpu']['server_jvm']:.2f} / "
                     f"{p['cpu']['browser']:.2f} |")
    change = result["change_with_pages"]
    lines += ["", f"With 3 pages open, against without (means over rounds): cycle p50 "
              f"{change['latency_p50']:+.1%}, cycle mean {change['latency_mean']:+.1%}, "
              f"period {change['period_mean']:+.1%}.", "",
              "CPU is in cores (1.00: one core busy the whole phase; the machine has 2).", "",
              "| phase | page | snapshots drawn | cycles | received p50 | drawn p50 | drawn p99 "
              "| drawn max |", "|---|---|---|---|---|---|---|---|"]
    for p in result["pages"]:
        lines.append(f"| {p['phase']} | {p['view']} | {p['updates']} | {p['cycles_in_phase']} | "
                     f"{p['received_p50'] * 1e3:.0f} ms | {p['drawn_p50'] * 1e3:.0f} ms | "
                     f"{p['drawn_p99'] * 1e3:.0f} ms | {p['drawn_max'] * 1e3:.0f} ms |")
    lines += ["", "Delays are from the snapshot being taken (in the engine thread, right after "
              "its cycle committed) to the page having drawn it."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--pushers", type=int, default=4)
    parser.add_argument("--rate", type=int, default=250, help="rows/s per pusher")
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--phase-seconds", type=float, default=120.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=20.0,
                        help="seconds after opening or closing the pages, not measured")
    parser.add_argument("--screenshot", type=Path, help="save the plan page of round 1")
    parser.add_argument("--out", default=None, help="report name under benchmarks/results")
    args = parser.parse_args()
    result = run(args)
    name = args.out or f"{result['date']}-console-load"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1))
    (RESULTS / f"{name}.md").write_text(report(result))
    print(report(result))


if __name__ == "__main__":
    main()
