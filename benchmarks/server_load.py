"""Load test of ``sparkcq serve``: concurrent clients push 1,000-row batches for a minute.

    .venv/bin/python -m benchmarks.server_load --clients 4 --seconds 60

Starts the server (default limits) with one stream and a windowed aggregate, then each
client pushes batches as fast as the server takes them, honouring ``429 Retry-After``. A
sampler reads ``/status`` every second: rows processed by the engine, rows queued, resident
memory of the server and of Spark's JVM. Reports rows accepted and processed per second,
push latency p50/p99, refusals, and memory over time, as JSON, markdown and a plot under
``benchmarks/results``. What it shows: processed keeps up with accepted up to what the
engine can take; beyond, pushes are refused (never queued without bound) and memory stays
flat.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sparkcq.server.client import Client, ServerError

RESULTS = Path(__file__).parent / "results"
LATENESS_MS = 2_000


@dataclass
class ClientStats:
    accepted: int = 0
    refused: int = 0  # 429: queue full
    rejected_rows: int = 0
    latencies: list[float] = field(default_factory=list)


@dataclass
class Sample:
    at: float
    accepted: int
    processed: int
    queued: int
    cycles: int
    rss_server: int
    rss_spark: int
    last_cycle_seconds: float | None


def start(port: int, folder: Path, args: list[str]) -> subprocess.Popen:
    log = open(folder / "server.log", "w")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkcq.cli", "serve", "--port", str(port),
         "--interval", "0.5", *args], stdout=log, stderr=subprocess.STDOUT)
    client = Client(f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 120
    while True:
        try:
            client.status()
            return proc
        except ServerError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((folder / "server.log").read_text()[-3000:]) from None
            time.sleep(0.5)


def pusher(url: str, stop: float, batch: int, began: float, stats: ClientStats,
           rng: random.Random) -> None:
    """Push ``batch`` rows at a time until ``stop``: event times are milliseconds since the
    start, a little out of order; the watermark trails the newest by the lateness.
    """
    while time.monotonic() < stop:
        now = int((time.monotonic() - began) * 1000)
        rows = [{"k": f"k{rng.randrange(100)}", "v": rng.random(),
                 "t": now - rng.randrange(LATENESS_MS // 2)} for _ in range(batch)]
        body = json.dumps({"rows": rows, "watermark": now - 2 * LATENESS_MS}).encode()
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        sent = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                answer = json.loads(resp.read())
            stats.latencies.append(time.monotonic() - sent)
            stats.accepted += answer["accepted"]
            stats.rejected_rows += len(answer["rejected"])
        except urllib.error.HTTPError as e:
            if e.code != 429:
                raise
            stats.refused += 1
            time.sleep(float(e.headers.get("Retry-After", "1")))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(clients: int, seconds: float, batch: int, server_args: list[str]) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="sparkcq-load-"))
    port = 18765 + os.getpid() % 1000
    proc = start(port, folder, server_args)
    client = Client(f"http://127.0.0.1:{port}")
    client.submit(f"CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) "
                  f"WITH (event_time='t', lateness='{LATENESS_MS}')")
    client.submit("CREATE QUERY per_key AS SELECT k, count(*) AS n, avg(v) AS a "
                  "FROM s [RANGE 10000 SLIDE 10000] GROUP BY k")
    stats = [ClientStats() for _ in range(clients)]
    began = time.monotonic()
    stop = began + seconds
    url = f"http://127.0.0.1:{port}/streams/s/rows"
    threads = [threading.Thread(target=pusher, args=(url, stop, batch, began, st,
                                                     random.Random(i)))
               for i, st in enumerate(stats)]
    for t in threads:
        t.start()
    samples: list[Sample] = []
    # after the pushes, until the engine has processed every acknowledged row
    while any(t.is_alive() for t in threads) or (
            samples[-1].processed < samples[-1].accepted and time.monotonic() < stop + 300):
        status = client.status()
        samples.append(Sample(
            time.monotonic() - began, sum(st.accepted for st in stats),
            status["rows_processed"].get("s", 0), status["queued_rows"].get("s", 0),
            status["cycles"], status["rss_bytes"]["server"], status["rss_bytes"]["spark"],
            status["last_cycle_seconds"]))
        time.sleep(1.0)
    for t in threads:
        t.join()
    metrics = client.metrics()
    client.shutdown()
    proc.wait(timeout=120)
    latencies = [x for st in stats for x in st.latencies]
    accepted = sum(st.accepted for st in stats)
    steady = [s for s in samples if s.at >= seconds / 3 and s.at <= seconds]
    return {
        "clients": clients, "seconds": seconds, "batch": batch, "server_args": server_args,
        "accepted_rows": accepted,
        "accepted_per_second": accepted / seconds,
        "processed_rows": samples[-1].processed,
        "seconds_to_process_the_rest": samples[-1].at - seconds,
        "processed_per_second_while_pushing": (
            (steady[-1].processed - steady[0].processed) / (steady[-1].at - steady[0].at)
            if len(steady) > 1 else float("nan")),
        "pushes": len(latencies), "refused_pushes_429": sum(st.refused for st in stats),
        "rejected_rows": sum(st.rejected_rows for st in stats),
        "dead_letters": metrics["dead_letters"],
        "push_latency_p50_s": percentile(latencies, 0.5),
        "push_latency_p99_s": percentile(latencies, 0.99),
        "push_latency_max_s": max(latencies, default=float("nan")),
        "max_queued_rows_seen": max(s.queued for s in samples),
        "rss_server_mb": [round(s.rss_server / 2**20) for s in samples],
        "rss_spark_mb": [round(s.rss_spark / 2**20) for s in samples],
        "cycles": samples[-1].cycles,
        "samples": [asdict(s) for s in samples],
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    at = [s["at"] for s in samples]
    fig, (rows, memory) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    rows.plot(at, [s["accepted"] for s in samples], label="accepted (acknowledged)")
    rows.plot(at, [s["processed"] for s in samples], label="processed by the engine")
    rows.plot(at, [s["queued"] for s in samples], label="queued")
    rows.set_ylabel("rows")
    rows.set_title(f"sparkcq serve, {result['clients']} clients pushing "
                   f"{result['batch']}-row batches")
    rows.legend()
    memory.plot(at, [s["rss_server"] / 2**20 for s in samples], label="server (Python)")
    memory.plot(at, [s["rss_spark"] / 2**20 for s in samples], label="Spark JVM")
    memory.set_ylabel("resident memory (MiB)")
    memory.set_xlabel("seconds")
    memory.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--server-arg", action="append", default=[],
                        help="extra option for sparkcq serve (repeatable)")
    parser.add_argument("--name", default=time.strftime("%Y-%m-%d") + "-server-load")
    args = parser.parse_args()
    result = run(args.clients, args.seconds, args.batch, args.server_arg)
    RESULTS.mkdir(exist_ok=True)
    summary = {k: v for k, v in result.items() if k not in ("samples",)}
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=1))
    plot(result, RESULTS / f"{args.name}.png")
    for key, value in summary.items():
        if not isinstance(value, list):
            print(f"{key}: {value}")
    rss = summary["rss_server_mb"], summary["rss_spark_mb"]
    print(f"rss server MiB first/max/last: {rss[0][0]}/{max(rss[0])}/{rss[0][-1]}; "
          f"spark: {rss[1][0]}/{max(rss[1])}/{rss[1][-1]}")


if __name__ == "__main__":
    main()
